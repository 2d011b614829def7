//! How much of a thread's buffer exists before it is needed. A thread's chunk file starts with
//! 32 KiB of record slots, written in place with no staging ring and so no helper thread: a
//! thread or process that records a few events costs one small file (a fork()ed child whose only
//! records are its fork, exec and exit markers has none: they go to its thread ledger, names.rs). When the thread needs more, the same file
//! is extended to the buffer size asked for (OSLENS_BUFFER_MB) and given its staging ring
//! (Chunk::extend): no second file, because a new name in the directory is what a chunk costs
//! most. Figures: docs/recorder.md, "Start-up".

use crate::config::Config;

/// Record slots a thread's chunk file holds at first (32 KiB).
pub const FIRST_RECORDS: u64 = 1024;

/// A thread's first chunk: `capacity` record slots (the header says so), of which the file
/// holds `in_file` at first; `staged`: it has (or will have, once extended) a staging ring.
#[derive(Debug, PartialEq)]
pub struct FirstChunk {
    pub capacity: u64,
    pub in_file: u64,
    pub staged: bool,
}

pub fn first_chunk(cfg: &Config) -> FirstChunk {
    if cfg.prepare_buffers {
        // the whole buffer is prepared up front (Chunk::prepare_all) and written in place
        return FirstChunk { capacity: cfg.buffer_records, in_file: cfg.buffer_records, staged: false };
    }
    // a buffer no larger than the first part is written in place, with no ring to extend to
    let in_file = cfg.buffer_records.min(FIRST_RECORDS);
    FirstChunk { capacity: cfg.buffer_records, in_file, staged: in_file < cfg.buffer_records }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OnFull;

    fn cfg(buffer_records: u64, prepare_buffers: bool) -> Config {
        Config {
            raw_dir: crate::config::Path::join(&["t/raw"]).unwrap(),
            trace_dir: crate::config::Path::join(&["t"]).unwrap(),
            buffer_records,
            on_full: OnFull::Drop,
            start_enabled: true,
            limit_slots: None,
            counter_period_us: 0,
            prepare_buffers,
            buffer_explicit: false,
            trace_in_memory: false,
            rotate: false,
        }
    }

    #[test]
    fn default_buffer_starts_with_64_kib_in_the_file_and_a_ring_to_come() {
        assert_eq!(first_chunk(&cfg(64 << 20 >> 5, false)), FirstChunk { capacity: 2 << 20, in_file: 1024, staged: true });
    }

    #[test]
    fn small_buffer_is_written_in_place_and_prepared_buffers_exist_whole() {
        assert_eq!(first_chunk(&cfg(100, false)), FirstChunk { capacity: 100, in_file: 100, staged: false });
        assert_eq!(first_chunk(&cfg(1 << 21, true)), FirstChunk { capacity: 1 << 21, in_file: 1 << 21, staged: false });
    }
}
