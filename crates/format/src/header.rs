//! The 4096-byte chunk header. Writers update `committed` (and the drop counters) in place in
//! the mapped file, so the offsets below are part of the format.

pub const MAGIC: [u8; 8] = *b"OSLRAW\0\x01";
/// The version writers put in new chunks. 3: the check byte is the XOR of the record's other
/// bytes (`record::check_byte`), which no single-byte change passes. 2: a byte sum through a
/// multiply (`record::Check::Sum`), still read. Version 1 chunks read as damaged.
pub const VERSION: u32 = 3;
/// The versions this reader decodes (each with its own record check: `record::Check`).
pub const READABLE_VERSIONS: [u32; 2] = [2, 3];
pub const HEADER_SIZE: usize = 4096;

/// Who wrote the chunk.
pub const SOURCE_APP_THREAD: u32 = 1;
pub const SOURCE_KERNEL_CPU: u32 = 2;

/// What `Record::ts` counts.
pub const CLOCK_TSC: u32 = 1;
pub const CLOCK_MONOTONIC_NS: u32 = 2;

pub mod offset {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const SOURCE: usize = 16;
    pub const CLOCK: usize = 20;
    pub const PID: usize = 24;
    pub const TID: usize = 28;
    pub const PPID: usize = 32;
    pub const CPU: usize = 36;
    pub const CAPACITY: usize = 40;
    /// Number of record slots the writer has finished; updated after each record.
    pub const COMMITTED: usize = 48;
    /// Events dropped because the buffer was full (an event may span several slots).
    pub const DROPPED_EVENTS: usize = 56;
    pub const DROPPED_BYTES: usize = 64;
    pub const CALIB0_TSC: usize = 72;
    pub const CALIB0_NS: usize = 80;
    pub const CALIB1_TSC: usize = 88;
    pub const CALIB1_NS: usize = 96;
    /// 1 once the writer closed the chunk normally.
    pub const CLOSED: usize = 104;
    /// Sequence number of this chunk among its writer's chunks.
    pub const SEQ: usize = 108;
    /// Events not recorded because a trigger limit was reached (not losses: the user asked).
    pub const SUPPRESSED_EVENTS: usize = 112;
    /// Slots in the chunk's staging ring (0: none; see `stage`).
    pub const STAGE_SLOTS: usize = 120;
    /// Records per staging slot.
    pub const STAGE_SLOT_RECORDS: usize = 124;
    pub const NAME: usize = 128;
    pub const NAME_LEN: usize = 64;
    /// Staging slots this chunk's writer copied out itself while recording because the helper
    /// had fallen behind (not the last ones, which it always copies out when it ends).
    pub const RING_SELF_COPIES: usize = 192;
    /// In a process's names chunk, at exit: the CPU time of its oslens-helper thread
    /// (ns) and the staging slots it copied out: what recording cost outside the program's
    /// threads, measured.
    pub const HELPER_CPU_NS: usize = 200;
    pub const HELPER_COPIES: usize = 208;
    /// The errno that stopped recording into this chunk (a file-space reservation or write that
    /// failed: ENOSPC, EDQUOT, EIO, EROFS...; see `fault_reason`); 0 while nothing failed.
    pub const FAULT_ERRNO: usize = 216;
    /// CLOCK_MONOTONIC ns when it failed.
    pub const FAULT_NS: usize = 224;
    /// Events (kernel chunks: records) not kept because of that fault. In a names chunk: the
    /// events of this process's threads that could get no chunk at all.
    pub const FAULT_DROPPED: usize = 232;
}

/// What a fault's errno means for a trace, in words (`lost` table reasons).
pub fn fault_reason(errno: u32) -> String {
    match errno {
        0 => "no fault".into(),
        28 => "disk full".into(),
        122 => "disk quota exceeded".into(),
        5 => "I/O error".into(),
        30 => "file system read-only".into(),
        2 | 19 | 116 => "trace directory gone".into(),
        12 => "out of memory".into(),
        // the recorder's own: the memory budget of the program's cgroup (see memlimit.rs)
        FAULT_MEMORY_BUDGET => "memory headroom of the cgroup used up".into(),
        e => format!("error {e}"),
    }
}

/// A fault errno of the recorder's own (not a kernel errno): no chunk because the buffers would
/// not fit the memory the program's cgroup has left.
pub const FAULT_MEMORY_BUDGET: u32 = 10_000;

/// A thread's chunk may carry a staging ring after its records: the writer fills small slots
/// that stay in its cache, and a helper copies each full slot to the slot positions it holds.
/// A slot's descriptor (in the header page) says which positions it holds and whether they are
/// still only there; a reader overlays those onto the records. A chunk closed normally has
/// been copied out and its ring removed (`stage_slots` 0).
pub mod stage {
    /// Descriptors: 32 bytes each from this offset: state u32, pad u32, start u64, len u64.
    pub const DESCRIPTORS: usize = 256;
    pub const DESCRIPTOR_SIZE: usize = 32;
    pub const MAX_SLOTS: usize = (super::HEADER_SIZE - DESCRIPTORS) / DESCRIPTOR_SIZE;
    /// Copied out (or never used): the slot holds nothing the records lack.
    pub const FREE: u32 = 0;
    /// Being written: it holds positions start..committed.
    pub const WRITING: u32 = 1;
    /// Written, not yet copied out: it holds start..start+len.
    pub const FULL: u32 = 2;
    /// Being copied out: as FULL.
    pub const COPYING: u32 = 3;

    /// (slots, records per slot) of a header's ring; (0, 0) without one.
    pub fn geometry(header: &[u8]) -> (u32, u32) {
        (super::u32_at(header, super::offset::STAGE_SLOTS), super::u32_at(header, super::offset::STAGE_SLOT_RECORDS))
    }

    /// (state, start, len) of slot `j`'s descriptor.
    pub fn descriptor(header: &[u8], j: usize) -> (u32, u64, u64) {
        let o = DESCRIPTORS + j * DESCRIPTOR_SIZE;
        (super::u32_at(header, o), super::u64_at(header, o + 8), super::u64_at(header, o + 16))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkHeader {
    pub version: u32,
    pub source: u32,
    pub clock: u32,
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub cpu: u32,
    pub capacity: u64,
    pub committed: u64,
    pub dropped_events: u64,
    pub dropped_bytes: u64,
    pub calib: [(u64, u64); 2],
    pub closed: bool,
    pub seq: u32,
    pub suppressed_events: u64,
    pub name: String,
    /// See offset::FAULT_*.
    pub fault_errno: u32,
    pub fault_ns: u64,
    pub fault_dropped: u64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

impl ChunkHeader {
    /// Parses a header; `None` when the magic or version is wrong (not a chunk, or damaged).
    pub fn parse(raw: &[u8]) -> Option<ChunkHeader> {
        if raw.len() < HEADER_SIZE || raw[..8] != MAGIC || !READABLE_VERSIONS.contains(&u32_at(raw, offset::VERSION)) {
            return None;
        }
        if u32_at(raw, offset::HEADER_SIZE) as usize != HEADER_SIZE {
            return None;
        }
        let name_raw = &raw[offset::NAME..offset::NAME + offset::NAME_LEN];
        let end = name_raw.iter().position(|&c| c == 0).unwrap_or(name_raw.len());
        Some(ChunkHeader {
            version: u32_at(raw, offset::VERSION),
            source: u32_at(raw, offset::SOURCE),
            clock: u32_at(raw, offset::CLOCK),
            pid: u32_at(raw, offset::PID),
            tid: u32_at(raw, offset::TID),
            ppid: u32_at(raw, offset::PPID),
            cpu: u32_at(raw, offset::CPU),
            capacity: u64_at(raw, offset::CAPACITY),
            committed: u64_at(raw, offset::COMMITTED),
            dropped_events: u64_at(raw, offset::DROPPED_EVENTS),
            dropped_bytes: u64_at(raw, offset::DROPPED_BYTES),
            calib: [
                (u64_at(raw, offset::CALIB0_TSC), u64_at(raw, offset::CALIB0_NS)),
                (u64_at(raw, offset::CALIB1_TSC), u64_at(raw, offset::CALIB1_NS)),
            ],
            closed: u32_at(raw, offset::CLOSED) == 1,
            seq: u32_at(raw, offset::SEQ),
            suppressed_events: u64_at(raw, offset::SUPPRESSED_EVENTS),
            name: String::from_utf8_lossy(&name_raw[..end]).into_owned(),
            fault_errno: u32_at(raw, offset::FAULT_ERRNO),
            fault_ns: u64_at(raw, offset::FAULT_NS),
            fault_dropped: u64_at(raw, offset::FAULT_DROPPED),
        })
    }

    /// Serialises the header into a fresh 4096-byte block (used by writers at creation); a
    /// version of 0 is written as the current `VERSION`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_SIZE];
        let put32 = |out: &mut Vec<u8>, o: usize, v: u32| out[o..o + 4].copy_from_slice(&v.to_le_bytes());
        let put64 = |out: &mut Vec<u8>, o: usize, v: u64| out[o..o + 8].copy_from_slice(&v.to_le_bytes());
        out[..8].copy_from_slice(&MAGIC);
        put32(&mut out, offset::VERSION, if self.version == 0 { VERSION } else { self.version });
        put32(&mut out, offset::HEADER_SIZE, HEADER_SIZE as u32);
        put32(&mut out, offset::SOURCE, self.source);
        put32(&mut out, offset::CLOCK, self.clock);
        put32(&mut out, offset::PID, self.pid);
        put32(&mut out, offset::TID, self.tid);
        put32(&mut out, offset::PPID, self.ppid);
        put32(&mut out, offset::CPU, self.cpu);
        put64(&mut out, offset::CAPACITY, self.capacity);
        put64(&mut out, offset::COMMITTED, self.committed);
        put64(&mut out, offset::DROPPED_EVENTS, self.dropped_events);
        put64(&mut out, offset::DROPPED_BYTES, self.dropped_bytes);
        put64(&mut out, offset::CALIB0_TSC, self.calib[0].0);
        put64(&mut out, offset::CALIB0_NS, self.calib[0].1);
        put64(&mut out, offset::CALIB1_TSC, self.calib[1].0);
        put64(&mut out, offset::CALIB1_NS, self.calib[1].1);
        put32(&mut out, offset::CLOSED, self.closed as u32);
        put32(&mut out, offset::SEQ, self.seq);
        put64(&mut out, offset::SUPPRESSED_EVENTS, self.suppressed_events);
        put32(&mut out, offset::FAULT_ERRNO, self.fault_errno);
        put64(&mut out, offset::FAULT_NS, self.fault_ns);
        put64(&mut out, offset::FAULT_DROPPED, self.fault_dropped);
        let name = self.name.as_bytes();
        let n = name.len().min(offset::NAME_LEN - 1);
        out[offset::NAME..offset::NAME + n].copy_from_slice(&name[..n]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = ChunkHeader {
            version: VERSION,
            source: SOURCE_APP_THREAD,
            clock: CLOCK_TSC,
            pid: 10,
            tid: 11,
            ppid: 1,
            cpu: 0,
            capacity: 1000,
            committed: 5,
            dropped_events: 2,
            dropped_bytes: 64,
            calib: [(1, 2), (3, 4)],
            closed: true,
            seq: 0,
            suppressed_events: 9,
            name: "worker-1".into(),
            fault_errno: 28,
            fault_ns: 77,
            fault_dropped: 5,
        };
        assert_eq!(ChunkHeader::parse(&h.to_bytes()), Some(h.clone()));
        assert_eq!(ChunkHeader::parse(&[0u8; HEADER_SIZE]), None);
        let old = ChunkHeader { version: 2, ..h.clone() };
        assert_eq!(ChunkHeader::parse(&old.to_bytes()), Some(old));
        assert_eq!(ChunkHeader::parse(&ChunkHeader { version: 1, ..h }.to_bytes()), None);
    }

    #[test]
    fn fault_fields_fit_between_the_cost_fields_and_the_ring_descriptors() {
        assert!(offset::HELPER_COPIES + 8 <= offset::FAULT_ERRNO && offset::FAULT_DROPPED + 8 <= stage::DESCRIPTORS);
        assert_eq!(fault_reason(28), "disk full");
        assert_eq!(fault_reason(FAULT_MEMORY_BUDGET), "memory headroom of the cgroup used up");
    }
}
