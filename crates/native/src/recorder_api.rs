//! The recorder exposed to Python programs (owned by auto-instrumentation): regions, counters,
//! events, raw records and named function entry/exit for oslens.instrument.
//!
//! One recorder per process: when liboslens.so is loaded globally (preloaded by `oslens record`,
//! or linked into the host program) its C functions are used, so Python records land in the
//! same per-thread chunks as the preload library's; otherwise the copy of the recorder built
//! into this extension records (it reads OSLENS_TRACE in the same way).

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

type P = *mut c_void;

// Defined in the recorder's funcs.rs (#[no_mangle], not re-exported as Rust items).
extern "C" {
    fn osl_define_name(class: u64, name: *const c_char) -> u32;
    fn osl_func_named(id: u32, exit: u32);
}

struct Api {
    global: bool,
    record_raw: unsafe extern "C" fn(u8, u32, u64, u64),
    define_name: unsafe extern "C" fn(u64, *const c_char) -> u32,
    func_named: unsafe extern "C" fn(u32, u32),
    region_begin: unsafe extern "C" fn(*const c_char),
    region_end: unsafe extern "C" fn(*const c_char),
    counter: unsafe extern "C" fn(*const c_char, P) -> P,
    count: unsafe extern "C" fn(P, i64),
    counter_record: unsafe extern "C" fn(P),
    counter_value: unsafe extern "C" fn(P) -> i64,
    event: unsafe extern "C" fn(u32, *const u8, usize),
    event_name: unsafe extern "C" fn(u32, *const c_char),
    enabled: unsafe extern "C" fn() -> c_int,
    flush: unsafe extern "C" fn(),
}

static API: OnceLock<Api> = OnceLock::new();

fn api() -> &'static Api {
    API.get_or_init(|| {
        macro_rules! pick {
            ($name:path) => {{
                let sym = CString::new(stringify!($name).rsplit(':').next().unwrap().trim()).unwrap();
                // dlsym lookup (inside the unsafe block below); the global symbol has our C signature.
                let p = libc::dlsym(libc::RTLD_DEFAULT, sym.as_ptr());
                if p.is_null() { $name as *const () as usize } else { p as usize }
            }};
        }
        // SAFETY: every address is a function with the signature of the field it fills.
        unsafe {
            let probe = libc::dlsym(libc::RTLD_DEFAULT, c"osl_func_named".as_ptr());
            if probe.is_null() {
                Api {
                    global: false,
                    record_raw: oslens::osl_record_raw,
                    define_name: osl_define_name,
                    func_named: osl_func_named,
                    region_begin: oslens::osl_region_begin,
                    region_end: oslens::osl_region_end,
                    counter: std::mem::transmute::<usize, _>(oslens::osl_counter as *const () as usize),
                    count: std::mem::transmute::<usize, _>(oslens::osl_count as *const () as usize),
                    counter_record: std::mem::transmute::<usize, _>(oslens::osl_counter_record as *const () as usize),
                    counter_value: std::mem::transmute::<usize, _>(oslens::osl_counter_value as *const () as usize),
                    event: oslens::osl_event,
                    event_name: oslens::osl_event_name,
                    enabled: oslens::osl_enabled,
                    flush: oslens::osl_flush,
                }
            } else {
                Api {
                    global: true,
                    record_raw: std::mem::transmute::<usize, _>(pick!(oslens::osl_record_raw)),
                    define_name: std::mem::transmute::<usize, _>(pick!(osl_define_name)),
                    func_named: std::mem::transmute::<usize, _>(pick!(osl_func_named)),
                    region_begin: std::mem::transmute::<usize, _>(pick!(oslens::osl_region_begin)),
                    region_end: std::mem::transmute::<usize, _>(pick!(oslens::osl_region_end)),
                    counter: std::mem::transmute::<usize, _>(pick!(oslens::osl_counter)),
                    count: std::mem::transmute::<usize, _>(pick!(oslens::osl_count)),
                    counter_record: std::mem::transmute::<usize, _>(pick!(oslens::osl_counter_record)),
                    counter_value: std::mem::transmute::<usize, _>(pick!(oslens::osl_counter_value)),
                    event: std::mem::transmute::<usize, _>(pick!(oslens::osl_event)),
                    event_name: std::mem::transmute::<usize, _>(pick!(oslens::osl_event_name)),
                    enabled: std::mem::transmute::<usize, _>(pick!(oslens::osl_enabled)),
                    flush: std::mem::transmute::<usize, _>(pick!(oslens::osl_flush)),
                }
            }
        }
    })
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

/// True when events are being recorded (OSLENS_TRACE set and recording enabled).
#[pyfunction]
fn recorder_enabled() -> bool {
    // SAFETY: C ABI call without arguments.
    unsafe { (api().enabled)() != 0 }
}

/// True when the process's global liboslens.so (not this extension's copy) records.
#[pyfunction]
fn recorder_global() -> bool {
    api().global
}

/// record_raw(kind, id, a, b): one raw record on the calling thread.
#[pyfunction]
fn record_raw(kind: u8, id: u32, a: u64, b: u64) {
    // SAFETY: C ABI call with plain values.
    unsafe { (api().record_raw)(kind, id, a, b) }
}

/// define_name(class, name) -> id: names an id of a class (kinds NAME_*) in the trace.
#[pyfunction]
fn define_name(class: u64, name: &str) -> u32 {
    let c = cstring(name);
    // SAFETY: valid C string.
    unsafe { (api().define_name)(class, c.as_ptr()) }
}

/// func_named(id, exit): FUNC_ENTRY (exit false) or FUNC_EXIT of a named function.
#[pyfunction]
fn func_named(id: u32, exit: bool) {
    // SAFETY: C ABI call with plain values.
    unsafe { (api().func_named)(id, exit as u32) }
}

/// Region names are kept as C strings for the life of the process (they are few).
fn region_cname(name: &str) -> *const c_char {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static NAMES: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    let mut map = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&p) = map.get(name) {
        return p as *const c_char;
    }
    let p = cstring(name).into_raw() as usize;
    map.insert(name.to_string(), p);
    p as *const c_char
}

#[pyfunction]
fn region_begin(name: &str) {
    let p = region_cname(name);
    // SAFETY: a C string that lives for the process.
    unsafe { (api().region_begin)(p) }
}

#[pyfunction]
fn region_end(name: &str) {
    let p = region_cname(name);
    // SAFETY: as above.
    unsafe { (api().region_end)(p) }
}

/// counter_new(name) -> handle (process-wide manager).
#[pyfunction]
fn counter_new(name: &str) -> usize {
    let c = cstring(name);
    // SAFETY: valid C string; NULL = process-wide manager.
    unsafe { (api().counter)(c.as_ptr(), std::ptr::null_mut()) as usize }
}

#[pyfunction]
fn counter_add(handle: usize, delta: i64) {
    // SAFETY: handle from counter_new (never freed); NULL is checked by the callee.
    unsafe { (api().count)(handle as P, delta) }
}

#[pyfunction]
fn counter_record(handle: usize) {
    // SAFETY: as above.
    unsafe { (api().counter_record)(handle as P) }
}

#[pyfunction]
fn counter_value(handle: usize) -> i64 {
    // SAFETY: as above.
    unsafe { (api().counter_value)(handle as P) }
}

/// event_name(id, name): names an event id.
#[pyfunction]
fn event_name(id: u32, name: &str) {
    let c = cstring(name);
    // SAFETY: valid C string.
    unsafe { (api().event_name)(id, c.as_ptr()) }
}

/// event(id, payload=b""): a user event with an optional payload.
#[pyfunction]
#[pyo3(signature = (id, payload=None))]
fn event(id: u32, payload: Option<&Bound<'_, PyBytes>>) {
    let bytes = payload.map(|p| p.as_bytes()).unwrap_or(&[]);
    // SAFETY: pointer and length of a live bytes object.
    unsafe { (api().event)(id, bytes.as_ptr(), bytes.len()) }
}

#[pyfunction]
fn flush() {
    // SAFETY: C ABI call without arguments.
    unsafe { (api().flush)() }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(recorder_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(recorder_global, m)?)?;
    m.add_function(wrap_pyfunction!(record_raw, m)?)?;
    m.add_function(wrap_pyfunction!(define_name, m)?)?;
    m.add_function(wrap_pyfunction!(func_named, m)?)?;
    m.add_function(wrap_pyfunction!(region_begin, m)?)?;
    m.add_function(wrap_pyfunction!(region_end, m)?)?;
    m.add_function(wrap_pyfunction!(counter_new, m)?)?;
    m.add_function(wrap_pyfunction!(counter_add, m)?)?;
    m.add_function(wrap_pyfunction!(counter_record, m)?)?;
    m.add_function(wrap_pyfunction!(counter_value, m)?)?;
    m.add_function(wrap_pyfunction!(event_name, m)?)?;
    m.add_function(wrap_pyfunction!(event, m)?)?;
    m.add_function(wrap_pyfunction!(flush, m)?)?;
    Ok(())
}
