//! Reading and salvaging chunks. The reader never fails on damage: it keeps every record that
//! validates and describes what it could not keep.

use crate::header::{stage, ChunkHeader, CLOCK_TSC, HEADER_SIZE};
use crate::kinds;
use crate::record::{continuation_check_with, continuation_payload, Check, Record, CONT_PAYLOAD, RECORD_SIZE};
use std::fs::File;
use std::path::Path;

/// One thing wrong with a chunk, and how many record slots it cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub reason: String,
    /// Byte offset in the file where the damage starts.
    pub offset: u64,
    pub records_lost: u64,
}

#[derive(Debug, Default)]
pub struct Chunk {
    /// `None` when the header was unreadable (records were still salvaged by scanning).
    pub header: Option<ChunkHeader>,
    /// Valid records other than CONT, as raw 32-byte blocks, in file order.
    pub records: Vec<u8>,
    /// (id, class, manager id, name) for each NAME record.
    pub names: Vec<(u32, u64, u32, String)>,
    /// (index into `records`, payload) for each EVENT with a payload longer than 8 bytes.
    pub payloads: Vec<(usize, Vec<u8>)>,
    pub damage: Vec<Damage>,
}

impl Chunk {
    pub fn record_count(&self) -> usize {
        self.records.len() / RECORD_SIZE
    }
}

/// How far outside its chunk's time range a timestamp may lie and still be believed: a record
/// may be timed just before its chunk was opened (the chunk a full one rolls over to, a
/// kernel record waiting in the ring), but not by a minute.
pub const TIME_SLACK_NS: u64 = 60_000_000_000;
/// TSC ticks per ns assumed when turning the slack into ticks (no TSC runs at 10 GHz).
const MAX_TICKS_PER_NS: u64 = 10;

/// Why a slot was not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotFault {
    /// Its check byte does not match (or it is empty).
    Check,
    /// It validates, but its timestamp lies outside the chunk's time range.
    Time,
}

/// What a slot of one chunk must satisfy to be kept: its check, by the chunk's format version,
/// and a timestamp inside the chunk's time range (from the header's calibration pairs: not
/// before the chunk was opened, and not after it was closed, each with `TIME_SLACK_NS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validator {
    pub check: Check,
    pub earliest: u64,
    pub latest: u64,
}

impl Validator {
    /// For a chunk with a readable header (its version is one `Check::for_version` knows).
    pub fn for_header(h: &ChunkHeader) -> Validator {
        let check = Check::for_version(h.version).unwrap_or(Check::Fold);
        let slack = if h.clock == CLOCK_TSC { TIME_SLACK_NS * MAX_TICKS_PER_NS } else { TIME_SLACK_NS };
        let (opened, closed) = (h.calib[0].0, h.calib[1].0);
        if opened == 0 {
            return Validator { check, earliest: 0, latest: u64::MAX };
        }
        // Only a closed chunk's second pair is its end: an open one's is the last flush.
        let latest = if h.closed && closed >= opened { closed.saturating_add(slack) } else { u64::MAX };
        Validator { check, earliest: opened.saturating_sub(slack), latest }
    }

    /// For a chunk whose header is unreadable: the check most of its first non-empty slots pass,
    /// and no time range.
    pub fn guess(raw: &[u8], slots: usize) -> Validator {
        let passes = |check: Check| {
            (0..slots)
                .map(|i| slot(raw, i))
                .filter(|s| s.iter().any(|&b| b != 0))
                .take(256)
                .filter(|s| check_passes(check, s))
                .count()
        };
        let check = if passes(Check::Sum) > passes(Check::Fold) { Check::Sum } else { Check::Fold };
        Validator { check, earliest: 0, latest: u64::MAX }
    }

    /// Whether a raw slot is kept, and why not.
    #[inline]
    pub fn judge(&self, s: &[u8]) -> Result<Record, SlotFault> {
        let r = Record::from_bytes(s);
        if r.kind == kinds::CONT {
            return if continuation_check_with(self.check, s) == s[15] { Ok(r) } else { Err(SlotFault::Check) };
        }
        if !self.check.accepts(&r) {
            return Err(SlotFault::Check);
        }
        if r.kind != kinds::NAME && (r.ts < self.earliest || r.ts > self.latest) {
            return Err(SlotFault::Time);
        }
        Ok(r)
    }
}

fn check_passes(check: Check, s: &[u8]) -> bool {
    if s[14] == kinds::CONT {
        continuation_check_with(check, s) == s[15]
    } else {
        check.accepts(&Record::from_bytes(s))
    }
}

/// Reads a chunk file: its header, its committed records and its staging ring, and nothing
/// else. A chunk is preallocated at its full capacity (64 MiB by default) as a sparse file, so
/// reading it whole, or faulting in a mapping of it with the device's read-ahead (8 MiB on the
/// development VM's disk), would fill the page cache with zeros: measured, importing 100 runs
/// of /bin/true (4.5 MB of trace) grew it by 9 GB. The parts are read into an anonymous mapping
/// of the file's length, whose untouched pages cost nothing, with read-ahead off.
pub fn read_chunk(path: &Path) -> std::io::Result<Chunk> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    let file = File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        let mut chunk = Chunk::default();
        chunk.damage.push(Damage { reason: "empty file".into(), offset: 0, records_lost: 0 });
        return Ok(chunk);
    }
    // SAFETY: no preconditions; advice only (read exactly the ranges asked for).
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut buf = memmap2::MmapMut::map_anon(len)?;
    for (from, to) in needed_ranges(&file, len)? {
        file.read_exact_at(&mut buf[from..to], from as u64)?;
    }
    Ok(decode_chunk(&buf))
}

/// The byte ranges of a chunk file the decoder reads: the header, the committed slots and the
/// staging ring when the header is readable, else the whole file (salvage scans every slot).
fn needed_ranges(file: &File, len: usize) -> std::io::Result<Vec<(usize, usize)>> {
    use std::os::unix::fs::FileExt;
    if len < HEADER_SIZE {
        return Ok(vec![(0, len)]);
    }
    let mut head = vec![0u8; HEADER_SIZE];
    file.read_exact_at(&mut head, 0)?;
    let Some(h) = ChunkHeader::parse(&head) else { return Ok(vec![(0, len)]) };
    let slot_end = |slots: u64| (slots as usize).checked_mul(RECORD_SIZE).and_then(|b| b.checked_add(HEADER_SIZE)).unwrap_or(usize::MAX).min(len);
    let mut out = vec![(0, slot_end(h.committed.min(h.capacity)))];
    // the ring's slots that hold records (overlay_stage reads no others; a copied-out slot's
    // stale bytes are never read)
    let (count, per_slot) = stage::geometry(&head);
    if count as usize <= stage::MAX_SLOTS {
        let ring = slot_end(h.capacity);
        let slot_bytes = per_slot as usize * RECORD_SIZE;
        for j in (0..count as usize).filter(|&j| stage::descriptor(&head, j).0 != stage::FREE) {
            let from = ring.saturating_add(j.saturating_mul(slot_bytes)).min(len);
            out.push((from, from.saturating_add(slot_bytes).min(len)));
        }
    }
    Ok(out)
}

/// Decodes a chunk held in memory.
pub fn decode_chunk(raw: &[u8]) -> Chunk {
    decode_chunk_into(raw, Vec::new())
}

/// decode_chunk, the records decoded into `records` (emptied first): a caller reusing its
/// buffers from chunk to chunk pays no fresh pages for each.
pub fn decode_chunk_into(raw: &[u8], mut records: Vec<u8>) -> Chunk {
    records.clear();
    let mut chunk = Chunk { records, ..Chunk::default() };
    let header = if raw.len() >= HEADER_SIZE { ChunkHeader::parse(raw) } else { None };
    let slots_in_file = raw.len().saturating_sub(HEADER_SIZE) / RECORD_SIZE;
    let slots = match &header {
        Some(h) => {
            let committed = h.committed.min(h.capacity) as usize;
            if committed > slots_in_file {
                chunk.damage.push(Damage {
                    reason: format!("truncated: {} of {} committed records are missing", committed - slots_in_file, committed),
                    offset: raw.len() as u64,
                    records_lost: (committed - slots_in_file) as u64,
                });
            }
            committed.min(slots_in_file)
        }
        None => {
            chunk.damage.push(Damage {
                reason: if raw.len() < HEADER_SIZE { "header truncated".into() } else { "header unreadable (bad magic or version)".into() },
                offset: 0,
                records_lost: 0,
            });
            // Without a committed count, scan up to the last slot that validates.
            let guess = Validator::guess(raw, slots_in_file);
            let last_valid = (0..slots_in_file).rev().find(|&i| check_passes(guess.check, slot(raw, i)));
            last_valid.map_or(0, |i| i + 1)
        }
    };
    let validator = match &header {
        Some(h) => Validator::for_header(h),
        None => Validator::guess(raw, slots),
    };
    let staged = header.as_ref().and_then(|h| overlay_stage(raw, h, slots, &mut chunk));
    chunk.header = header;
    decode_records(staged.as_deref().unwrap_or(raw), slots, &validator, &mut chunk);
    chunk
}

/// The header and record slots with the staging ring's slots laid over them, when the writer
/// stopped before copying some out (a crash, a kill, a thread still running at exit); `None`
/// when no slot holds records the record slots lack.
fn overlay_stage(raw: &[u8], h: &ChunkHeader, slots: usize, chunk: &mut Chunk) -> Option<Vec<u8>> {
    let (count, per_slot) = stage::geometry(raw);
    if count == 0 {
        return None;
    }
    let ring = HEADER_SIZE + h.capacity as usize * RECORD_SIZE;
    let slot_bytes = per_slot as usize * RECORD_SIZE;
    if count as usize > stage::MAX_SLOTS || per_slot == 0 {
        chunk.damage.push(Damage { reason: format!("staging ring header unreadable ({count} slots of {per_slot})"), offset: 0, records_lost: 0 });
        return None;
    }
    let mut out: Option<Vec<u8>> = None;
    for j in 0..count as usize {
        let (state, start, len) = stage::descriptor(raw, j);
        let end = match state {
            stage::FREE => continue,
            stage::WRITING => h.committed,
            stage::FULL | stage::COPYING => start.saturating_add(len),
            _ => u64::MAX,
        };
        let end = end.min(slots as u64);
        let n = end.saturating_sub(start) as usize;
        if n == 0 {
            continue;
        }
        let from = ring + j * slot_bytes;
        if n > per_slot as usize || from + n * RECORD_SIZE > raw.len() {
            chunk.damage.push(Damage {
                reason: format!("staging slot {j} is damaged or truncated"),
                offset: from as u64,
                records_lost: n.min(per_slot as usize) as u64,
            });
            continue;
        }
        let buf = out.get_or_insert_with(|| raw[..HEADER_SIZE + slots * RECORD_SIZE].to_vec());
        let at = HEADER_SIZE + start as usize * RECORD_SIZE;
        buf[at..at + n * RECORD_SIZE].copy_from_slice(&raw[from..from + n * RECORD_SIZE]);
    }
    out
}

fn slot(raw: &[u8], i: usize) -> &[u8] {
    &raw[HEADER_SIZE + i * RECORD_SIZE..HEADER_SIZE + (i + 1) * RECORD_SIZE]
}

/// A run of adjacent slots not kept for one reason: (first slot, count, reason).
type BadRun = Option<(usize, u64, SlotFault)>;

fn decode_records(raw: &[u8], slots: usize, validator: &Validator, chunk: &mut Chunk) {
    chunk.records.reserve(slots * RECORD_SIZE);
    let mut bad_run: BadRun = None;
    let mut i = 0;
    while i < slots {
        let s = slot(raw, i);
        // A CONT here is an orphan: its head was damaged or it is itself damaged.
        let judged = validator.judge(s).and_then(|r| if r.kind == kinds::CONT { Err(SlotFault::Check) } else { Ok(r) });
        let rec = match judged {
            Ok(rec) => rec,
            Err(fault) => {
                if bad_run.is_some_and(|(_, _, f)| f != fault) {
                    flush_bad_run(&mut bad_run, chunk);
                }
                bad_run.get_or_insert((i, 0, fault)).1 += 1;
                i += 1;
                continue;
            }
        };
        flush_bad_run(&mut bad_run, chunk);
        let cont = match rec.kind {
            kinds::NAME => (rec.b as usize).div_ceil(CONT_PAYLOAD),
            kinds::EVENT if rec.a > 8 => (rec.a as usize - 8).div_ceil(CONT_PAYLOAD),
            _ => 0,
        };
        if cont > 0 {
            match collect_payload(raw, i + 1, cont, slots, validator.check) {
                Some(bytes) => keep_with_payload(rec, s, bytes, chunk),
                None => {
                    chunk.damage.push(Damage {
                        reason: format!("{} record lost its continuation", crate::kind_names::kind_name(rec.kind)),
                        offset: (HEADER_SIZE + i * RECORD_SIZE) as u64,
                        records_lost: 1 + cont as u64,
                    });
                }
            }
            i += 1 + cont;
            continue;
        }
        chunk.records.extend_from_slice(s);
        i += 1;
    }
    flush_bad_run(&mut bad_run, chunk);
}

fn flush_bad_run(bad_run: &mut BadRun, chunk: &mut Chunk) {
    if let Some((start, n, fault)) = bad_run.take() {
        chunk.damage.push(Damage {
            reason: match fault {
                SlotFault::Check => format!("{n} record(s) failed their check"),
                SlotFault::Time => format!("{n} record(s) with a timestamp outside the chunk's time range"),
            },
            offset: (HEADER_SIZE + start * RECORD_SIZE) as u64,
            records_lost: n,
        });
    }
}

fn collect_payload(raw: &[u8], first: usize, count: usize, slots: usize, check: Check) -> Option<Vec<u8>> {
    if first + count > slots {
        return None;
    }
    let mut bytes = Vec::with_capacity(count * CONT_PAYLOAD);
    for j in first..first + count {
        let s = slot(raw, j);
        if s[14] != kinds::CONT || continuation_check_with(check, s) != s[15] {
            return None;
        }
        bytes.extend(continuation_payload(s));
    }
    Some(bytes)
}

fn keep_with_payload(rec: Record, s: &[u8], mut bytes: Vec<u8>, chunk: &mut Chunk) {
    if rec.kind == kinds::NAME {
        bytes.truncate(rec.b as usize);
        let class = rec.a & 0xffff_ffff;
        let manager = (rec.a >> 32) as u32;
        chunk.names.push((rec.id, class, manager, String::from_utf8_lossy(&bytes).into_owned()));
    } else {
        let mut payload = rec.b.to_le_bytes().to_vec();
        payload.extend_from_slice(&bytes);
        payload.truncate(rec.a as usize);
        chunk.payloads.push((chunk.record_count(), payload));
    }
    chunk.records.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{SOURCE_APP_THREAD, CLOCK_TSC};
    use crate::record::continuation_records;

    fn build(records: &[[u8; 32]], committed: u64) -> Vec<u8> {
        let h = ChunkHeader {
            version: crate::VERSION,
            source: SOURCE_APP_THREAD,
            clock: CLOCK_TSC,
            pid: 1,
            tid: 1,
            capacity: 100,
            committed,
            ..Default::default()
        };
        let mut out = h.to_bytes();
        for r in records {
            out.extend_from_slice(r);
        }
        out
    }

    fn name_records(id: u32, name: &str) -> Vec<[u8; 32]> {
        let mut v = vec![Record::new(0, id, 0, kinds::NAME, kinds::NAME_REGION, name.len() as u64).to_bytes()];
        v.extend(continuation_records(name.as_bytes()));
        v
    }

    #[test]
    fn decodes_names_events_and_plain_records() {
        let mut recs = name_records(9, "a fairly long region name beyond thirty bytes");
        recs.push(Record::new(10, 9, 1, kinds::REGION_BEGIN, 0, 0).to_bytes());
        let payload: Vec<u8> = (0..20u8).collect();
        recs.push(Record::new(11, 5, 1, kinds::EVENT, 20, u64::from_le_bytes(payload[..8].try_into().unwrap())).to_bytes());
        recs.extend(continuation_records(&payload[8..]));
        recs.push(Record::new(12, 9, 1, kinds::REGION_END, 0, 0).to_bytes());
        let raw = build(&recs, recs.len() as u64);
        let chunk = decode_chunk(&raw);
        assert!(chunk.damage.is_empty(), "{:?}", chunk.damage);
        assert_eq!(chunk.record_count(), 4);
        assert_eq!(chunk.names, vec![(9, kinds::NAME_REGION, 0, "a fairly long region name beyond thirty bytes".into())]);
        assert_eq!(chunk.payloads, vec![(2, payload)]);
    }

    /// A chunk of `capacity` 100 whose staging ring (2 slots of 4) holds what `slots` says.
    fn with_ring(mut raw: Vec<u8>, ring: &[(u32, u64, u64, Vec<[u8; 32]>)]) -> Vec<u8> {
        raw.resize(HEADER_SIZE + 100 * RECORD_SIZE, 0);
        raw[crate::header::offset::STAGE_SLOTS..][..4].copy_from_slice(&2u32.to_le_bytes());
        raw[crate::header::offset::STAGE_SLOT_RECORDS..][..4].copy_from_slice(&4u32.to_le_bytes());
        for (j, (state, start, len, recs)) in ring.iter().enumerate() {
            let d = stage::DESCRIPTORS + j * stage::DESCRIPTOR_SIZE;
            raw[d..d + 4].copy_from_slice(&state.to_le_bytes());
            raw[d + 8..d + 16].copy_from_slice(&start.to_le_bytes());
            raw[d + 16..d + 24].copy_from_slice(&len.to_le_bytes());
            let mut slot = vec![0u8; 4 * RECORD_SIZE];
            for (i, r) in recs.iter().enumerate() {
                slot[i * RECORD_SIZE..(i + 1) * RECORD_SIZE].copy_from_slice(r);
            }
            raw.extend_from_slice(&slot);
        }
        raw
    }

    #[test]
    fn staged_records_not_yet_copied_out_are_read_from_the_ring() {
        let recs: Vec<_> = (0..10).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, i).to_bytes()).collect();
        // positions 0..3 copied out; 3..7 full in slot 0 (copy never made); 7..10 being written in slot 1
        let raw = with_ring(build(&recs[..3], 10), &[(stage::FULL, 3, 4, recs[3..7].to_vec()), (stage::WRITING, 7, 0, recs[7..].to_vec())]);
        let chunk = decode_chunk(&raw);
        assert!(chunk.damage.is_empty(), "{:?}", chunk.damage);
        let ts: Vec<u64> = chunk.records.chunks(RECORD_SIZE).map(|r| Record::from_bytes(r).ts).collect();
        assert_eq!(ts, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn free_ring_slots_and_uncommitted_ring_records_are_ignored() {
        let recs: Vec<_> = (0..8).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, i).to_bytes()).collect();
        let stale: Vec<_> = (0..4).map(|i| Record::new(100 + i, 1, 0, kinds::EVENT, 0, 0).to_bytes()).collect();
        // slot 0 was copied out (its stale content must not win); slot 1 has 3 records, 2 committed
        let raw = with_ring(build(&recs[..4], 6), &[(stage::FREE, 0, 4, stale), (stage::WRITING, 4, 0, recs[4..7].to_vec())]);
        let chunk = decode_chunk(&raw);
        let ts: Vec<u64> = chunk.records.chunks(RECORD_SIZE).map(|r| Record::from_bytes(r).ts).collect();
        assert_eq!(ts, (0..6).collect::<Vec<_>>());
        assert!(chunk.damage.is_empty());
    }

    #[test]
    fn a_truncated_ring_is_reported_as_damage() {
        let recs: Vec<_> = (0..8).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, i).to_bytes()).collect();
        let raw = with_ring(build(&recs[..4], 8), &[(stage::FULL, 4, 4, recs[4..].to_vec())]);
        let cut = raw.len() - 2 * RECORD_SIZE;
        let chunk = decode_chunk(&raw[..cut]);
        assert_eq!(chunk.record_count(), 4);
        assert_eq!(chunk.damage.len(), 2, "{:?}", chunk.damage);
        assert!(chunk.damage.iter().any(|d| d.reason == "staging slot 0 is damaged or truncated" && d.records_lost == 4));
    }

    #[test]
    fn uncommitted_slots_are_ignored() {
        let recs: Vec<_> = (0..5).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, 0).to_bytes()).collect();
        let chunk = decode_chunk(&build(&recs, 3));
        assert_eq!(chunk.record_count(), 3);
        assert!(chunk.damage.is_empty());
    }

    #[test]
    fn flipped_byte_loses_one_record() {
        let recs: Vec<_> = (0..5).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, 0).to_bytes()).collect();
        let mut raw = build(&recs, 5);
        raw[HEADER_SIZE + 2 * RECORD_SIZE + 3] ^= 0x10;
        let chunk = decode_chunk(&raw);
        assert_eq!(chunk.record_count(), 4);
        assert_eq!(chunk.damage.len(), 1);
        assert_eq!(chunk.damage[0].records_lost, 1);
    }

    #[test]
    fn truncated_file_keeps_the_intact_prefix() {
        let recs: Vec<_> = (0..5).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, 0).to_bytes()).collect();
        let raw = build(&recs, 5);
        let chunk = decode_chunk(&raw[..HEADER_SIZE + 3 * RECORD_SIZE + 7]);
        assert_eq!(chunk.record_count(), 3);
        assert_eq!(chunk.damage[0].records_lost, 2);
        assert!(chunk.damage[0].reason.starts_with("truncated"));
    }

    #[test]
    fn bad_header_still_salvages_records() {
        let recs: Vec<_> = (0..4).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, 0).to_bytes()).collect();
        let mut raw = build(&recs, 4);
        raw.extend_from_slice(&[0u8; 64]);
        raw[0] = b'X';
        let chunk = decode_chunk(&raw);
        assert!(chunk.header.is_none());
        assert_eq!(chunk.record_count(), 4);
    }

    /// A chunk of version `version` whose records carry that version's check.
    fn build_versioned(version: u32, calib: [(u64, u64); 2], closed: bool, records: &[(u64, u8)]) -> Vec<u8> {
        let check = Check::for_version(version).unwrap();
        let h = ChunkHeader { version, source: SOURCE_APP_THREAD, clock: CLOCK_TSC, pid: 1, tid: 1, capacity: 100,
                              committed: records.len() as u64, calib, closed, ..Default::default() };
        let mut out = h.to_bytes();
        for &(ts, kind) in records {
            let mut r = Record::new(ts, 1, 0, kind, 0, ts);
            r.check = check.compute(r.ts, r.id, r.cpu, r.kind, r.a, r.b);
            out.extend_from_slice(&r.to_bytes());
        }
        out
    }

    #[test]
    fn version_2_chunks_read_with_their_own_check() {
        let recs: Vec<(u64, u8)> = (0..5).map(|i| (1000 + i, kinds::EVENT)).collect();
        let old = build_versioned(2, [(0, 0), (0, 0)], true, &recs);
        let chunk = decode_chunk(&old);
        assert_eq!((chunk.record_count(), chunk.damage.len()), (5, 0), "{:?}", chunk.damage);
        assert_eq!(chunk.header.as_ref().unwrap().version, 2);
        // the same chunk with its header gone: the check is told from the records
        let mut headless = old.clone();
        headless[0] = b'X';
        assert_eq!(decode_chunk(&headless).record_count(), 5);
        // a version-2 chunk is not read with the version-3 check, nor the reverse
        let mut relabelled = old;
        relabelled[crate::header::offset::VERSION] = 3;
        assert_eq!(decode_chunk(&relabelled).record_count(), 0);
    }

    #[test]
    fn a_timestamp_outside_the_chunks_time_range_is_damage() {
        let slack = TIME_SLACK_NS * MAX_TICKS_PER_NS;
        let (opened, closed) = (5 * slack, 6 * slack);
        let recs = [(opened + 1, kinds::EVENT), (opened - 2 * slack, kinds::EVENT), (closed + 2 * slack, kinds::EVENT),
                    (closed + 3 * slack, kinds::EVENT), (0, kinds::NAME), (closed, kinds::EVENT)];
        let chunk = decode_chunk(&build_versioned(3, [(opened, 1), (closed, 2)], true, &recs));
        let ts: Vec<u64> = chunk.records.chunks(RECORD_SIZE).map(|r| Record::from_bytes(r).ts).collect();
        assert_eq!(ts, vec![opened + 1, 0, closed]);
        let lost: Vec<(u64, u64)> = chunk.damage.iter().map(|d| (d.offset, d.records_lost)).collect();
        assert_eq!(lost, vec![((HEADER_SIZE + RECORD_SIZE) as u64, 3)]);
        assert_eq!(chunk.damage[0].reason, "3 record(s) with a timestamp outside the chunk's time range");
        // a chunk still open (a killed writer) has no end yet: only its start bounds it
        let chunk = decode_chunk(&build_versioned(3, [(opened, 1), (closed, 2)], false, &recs));
        assert_eq!(chunk.record_count(), 5);
        // without a calibration pair there is no range
        let chunk = decode_chunk(&build_versioned(3, [(0, 0), (0, 0)], true, &recs));
        assert_eq!(chunk.record_count(), 6);
    }

    /// read_chunk reads the header, the committed slots and the ring of a sparse chunk whose
    /// capacity is far larger than what was written, and finds what decode_chunk finds.
    #[test]
    fn read_chunk_reads_committed_slots_and_the_ring_of_a_sparse_file() {
        use std::io::{Seek, SeekFrom, Write};
        let capacity = 1u64 << 20;
        let recs: Vec<_> = (0..7).map(|i| Record::new(i, 1, 0, kinds::EVENT, 0, i).to_bytes()).collect();
        let mut head = ChunkHeader { version: crate::VERSION, source: SOURCE_APP_THREAD, clock: CLOCK_TSC, pid: 1, tid: 1,
                                     capacity, committed: 7, ..Default::default() }.to_bytes();
        head[crate::header::offset::STAGE_SLOTS..][..4].copy_from_slice(&1u32.to_le_bytes());
        head[crate::header::offset::STAGE_SLOT_RECORDS..][..4].copy_from_slice(&4u32.to_le_bytes());
        let d = stage::DESCRIPTORS;
        head[d..d + 4].copy_from_slice(&stage::WRITING.to_le_bytes());
        head[d + 8..d + 16].copy_from_slice(&4u64.to_le_bytes());
        let path = std::env::temp_dir().join(format!("oslens-format-sparse-{}.osl", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(&head).unwrap();
        for r in &recs[..4] {
            f.write_all(r).unwrap();
        }
        let ring = HEADER_SIZE as u64 + capacity * RECORD_SIZE as u64;
        f.seek(SeekFrom::Start(ring)).unwrap();
        for r in &recs[4..] {
            f.write_all(r).unwrap();
        }
        f.set_len(ring + 4 * RECORD_SIZE as u64).unwrap();
        drop(f);
        let chunk = read_chunk(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(chunk.damage.is_empty(), "{:?}", chunk.damage);
        let ts: Vec<u64> = chunk.records.chunks(RECORD_SIZE).map(|r| Record::from_bytes(r).ts).collect();
        assert_eq!(ts, (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn damaged_name_continuation_drops_only_the_name() {
        let mut recs = name_records(9, "region");
        recs.push(Record::new(10, 9, 1, kinds::REGION_BEGIN, 0, 0).to_bytes());
        let mut raw = build(&recs, recs.len() as u64);
        raw[HEADER_SIZE + RECORD_SIZE + 2] ^= 1;
        let chunk = decode_chunk(&raw);
        assert!(chunk.names.is_empty());
        assert_eq!(chunk.record_count(), 1);
        assert_eq!(chunk.damage.len(), 1);
    }
}
