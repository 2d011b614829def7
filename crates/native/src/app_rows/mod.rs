//! The application tables in one pass over the recorder's records (oslens.store.app_tables
//! builds the same tables with numpy, the test oracle; the results are the same).
//!
//! One tracker per concern, as Perfetto's importers have: the scan (scan.rs) counts the kinds
//! first; the pass (pass.rs) reads each chunk's records (source.rs) once, decoded through
//! oslens_format::Record with the trace's clock (clock.rs), and hands each to the trackers of
//! the tables it makes rows of: app_events (events.rs, written a page at a time, never laid out
//! whole), regions and functions (nesting.rs), counters, timers, pauses and adapt (derived.rs),
//! sync (sync.rs, written by sync_table.rs, its parts after the mutex acquisitions kept on disk
//! meanwhile by sync_spill.rs) and compensation's times (compensation.rs). Streamed tables are
//! written a page at a time as their rows are complete (columns.rs: their Parquet columns);
//! flags.rs decides which columns are nullable.

mod clock;
pub(crate) mod columns;
mod compensation;
mod derived;
mod events;
mod flags;
mod nesting;
mod pass;
mod scan;
mod source;
mod sync;
mod sync_spill;
mod sync_table;

pub use clock::Clock;
pub use columns::{Declared, Dicts, Reasons, Sink};
pub use derived::{Derived, Streams};
pub use flags::{Retry, NULLABLE};
pub use scan::scan;
pub use source::{Chunk, Records, Reload, Source};

use flags::PassErr;

/// Runs the pass: app_events written to `file` in row groups of `group_rows` (None: not
/// written), the derived tables with a sink in `st` written there, the other derived rows
/// returned. `nullable`: see Retry (None: decided by the first page).
#[allow(clippy::too_many_arguments)]
pub fn run(
    chunks: &[Chunk],
    threads: usize,
    clock: Clock,
    dicts: &Dicts,
    file: Option<std::fs::File>,
    group_rows: usize,
    nullable: [Option<bool>; NULLABLE],
    st: &mut Streams,
) -> std::io::Result<Result<Derived, Retry>> {
    let mut flags = nullable;
    match pass::pass(chunks, threads, clock, dicts, file, group_rows, &mut flags, st) {
        Ok(d) => Ok(Ok(d)),
        Err(PassErr::Io(e)) => Err(e),
        Err(PassErr::Retry(slot)) => {
            let mut again = flags.map(|f| f.filter(|&n| n));
            again[slot] = Some(true);
            Ok(Err(Retry(again)))
        }
    }
}
