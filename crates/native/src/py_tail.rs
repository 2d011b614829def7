//! Tailing a chunk that is still being written (the flight recorder's trigger watcher,
//! python/oslens/capture/triggers.py): each `read()` returns the records committed since the
//! last one, laid over by the staging ring's slots that still hold them, validated, with no
//! mapping (a kernel chunk is cut to its records when closed; a mapping past that would fault).

use oslens_format::header::{offset, stage, ChunkHeader, HEADER_SIZE};
use oslens_format::kinds;
use oslens_format::record::RECORD_SIZE;
use oslens_format::Validator;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A slot that fails its check this many reads in a row is skipped as damage (a torn record
/// passes on the next read, once its writer finished it).
const RETRIES: u32 = 3;

/// ChunkTail(path): the committed records of one chunk, read incrementally.
#[pyclass(module = "oslens._native")]
pub struct ChunkTail {
    file: File,
    path: String,
    head: Vec<u8>,
    header: Option<ChunkHeader>,
    /// Record positions consumed so far (valid, skipped or continuation).
    seen: u64,
    fails: u32,
    /// Slots skipped as damaged.
    #[pyo3(get)]
    damaged: u64,
}

impl ChunkTail {
    fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.file.read_at(&mut buf[got..], at + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }

    /// The ring slots holding positions in `from..to`: (slot, first position, end position, start).
    fn ring_slots(head: &[u8], h: &ChunkHeader, from: u64, to: u64) -> Vec<(usize, u64, u64, u64)> {
        let (count, _) = stage::geometry(head);
        let mut out = vec![];
        for j in 0..(count as usize).min(stage::MAX_SLOTS) {
            let (state, start, len) = stage::descriptor(head, j);
            let end = match state {
                stage::WRITING => h.committed,
                stage::FULL | stage::COPYING => start.saturating_add(len),
                _ => continue,
            };
            let (a, b) = (start.max(from), end.min(to));
            if a < b {
                out.push((j, a, b, start));
            }
        }
        out
    }

    /// Positions `from..to` as they are now: the file's slots, with the ring's laid over them;
    /// None when a ring slot was reused while it was read (read again next time).
    fn read_range(&self, h: &ChunkHeader, from: u64, to: u64) -> std::io::Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; ((to - from) as usize) * RECORD_SIZE];
        let got = self.read_at(&mut buf, (HEADER_SIZE as u64) + from * RECORD_SIZE as u64)?;
        buf.truncate(got / RECORD_SIZE * RECORD_SIZE);
        let slots = Self::ring_slots(&self.head, h, from, from + (buf.len() / RECORD_SIZE) as u64);
        if slots.is_empty() {
            return Ok(Some(buf));
        }
        let (_, per_slot) = stage::geometry(&self.head);
        let ring = HEADER_SIZE as u64 + h.capacity * RECORD_SIZE as u64;
        for &(j, a, b, start) in &slots {
            let at = ring + (j as u64 * per_slot as u64 + (a - start)) * RECORD_SIZE as u64;
            let o = ((a - from) as usize) * RECORD_SIZE;
            let n = ((b - a) as usize) * RECORD_SIZE;
            // a short read (a ring cut off the file) leaves zeros, which fail their check below
            self.read_at(&mut buf[o..o + n], at)?;
        }
        // a slot whose start moved was handed a later range while we read it: its bytes are not ours
        let mut again = vec![0u8; HEADER_SIZE];
        self.read_at(&mut again, 0)?;
        let moved = slots.iter().any(|&(j, _, _, start)| stage::descriptor(&again, j).1 != start);
        Ok(if moved { None } else { Some(buf) })
    }
}

#[pymethods]
impl ChunkTail {
    #[new]
    fn new(path: &str) -> PyResult<Self> {
        let file = File::open(path).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))?;
        Ok(ChunkTail { file, path: path.into(), head: vec![0u8; HEADER_SIZE], header: None, seen: 0, fails: 0, damaged: 0 })
    }

    /// read() -> bytes: the valid records (continuations left out) committed since the last read.
    fn read<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let err = |e: std::io::Error| PyOSError::new_err(format!("{}: {e}", self.path));
        let mut head = std::mem::take(&mut self.head);
        let got = self.read_at(&mut head, 0).map_err(err)?;
        self.head = head;
        let h = if got == HEADER_SIZE { ChunkHeader::parse(&self.head) } else { None };
        let Some(h) = h else { return Ok(PyBytes::new(py, &[])) };
        let committed = h.committed.min(h.capacity);
        self.header = Some(h.clone());
        if committed <= self.seen {
            return Ok(PyBytes::new(py, &[]));
        }
        let Some(raw) = self.read_range(&h, self.seen, committed).map_err(err)? else { return Ok(PyBytes::new(py, &[])) };
        let validator = Validator::for_header(&h);
        let mut out = Vec::with_capacity(raw.len());
        for s in raw.chunks_exact(RECORD_SIZE) {
            match validator.judge(s) {
                Ok(r) if r.kind == kinds::CONT => {}
                Ok(_) => out.extend_from_slice(s),
                Err(_) if self.fails + 1 >= RETRIES => self.damaged += 1,
                Err(_) => {
                    self.fails += 1;
                    break;
                }
            }
            self.fails = 0;
            self.seen += 1;
        }
        Ok(PyBytes::new(py, &out))
    }

    /// The header as last read (read_chunk's keys that a tail needs), or None before a readable one.
    fn header<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(h) = &self.header else { return Ok(None) };
        let d = PyDict::new(py);
        d.set_item("source", h.source)?;
        d.set_item("clock", h.clock)?;
        d.set_item("pid", h.pid)?;
        d.set_item("tid", h.tid)?;
        d.set_item("cpu", h.cpu)?;
        d.set_item("committed", h.committed)?;
        d.set_item("closed", h.closed)?;
        d.set_item("calib", vec![h.calib[0], h.calib[1]])?;
        Ok(Some(d))
    }

    /// Record positions consumed so far.
    #[getter]
    fn seen(&self) -> u64 {
        self.seen
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChunkTail>()?;
    // where a writer's progress and staging ring lie in a header: the tests replay a finished
    // chunk as it grew, and build chunks whose records are still in the ring
    m.add("TAIL_HEADER_OFFSETS", vec![
        ("committed", offset::COMMITTED),
        ("closed", offset::CLOSED),
        ("stage_slots", offset::STAGE_SLOTS),
        ("stage_slot_records", offset::STAGE_SLOT_RECORDS),
        ("descriptors", stage::DESCRIPTORS),
        ("descriptor_size", stage::DESCRIPTOR_SIZE),
    ])?;
    m.add("TAIL_STAGE_STATES", vec![("free", stage::FREE), ("writing", stage::WRITING), ("full", stage::FULL), ("copying", stage::COPYING)])
}
