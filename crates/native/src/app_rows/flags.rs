//! Which columns are written nullable: decided by the first page of each, and the pass run
//! again when a later page holds a null a column written as required cannot.

/// Columns that may hold nulls, each written as nullable when its table's first page holds one:
/// app_events' instrument and payload, the names of regions, counters, timers and adapt, sync's
/// acquire and release; and whether sync's object dictionary holds objects not named. The last
/// slot is not a column: Some(true) where the objects not named the scans promised (Chunk::
/// sync_keys) were not those of the rows (the pass then holds sync as without the scans).
pub const NULLABLE: usize = 10;
pub const N_INSTRUMENT: usize = 0;
pub const N_PAYLOAD: usize = 1;
pub const N_REGIONS: usize = 2;
pub const N_COUNTERS: usize = 3;
pub const N_TIMERS: usize = 4;
pub const N_ADAPT: usize = 5;
pub const N_SYNC_ACQUIRE: usize = 6;
pub const N_SYNC_RELEASE: usize = 7;
pub const N_SYNC_UNNAMED: usize = 8;
pub const N_SYNC_HELD: usize = 9;

/// The pass is run again when a later page holds a null in a column the first page wrote as
/// required: with that column nullable (the others that were nullable stay so, the rest are
/// decided again).
pub struct Retry(pub [Option<bool>; NULLABLE]);

pub enum PassErr {
    Io(std::io::Error),
    Retry(usize),
}

impl From<std::io::Error> for PassErr {
    fn from(e: std::io::Error) -> Self {
        PassErr::Io(e)
    }
}

/// Whether column `slot` is written nullable, deciding it from this page's nulls the first time.
pub fn decide(flags: &mut [Option<bool>; NULLABLE], slot: usize, nulls: usize) -> Result<bool, PassErr> {
    let n = *flags[slot].get_or_insert(nulls > 0);
    if nulls > 0 && !n {
        return Err(PassErr::Retry(slot));
    }
    Ok(n)
}

/// The table number of pauses (no name column: no slot in the flags).
pub const N_PAUSES: usize = NULLABLE;
/// The table number of functions (its name column is always null in the pass, named later by
/// oslens.store.symbols: no slot in the flags).
pub const N_FUNCTIONS: usize = NULLABLE + 1;

/// The nullability decided so far, by slot.
pub type Flags = [Option<bool>; NULLABLE];
