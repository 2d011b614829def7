//! How a thread's buffer grows. A thread's first chunk is small (64 KiB of records) and written
//! in place, with no staging ring and so no helper thread: a thread or process that records a
//! few events (a fork()ed child's fork and exec markers, a short-lived worker's start) costs one
//! small file. When it fills, the next chunk is 16 times larger, and from 1 MiB on a chunk has
//! a staging ring (stage.rs), until the chunks together hold the buffer size the user asked for
//! (OSLENS_BUFFER_MB); past it events are dropped and counted, or, with OSLENS_ON_FULL=block,
//! further chunks of the full size are opened. Figures: docs/recorder.md, "Start-up".

use crate::config::{Config, OnFull};

/// Records in a thread's first chunk (64 KiB).
pub const FIRST_RECORDS: u64 = 2048;
/// Each further chunk is this many times larger than the one before.
const FACTOR: u64 = 16;
/// Chunks of at least this many records (1 MiB) get a staging ring; the first (64 KiB) is
/// written in place: for so few pages the ring (512 KiB) and the helper thread cost more.
const STAGED_FROM: u64 = 1 << 15;

/// (capacity, staged) of a thread's first chunk.
pub fn first_chunk(cfg: &Config) -> (u64, bool) {
    if cfg.prepare_buffers {
        // the whole buffer is prepared up front (Chunk::prepare_all): nothing to grow
        return (cfg.buffer_records, false);
    }
    let capacity = cfg.buffer_records.min(FIRST_RECORDS);
    (capacity, capacity >= STAGED_FROM)
}

/// (capacity, staged) of the chunk after one of `previous` records, when the thread's chunks
/// so far hold `buffered` records and `n` must fit; None when the buffer size is used up and
/// full buffers drop.
pub fn next_chunk(cfg: &Config, previous: u64, buffered: u64, n: u64) -> Option<(u64, bool)> {
    let left = cfg.buffer_records.saturating_sub(buffered);
    // a pause record goes in too (Chunk::record_pause)
    let need = n + 1;
    let capacity = if left >= need {
        let grown = previous.saturating_mul(FACTOR).max(need).min(left);
        // no small remainder chunk after this one
        if left - grown < grown { left } else { grown }
    } else if matches!(cfg.on_full, OnFull::Block) {
        cfg.buffer_records.max(need)
    } else {
        return None;
    };
    Some((capacity, !cfg.prepare_buffers && capacity >= STAGED_FROM))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(buffer_records: u64, on_full: OnFull, prepare_buffers: bool) -> Config {
        Config {
            raw_dir: String::new(),
            trace_dir: std::ffi::CString::new("t").unwrap(),
            buffer_records,
            on_full,
            start_enabled: true,
            limit_slots: None,
            counter_period_us: 0,
            prepare_buffers,
        }
    }

    /// Walks a thread's chunks until the buffer size is used up.
    fn chain(c: &Config) -> Vec<(u64, bool)> {
        let mut out = vec![first_chunk(c)];
        let mut buffered = out[0].0;
        while let Some(next) = next_chunk(c, out.last().unwrap().0, buffered, 1) {
            buffered += next.0;
            out.push(next);
            assert!(out.len() < 20);
        }
        out
    }

    #[test]
    fn default_buffer_grows_from_64_kib_and_adds_up_to_the_size_asked_for() {
        let c = cfg(64 << 20 >> 5, OnFull::Drop, false);
        let chunks = chain(&c);
        assert_eq!(chunks, vec![(2048, false), (32768, true), (524288, true), (2097152 - 2048 - 32768 - 524288, true)]);
        assert_eq!(chunks.iter().map(|c| c.0).sum::<u64>(), c.buffer_records);
    }

    #[test]
    fn small_buffer_is_one_chunk_and_prepared_buffers_do_not_grow() {
        assert_eq!(chain(&cfg(100, OnFull::Drop, false)), vec![(100, false)]);
        assert_eq!(chain(&cfg(1 << 21, OnFull::Drop, true)), vec![(1 << 21, false)]);
    }

    #[test]
    fn blocking_mode_opens_full_chunks_past_the_buffer_size() {
        let c = cfg(4096, OnFull::Block, false);
        assert_eq!(first_chunk(&c), (2048, false));
        assert_eq!(next_chunk(&c, 2048, 2048, 1), Some((2048, false)));
        assert_eq!(next_chunk(&c, 2048, 4096, 1), Some((4096, false)));
        // a record group larger than what is left still fits
        assert_eq!(next_chunk(&c, 2048, 4096, 5000), Some((5001, false)));
        assert_eq!(next_chunk(&cfg(4096, OnFull::Drop, false), 2048, 4096, 1), None);
    }
}
