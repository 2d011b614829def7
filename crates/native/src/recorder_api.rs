//! The recorder exposed to Python programs (owned by auto-instrumentation): regions, counters,
//! events, raw records and named function entry/exit for oslens.instrument.
//!
//! One recorder per process: when liboslens.so is loaded globally (preloaded by `oslens record`,
//! or linked into the host program) its C functions are used, so Python records land in the
//! same per-thread chunks as the preload library's; otherwise the copy of the recorder built
//! into this extension records (it reads OSLENS_TRACE in the same way).

use oslens_format::object::object_base;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::OnceLock;

type P = *mut c_void;

// Defined in the recorder's funcs.rs (#[no_mangle], not re-exported as Rust items).
extern "C" {
    fn osl_define_name(class: u64, name: *const c_char) -> u32;
    fn osl_func_named(id: u32, exit: u32);
}

struct Api {
    global: bool,
    /// The activation word of the recorder in use (crates/recorder/src/lib.rs), read first by
    /// every call so that a dormant program's call costs a load and a branch.
    inactive: &'static AtomicU32,
    /// Its names epoch (bumped by every attach session and in a fork()ed child): a name defined
    /// in an earlier epoch must be defined again; None (a library without it): always define.
    names_epoch: Option<&'static AtomicU32>,
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
            // RTLD_DEFAULT also searches this extension's own symbols: "global" means another
            // object's (liboslens.so loaded by the program or preloaded).
            let probe = libc::dlsym(libc::RTLD_DEFAULT, c"osl_func_named".as_ptr());
            if probe.is_null() || object_base(probe) == object_base(api as *const () as *const c_void) {
                Api {
                    global: false,
                    inactive: &oslens::INACTIVE,
                    names_epoch: Some(&oslens::NAMES_EPOCH),
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
                let word = libc::dlsym(libc::RTLD_DEFAULT, c"osl__inactive".as_ptr()) as *const AtomicU32;
                let epoch = libc::dlsym(libc::RTLD_DEFAULT, c"osl__names_epoch".as_ptr()) as *const AtomicU32;
                Api {
                    global: true,
                    inactive: if word.is_null() { &oslens::INACTIVE } else { &*word },
                    names_epoch: epoch.as_ref(),
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

/// True when a call records nothing and need not reach the recorder (started outside `oslens
/// record` and not attached, or recording off), as the C inline path decides (oslens.h).
#[pyfunction]
fn dormant() -> bool {
    let word = api().inactive.load(Relaxed);
    word != 0 && word & oslens::ASK_LIBRARY == 0
}

/// True when events are being recorded (OSLENS_TRACE set and recording enabled).
#[pyfunction]
fn recorder_enabled() -> bool {
    // SAFETY: C ABI call without arguments.
    unsafe { (api().enabled)() != 0 }
}

/// tsc_invariant(): the recorder's CPUID check, done once by `oslens record` for the programs it
/// starts (OSLENS_TSC_INVARIANT), which then skip it at their clock's first read.
#[pyfunction]
fn tsc_invariant() -> bool {
    oslens::tsc_is_invariant()
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
    if dormant() {
        return;
    }
    let p = region_cname(name);
    // SAFETY: a C string that lives for the process.
    unsafe { (api().region_begin)(p) }
}

#[pyfunction]
fn region_end(name: &str) {
    if dormant() {
        return;
    }
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

thread_local! {
    /// Event name -> (id, names epoch it was defined in), so a recording thread defines a name
    /// once per attach session (the GIL makes a per-thread table the cheap choice).
    static EVENT_IDS: std::cell::RefCell<std::collections::HashMap<String, (u32, u32)>> = Default::default();
}

/// The id of event `name`, defined in the current trace once per names epoch.
fn event_id(name: &str) -> u32 {
    let api = api();
    let Some(epoch) = api.names_epoch.map(|e| e.load(Relaxed)) else { return define_name(oslens_format::kinds::NAME_EVENT, name) };
    if let Some(id) = EVENT_IDS.with(|m| m.borrow().get(name).filter(|(_, e)| *e == epoch).map(|(id, _)| *id)) {
        return id;
    }
    let id = define_name(oslens_format::kinds::NAME_EVENT, name); // read the epoch first: a session begun meanwhile defines it again
    EVENT_IDS.with(|m| m.borrow_mut().insert(name.to_owned(), (id, epoch)));
    id
}

/// event_named(name, payload=b""): oslens.instrument.event: a disabled call when dormant, else
/// the event, its name defined once per session (docs/recorder.md, "Dormant instruments").
#[pyfunction]
#[pyo3(signature = (name, payload=None))]
fn event_named(name: &Bound<'_, PyString>, payload: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let word = api().inactive.load(Relaxed);
    if word != 0 && word & oslens::ASK_LIBRARY == 0 {
        return Ok(());
    }
    // SAFETY: C ABI call without arguments. An attach waiting starts its session here, before
    // the name is defined, so the name goes to that session's trace.
    if word != 0 && unsafe { (api().enabled)() } == 0 {
        return Ok(()); // past a trigger: counted as suppressed once, as the event would have been
    }
    let id = event_id(name.to_str()?);
    let owned;
    let bytes: &[u8] = match payload {
        None => &[],
        Some(p) => match p.downcast::<PyBytes>() {
            Ok(b) => b.as_bytes(),
            Err(_) => {
                owned = p.downcast::<PyString>()?.to_str()?.as_bytes().to_vec();
                &owned
            }
        },
    };
    // SAFETY: pointer and length of live bytes.
    unsafe { (api().event)(id, bytes.as_ptr(), bytes.len()) };
    Ok(())
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

// ---- a C-level profile function for Python < 3.12 (sys.setprofile costs a Python call per event)

type PyObj = *mut pyo3::ffi::PyObject;
type TraceFn = unsafe extern "C" fn(PyObj, PyObj, c_int, PyObj) -> c_int;

extern "C" {
    // Exported by every CPython (not in the limited API, so declared here).
    fn PyEval_SetProfile(func: Option<TraceFn>, obj: PyObj);
    fn PyFrame_GetCode(frame: PyObj) -> PyObj;
}

const PY_TRACE_CALL: c_int = 0;
const PY_TRACE_RETURN: c_int = 3;

thread_local! {
    /// Code object -> name id (0 = not traced). Code objects in the table are kept alive, so
    /// an address is never reused for another function.
    static CODE_IDS: std::cell::RefCell<std::collections::HashMap<usize, u32>> = Default::default();
    /// Traced entries not yet exited on this thread since the profiler was installed: a return
    /// while it is 0 belongs to a frame that was running before, and is not recorded.
    static DEPTH: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

unsafe fn code_id(resolver: PyObj, frame: PyObj) -> u32 {
    let code = PyFrame_GetCode(frame);
    if code.is_null() {
        pyo3::ffi::PyErr_Clear();
        return 0;
    }
    let key = code as usize;
    let known = CODE_IDS.with(|m| m.borrow().get(&key).copied());
    let id = match known {
        Some(id) => {
            pyo3::ffi::Py_DecRef(code);
            id
        }
        None => {
            // The resolver (oslens.instrument) names the function and applies the filter.
            let r = pyo3::ffi::PyObject_CallFunctionObjArgs(resolver, frame, std::ptr::null_mut::<pyo3::ffi::PyObject>());
            let id = if r.is_null() {
                pyo3::ffi::PyErr_Clear();
                0
            } else {
                let v = pyo3::ffi::PyLong_AsLong(r);
                pyo3::ffi::Py_DecRef(r);
                if v == -1 && !pyo3::ffi::PyErr_Occurred().is_null() {
                    pyo3::ffi::PyErr_Clear();
                }
                v.clamp(0, u32::MAX as _) as u32
            };
            CODE_IDS.with(|m| m.borrow_mut().insert(key, id)); // keeps the reference from GetCode
            id
        }
    };
    id
}

unsafe extern "C" fn profile(resolver: PyObj, frame: PyObj, what: c_int, _arg: PyObj) -> c_int {
    if what != PY_TRACE_CALL && what != PY_TRACE_RETURN {
        return 0;
    }
    let id = code_id(resolver, frame);
    if id == 0 {
        return 0;
    }
    if what == PY_TRACE_CALL {
        DEPTH.with(|d| d.set(d.get() + 1));
        (api().func_named)(id, 0);
    } else if DEPTH.with(|d| {
        let n = d.get();
        d.set(n.saturating_sub(1));
        n > 0
    }) {
        (api().func_named)(id, 1);
    }
    0
}

/// profile_install(resolver): records calls and returns of Python functions on the calling
/// thread; resolver(frame) -> name id (0 = not traced) is asked once per code object.
#[pyfunction]
fn profile_install(resolver: &Bound<'_, PyAny>) {
    DEPTH.with(|d| d.set(0));
    // SAFETY: GIL held; the interpreter keeps its own reference to `resolver`.
    unsafe { PyEval_SetProfile(Some(profile), resolver.as_ptr()) };
}

/// profile_enter(id): an entry recorded by Python code (a thread's first call, seen by the
/// bootstrap hook before the C profiler took over), counted as the C profiler counts its own.
#[pyfunction]
fn profile_enter(id: u32) {
    DEPTH.with(|d| d.set(d.get() + 1));
    // SAFETY: C ABI call with plain values.
    unsafe { (api().func_named)(id, 0) }
}

#[pyfunction]
fn profile_remove() {
    // SAFETY: GIL held; removes this thread's profile function.
    unsafe { PyEval_SetProfile(None, std::ptr::null_mut()) };
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(profile_install, m)?)?;
    m.add_function(wrap_pyfunction!(profile_enter, m)?)?;
    m.add_function(wrap_pyfunction!(profile_remove, m)?)?;
    m.add_function(wrap_pyfunction!(dormant, m)?)?;
    m.add_function(wrap_pyfunction!(recorder_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(recorder_global, m)?)?;
    m.add_function(wrap_pyfunction!(tsc_invariant, m)?)?;
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
    m.add_function(wrap_pyfunction!(event_named, m)?)?;
    m.add_function(wrap_pyfunction!(flush, m)?)?;
    Ok(())
}
