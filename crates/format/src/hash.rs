//! The one fast hasher of the crates, for maps keyed by task ids, devices and addresses: rustc's
//! FxHasher, a rotate, xor and multiply per word (std's SipHash resists flooding, which keys the
//! kernel or the program hand out need not pay for).

use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

/// HashMap/HashSet's third parameter for Fx.
pub type FxBuild = BuildHasherDefault<Fx>;

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline(always)]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline(always)]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn fx_tells_keys_apart_and_is_stable() {
        let mut set: HashSet<(u64, u64), FxBuild> = HashSet::default();
        for i in 0..1000u64 {
            assert!(set.insert((i, i * 7)));
        }
        assert_eq!(set.len(), 1000);
        let h = |v: u32| {
            let mut x = Fx::default();
            x.write_u32(v);
            x.finish()
        };
        assert_ne!(h(1), h(2));
        assert_eq!(h(5), h(5));
    }
}
