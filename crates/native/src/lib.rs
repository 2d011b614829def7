//! oslens._native: what Python needs from the native side. Decoding stays in Rust (validation,
//! continuation records, salvage); Python receives the valid records as one bytes object of
//! 32-byte records that numpy views without copying (`oslens.capture.raw.RECORD_DTYPE`).

mod recorder_api;

use oslens_format::header::{ChunkHeader, HEADER_SIZE};
use oslens_format::record::{continuation_records, Record, CONT_PAYLOAD};
use oslens_format::{kinds, read_chunk as read_chunk_file};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::io::Write;

fn header_dict<'py>(py: Python<'py>, h: &ChunkHeader) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("source", h.source)?;
    d.set_item("clock", h.clock)?;
    d.set_item("pid", h.pid)?;
    d.set_item("tid", h.tid)?;
    d.set_item("ppid", h.ppid)?;
    d.set_item("cpu", h.cpu)?;
    d.set_item("capacity", h.capacity)?;
    d.set_item("committed", h.committed)?;
    d.set_item("dropped_events", h.dropped_events)?;
    d.set_item("dropped_bytes", h.dropped_bytes)?;
    d.set_item("calib", vec![h.calib[0], h.calib[1]])?;
    d.set_item("closed", h.closed)?;
    d.set_item("seq", h.seq)?;
    d.set_item("suppressed_events", h.suppressed_events)?;
    d.set_item("name", &h.name)?;
    Ok(d)
}

/// read_chunk(path) -> dict(header, records, names, payloads, damage)
#[pyfunction]
fn read_chunk<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    let chunk = py
        .allow_threads(|| read_chunk_file(std::path::Path::new(path)))
        .map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
    let d = PyDict::new(py);
    match &chunk.header {
        Some(h) => d.set_item("header", header_dict(py, h)?)?,
        None => d.set_item("header", py.None())?,
    }
    d.set_item("records", PyBytes::new(py, &chunk.records))?;
    d.set_item("names", chunk.names.clone())?;
    let payloads = PyList::empty(py);
    for (idx, bytes) in &chunk.payloads {
        payloads.append((idx, PyBytes::new(py, bytes)))?;
    }
    d.set_item("payloads", payloads)?;
    let damage: Vec<(String, u64, u64)> = chunk.damage.iter().map(|x| (x.reason.clone(), x.offset, x.records_lost)).collect();
    d.set_item("damage", damage)?;
    Ok(d)
}

fn get<'py, T: FromPyObject<'py>>(d: &Bound<'py, PyDict>, key: &str, default: T) -> PyResult<T> {
    match d.get_item(key)? {
        Some(v) => v.extract(),
        None => Ok(default),
    }
}

/// write_chunk(path, header: dict, records: list[(ts, id, cpu, kind, a, b)], names=[(id, class, manager, name)],
/// payloads={record index: bytes}) writes a valid chunk: for tests and synthetic traces.
#[pyfunction]
#[pyo3(signature = (path, header, records, names=None, payloads=None))]
fn write_chunk(
    path: &str,
    header: &Bound<'_, PyDict>,
    records: Vec<(u64, u32, u16, u8, u64, u64)>,
    names: Option<Vec<(u32, u64, u32, String)>>,
    payloads: Option<std::collections::HashMap<usize, Vec<u8>>>,
) -> PyResult<u64> {
    let mut body: Vec<u8> = Vec::new();
    for (id, class, manager, name) in names.unwrap_or_default() {
        body.extend_from_slice(&Record::new(0, id, 0, kinds::NAME, class | (manager as u64) << 32, name.len() as u64).to_bytes());
        for c in continuation_records(name.as_bytes()) {
            body.extend_from_slice(&c);
        }
    }
    let payloads = payloads.unwrap_or_default();
    for (i, (ts, id, cpu, kind, a, b)) in records.into_iter().enumerate() {
        match payloads.get(&i) {
            Some(p) if kind == kinds::EVENT => {
                let mut first = [0u8; 8];
                let n = p.len().min(8);
                first[..n].copy_from_slice(&p[..n]);
                body.extend_from_slice(&Record::new(ts, id, cpu, kind, p.len() as u64, u64::from_le_bytes(first)).to_bytes());
                if p.len() > 8 {
                    for c in continuation_records(&p[8..]) {
                        body.extend_from_slice(&c);
                    }
                }
            }
            _ => body.extend_from_slice(&Record::new(ts, id, cpu, kind, a, b).to_bytes()),
        }
    }
    let slots = (body.len() / 32) as u64;
    let h = ChunkHeader {
        version: oslens_format::VERSION,
        source: get(header, "source", oslens_format::header::SOURCE_APP_THREAD)?,
        clock: get(header, "clock", oslens_format::header::CLOCK_MONOTONIC_NS)?,
        pid: get(header, "pid", 1)?,
        tid: get(header, "tid", 1)?,
        ppid: get(header, "ppid", 0)?,
        cpu: get(header, "cpu", 0)?,
        capacity: get(header, "capacity", slots)?.max(slots),
        committed: get(header, "committed", slots)?,
        dropped_events: get(header, "dropped_events", 0)?,
        dropped_bytes: get(header, "dropped_bytes", 0)?,
        calib: get(header, "calib", [(0u64, 0u64), (0, 0)])?,
        closed: get(header, "closed", true)?,
        seq: get(header, "seq", 0)?,
        suppressed_events: get(header, "suppressed_events", 0)?,
        name: get(header, "name", String::new())?,
    };
    let mut f = std::fs::File::create(path).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
    f.write_all(&h.to_bytes()).and_then(|_| f.write_all(&body)).map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(slots)
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
    kinds::kind_name(kind)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(write_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(clock_pair, m)?)?;
    m.add_function(wrap_pyfunction!(kind_name, m)?)?;
    recorder_api::register(m)?;
    m.add("HEADER_SIZE", HEADER_SIZE)?;
    m.add("RECORD_SIZE", 32)?;
    m.add("CONT_PAYLOAD", CONT_PAYLOAD)?;
    Ok(())
}
