//! The native pass from Python (app_rows): its chunks, dictionaries and streams taken from
//! Python, its derived rows handed back as columns.

use crate::app_rows;
use crate::names::NameMap;
use crate::py_buffers::{buffer_ptr, Col, ColumnBuffer};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

type AppChunkIn = (RecordsIn, usize, bool, PyBuffer<u8>, PyBuffer<u8>, std::collections::HashMap<usize, Vec<u8>>, Option<(Vec<u64>, u16, Option<Vec<u64>>)>);

/// A chunk's records as app_pass takes them: a buffer held for the whole call, or (its length in
/// bytes, a callable that returns them again), called when the pass reaches the chunk and let go
/// after it (app_rows::Source).
#[derive(FromPyObject)]
pub enum RecordsIn {
    Held(PyBuffer<u8>),
    Reload((usize, PyReload)),
}

/// A Python callable returning a chunk's records (a contiguous buffer of 32-byte records).
#[derive(FromPyObject)]
pub struct PyReload(Py<PyAny>);

/// The buffer a PyReload returned, held while the pass reads it (its owner, the mapping or
/// the decoded records, goes when the buffer is released).
struct HeldBuffer(PyBuffer<u8>);

impl std::ops::Deref for HeldBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: a contiguous buffer (checked in reload), valid while it is held.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr() as *const u8, self.0.len_bytes()) }
    }
}

impl app_rows::Reload for PyReload {
    fn reload(&self) -> std::io::Result<Box<dyn std::ops::Deref<Target = [u8]> + '_>> {
        Python::with_gil(|py| {
            let got = self.0.call0(py).and_then(|o| PyBuffer::<u8>::get(o.bind(py)));
            match got {
                Ok(b) if b.is_c_contiguous() => Ok(Box::new(HeldBuffer(b)) as Box<dyn std::ops::Deref<Target = [u8]>>),
                Ok(_) => Err(std::io::Error::other("a chunk's records read again are not one contiguous buffer")),
                Err(e) => Err(std::io::Error::other(format!("reading a chunk again: {e}"))),
            }
        })
    }
}

/// scan_records(records) -> (counts, clock_pairs, cpu_max, reasons, sync_keys): one pass over a
/// chunk's 32-byte records (best right after reading it, while they are in cache): the records
/// per kind (256 counts), the (ts, a) of its CLOCK_PAIR records in order (raw.clock_for's
/// pairs), the largest CPU number, the distinct `b` words (reasons) of its COUNTER and of its
/// PAUSE records, sorted (None where there are more than 256), and the distinct (name key,
/// address) pairs of the sync records a sync row comes from (lock requests and acquisitions,
/// barrier and condition wait entries), sorted and laid flat (None where there are very many):
/// app_pass decides from them which objects are not named before it starts.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn scan_records(py: Python<'_>, records: PyBuffer<u8>) -> PyResult<(Vec<u64>, Vec<(u64, u64)>, u16, (Option<Vec<u64>>, Option<Vec<u64>>), Option<Vec<u64>>)> {
    if records.len_bytes() % 32 != 0 || !records.is_c_contiguous() {
        return Err(PyValueError::new_err("scan_records: records must be a contiguous buffer of 32-byte records"));
    }
    let (p, n) = (records.buf_ptr() as usize, records.len_bytes());
    Ok(py.allow_threads(move || {
        // SAFETY: checked contiguous above; `records` holds the buffer for the call.
        let rec = unsafe { std::slice::from_raw_parts(p as *const u8, n) };
        let mut sc = app_rows::scan(rec);
        (sc.counts, sc.pairs, sc.cpu_max, (sc.reasons[0].take_if_few(), sc.reasons[1].take_if_few()), sc.sync.take_if_few())
    }))
}

/// app_pass(chunks, threads, clock, dicts, path, group_rows) -> dict: the application tables
/// in one pass over the records (see app_rows/mod.rs). chunks: (records or (their bytes, a
/// callable returning them: read when the pass reaches the chunk, let go after), thread index, tsc,
/// name_keys uint64, name_values int32, {record index: payload}, (counts per kind, largest
/// CPU number, sync keys or None) from scan_records or None) in
/// the order the threads'
/// records are laid end to end (threads contiguous); clock: (r0, n0, slope, intercept);
/// dicts: (count, PLAIN bytes) of app_events' pid, tid, instrument and kind dictionaries;
/// path: where app_events is written (None: not written). Returns the kind counts, the rows
/// of app_events, each thread's first and last time, and the derived tables' columns as
/// buffers (numpy views them), keyed "table.column".
///
/// streams: {table: path} of the derived tables written while the pass runs, a page at a time
/// (regions, functions, counters, timers, pauses, adapt, sync; their columns are then not
/// returned, and "sync.rows" says how many rows sync got, "sync.peak", "regions.peak" and
/// "functions.peak" the most rows each held at once); with every chunk's sync keys sync's rows are written as threads end whatever the objects' names;
/// "passes": the times the pass ran (more than once where a column's nullability or sync's
/// dictionary was not what its first page decided); reasons:
/// ((codes, count, PLAIN labels) of counters' reasons, the same of pauses'), the sorted codes
/// the streamed tables hold; thread_end: per thread (latest closing calibration time, program
/// exit where its chunk was never closed), i64 min for none: when an unclosed region ends.
/// costs: per record kind, what one record cost (ns; oslens.store.compensation): app_events,
/// regions, functions, counters and timers then get compensation's columns (each time less the cost of its
/// thread's earlier records, a pause charged its value), the other tables' compensated times
/// are returned as "table.comp0".. (in the order of their times), and "comp.kinds" (records per
/// thread and kind) and "comp.pause_ns" (each thread's pauses) for its summary.
/// object_names: {address: name} of sync objects the program did not name (else 0x<address>).
/// declared: {table: [(column, Arrow type)]} of app_events and each streamed table, as
/// oslens.store.schema declares them (with compensation's columns when `costs` is given): the
/// files' columns are named from it, and the pass fails where its columns are not those
/// (ValueError: a bug, not the file system's).
#[pyfunction]
#[pyo3(signature = (chunks, threads, clock, dicts, path, group_rows, streams=None, reasons=None, thread_end=None, costs=None, object_names=None, declared=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn app_pass<'py>(
    py: Python<'py>,
    chunks: Vec<AppChunkIn>,
    threads: usize,
    clock: (i64, i64, f64, f64),
    dicts: [(usize, Vec<u8>); 4],
    path: Option<String>,
    group_rows: usize,
    streams: Option<std::collections::HashMap<String, String>>,
    reasons: Option<((Vec<u64>, usize, Vec<u8>), (Vec<u64>, usize, Vec<u8>))>,
    thread_end: Option<Vec<(i64, i64)>>,
    costs: Option<Vec<f64>>,
    object_names: Option<std::collections::HashMap<u64, String>>,
    declared: Option<app_rows::Declared>,
) -> PyResult<Bound<'py, PyDict>> {
    let declared = declared.unwrap_or_default();
    let object_names = object_names.unwrap_or_default();
    let streams = streams.unwrap_or_default();
    check_args(costs.as_deref(), &streams, reasons.is_some())?;
    let ((cc, cn, cp), (pc, pn, pp)) = reasons.unwrap_or_default();
    let thread_end = thread_end.unwrap_or_default();
    let mut maps = Vec::with_capacity(chunks.len());
    let mut raw = Vec::with_capacity(chunks.len());
    for (rec, g, _, keys, vals, _, counts) in &chunks {
        let (len, contiguous) = match rec {
            RecordsIn::Held(b) => (b.len_bytes(), b.is_c_contiguous()),
            RecordsIn::Reload((n, _)) => (*n, true),
        };
        if len % 32 != 0 || !contiguous || *g >= threads || counts.as_ref().is_some_and(|c| c.0.len() != 256) {
            return Err(PyValueError::new_err("app_pass: records must be whole 32-byte records of a listed thread"));
        }
        let n = vals.len_bytes() / 4;
        let (kp, vp) = (buffer_ptr(keys, n * 8, "name_keys", false)?, buffer_ptr(vals, n * 4, "name_values", false)?);
        // SAFETY: sizes checked; the buffers live as long as `chunks`.
        maps.push(unsafe { (NameMap::new(std::slice::from_raw_parts(kp as *const u8, n * 8), std::slice::from_raw_parts(vp as *const u8, n * 4)), n > 0) });
        raw.push(match rec {
            RecordsIn::Held(b) => (b.buf_ptr() as usize, b.len_bytes()),
            RecordsIn::Reload(_) => (0, 0),
        });
    }
    let (r0, n0, slope, intercept) = clock;
    let clock = app_rows::Clock { r0, n0, slope, intercept };
    let result = py.allow_threads(|| -> std::io::Result<Result<(app_rows::Derived, usize), String>> {
        // SAFETY: the record buffers are held by `chunks` for the whole call.
        let input: Vec<app_rows::Chunk> = chunks
            .iter()
            .zip(&raw)
            .zip(&maps)
            .map(|(((rec, g, tsc, _, _, payloads, counts), &(p, n)), (map, has))| app_rows::Chunk {
                records: match rec {
                    RecordsIn::Held(_) => app_rows::Source::Held(unsafe { std::slice::from_raw_parts(p as *const u8, n) }),
                    RecordsIn::Reload((len, from)) => app_rows::Source::Reload(*len, from),
                },
                g: *g,
                tsc: *tsc,
                names: map,
                has_names: *has,
                payloads,
                counts: counts.as_ref().map(|(c, top, _)| (&c[..], *top)),
                sync_keys: counts.as_ref().and_then(|(_, _, k)| k.as_deref()),
            })
            .collect();
        let d = |i: usize| (dicts[i].0, &dicts[i].1[..]);
        let dd = app_rows::Dicts { pid: d(0), tid: d(1), instrument: d(2), kind: d(3), declared: &declared };
        let mut nullable = [None; app_rows::NULLABLE];
        let mut passes = 0usize;
        let remove = || {
            for p in path.iter().chain(streams.values()) {
                let _ = std::fs::remove_file(p);
            }
        };
        for _ in 0..=app_rows::NULLABLE {
            let file = path.as_ref().map(std::fs::File::create).transpose()?;
            let sink = |t: &str| -> std::io::Result<Option<app_rows::Sink>> {
                streams.get(t).map(|p| std::fs::File::create(p).and_then(|f| app_rows::Sink::new(f, group_rows))).transpose()
            };
            let built = (|| {
                Ok::<_, std::io::Error>(app_rows::Streams {
                    regions: sink("regions")?,
                    functions: sink("functions")?,
                    counters: sink("counters")?,
                    timers: sink("timers")?,
                    pauses: sink("pauses")?,
                    adapt: sink("adapt")?,
                    sync: sink("sync")?,
                    counter_reasons: app_rows::Reasons { codes: cc.clone(), count: cn, plain: cp.clone() },
                    pause_reasons: app_rows::Reasons { codes: pc.clone(), count: pn, plain: pp.clone() },
                    thread_end: thread_end.clone(),
                    costs: costs.clone(),
                    object_names: object_names.clone(),
                })
            })();
            let mut st = match built {
                Ok(st) => st,
                Err(e) => {
                    remove();
                    return Err(e);
                }
            };
            passes += 1;
            match app_rows::run(&input, threads, clock, &dd, file, group_rows, nullable, &mut st) {
                Ok(Ok(out)) => return Ok(Ok((out, passes))),
                Ok(Err(app_rows::Retry(n))) => nullable = n,
                Err(e) => {
                    remove();
                    return Err(e);
                }
            }
        }
        remove();
        Ok(Err("app_pass: the columns' nullability did not settle".to_string()))
    });
    let (d, passes) = match result {
        Ok(Ok(d)) => d,
        Ok(Err(msg)) => return Err(PyValueError::new_err(msg)),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData && e.to_string().starts_with("app_pass: table ") => return Err(PyValueError::new_err(e.to_string())),
        Err(e) => return Err(PyOSError::new_err(format!("{}: {e}", path.unwrap_or_default()))),
    };
    derived_dict(py, d, passes)
}

/// The pass's derived rows not streamed, as columns keyed "table.column", and its counts.
fn derived_dict(py: Python<'_>, d: app_rows::Derived, passes: usize) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    let put = |k: &str, c: Col| -> PyResult<()> { out.set_item(k, Bound::new(py, ColumnBuffer { data: c })?) };
    out.set_item("counts", d.counts)?;
    out.set_item("rows", d.rows)?;
    out.set_item("sync.rows", d.sync_rows)?;
    out.set_item("sync.peak", d.sync_peak)?;
    out.set_item("regions.peak", d.regions_peak)?;
    out.set_item("functions.peak", d.functions_peak)?;
    out.set_item("timers.peak", d.timers.peak)?;
    out.set_item("passes", passes)?;
    put("extent.min", Col::I64(d.extent_min))?;
    put("extent.max", Col::I64(d.extent_max))?;
    put("counters.ts", Col::I64(d.counters.ts))?;
    put("counters.g", Col::I32(d.counters.g))?;
    put("counters.name", Col::I32(d.counters.name))?;
    put("counters.value", Col::I64(d.counters.value))?;
    put("counters.reason", Col::U64(d.counters.reason))?;
    put("timers.g", Col::I32(d.timers.g))?;
    put("timers.name", Col::I32(d.timers.name))?;
    put("timers.start_ns", Col::I64(d.timers.start))?;
    put("timers.stop_ns", Col::I64(d.timers.stop))?;
    put("timers.elapsed_ns", Col::I64(d.timers.elapsed))?;
    // timer rows written before their compensated start was known, and its final value
    let patches = &d.timers.patches;
    put("timers.patch_row", Col::I64(patches.iter().map(|p| p.0 as i64).collect()))?;
    put("timers.patch_comp_start", Col::I64(patches.iter().map(|p| p.1).collect()))?;
    put("timers.patch_comp_elapsed", Col::I64(patches.iter().map(|p| p.2).collect()))?;
    put("pauses.g", Col::I32(d.pauses.g))?;
    put("pauses.start_ns", Col::I64(d.pauses.start))?;
    put("pauses.end_ns", Col::I64(d.pauses.end))?;
    put("pauses.duration_ns", Col::I64(d.pauses.duration))?;
    put("pauses.reason", Col::U64(d.pauses.reason))?;
    put("adapt.ts", Col::I64(d.adapt.ts))?;
    put("adapt.g", Col::I32(d.adapt.g))?;
    put("adapt.name", Col::I32(d.adapt.name))?;
    put("adapt.error", Col::I64(d.adapt.error))?;
    put("adapt.policy", Col::I64(d.adapt.policy))?;
    for (t, n) in [("regions", d.regions), ("functions", d.functions)] {
        // rows written before their region or call ended: their rows in the table and final values
        let late = &n.late;
        put(&format!("{t}.late_row"), Col::I64(late.iter().map(|l| l.row as i64).collect()))?;
        put(&format!("{t}.late_end"), Col::I64(late.iter().map(|l| l.end).collect()))?;
        put(&format!("{t}.late_duration"), Col::I64(late.iter().map(|l| l.end.wrapping_sub(l.begin)).collect()))?;
        put(&format!("{t}.late_complete"), Col::U8(late.iter().map(|l| l.complete).collect()))?;
        put(&format!("{t}.late_comp_end"), Col::I64(late.iter().map(|l| l.comp_end).collect()))?;
        put(&format!("{t}.late_comp_duration"), Col::I64(late.iter().map(|l| l.comp_end.wrapping_sub(l.comp_begin)).collect()))?;
        out.set_item(format!("{t}.unmatched"), n.unmatched)?;
        put(&format!("{t}.g"), Col::I32(n.g))?;
        put(&format!("{t}.name"), Col::I32(n.name))?;
        put(&format!("{t}.key"), Col::U64(n.key))?;
        put(&format!("{t}.b"), Col::U64(n.b))?;
        put(&format!("{t}.begin_ns"), Col::I64(n.begin))?;
        put(&format!("{t}.end_ns"), Col::I64(n.end))?;
        put(&format!("{t}.duration_ns"), Col::I64(n.duration))?;
        put(&format!("{t}.depth"), Col::I64(n.depth))?;
        put(&format!("{t}.complete"), Col::U8(n.complete))?;
        for (i, v) in n.comp.into_iter().enumerate() {
            put(&format!("{t}.comp{i}"), Col::I64(v))?;
        }
    }
    if let Some(c) = d.comp {
        put("comp.kinds", Col::U64(c.kinds))?;
        put("comp.pause_ns", Col::I64(c.pause_ns))?;
        // compensated times of the rows returned (keyed table.comp0..2: as the table's times)
        put("counters.comp0", Col::I64(d.counters.comp))?;
        for (i, v) in d.timers.comp.into_iter().enumerate() {
            put(&format!("timers.comp{i}"), Col::I64(v))?;
        }
    }
    for (i, s) in d.sync.into_iter().enumerate() {
        put(&format!("sync{i}.g"), Col::I32(s.g))?;
        put(&format!("sync{i}.name"), Col::I32(s.name))?;
        put(&format!("sync{i}.address"), Col::U64(s.addr))?;
        put(&format!("sync{i}.request_ns"), Col::I64(s.request))?;
        put(&format!("sync{i}.acquire_ns"), Col::I64(s.acquire))?;
        put(&format!("sync{i}.acquire_ok"), Col::U8(s.acquire_ok))?;
        put(&format!("sync{i}.release_ns"), Col::I64(s.release))?;
        put(&format!("sync{i}.release_ok"), Col::U8(s.release_ok))?;
        for (j, v) in s.comp.into_iter().enumerate() {
            put(&format!("sync{i}.comp{j}"), Col::I64(v))?;
        }
    }
    Ok(out)
}

/// app_pass's arguments that the types do not check.
fn check_args(costs: Option<&[f64]>, streams: &std::collections::HashMap<String, String>, reasons: bool) -> PyResult<()> {
    if costs.is_some_and(|c| c.len() != 256) {
        return Err(PyValueError::new_err("app_pass: costs must give one figure per record kind (256)"));
    }
    if let Some(bad) = streams.keys().find(|k| !["regions", "functions", "counters", "timers", "pauses", "adapt", "sync"].contains(&k.as_str())) {
        return Err(PyValueError::new_err(format!("app_pass: {bad} cannot be streamed")));
    }
    if streams.keys().any(|k| k == "counters" || k == "pauses") && !reasons {
        return Err(PyValueError::new_err("app_pass: streamed counters and pauses need their reasons"));
    }
    Ok(())
}
