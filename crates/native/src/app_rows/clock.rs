//! A record's times in ns: the trace's clock (raw TSC -> ns, as app_tables.to_ns_into) and the
//! rounding numpy's rint does.

use oslens_format::kinds;
use oslens_format::record::Record;

/// x rounded to the nearest integer, ties to even, as f64::round_ties_even (numpy's rint) for
/// every x, without the libm call that function compiles to before SSE4.1: adding and taking
/// away 2^52 rounds in the FPU's default mode (nearest, ties to even) where |x| < 2^52, and any
/// larger (or non-finite) x is already an integer (or stays what it is).
#[inline(always)]
pub fn rint(x: f64) -> f64 {
    const BIG: f64 = 4503599627370496.0; // 2^52
    let a = x.abs();
    if a < BIG {
        ((a + BIG) - BIG).copysign(x)
    } else {
        x
    }
}

/// (r0, n0, slope, intercept): raw TSC -> ns as app_tables.to_ns_into computes it.
#[derive(Clone, Copy)]
pub struct Clock {
    pub r0: i64,
    pub n0: i64,
    pub slope: f64,
    pub intercept: f64,
}

impl Clock {
    /// A record's time and value in ns: raw TSC converted where the chunk's clock is the TSC
    /// (a timer's elapsed time and a pause's duration are TSC spans too), else as recorded.
    #[inline(always)]
    pub fn decode(&self, r: &Record, tsc: bool) -> (i64, i64) {
        if !tsc {
            return (r.ts as i64, r.a as i64);
        }
        let v = if r.kind == kinds::TIMER_STOP || r.kind == kinds::PAUSE { rint(r.a as i64 as f64 * self.slope) as i64 } else { r.a as i64 };
        (self.ts(r.ts), v)
    }

    /// A raw TSC value in ns.
    #[inline(always)]
    pub fn ts(&self, raw: u64) -> i64 {
        let dt = (raw as i64).wrapping_sub(self.r0) as f64;
        (rint(dt * self.slope + self.intercept) as i64).wrapping_add(self.n0)
    }
}
