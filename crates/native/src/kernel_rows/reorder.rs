//! Rows that are complete out of their table's order (a call's row is complete at its exit but
//! ordered by its entry): held until no row still to come can sort before them, then given in
//! order. What is held grows with the rows made while the oldest pair is open.

/// A row's place in its table's order: (time, then the table's tie-breaks, then the place of
/// its record).
pub type Key = (i64, i64, i64, i64, u64);

pub struct Reorder<R> {
    rows: Vec<(Key, R)>,
    /// try to give rows when this many are held (doubles while the oldest open pair holds them)
    next_try: usize,
    /// the most rows held at once
    pub peak: usize,
}

const FIRST_TRY: usize = 4096;

impl<R> Default for Reorder<R> {
    fn default() -> Self {
        Reorder { rows: Vec::new(), next_try: FIRST_TRY, peak: 0 }
    }
}

impl<R> Reorder<R> {
    pub fn push(&mut self, k: Key, r: R) {
        self.rows.push((k, r));
    }

    /// Whether enough rows are held to try giving some.
    pub fn due(&self) -> bool {
        self.rows.len() >= self.next_try
    }

    /// Gives `out` the rows whose time is below `bound`, in order (every row: i64::MAX).
    pub fn give(&mut self, bound: i64, out: &mut dyn FnMut(R) -> std::io::Result<()>) -> std::io::Result<()> {
        self.peak = self.peak.max(self.rows.len());
        self.rows.sort_unstable_by_key(|x| x.0);
        let n = self.rows.partition_point(|x| x.0 .0 < bound);
        for (_, r) in self.rows.drain(..n) {
            out(r)?;
        }
        self.next_try = (2 * self.rows.len()).max(FIRST_TRY);
        Ok(())
    }
}
