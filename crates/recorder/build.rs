//! liboslens.so gets a SONAME, so a program linked with it and started with it preloaded (by
//! `oslens record`) loads one copy, even when the two paths differ: the loader matches the
//! program's DT_NEEDED against the preloaded object's SONAME (docs/recorder.md, "Start-up").
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liboslens.so");
}
