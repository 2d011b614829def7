//! The kernel tables in one streaming pass over the collector's per-CPU chunks
//! (oslens.store.kernel_tables drives it; oslens_testing's kernel build with numpy and DuckDB is
//! the tests' oracle, and the tables are the same).
//!
//! scan.rs reads each chunk once for what grows with tasks, not records (each thread's pid,
//! exit times, the fork/exec/exit records, the string columns' codes, each chunk's first time);
//! the importer completes it in Python (dictionaries, comm history, `tasks`). Then merge.rs
//! gives the records in time order across chunks (a k-way merge, ties in record order), and
//! each goes to the trackers of the tables it makes rows of: rows.rs (a row per record, and
//! wakeups with their enqueue), pairs.rs (syscalls, block_io, irqs) and slices.rs
//! (cpu_slices); table.rs writes their pages to Parquet as they fill (crate::parquet).

mod context;
mod merge;
mod pairs;
mod reorder;
mod rows;
mod scan;
mod slices;
mod table;

pub use context::{Comms, Ctx, DICTS};
pub use merge::ChunkInfo;
pub use scan::scan;
pub use table::Dict;

use crate::app_rows::Source;

/// Maps and sets keyed by task ids, CPUs and sectors, with the crates' fast hasher.
pub type Map<K, V> = std::collections::HashMap<K, V, oslens_format::hash::FxBuild>;
pub type Set<K> = std::collections::HashSet<K, oslens_format::hash::FxBuild>;

/// Records between two calls of `progress` (with the records merged so far).
pub const PROGRESS_EVERY: u64 = 1 << 20;

/// Writes the tables `cx.paths` names from the chunks' records (`info` from the scan); returns
/// each table's rows and the most rows held out of order at once.
pub fn run(chunks: &[Source], info: &[ChunkInfo], cx: &Ctx, progress: &mut dyn FnMut(u64)) -> std::io::Result<Vec<(&'static str, usize)>> {
    let mut rows = rows::Rows::new(cx)?;
    let mut pairs = pairs::Pairs::new(cx)?;
    let mut slices = slices::Slices::new(cx)?;
    let mut m = merge::Merge::new(chunks, info);
    let mut n = 0u64;
    while let Some((r, seq)) = m.next()? {
        rows.record(cx, &r, seq)?;
        pairs.record(cx, &r, seq)?;
        if let Some(s) = slices.as_mut() {
            s.record(cx, &r)?;
        }
        n += 1;
        if n % PROGRESS_EVERY == 0 {
            progress(n);
        }
    }
    let mut out = rows.finish(cx)?;
    out.extend(pairs.finish(cx)?);
    if let Some(s) = slices {
        out.push(s.finish(cx)?);
    }
    Ok(out)
}
