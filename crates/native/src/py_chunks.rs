//! Chunk files to and from Python: a chunk read (validated, salvaged) into a dict of its
//! header and records, mapped without copying where it is clean, and a chunk written (tests,
//! synthetic traces).

use crate::py_buffers::export_bytes;
use oslens_format::header::{stage, ChunkHeader, HEADER_SIZE};
use oslens_format::record::{continuation_records, Record, RECORD_SIZE};
use oslens_format::{kinds, read_chunk as read_chunk_file, Validator};
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
    d.set_item("fault_errno", h.fault_errno)?;
    d.set_item("fault_ns", h.fault_ns)?;
    d.set_item("fault_dropped", h.fault_dropped)?;
    d.set_item("fault_reason", oslens_format::header::fault_reason(h.fault_errno))?;
    Ok(d)
}


/// read_chunk(path) -> dict(header, records, names, payloads, damage)
#[pyfunction]
pub fn read_chunk<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    chunk_dict(py, path, false)
}

/// read_chunk_records(path): read_chunk, but `records` is a read-only buffer object (numpy views
/// it with frombuffer) holding the decoded records without a second copy into a bytes object.
#[pyfunction]
pub fn read_chunk_records<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    chunk_dict(py, path, true)
}

/// Decoded records, exposed through the buffer protocol (read-only, one-dimensional bytes):
/// either decoded into memory, or, for a chunk that needs no decoding, the file's own slots
/// mapped read-only (no copy, and page-cache pages cost no zeroing on first touch).
#[pyclass(frozen, module = "oslens._native")]
pub struct RecordBuffer {
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
fn map_clean(path: &str) -> std::io::Result<Option<Mapped>> {
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
    if let Some((h, n)) = clean_slots(&map) {
        return Ok(Some(Mapped::Clean(h, Records::Mapped(map, HEADER_SIZE..HEADER_SIZE + n * RECORD_SIZE))));
    }
    // a chunk with names (every kernel chunk) is decoded from this mapping when its staging ring
    // holds nothing: read_chunk would read the same bytes again into fresh anonymous memory
    Ok(ring_unused(&map).then(|| Mapped::Decode(map)))
}

/// Decoded records' buffers given back by the RecordBuffers that held them, for the next chunk's
/// records: a chunk's records take 32 MiB, and a fresh buffer for each cost a page fault per
/// 4 KiB or, from the heap, a hole the next rarely fitted (peak RSS grew with the trace).
static SPARE: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
/// Buffers kept at most (one per reader thread and per CPU the pass has open).
const SPARE_MAX: usize = 2;
/// Smaller buffers are not worth keeping.
const SPARE_MIN: usize = 1 << 20;

fn spare_take() -> Vec<u8> {
    SPARE.lock().map(|mut s| s.pop()).ok().flatten().unwrap_or_default()
}

fn spare_put(v: Vec<u8>) {
    if v.capacity() >= SPARE_MIN {
        if let Ok(mut s) = SPARE.lock() {
            if s.len() < SPARE_MAX {
                s.push(v);
            }
        }
    }
}

/// release_chunk_buffers(): frees the spare buffers (the importer calls it when done).
#[pyfunction]
pub fn release_chunk_buffers() {
    if let Ok(mut s) = SPARE.lock() {
        s.clear();
    }
}

impl Drop for RecordBuffer {
    fn drop(&mut self) {
        if let Records::Owned(v) = &mut self.data {
            spare_put(std::mem::take(v));
        }
    }
}

/// A chunk file's mapping from map_clean: its records as they lie, or to be decoded.
enum Mapped {
    Clean(ChunkHeader, Records),
    Decode(memmap2::Mmap),
}

/// No slot of the staging ring holds records (decode_chunk then reads only the header and the
/// committed slots, all inside map_clean's mapping).
fn ring_unused(head: &[u8]) -> bool {
    let (count, _) = stage::geometry(head);
    count == 0 || (count as usize <= stage::MAX_SLOTS && (0..count as usize).all(|j| stage::descriptor(head, j).0 == stage::FREE))
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
    let mut mapped = None;
    if no_copy {
        mapped = py.allow_threads(|| map_clean(path)).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
        if let Some(Mapped::Clean(h, records)) = mapped {
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
        .allow_threads(|| match mapped {
            Some(Mapped::Decode(map)) => Ok(oslens_format::reader::decode_chunk_into(&map, spare_take())),
            _ => read_chunk_file(std::path::Path::new(path)),
        })
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
pub fn write_chunk(
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

