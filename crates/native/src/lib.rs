//! oslens._native: what Python needs from the native side. Decoding stays in Rust (validation,
//! continuation records, salvage); Python receives the valid records as one bytes object of
//! 32-byte records that numpy views without copying (`oslens.capture.raw.RECORD_DTYPE`).

mod anon_file;
mod app_rows;
mod kernel_rows;
mod constants;
mod names;
mod pairing;
mod parquet;
mod py_app_pass;
mod py_buffers;
mod py_chunks;
mod py_kernel_pass;
mod py_parquet;
mod py_tail;
#[cfg(feature = "parquet-crate")]
#[path = "../../../bench/import/crate_writer.rs"]
mod crate_writer;
mod recorder_api;
mod whatif;

use oslens_format::kind_names;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// memory_limit(root=None) -> (limit, usage, cgroup dir) of this process's nearest limited
/// memory cgroup (v1 or v2), or None; the recorder sizes its buffers from the same figures.
/// `root`: read /proc and /sys under it (a fake machine's tree, for tests).
#[pyfunction]
#[pyo3(signature = (root=None))]
fn memory_limit(root: Option<&str>) -> Option<(u64, u64, String)> {
    match root {
        Some(r) => oslens::memory_limit_under(r),
        None => oslens::memory_limit(),
    }
}

/// populate(buffer): asks the kernel to back the whole pages of a writable buffer now, in one
/// call (MADV_POPULATE_WRITE), rather than one page fault per 4 KiB on first touch. Returns
/// False where the kernel cannot (before Linux 5.14); the memory then faults in as usual.
#[pyfunction]
fn populate(py: Python<'_>, buffer: PyBuffer<u8>) -> PyResult<bool> {
    if buffer.readonly() || !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("populate: the buffer must be writable and contiguous"));
    }
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    let page = 4096usize;
    let start = (buffer.buf_ptr() as usize).div_ceil(page) * page;
    let end = (buffer.buf_ptr() as usize + buffer.len_bytes()) / page * page;
    if end <= start {
        return Ok(true);
    }
    // SAFETY: the range lies inside the buffer, which Python keeps alive during the call;
    // MADV_POPULATE_WRITE only faults the pages in (their contents are unchanged).
    let rc = py.allow_threads(|| unsafe { libc::madvise(start as *mut libc::c_void, end - start, MADV_POPULATE_WRITE) });
    Ok(rc == 0)
}

/// A (raw clock, CLOCK_MONOTONIC ns) pair read back to back, with the TSC when invariant.
#[pyfunction]
fn clock_pair() -> (u64, u64) {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions; clock_gettime gets a valid pointer.
    let (r0, r1) = unsafe {
        let r0 = core::arch::x86_64::_rdtsc();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        (r0, core::arch::x86_64::_rdtsc())
    };
    (r0 / 2 + r1 / 2, ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[pyfunction]
fn kind_name(kind: u8) -> &'static str {
    kind_names::kind_name(kind)
}

/// event_sets(list) -> the kernel event sets a comma-separated list names (crates/format's
/// kernel::parse_event_sets: aliases resolved, each once); ValueError naming the choices for an
/// unknown one. `oslens record` checks --events with it before the program starts.
#[pyfunction]
fn event_sets(list: &str) -> PyResult<Vec<String>> {
    oslens_format::kernel::parse_event_sets(list).map_err(PyValueError::new_err)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_chunks::read_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(memory_limit, m)?)?;
    m.add("HEADROOM_SHARE_DIV", oslens::HEADROOM_SHARE_DIV)?;
    m.add_function(wrap_pyfunction!(event_sets, m)?)?;
    m.add_function(wrap_pyfunction!(py_chunks::write_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(py_parquet::write_parquet, m)?)?;
    m.add_class::<py_parquet::ParquetStream>()?;
    #[cfg(feature = "parquet-crate")]
    m.add_function(wrap_pyfunction!(crate_writer::write_parquet_crate, m)?)?;
    m.add_function(wrap_pyfunction!(py_chunks::read_chunk_records, m)?)?;
    m.add_function(wrap_pyfunction!(py_chunks::release_chunk_buffers, m)?)?;
    m.add_class::<py_chunks::RecordBuffer>()?;
    m.add_function(wrap_pyfunction!(clock_pair, m)?)?;
    m.add_function(wrap_pyfunction!(populate, m)?)?;
    m.add_function(wrap_pyfunction!(py_app_pass::app_pass, m)?)?;
    m.add_function(wrap_pyfunction!(py_app_pass::scan_records, m)?)?;
    m.add_function(wrap_pyfunction!(py_kernel_pass::kernel_scan, m)?)?;
    m.add_function(wrap_pyfunction!(py_kernel_pass::kernel_pass, m)?)?;
    m.add_class::<py_buffers::ColumnBuffer>()?;
    m.add_function(wrap_pyfunction!(kind_name, m)?)?;
    recorder_api::register(m)?;
    constants::register(m)?;
    whatif::register(m)?;
    py_tail::register(m)?;
    Ok(())
}

