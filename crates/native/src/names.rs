//! Record names: the map from a record's name key to its name's index.

/// Open-addressing map from a record's name key (kind << 48 | id) to a name index.
pub(crate) struct NameMap {
    bits: u32,
    slots: Vec<(u64, i32)>,
}

const EMPTY_KEY: u64 = u64::MAX; // kind 255, id 0xffffffff: never a key (the mask clears bits 32..48 only)

impl NameMap {
    pub(crate) fn new(keys: &[u8], vals: &[u8]) -> NameMap {
        let n = vals.len() / 4;
        let bits = ((2 * n).max(2)).next_power_of_two().trailing_zeros();
        let mut m = NameMap { bits, slots: vec![(EMPTY_KEY, -1); 1 << bits] };
        for i in 0..n {
            let k = u64::from_le_bytes(keys[i * 8..i * 8 + 8].try_into().unwrap());
            let v = i32::from_le_bytes(vals[i * 4..i * 4 + 4].try_into().unwrap());
            let mut h = m.hash(k);
            while m.slots[h].0 != EMPTY_KEY && m.slots[h].0 != k {
                h = (h + 1) & (m.slots.len() - 1);
            }
            m.slots[h] = (k, v);
        }
        m
    }

    #[inline(always)]
    fn hash(&self, k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    pub(crate) fn get(&self, k: u64) -> i32 {
        let mut h = self.hash(k);
        loop {
            let (sk, v) = self.slots[h];
            if sk == k {
                return v;
            }
            if sk == EMPTY_KEY {
                return -1;
            }
            h = (h + 1) & (self.slots.len() - 1);
        }
    }
}

