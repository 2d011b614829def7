//! oslens._native: what Python needs from the native side. Decoding stays in Rust (validation,
//! continuation records, salvage); Python receives the valid records as one bytes object of
//! 32-byte records that numpy views without copying (`oslens.capture.raw.RECORD_DTYPE`).

mod app_rows;
mod constants;
mod parquet;
#[cfg(feature = "parquet-crate")]
#[path = "../../../bench/import/crate_writer.rs"]
mod crate_writer;
mod recorder_api;
mod whatif;

use oslens_format::header::{ChunkHeader, HEADER_SIZE};
use oslens_format::record::{continuation_records, Record, CONT_PAYLOAD, RECORD_SIZE};
use oslens_format::{kinds, read_chunk as read_chunk_file, Validator};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
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
    d.set_item("fault_errno", h.fault_errno)?;
    d.set_item("fault_ns", h.fault_ns)?;
    d.set_item("fault_dropped", h.fault_dropped)?;
    d.set_item("fault_reason", oslens_format::header::fault_reason(h.fault_errno))?;
    Ok(d)
}

/// memory_limit() -> (limit, usage, cgroup dir) of this process's nearest limited memory
/// cgroup (v1 or v2), or None; the recorder sizes its buffers from the same figures.
#[pyfunction]
fn memory_limit() -> Option<(u64, u64, String)> {
    oslens::memory_limit()
}

/// read_chunk(path) -> dict(header, records, names, payloads, damage)
#[pyfunction]
fn read_chunk<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    chunk_dict(py, path, false)
}

/// read_chunk_records(path): read_chunk, but `records` is a read-only buffer object (numpy views
/// it with frombuffer) holding the decoded records without a second copy into a bytes object.
#[pyfunction]
fn read_chunk_records<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    chunk_dict(py, path, true)
}

/// Decoded records, exposed through the buffer protocol (read-only, one-dimensional bytes):
/// either decoded into memory, or, for a chunk that needs no decoding, the file's own slots
/// mapped read-only (no copy, and page-cache pages cost no zeroing on first touch).
#[pyclass(frozen, module = "oslens._native")]
struct RecordBuffer {
    data: Records,
}

enum Records {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap, std::ops::Range<usize>),
}

impl Records {
    fn bytes(&self) -> &[u8] {
        match self {
            Records::Owned(v) => v,
            Records::Mapped(m, r) => &m[r.clone()],
        }
    }
}

/// Where a mapped chunk's decoded records are its slots as they lie in the file: a readable
/// header, every committed slot present and kept by the chunk's validator (its check and time
/// range), none a continuation or a record that takes continuations (a name, an event payload
/// over 8 bytes). decode_chunk would then copy every slot and report no damage, names or
/// payloads. `map` holds the header and at least the committed slots. Returns the header and
/// the committed slots.
fn clean_slots(map: &[u8]) -> Option<(ChunkHeader, usize)> {
    let h = if map.len() >= HEADER_SIZE { ChunkHeader::parse(map)? } else { return None };
    let committed = h.committed.min(h.capacity) as usize;
    if committed > (map.len() - HEADER_SIZE) / RECORD_SIZE {
        return None;
    }
    let validator = Validator::for_header(&h);
    let body = &map[HEADER_SIZE..HEADER_SIZE + committed * RECORD_SIZE];
    let plain = |s: &[u8]| match validator.judge(s) {
        Ok(r) => r.kind != kinds::CONT && !(r.kind == kinds::NAME && r.b > 0) && !(r.kind == kinds::EVENT && r.a > 8),
        Err(_) => false,
    };
    body.chunks_exact(RECORD_SIZE).all(plain).then_some((h, committed))
}

/// The header and committed slots of a chunk file mapped read-only (those pages populated up
/// front, and no others: a chunk is preallocated at its full capacity, 64 MiB by default, and
/// populating the rest would fill the page cache with zeros; oslens_format::read_chunk says
/// what that cost) and, when clean_slots says so, the range of its records.
fn map_clean(path: &str) -> std::io::Result<Option<(ChunkHeader, Records)>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len < HEADER_SIZE {
        return Ok(None);
    }
    // SAFETY: no preconditions; advice only (the header read below reads no more than asked).
    unsafe { libc::posix_fadvise(std::os::unix::io::AsRawFd::as_raw_fd(&file), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut head = vec![0u8; HEADER_SIZE];
    file.read_exact_at(&mut head, 0)?;
    let Some(h) = ChunkHeader::parse(&head) else { return Ok(None) };
    // Only the header and the committed records are mapped and populated: on tmpfs, populating
    // the holes of a sparse chunk (an unfilled buffer) allocates them, which filled a small
    // trace file system with zeros (docs/recorder.md, "Faults").
    let want = HEADER_SIZE.saturating_add((h.committed.min(h.capacity) as usize).saturating_mul(RECORD_SIZE));
    if want > len {
        return Ok(None); // truncated: decode_chunk reports it
    }
    // SAFETY: read-only mapping of a finished chunk (a writer still running only appends past
    // `committed`); a file truncated while mapped would fault.
    let map = unsafe { memmap2::MmapOptions::new().len(want).map(&file)? };
    // No read-around past the mapping (the device's read-ahead would read megabytes of the
    // chunk's unwritten capacity), then the pages populated up front.
    let _ = map.advise(memmap2::Advice::Random);
    if map.advise(memmap2::Advice::PopulateRead).is_err() {
        let _ = map.advise(memmap2::Advice::WillNeed);
    }
    Ok(clean_slots(&map).map(|(h, n)| (h, Records::Mapped(map, HEADER_SIZE..HEADER_SIZE + n * RECORD_SIZE))))
}

/// Fills a Py_buffer with `data`, which `owner` (a frozen object) owns.
///
/// # Safety
/// `view` is a valid Py_buffer to fill, and `data` lives as long as `owner`.
unsafe fn export_bytes(owner: &Bound<'_, PyAny>, data: &[u8], view: *mut pyo3::ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
    // SAFETY: the buffer points into memory `owner` owns and never changes; PyBuffer_FillInfo
    // takes a reference to `owner`, which keeps it alive while the view exists.
    let rc = unsafe {
        pyo3::ffi::PyBuffer_FillInfo(view, owner.as_ptr(), data.as_ptr() as *mut std::os::raw::c_void, data.len() as pyo3::ffi::Py_ssize_t, 1, flags)
    };
    if rc != 0 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}

#[pymethods]
impl RecordBuffer {
    /// # Safety
    /// Called by Python with a valid Py_buffer to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        // SAFETY: the records belong to this frozen object.
        unsafe { export_bytes(slf.as_any(), slf.get().data.bytes(), view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.bytes().len()
    }
}

fn chunk_dict<'py>(py: Python<'py>, path: &str, no_copy: bool) -> PyResult<Bound<'py, PyDict>> {
    if no_copy {
        let mapped = py.allow_threads(|| map_clean(path)).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
        if let Some((h, records)) = mapped {
            let d = PyDict::new(py);
            d.set_item("header", header_dict(py, &h)?)?;
            d.set_item("records", Bound::new(py, RecordBuffer { data: records })?)?;
            d.set_item("names", PyList::empty(py))?;
            d.set_item("payloads", PyList::empty(py))?;
            d.set_item("damage", PyList::empty(py))?;
            return Ok(d);
        }
    }
    let mut chunk = py
        .allow_threads(|| read_chunk_file(std::path::Path::new(path)))
        .map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
    let d = PyDict::new(py);
    match &chunk.header {
        Some(h) => d.set_item("header", header_dict(py, h)?)?,
        None => d.set_item("header", py.None())?,
    }
    if no_copy {
        d.set_item("records", Bound::new(py, RecordBuffer { data: Records::Owned(std::mem::take(&mut chunk.records)) })?)?;
    } else {
        d.set_item("records", PyBytes::new(py, &chunk.records))?;
    }
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
        fault_errno: get(header, "fault_errno", 0)?,
        fault_ns: get(header, "fault_ns", 0)?,
        fault_dropped: get(header, "fault_dropped", 0)?,
    };
    let mut f = std::fs::File::create(path).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
    f.write_all(&h.to_bytes()).and_then(|_| f.write_all(&body)).map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(slots)
}

fn buffer_ptr(buf: &PyBuffer<u8>, bytes: usize, what: &str, writable: bool) -> PyResult<usize> {
    if !buf.is_c_contiguous() || buf.len_bytes() != bytes || (writable && buf.readonly()) {
        return Err(PyValueError::new_err(format!(
            "split_records: {what} must be a {}contiguous buffer of {bytes} bytes",
            if writable { "writable " } else { "" }
        )));
    }
    Ok(buf.buf_ptr() as usize)
}

/// Open-addressing map from a record's name key (kind << 48 | id) to a name index.
pub(crate) struct NameMap {
    bits: u32,
    slots: Vec<(u64, i32)>,
}

const EMPTY_KEY: u64 = u64::MAX; // kind 255, id 0xffffffff: never a key (the mask clears bits 32..48 only)

impl NameMap {
    pub(crate) fn new(keys: &[u8], vals: &[u8]) -> NameMap {
        let n = vals.len() / 4;
        let bits = ((2 * n).max(2)).next_power_of_two().trailing_zeros();
        let mut m = NameMap { bits, slots: vec![(EMPTY_KEY, -1); 1 << bits] };
        for i in 0..n {
            let k = u64::from_le_bytes(keys[i * 8..i * 8 + 8].try_into().unwrap());
            let v = i32::from_le_bytes(vals[i * 4..i * 4 + 4].try_into().unwrap());
            let mut h = m.hash(k);
            while m.slots[h].0 != EMPTY_KEY && m.slots[h].0 != k {
                h = (h + 1) & (m.slots.len() - 1);
            }
            m.slots[h] = (k, v);
        }
        m
    }

    #[inline(always)]
    fn hash(&self, k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    pub(crate) fn get(&self, k: u64) -> i32 {
        let mut h = self.hash(k);
        loop {
            let (sk, v) = self.slots[h];
            if sk == k {
                return v;
            }
            if sk == EMPTY_KEY {
                return -1;
            }
            h = (h + 1) & (self.slots.len() - 1);
        }
    }
}

/// split_records(records, ts, kind, ident, cpu, value, name, name_keys, name_values, clock=None)
/// -> records per kind (256 counts): one pass over n 32-byte records (a chunk's `records`)
/// writing each field into its own contiguous column: ts (int64), kind (uint8), ident (uint32),
/// cpu (uint16), value (int64: the `a` word), name (int32: name_values[j] where
/// name_keys[j] == kind << 48 | id, else -1; name_keys uint64, name_values int32). With
/// clock = (r0, n0, slope, intercept) the raw TSC is converted to CLOCK_MONOTONIC ns as numpy's
/// `n0 + rint((ts - r0) * slope + intercept)` does, and the tick counts of TIMER_STOP and PAUSE
/// records as `rint(a * slope)` (bit for bit the same arithmetic: two separately rounded f64
/// operations, ties to even).
#[pyfunction]
#[pyo3(signature = (records, ts, kind, ident, cpu, value, name, name_keys, name_values, clock=None))]
#[allow(clippy::too_many_arguments)]
fn split_records(
    py: Python<'_>,
    records: PyBuffer<u8>,
    ts: PyBuffer<u8>,
    kind: PyBuffer<u8>,
    ident: PyBuffer<u8>,
    cpu: PyBuffer<u8>,
    value: PyBuffer<u8>,
    name: PyBuffer<u8>,
    name_keys: PyBuffer<u8>,
    name_values: PyBuffer<u8>,
    clock: Option<(i64, i64, f64, f64)>,
) -> PyResult<Vec<u64>> {
    if records.len_bytes() % 32 != 0 {
        return Err(PyValueError::new_err("split_records: records must be a whole number of 32-byte records"));
    }
    let n = records.len_bytes() / 32;
    let names = name_values.len_bytes() / 4;
    let rp = buffer_ptr(&records, n * 32, "records", false)?;
    let tp = buffer_ptr(&ts, n * 8, "ts", true)?;
    let kp = buffer_ptr(&kind, n, "kind", true)?;
    let ip = buffer_ptr(&ident, n * 4, "ident", true)?;
    let cp = buffer_ptr(&cpu, n * 2, "cpu", true)?;
    let vp = buffer_ptr(&value, n * 8, "value", true)?;
    let np_ = buffer_ptr(&name, n * 4, "name", true)?;
    if tp % 8 != 0 || ip % 4 != 0 || cp % 2 != 0 || vp % 8 != 0 || np_ % 4 != 0 {
        return Err(PyValueError::new_err("split_records: the columns must be aligned to their item size"));
    }
    let nkp = buffer_ptr(&name_keys, names * 8, "name_keys", false)?;
    let nvp = buffer_ptr(&name_values, names * 4, "name_values", false)?;
    Ok(py.allow_threads(move || {
        // SAFETY: every buffer was checked to be contiguous and of the size used here, and the
        // outputs writable; all access is byte-wise (no alignment assumed).
        let rec = unsafe { std::slice::from_raw_parts(rp as *const u8, n * 32) };
        let map = unsafe {
            NameMap::new(std::slice::from_raw_parts(nkp as *const u8, names * 8), std::slice::from_raw_parts(nvp as *const u8, names * 4))
        };
        // typed views of the columns (alignment checked before the GIL was released)
        let (ts, kind, ident, cpu, value, name) = unsafe {
            (
                std::slice::from_raw_parts_mut(tp as *mut i64, n),
                std::slice::from_raw_parts_mut(kp as *mut u8, n),
                std::slice::from_raw_parts_mut(ip as *mut u32, n),
                std::slice::from_raw_parts_mut(cp as *mut u16, n),
                std::slice::from_raw_parts_mut(vp as *mut i64, n),
                std::slice::from_raw_parts_mut(np_ as *mut i32, n),
            )
        };
        let mut counts = vec![0u64; 256];
        let word = |r: &[u8], o: usize| u64::from_le_bytes(r[o..o + 8].try_into().unwrap());
        let (tsc, (r0, n0, slope, intercept)) = match clock {
            Some(c) => (true, c),
            None => (false, (0, 0, 1.0, 0.0)),
        };
        for (i, r) in rec.chunks_exact(32).enumerate() {
            let w1 = word(r, 8);
            let k = r[14];
            let a = word(r, 16) as i64;
            counts[k as usize] += 1;
            kind[i] = k;
            ident[i] = w1 as u32;
            cpu[i] = (w1 >> 32) as u16;
            name[i] = if names == 0 { -1 } else { map.get(w1 & 0x00FF_0000_FFFF_FFFF) };
            if tsc {
                let d = (word(r, 0) as i64).wrapping_sub(r0) as f64;
                ts[i] = ((d * slope + intercept).round_ties_even() as i64).wrapping_add(n0);
                value[i] = if k == kinds::TIMER_STOP || k == kinds::PAUSE { (a as f64 * slope).round_ties_even() as i64 } else { a };
            } else {
                ts[i] = word(r, 0) as i64;
                value[i] = a;
            }
        }
        counts
    }))
}

/// pair_nested(g, key, is_begin, match, depth) -> unmatched ends: begin/end pairing as
/// oslens.store.pairing.pair_nested does it, in one pass per thread. g (int32, non-decreasing
/// thread index), key (uint64), is_begin (uint8 0/1) are read; match and depth (int64) written:
/// a begin is closed by the next end at its nesting level over all keys of its thread (a stack);
/// a thread where that pairs different keys, or where an end closes nothing, is paired again
/// with one stack per key. depth = begins open (not closed by a paired end) before each record,
/// counting the record itself, minus one.
#[pyfunction]
fn pair_nested(
    py: Python<'_>,
    g: PyBuffer<u8>,
    key: PyBuffer<u8>,
    is_begin: PyBuffer<u8>,
    matched: PyBuffer<u8>,
    depth: PyBuffer<u8>,
) -> PyResult<u64> {
    let n = is_begin.len_bytes();
    let gp = buffer_ptr(&g, n * 4, "g", false)?;
    let kp = buffer_ptr(&key, n * 8, "key", false)?;
    let bp = buffer_ptr(&is_begin, n, "is_begin", false)?;
    let mp = buffer_ptr(&matched, n * 8, "match", true)?;
    let dp = buffer_ptr(&depth, n * 8, "depth", true)?;
    Ok(py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; unaligned reads and writes only.
        let (gb, kb, begin) = unsafe {
            (
                std::slice::from_raw_parts(gp as *const u8, n * 4),
                std::slice::from_raw_parts(kp as *const u8, n * 8),
                std::slice::from_raw_parts(bp as *const u8, n),
            )
        };
        let (mb, db) = unsafe {
            (std::slice::from_raw_parts_mut(mp as *mut u8, n * 8), std::slice::from_raw_parts_mut(dp as *mut u8, n * 8))
        };
        let gi = |i: usize| i32::from_le_bytes(gb[i * 4..i * 4 + 4].try_into().unwrap());
        let ki = |i: usize| u64::from_le_bytes(kb[i * 8..i * 8 + 8].try_into().unwrap());
        let mut m = vec![-1i64; n];
        let mut end_used = vec![false; n];
        let mut unmatched = 0u64;
        let mut stack: Vec<usize> = Vec::new();
        let mut start = 0;
        while start < n {
            let g0 = gi(start);
            let mut end = start + 1;
            while end < n && gi(end) == g0 {
                end += 1;
            }
            stack.clear();
            let mut bad = false;
            for i in start..end {
                if begin[i] != 0 {
                    stack.push(i);
                } else if let Some(b) = stack.pop() {
                    m[b] = i as i64;
                    end_used[i] = true;
                    bad |= ki(b) != ki(i);
                } else {
                    bad = true;
                }
            }
            if bad {
                let mut stacks: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
                for i in start..end {
                    m[i] = -1;
                    end_used[i] = false;
                }
                for i in start..end {
                    let st = stacks.entry(ki(i)).or_default();
                    if begin[i] != 0 {
                        st.push(i);
                    } else if let Some(b) = st.pop() {
                        m[b] = i as i64;
                        end_used[i] = true;
                    }
                }
            }
            let mut open = 0i64;
            for i in start..end {
                if begin[i] != 0 {
                    open += 1;
                } else if end_used[i] {
                    open -= 1;
                } else {
                    unmatched += 1;
                }
                db[i * 8..i * 8 + 8].copy_from_slice(&(open - 1).to_le_bytes());
                mb[i * 8..i * 8 + 8].copy_from_slice(&m[i].to_le_bytes());
            }
            start = end;
        }
        unmatched
    }))
}

/// pair_kinds(kind, g, key, key_width, begin_kind, end_kind, begins, ends, depth) -> unmatched
/// ends: pair_nested over the records of two kinds among all records, without selecting them
/// first. kind (uint8), g (int32, non-decreasing thread index) and key (key_width = 4 or 8
/// bytes per record, unsigned) are read for every record; for each begin_kind record, in
/// record order, begins gets its row, ends the row of the end_kind record that closes it (-1:
/// never closed) and depth the number of its thread's begins open before it (int64 each, as
/// many as there are begin_kind records). Pairing as pair_nested: a stack per thread over all
/// keys, redone with a stack per key in a thread where that pairs different keys or an end
/// closes nothing.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn pair_kinds(
    py: Python<'_>,
    kind: PyBuffer<u8>,
    g: PyBuffer<u8>,
    key: PyBuffer<u8>,
    key_width: usize,
    begin_kind: u8,
    end_kind: u8,
    begins: PyBuffer<u8>,
    ends: PyBuffer<u8>,
    depth: PyBuffer<u8>,
) -> PyResult<u64> {
    let n = kind.len_bytes();
    if key_width != 4 && key_width != 8 {
        return Err(PyValueError::new_err("pair_kinds: key_width must be 4 or 8"));
    }
    let nb = begins.len_bytes() / 8;
    let kp = buffer_ptr(&kind, n, "kind", false)?;
    let gp = buffer_ptr(&g, n * 4, "g", false)?;
    let yp = buffer_ptr(&key, n * key_width, "key", false)?;
    let bp = buffer_ptr(&begins, nb * 8, "begins", true)?;
    let ep = buffer_ptr(&ends, nb * 8, "ends", true)?;
    let dp = buffer_ptr(&depth, nb * 8, "depth", true)?;
    let got = py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; byte-wise access only.
        let (kb, gb, yb) = unsafe {
            (
                std::slice::from_raw_parts(kp as *const u8, n),
                std::slice::from_raw_parts(gp as *const u8, n * 4),
                std::slice::from_raw_parts(yp as *const u8, n * key_width),
            )
        };
        let (bo, eo, dout) = unsafe {
            (
                std::slice::from_raw_parts_mut(bp as *mut u8, nb * 8),
                std::slice::from_raw_parts_mut(ep as *mut u8, nb * 8),
                std::slice::from_raw_parts_mut(dp as *mut u8, nb * 8),
            )
        };
        let gi = |i: usize| i32::from_le_bytes(gb[i * 4..i * 4 + 4].try_into().unwrap());
        let ki = |i: usize| {
            if key_width == 8 {
                u64::from_le_bytes(yb[i * 8..i * 8 + 8].try_into().unwrap())
            } else {
                u32::from_le_bytes(yb[i * 4..i * 4 + 4].try_into().unwrap()) as u64
            }
        };
        let mut out = 0usize; // begins written
        let mut unmatched = 0u64;
        let mut ev: Vec<usize> = Vec::new(); // the thread's begin/end rows
        let mut m: Vec<i64> = Vec::new(); // per event: the event closing it (index into ev)
        let mut used: Vec<bool> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        let mut i = 0;
        while i <= n {
            // gather one thread's events
            let at_end = i == n;
            if !at_end {
                let k = kb[i];
                if k != begin_kind && k != end_kind {
                    i += 1;
                    continue;
                }
            }
            let flush = at_end || (!ev.is_empty() && gi(i) != gi(ev[0]));
            if flush && !ev.is_empty() {
                let len = ev.len();
                m.clear();
                m.resize(len, -1);
                used.clear();
                used.resize(len, false);
                stack.clear();
                let mut bad = false;
                for j in 0..len {
                    if kb[ev[j]] == begin_kind {
                        stack.push(j);
                    } else if let Some(b) = stack.pop() {
                        m[b] = j as i64;
                        used[j] = true;
                        bad |= ki(ev[b]) != ki(ev[j]);
                    } else {
                        bad = true;
                    }
                }
                if bad {
                    m.iter_mut().for_each(|x| *x = -1);
                    used.iter_mut().for_each(|x| *x = false);
                    let mut stacks: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
                    for j in 0..len {
                        let st = stacks.entry(ki(ev[j])).or_default();
                        if kb[ev[j]] == begin_kind {
                            st.push(j);
                        } else if let Some(b) = st.pop() {
                            m[b] = j as i64;
                            used[j] = true;
                        }
                    }
                }
                let mut open = 0i64;
                for j in 0..len {
                    if kb[ev[j]] == begin_kind {
                        if out < nb {
                            let e = if m[j] >= 0 { ev[m[j] as usize] as i64 } else { -1 };
                            bo[out * 8..out * 8 + 8].copy_from_slice(&(ev[j] as i64).to_le_bytes());
                            eo[out * 8..out * 8 + 8].copy_from_slice(&e.to_le_bytes());
                            dout[out * 8..out * 8 + 8].copy_from_slice(&open.to_le_bytes());
                        }
                        out += 1;
                        open += 1;
                    } else if used[j] {
                        open -= 1;
                    } else {
                        unmatched += 1;
                    }
                }
                ev.clear();
            }
            if at_end {
                break;
            }
            ev.push(i);
            i += 1;
        }
        (out, unmatched)
    });
    if got.0 != nb {
        return Err(PyValueError::new_err(format!("pair_kinds: {} begins found, room for {nb}", got.0)));
    }
    Ok(got.1)
}

/// lock_requests(kind, g, addr, ts, request, stuck) -> stuck requests: when each lock
/// acquisition was asked for, in one pass over all records. kind (uint8), g (int32 thread
/// index), addr (uint64: the `a` word) and ts (int64) are read for every record; among the
/// sync records (kinds LOCK_REQUEST..=COND_WAIT_EXIT, in record order) an acquisition right
/// after a request of the same thread and object was asked for at the request's time, else at
/// its own. request (int64, one per LOCK_ACQUIRE record in order) gets that time; stuck (int64,
/// room for one per LOCK_REQUEST) the rows of the requests not followed so by an acquisition.
#[pyfunction]
fn lock_requests(
    py: Python<'_>,
    kind: PyBuffer<u8>,
    g: PyBuffer<u8>,
    addr: PyBuffer<u8>,
    ts: PyBuffer<u8>,
    request: PyBuffer<u8>,
    stuck: PyBuffer<u8>,
) -> PyResult<usize> {
    let n = kind.len_bytes();
    let (n_acq, n_req) = (request.len_bytes() / 8, stuck.len_bytes() / 8);
    let kp = buffer_ptr(&kind, n, "kind", false)?;
    let gp = buffer_ptr(&g, n * 4, "g", false)?;
    let ap = buffer_ptr(&addr, n * 8, "addr", false)?;
    let tp = buffer_ptr(&ts, n * 8, "ts", false)?;
    let rp = buffer_ptr(&request, n_acq * 8, "request", true)?;
    let sp = buffer_ptr(&stuck, n_req * 8, "stuck", true)?;
    let got = py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; byte-wise access only.
        let (kb, gb, ab, tb) = unsafe {
            (
                std::slice::from_raw_parts(kp as *const u8, n),
                std::slice::from_raw_parts(gp as *const u8, n * 4),
                std::slice::from_raw_parts(ap as *const u8, n * 8),
                std::slice::from_raw_parts(tp as *const u8, n * 8),
            )
        };
        let (ro, so) = unsafe {
            (std::slice::from_raw_parts_mut(rp as *mut u8, n_acq * 8), std::slice::from_raw_parts_mut(sp as *mut u8, n_req * 8))
        };
        let gi = |i: usize| i32::from_le_bytes(gb[i * 4..i * 4 + 4].try_into().unwrap());
        let ai = |i: usize| u64::from_le_bytes(ab[i * 8..i * 8 + 8].try_into().unwrap());
        let ti = |i: usize| i64::from_le_bytes(tb[i * 8..i * 8 + 8].try_into().unwrap());
        let same = |p: usize, i: usize| gi(p) == gi(i) && ai(p) == ai(i);
        let (mut acquired, mut stuck_n) = (0usize, 0usize);
        let put = |o: &mut [u8], at: &mut usize, v: i64| {
            if *at * 8 + 8 <= o.len() {
                o[*at * 8..*at * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
            *at += 1;
        };
        let mut last: Option<usize> = None; // the previous sync record
        for (i, &k) in kb.iter().enumerate() {
            if !(kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT).contains(&k) {
                continue;
            }
            let asked = last.filter(|&p| kb[p] == kinds::LOCK_REQUEST && same(p, i));
            if let Some(p) = last.filter(|&p| kb[p] == kinds::LOCK_REQUEST) {
                if !(k == kinds::LOCK_ACQUIRE && same(p, i)) {
                    put(so, &mut stuck_n, p as i64);
                }
            }
            if k == kinds::LOCK_ACQUIRE {
                put(ro, &mut acquired, ti(asked.unwrap_or(i)));
            }
            last = Some(i);
        }
        if let Some(p) = last.filter(|&p| kb[p] == kinds::LOCK_REQUEST) {
            put(so, &mut stuck_n, p as i64);
        }
        (acquired, stuck_n)
    });
    if got.0 != n_acq || got.1 > n_req {
        return Err(PyValueError::new_err(format!("lock_requests: {} acquisitions and {} requests do not fit", got.0, got.1)));
    }
    Ok(got.1)
}

/// event_offsets(kind, lens, offsets, validity): the offsets (int32, n + 1) and validity bitmap
/// (n bits, LSB first) of a binary column that holds a value for each EVENT record and null
/// elsewhere; lens (int64) are the values' lengths in record order, one per EVENT record.
#[pyfunction]
fn event_offsets(py: Python<'_>, kind: PyBuffer<u8>, lens: PyBuffer<u8>, offsets: PyBuffer<u8>, validity: PyBuffer<u8>) -> PyResult<()> {
    let n = kind.len_bytes();
    let ne = lens.len_bytes() / 8;
    let kp = buffer_ptr(&kind, n, "kind", false)?;
    let lp = buffer_ptr(&lens, ne * 8, "lens", false)?;
    let op = buffer_ptr(&offsets, (n + 1) * 4, "offsets", true)?;
    let vp = buffer_ptr(&validity, n.div_ceil(8), "validity", true)?;
    py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; byte-wise access only.
        let (kb, lb) = unsafe { (std::slice::from_raw_parts(kp as *const u8, n), std::slice::from_raw_parts(lp as *const u8, ne * 8)) };
        let (ob, vb) = unsafe {
            (std::slice::from_raw_parts_mut(op as *mut u8, (n + 1) * 4), std::slice::from_raw_parts_mut(vp as *mut u8, n.div_ceil(8)))
        };
        vb.fill(0);
        let (mut off, mut e) = (0i64, 0usize);
        ob[..4].copy_from_slice(&0i32.to_le_bytes());
        for (i, &k) in kb.iter().enumerate() {
            if k == kinds::EVENT && e < ne {
                off += i64::from_le_bytes(lb[e * 8..e * 8 + 8].try_into().unwrap());
                e += 1;
                vb[i >> 3] |= 1 << (i & 7);
            }
            ob[(i + 1) * 4..(i + 2) * 4].copy_from_slice(&(off as i32).to_le_bytes());
        }
        if e != ne || off > i32::MAX as i64 {
            return Err(PyValueError::new_err(format!("event_offsets: {e} events for {ne} lengths, {off} bytes")));
        }
        Ok(())
    })
}

/// One column for write_parquet, as Python describes it (a dict): name, physical (parquet type
/// number), converted (converted type or None), values (buffer), width (bytes per value: 8, 4;
/// dictionary indices 1-8; byte-array offsets 4 or 8; 0 for booleans, one bit each), offset
/// (the Arrow array offset), validity (Arrow validity bitmap, or None when no value is null),
/// data (byte-array data), dict_count and dict_plain (dictionary values PLAIN-encoded), delta
/// (DELTA_BINARY_PACKED) and stats (min/max statistics).
struct ColumnSpec {
    name: String,
    physical: i32,
    converted: Option<i32>,
    values: PyBuffer<u8>,
    width: usize,
    offset: usize,
    validity: Option<PyBuffer<u8>>,
    data: Option<PyBuffer<u8>>,
    dict: Option<(usize, PyBuffer<u8>)>,
    delta: bool,
    stats: bool,
}

fn column_spec(d: &Bound<'_, PyDict>) -> PyResult<ColumnSpec> {
    let item = |k: &str| d.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("write_parquet: column lacks {k}")));
    let opt_buf = |k: &str| -> PyResult<Option<PyBuffer<u8>>> {
        match d.get_item(k)? {
            Some(v) if !v.is_none() => Ok(Some(PyBuffer::get(&v)?)),
            _ => Ok(None),
        }
    };
    let dict_count: Option<usize> = d.get_item("dict_count")?.map(|v| v.extract()).transpose()?;
    Ok(ColumnSpec {
        name: item("name")?.extract()?,
        physical: item("physical")?.extract()?,
        converted: d.get_item("converted")?.map(|v| v.extract()).transpose()?.flatten(),
        values: PyBuffer::get(&item("values")?)?,
        width: item("width")?.extract()?,
        offset: item("offset")?.extract()?,
        validity: opt_buf("validity")?,
        data: opt_buf("data")?,
        dict: match (dict_count, opt_buf("dict_plain")?) {
            (Some(n), Some(b)) => Some((n, b)),
            _ => None,
        },
        delta: item("delta")?.extract()?,
        stats: item("stats")?.extract()?,
    })
}

/// A read-only view of a contiguous buffer that Python keeps alive during the call.
fn view(b: &PyBuffer<u8>) -> PyResult<&'static [u8]> {
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err("write_parquet: buffers must be contiguous"));
    }
    // SAFETY: the PyBuffer holds the exporter for the whole call; the slice is not kept after it.
    Ok(unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) })
}

/// Checks that every row the writer will read lies inside the buffers (no panic later).
fn checked_column(s: &ColumnSpec, rows: usize) -> PyResult<parquet::Column<'static>> {
    let end = s.offset + rows;
    let values = view(&s.values)?;
    let bad = |what: &str| Err(PyValueError::new_err(format!("write_parquet: column {}: {what}", s.name)));
    let value_bytes = match (s.physical, &s.data) {
        (parquet::BOOLEAN, _) => end.div_ceil(8),
        (parquet::BYTE_ARRAY, Some(_)) if s.dict.is_none() => (end + 1) * s.width,
        _ => end * s.width,
    };
    if !matches!(s.width, 0 | 1 | 2 | 4 | 8) || values.len() < value_bytes {
        return bad("values too short");
    }
    let validity = s.validity.as_ref().map(view).transpose()?;
    if validity.is_some_and(|v| v.len() < end.div_ceil(8)) {
        return bad("validity too short");
    }
    let data = s.data.as_ref().map(view).transpose()?;
    if let Some(d) = data {
        let last = |i: usize| {
            let b = &values[i * s.width..(i + 1) * s.width];
            if s.width == 4 { u32::from_le_bytes(b.try_into().unwrap()) as usize } else { u64::from_le_bytes(b.try_into().unwrap()) as usize }
        };
        if s.width < 4 || last(end) > d.len() || (s.offset..end).any(|i| last(i) > last(i + 1)) {
            return bad("byte-array offsets out of order or past the data");
        }
    }
    let dict = match &s.dict {
        Some((n, b)) => Some(parquet::Dictionary { count: *n, plain: view(b)? }),
        None => None,
    };
    Ok(parquet::Column {
        name: s.name.clone(),
        physical: s.physical,
        converted: s.converted,
        validity,
        offset: s.offset,
        values,
        width: s.width,
        data,
        dict,
        delta: s.delta,
        stats: s.stats,
    })
}

/// write_parquet(path, rows, columns, group_rows): writes a Parquet file of `rows` rows from
/// column descriptions (see ColumnSpec) in row groups of `group_rows`.
#[pyfunction]
fn write_parquet(py: Python<'_>, path: &str, rows: usize, columns: Vec<Bound<'_, PyDict>>, group_rows: usize) -> PyResult<()> {
    let specs = columns.iter().map(column_spec).collect::<PyResult<Vec<_>>>()?;
    let cols = specs.iter().map(|s| checked_column(s, rows)).collect::<PyResult<Vec<_>>>()?;
    py.allow_threads(|| {
        let f = std::fs::File::create(path)?;
        parquet::write(f, &cols, rows, group_rows).inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })
    })
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => PyValueError::new_err(format!("write_parquet: {e}")),
        _ => PyOSError::new_err(format!("{path}: {e}")),
    })
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
    kinds::kind_name(kind)
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
    m.add_function(wrap_pyfunction!(read_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(memory_limit, m)?)?;
    m.add("HEADROOM_SHARE_DIV", oslens::HEADROOM_SHARE_DIV)?;
    m.add_function(wrap_pyfunction!(event_sets, m)?)?;
    m.add_function(wrap_pyfunction!(write_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(split_records, m)?)?;
    m.add_function(wrap_pyfunction!(pair_nested, m)?)?;
    m.add_function(wrap_pyfunction!(pair_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(lock_requests, m)?)?;
    m.add_function(wrap_pyfunction!(write_parquet, m)?)?;
    #[cfg(feature = "parquet-crate")]
    m.add_function(wrap_pyfunction!(crate_writer::write_parquet_crate, m)?)?;
    m.add_function(wrap_pyfunction!(event_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(read_chunk_records, m)?)?;
    m.add_class::<RecordBuffer>()?;
    m.add_function(wrap_pyfunction!(clock_pair, m)?)?;
    m.add_function(wrap_pyfunction!(populate, m)?)?;
    m.add_function(wrap_pyfunction!(app_pass, m)?)?;
    m.add_function(wrap_pyfunction!(scan_records, m)?)?;
    m.add_class::<ColumnBuffer>()?;
    m.add_function(wrap_pyfunction!(kind_name, m)?)?;
    recorder_api::register(m)?;
    constants::register(m)?;
    whatif::register(m)?;
    m.add("HEADER_SIZE", HEADER_SIZE)?;
    m.add("FORMAT_VERSION", oslens_format::VERSION)?;
    m.add("RECORD_SIZE", 32)?;
    m.add("CONT_PAYLOAD", CONT_PAYLOAD)?;
    Ok(())
}

/// A column built natively, handed to Python through the buffer protocol (read-only; numpy
/// views it with frombuffer, no copy).
#[pyclass(frozen, module = "oslens._native")]
struct ColumnBuffer {
    data: Col,
}

enum Col {
    I64(Vec<i64>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    U8(Vec<u8>),
}

impl Col {
    fn bytes(&self) -> &[u8] {
        fn b<T>(v: &[T]) -> &[u8] {
            // SAFETY: plain integers: any value is its bytes; the slice covers the vector.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match self {
            Col::I64(v) => b(v),
            Col::I32(v) => b(v),
            Col::U64(v) => b(v),
            Col::U8(v) => b(v),
        }
    }
}

#[pymethods]
impl ColumnBuffer {
    /// # Safety
    /// Called by Python with a valid Py_buffer to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        // SAFETY: the column belongs to this frozen object.
        unsafe { export_bytes(slf.as_any(), slf.get().data.bytes(), view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.bytes().len()
    }
}

type AppChunkIn = (RecordsIn, usize, bool, PyBuffer<u8>, PyBuffer<u8>, std::collections::HashMap<usize, Vec<u8>>, Option<(Vec<u64>, u16, Option<Vec<u64>>)>);

/// A chunk's records as app_pass takes them: a buffer held for the whole call, or (its length in
/// bytes, a callable that returns them again), called when the pass reaches the chunk and let go
/// after it (app_rows::Source).
#[derive(FromPyObject)]
enum RecordsIn {
    Held(PyBuffer<u8>),
    Reload((usize, PyReload)),
}

/// A Python callable returning a chunk's records (a contiguous buffer of 32-byte records).
#[derive(FromPyObject)]
struct PyReload(Py<PyAny>);

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
fn scan_records(py: Python<'_>, records: PyBuffer<u8>) -> PyResult<(Vec<u64>, Vec<(u64, u64)>, u16, (Option<Vec<u64>>, Option<Vec<u64>>), Option<Vec<u64>>)> {
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
/// (regions, counters, timers, pauses, adapt, sync; their columns are then not returned, and
/// "sync.rows" says how many rows sync got, "sync.peak" the most it held at once); with every
/// chunk's sync keys sync's rows are written as threads end whatever the objects' names;
/// "passes": the times the pass ran (more than once where a column's nullability or sync's
/// dictionary was not what its first page decided); reasons:
/// ((codes, count, PLAIN labels) of counters' reasons, the same of pauses'), the sorted codes
/// the streamed tables hold; thread_end: per thread (latest closing calibration time, program
/// exit where its chunk was never closed), i64 min for none: when an unclosed region ends.
/// costs: per record kind, what one record cost (ns; oslens.store.compensation): app_events,
/// regions, counters and timers then get compensation's columns (each time less the cost of its
/// thread's earlier records, a pause charged its value), the other tables' compensated times
/// are returned as "table.comp0".. (in the order of their times), and "comp.kinds" (records per
/// thread and kind) and "comp.pause_ns" (each thread's pauses) for its summary.
/// object_names: {address: name} of sync objects the program did not name (else 0x<address>).
#[pyfunction]
#[pyo3(signature = (chunks, threads, clock, dicts, path, group_rows, streams=None, reasons=None, thread_end=None, costs=None, object_names=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn app_pass<'py>(
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
) -> PyResult<Bound<'py, PyDict>> {
    let object_names = object_names.unwrap_or_default();
    if costs.as_ref().is_some_and(|c| c.len() != 256) {
        return Err(PyValueError::new_err("app_pass: costs must give one figure per record kind (256)"));
    }
    let streams = streams.unwrap_or_default();
    if let Some(bad) = streams.keys().find(|k| !["regions", "counters", "timers", "pauses", "adapt", "sync"].contains(&k.as_str())) {
        return Err(PyValueError::new_err(format!("app_pass: {bad} cannot be streamed")));
    }
    if streams.keys().any(|k| k == "counters" || k == "pauses") && reasons.is_none() {
        return Err(PyValueError::new_err("app_pass: streamed counters and pauses need their reasons"));
    }
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
        let dd = app_rows::Dicts { pid: d(0), tid: d(1), instrument: d(2), kind: d(3) };
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
        Err(e) => return Err(PyOSError::new_err(format!("{}: {e}", path.unwrap_or_default()))),
    };
    let out = PyDict::new(py);
    let put = |k: &str, c: Col| -> PyResult<()> { out.set_item(k, Bound::new(py, ColumnBuffer { data: c })?) };
    out.set_item("counts", d.counts)?;
    out.set_item("rows", d.rows)?;
    out.set_item("sync.rows", d.sync_rows)?;
    out.set_item("sync.peak", d.sync_peak)?;
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
