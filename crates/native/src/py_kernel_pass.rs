//! The kernel pass from Python (kernel_rows): kernel_scan, then kernel_pass with what the
//! importer made of the scan (oslens.store.kernel_tables).

use crate::app_rows::{self, Declared};
use crate::kernel_rows::{self, ChunkInfo, Comms, Ctx, Dict, DICTS};
use crate::py_app_pass::RecordsIn;
use oslens_format::RECORD_SIZE;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::HashMap;

/// The chunks' records as (pointer, length) pairs for Held buffers, checked whole records.
fn raw_of(chunks: &[RecordsIn]) -> PyResult<Vec<(usize, usize)>> {
    chunks
        .iter()
        .map(|rec| {
            let (len, contiguous, p) = match rec {
                RecordsIn::Held(b) => (b.len_bytes(), b.is_c_contiguous(), b.buf_ptr() as usize),
                RecordsIn::Reload((n, _)) => (*n, true, 0),
            };
            if len % RECORD_SIZE != 0 || !contiguous {
                return Err(PyValueError::new_err("kernel pass: records must be a contiguous buffer of 32-byte records"));
            }
            Ok((p, len))
        })
        .collect()
}

fn sources<'a>(chunks: &'a [RecordsIn], raw: &[(usize, usize)]) -> Vec<app_rows::Source<'a>> {
    chunks
        .iter()
        .zip(raw)
        .map(|(rec, &(p, n))| match rec {
            // SAFETY: the buffers are held by `chunks` for the whole call (raw_of checked them).
            RecordsIn::Held(_) => app_rows::Source::Held(unsafe { std::slice::from_raw_parts(p as *const u8, n) }),
            RecordsIn::Reload((len, from)) => app_rows::Source::Reload(*len, from),
        })
        .collect()
}

/// kernel_scan(chunks) -> dict: one read of each kernel chunk's records (a buffer, or (bytes,
/// a callable returning them again)): "chunks" [(first time or 2**64-1, in time order)],
/// "name_ts" (per chunk, its NAME records' times), "lost" (per chunk, its LOST records' sum),
/// "first_cpu" (per chunk, -1: none), "pid_tids"/"pid_pids" (each thread's last named pid) and
/// "pid_keys" ((PID_PAIRS group, time, chunk << 32 | index) of the record that named it),
/// "seen" (tids `tasks` has a row for), "last_seen", "exit_tids"/"exit_ts", "codes" (switch
/// states, syscall numbers, counters, block rw, block devs, irqs, softirqs), "small" (the
/// fork, exec, exit and traced records in time order, 32 bytes each), "records".
#[pyfunction]
pub fn kernel_scan<'py>(py: Python<'py>, chunks: Vec<RecordsIn>) -> PyResult<Bound<'py, PyDict>> {
    let raw = raw_of(&chunks)?;
    let s = py.allow_threads(|| kernel_rows::scan(&sources(&chunks, &raw))).map_err(|e| PyOSError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("chunks", s.chunks.iter().map(|c| (c.min_ts, c.sorted)).collect::<Vec<_>>())?;
    d.set_item("name_ts", &s.name_ts)?;
    d.set_item("lost", &s.lost)?;
    d.set_item("first_cpu", &s.first_cpu)?;
    let (tids, pids): (Vec<i64>, Vec<i64>) = s.pids.iter().map(|(t, (_, p))| (*t, *p)).unzip();
    d.set_item("pid_tids", tids)?;
    d.set_item("pid_pids", pids)?;
    d.set_item("pid_keys", s.pids.values().map(|(k, _)| *k).collect::<Vec<_>>())?;
    let mut seen: Vec<i64> = s.seen.into_iter().collect();
    seen.sort_unstable();
    d.set_item("seen", seen)?;
    d.set_item("last_seen", s.last_seen)?;
    let (et, ets): (Vec<i64>, Vec<i64>) = s.exit_at.iter().map(|(t, ts)| (*t, *ts)).unzip();
    d.set_item("exit_tids", et)?;
    d.set_item("exit_ts", ets)?;
    d.set_item("codes", s.codes.iter().map(|c| c.iter().copied().collect::<Vec<i64>>()).collect::<Vec<_>>())?;
    let mut small = Vec::with_capacity(s.small.len() * RECORD_SIZE);
    for (r, _) in &s.small {
        // SAFETY: Record is 32 bytes of plain data.
        small.extend_from_slice(unsafe { std::slice::from_raw_parts(r as *const _ as *const u8, RECORD_SIZE) });
    }
    d.set_item("small", PyBytes::new(py, &small))?;
    d.set_item("records", s.records)?;
    Ok(d)
}

/// kernel_pass(chunks, info, pids, exit_at, comms, dicts, whole, paths, declared, enc,
/// group_rows, progress=None) -> {table: rows}: the kernel tables `paths` names ({table: file})
/// written in one pass over the records in time order. info: kernel_scan's "chunks"; pids:
/// (tids, pids); exit_at: (tids, times); comms: (tids, times, indices into dicts[0], index of
/// `<idle>`, index of "") in (tid, time) order; dicts: (sorted codes, count, PLAIN texts) of
/// the comm, switch state, syscall, counter, block rw, block dev, irq (code num * 2 + soft)
/// and irq kind (0 hard, 1 soft) columns; whole: the tasks whose every switch is kept (None:
/// all); declared: {table: [(column, Arrow type)]}; enc: {table: [(delta, statistics)]};
/// progress(records merged) is called now and then.
#[pyfunction]
#[pyo3(signature = (chunks, info, pids, exit_at, comms, dicts, whole, paths, declared, enc, group_rows, progress=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn kernel_pass(
    py: Python<'_>,
    chunks: Vec<RecordsIn>,
    info: Vec<(u64, bool)>,
    pids: (Vec<i64>, Vec<i64>),
    exit_at: (Vec<i64>, Vec<i64>),
    comms: (Vec<i64>, Vec<i64>, Vec<u32>, u32, u32),
    dicts: Vec<(Vec<i64>, usize, Vec<u8>)>,
    whole: Option<Vec<i64>>,
    paths: HashMap<String, String>,
    declared: Declared,
    enc: HashMap<String, Vec<(bool, bool)>>,
    group_rows: usize,
    progress: Option<Py<PyAny>>,
) -> PyResult<HashMap<String, usize>> {
    let raw = raw_of(&chunks)?;
    if info.len() != chunks.len() || dicts.len() != DICTS {
        return Err(PyValueError::new_err(format!("kernel_pass: one info per chunk and {DICTS} dictionaries")));
    }
    let history: Vec<(i64, i64, u32)> = comms.0.iter().zip(&comms.1).zip(&comms.2).map(|((&t, &ts), &i)| (t, ts, i)).collect();
    let cx = Ctx {
        pids: pids.0.into_iter().zip(pids.1).collect(),
        comms: Comms::new(&history, comms.3, comms.4),
        dicts: dicts.into_iter().map(|(codes, count, plain)| Dict { codes, count, plain }).collect(),
        declared: &declared,
        enc: &enc,
        paths: &paths,
        group_rows,
        whole: whole.map(|w| w.into_iter().collect::<kernel_rows::Set<i64>>()),
        exit_at: exit_at.0.into_iter().zip(exit_at.1).collect(),
    };
    let info: Vec<ChunkInfo> = info.into_iter().map(|(min_ts, sorted)| ChunkInfo { min_ts, sorted }).collect();
    let got = py.allow_threads(|| {
        let src = sources(&chunks, &raw);
        kernel_rows::run(&src, &info, &cx, &mut |n| {
            if let Some(p) = &progress {
                Python::with_gil(|py| {
                    let _ = p.call1(py, (n,));
                });
            }
        })
    });
    match got {
        Ok(rows) => Ok(rows.into_iter().map(|(n, r)| (n.to_string(), r)).collect()),
        Err(e) => {
            paths.values().for_each(|p| {
                let _ = std::fs::remove_file(p);
            });
            Err(if e.kind() == std::io::ErrorKind::InvalidData { PyValueError::new_err(e.to_string()) } else { PyOSError::new_err(e.to_string()) })
        }
    }
}
