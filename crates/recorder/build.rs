//! liboslens.so gets a SONAME, so a program linked with it and started with it preloaded (by
//! `oslens record`) loads one copy, even when the two paths differ: the loader matches the
//! program's DT_NEEDED against the preloaded object's SONAME (docs/recorder.md, "Start-up").
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liboslens.so");
    // The unwinder linked in (hidden by the cdylib's export list), not libgcc_s: loading
    // libgcc_s ran its CPUID-heavy constructor in every process started under the preload, which
    // this VM traps (docs/recorder.md, "Start-up"). Not bundled into liboslens.a, whose users
    // link their compiler's unwinder as before.
    println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
}
