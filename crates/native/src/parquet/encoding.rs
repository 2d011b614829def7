//! Parquet's encodings of values and levels: the RLE / bit-packed hybrid, DELTA_BINARY_PACKED,
//! definition levels from a validity bitmap, and the min/max statistics of 64-bit values.

/// Packs values of `bw` bits, least significant bit first, as Parquet's bit-packing does.
pub(crate) struct BitPacker<'a> {
    out: &'a mut Vec<u8>,
    acc: u128,
    bits: u32,
    bw: u32,
}

impl<'a> BitPacker<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>, bw: u32) -> Self {
        BitPacker { out, acc: 0, bits: 0, bw }
    }

    #[inline(always)]
    pub(crate) fn put(&mut self, v: u64) {
        self.acc |= (v as u128) << self.bits;
        self.bits += self.bw;
        while self.bits >= 64 {
            self.out.extend_from_slice(&(self.acc as u64).to_le_bytes());
            self.acc >>= 64;
            self.bits -= 64;
        }
    }

    pub(crate) fn finish(mut self) {
        while self.bits > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.bits = self.bits.saturating_sub(8);
        }
    }
}

pub(crate) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn bit_width(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// Bit-packs `vals` (a multiple of 8 of them) as literal runs of the hybrid encoding.
pub(crate) fn literal_runs(out: &mut Vec<u8>, vals: &[u32], bw: u32) {
    const MAX_GROUPS: usize = 1 << 16;
    for part in vals.chunks(MAX_GROUPS * 8) {
        varint(out, ((part.len() / 8) as u64) << 1 | 1);
        if bw <= 8 {
            // a group of 8 values of bw bits is bw bytes of one u64
            for g in part.chunks_exact(8) {
                let x = g.iter().enumerate().fold(0u64, |x, (k, &v)| x | (v as u64) << (k as u32 * bw));
                out.extend_from_slice(&x.to_le_bytes()[..bw as usize]);
            }
            continue;
        }
        let mut p = BitPacker::new(out, bw);
        for &v in part {
            p.put(v as u64);
        }
        p.finish();
    }
}

/// The RLE / bit-packed hybrid encoding of `vals` at `bw` bits (bw >= 1): runs of 8 or more
/// equal values as RLE runs, the rest bit-packed in groups of 8 (the last padded with zeros).
pub fn rle_hybrid(out: &mut Vec<u8>, vals: &[u32], bw: u32) {
    let value_bytes = bw.div_ceil(8) as usize;
    let n = vals.len();
    let (mut lit_start, mut i) = (0, 0);
    while i < n {
        let v = vals[i];
        let mut j = i + 1;
        while j < n && vals[j] == v {
            j += 1;
        }
        // a run may only follow whole groups of literals: its first `pad` fill the last group
        let pad = (8 - (i - lit_start) % 8) % 8;
        if j - i >= 8 + pad {
            literal_runs(out, &vals[lit_start..i + pad], bw);
            varint(out, ((j - i - pad) as u64) << 1);
            out.extend_from_slice(&v.to_le_bytes()[..value_bytes]);
            lit_start = j;
        }
        i = j;
    }
    if lit_start < n {
        let mut last: Vec<u32> = vals[lit_start..].to_vec();
        last.resize(last.len().div_ceil(8) * 8, 0);
        literal_runs(out, &last, bw);
    }
}

/// Bit-packs 32 values of `w` bits (4 w bytes).
pub(crate) fn pack32(out: &mut Vec<u8>, vals: &[u64; 32], w: u32) {
    if w == 0 {
        return;
    }
    if w > 32 {
        let mut p = BitPacker::new(out, w);
        vals.iter().for_each(|&v| p.put(v));
        p.finish();
        return;
    }
    let (mut acc, mut bits) = (0u64, 0u32);
    for &v in vals {
        acc |= v << bits;
        bits += w;
        if bits >= 32 {
            out.extend_from_slice(&(acc as u32).to_le_bytes());
            acc >>= 32;
            bits -= 32;
        }
    }
}

/// DELTA_BINARY_PACKED: blocks of 128 deltas in 4 miniblocks of 32 (with AVX2 where the CPU
/// has it: the deltas and their minimum and maximum are computed four at a time, not two).
pub fn delta_binary_packed(out: &mut Vec<u8>, vals: &[i64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { delta_binary_packed_avx2(out, vals) };
    }
    delta_binary_packed_lanes(out, vals)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn delta_binary_packed_avx2(out: &mut Vec<u8>, vals: &[i64]) {
    delta_binary_packed_lanes(out, vals)
}

/// The largest of `v` (vectorised with AVX2 where present: SSE2 has no unsigned 32-bit max).
pub(crate) fn max_u32(v: &[u32]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { max_u32_avx2(v) };
    }
    v.iter().copied().max()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_u32_avx2(v: &[u32]) -> Option<u32> {
    v.iter().copied().max()
}

#[inline(always)]
pub(crate) fn delta_binary_packed_lanes(out: &mut Vec<u8>, vals: &[i64]) {
    const BLOCK: usize = 128;
    const MINI: usize = 32;
    varint(out, BLOCK as u64);
    varint(out, (BLOCK / MINI) as u64);
    varint(out, vals.len() as u64);
    let first = vals.first().copied().unwrap_or(0);
    varint(out, ((first << 1) ^ (first >> 63)) as u64);
    let mut deltas = [0i64; BLOCK];
    let mut start = 1;
    while start < vals.len() {
        let end = (start + BLOCK).min(vals.len());
        let k = end - start;
        for j in 0..k {
            deltas[j] = vals[start + j].wrapping_sub(vals[start + j - 1]);
        }
        let min = deltas[..k].iter().copied().min().unwrap_or(0);
        varint(out, ((min << 1) ^ (min >> 63)) as u64);
        let mut widths = [0u32; BLOCK / MINI];
        for (m, w) in widths.iter_mut().enumerate() {
            let lo = m * MINI;
            if lo < k {
                let max = deltas[lo..k.min(lo + MINI)].iter().map(|&d| d.wrapping_sub(min) as u64).max().unwrap_or(0);
                *w = bit_width(max);
            }
        }
        out.extend(widths.iter().map(|&w| w as u8));
        for (m, &w) in widths.iter().enumerate() {
            let lo = m * MINI;
            if lo >= k {
                break;
            }
            let mut mini = [0u64; MINI];
            for (j, x) in mini.iter_mut().enumerate().take(k.saturating_sub(lo).min(MINI)) {
                *x = deltas[lo + j].wrapping_sub(min) as u64;
            }
            pack32(out, &mini, w);
        }
        start = end;
    }
}


pub(crate) fn bytemuck_i64(v: &[i64]) -> &[u8] {
    // SAFETY: any i64 is 8 plain bytes; the slice covers exactly the vector's values.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, v.len() * 8) }
}

/// min and max of little-endian i64s, 8 lanes at a time (vectorised where AVX2 is present).
pub(crate) fn min_max(bytes: &[u8]) -> (i64, i64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { min_max_avx2(bytes) };
    }
    min_max_lanes(bytes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn min_max_avx2(bytes: &[u8]) -> (i64, i64) {
    min_max_lanes(bytes)
}

#[inline(always)]
pub(crate) fn min_max_lanes(bytes: &[u8]) -> (i64, i64) {
    let (mut lo, mut hi) = ([i64::MAX; 8], [i64::MIN; 8]);
    let mut blocks = bytes.chunks_exact(64);
    for b in &mut blocks {
        for k in 0..8 {
            let v = i64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().unwrap());
            lo[k] = lo[k].min(v);
            hi[k] = hi[k].max(v);
        }
    }
    for b in blocks.remainder().chunks_exact(8) {
        let v = i64::from_le_bytes(b.try_into().unwrap());
        lo[0] = lo[0].min(v);
        hi[0] = hi[0].max(v);
    }
    (lo.into_iter().min().unwrap(), hi.into_iter().max().unwrap())
}

pub(crate) fn merge(a: Option<(i64, i64)>, b: Option<(i64, i64)>) -> Option<(i64, i64)> {
    match (a, b) {
        (Some((l1, h1)), Some((l2, h2))) => Some((l1.min(l2), h1.max(h2))),
        (x, None) | (None, x) => x,
    }
}

/// The rows lo..hi whose validity bit is set (bitmap indexed from `offset`), in order.
pub(crate) fn valid_rows(bitmap: &[u8], offset: usize, lo: usize, hi: usize, rows: &mut Vec<usize>) {
    let mut i = lo;
    while i < hi {
        let j = offset + i;
        if j % 8 == 0 && i + 8 <= hi {
            let mut byte = bitmap[j / 8];
            while byte != 0 {
                rows.push(i + byte.trailing_zeros() as usize);
                byte &= byte - 1;
            }
            i += 8;
        } else {
            if bitmap[j >> 3] >> (j & 7) & 1 == 1 {
                rows.push(i);
            }
            i += 1;
        }
    }
}

/// Definition levels (0 null, 1 valid) of `n` rows from bit `start` of an Arrow validity bitmap,
/// in the hybrid encoding at bit width 1: where the rows start on a byte, the bitmap's bytes
/// are the bit-packed groups as they are.
pub(crate) fn definition_levels(out: &mut Vec<u8>, bitmap: &[u8], start: usize, n: usize) {
    let groups = n.div_ceil(8);
    if start % 8 == 0 && start / 8 + groups <= bitmap.len() {
        varint(out, (groups as u64) << 1 | 1);
        out.extend_from_slice(&bitmap[start / 8..start / 8 + groups]);
    } else {
        let levels: Vec<u32> = (start..start + n).map(|j| (bitmap[j >> 3] >> (j & 7) & 1) as u32).collect();
        rle_hybrid(out, &levels, 1);
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    fn unpack(bytes: &[u8], bw: u32, n: usize) -> Vec<u64> {
        (0..n)
            .map(|i| {
                let mut v = 0u64;
                for b in 0..bw as usize {
                    let bit = i * bw as usize + b;
                    v |= ((bytes[bit / 8] >> (bit % 8) & 1) as u64) << b;
                }
                v
            })
            .collect()
    }

    fn read_varint(b: &[u8], p: &mut usize) -> u64 {
        let (mut v, mut s) = (0u64, 0);
        loop {
            let x = b[*p];
            *p += 1;
            v |= ((x & 0x7f) as u64) << s;
            if x < 0x80 {
                return v;
            }
            s += 7;
        }
    }

    fn decode_hybrid(b: &[u8], bw: u32, n: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let mut p = 0;
        while out.len() < n {
            let h = read_varint(b, &mut p);
            if h & 1 == 1 {
                let count = (h >> 1) as usize * 8;
                let bytes = count * bw as usize / 8;
                out.extend(unpack(&b[p..p + bytes], bw, count));
                p += bytes;
            } else {
                let vb = bw.div_ceil(8) as usize;
                let mut v = [0u8; 8];
                v[..vb].copy_from_slice(&b[p..p + vb]);
                p += vb;
                out.extend(std::iter::repeat_n(u64::from_le_bytes(v), (h >> 1) as usize));
            }
        }
        out.truncate(n);
        out
    }

    #[test]
    fn min_max_reads_every_value() {
        let vals: Vec<i64> = (0..1001).map(|i| (i * 7919) % 1000 - 500).collect();
        assert_eq!(min_max(bytemuck_i64(&vals)), (-500, 499));
        assert_eq!(min_max(bytemuck_i64(&[3])), (3, 3));
    }

    #[test]
    fn hybrid_round_trips_runs_and_literals() {
        let vals: Vec<u32> = (0..1000).map(|i| if i % 100 < 40 { 3 } else { (i * 7 % 13) as u32 }).collect();
        let mut out = Vec::new();
        rle_hybrid(&mut out, &vals, 4);
        assert_eq!(decode_hybrid(&out, 4, vals.len()), vals.iter().map(|&v| v as u64).collect::<Vec<_>>());
        assert!(out.len() < 1000 * 4 / 8);
    }

    #[test]
    fn delta_writes_the_header_and_first_value() {
        let vals: Vec<i64> = (0..300).map(|i| 1000 + i * 5 + (i % 3)).collect();
        let mut out = Vec::new();
        delta_binary_packed(&mut out, &vals);
        let mut p = 0;
        assert_eq!(read_varint(&out, &mut p), 128);
        assert_eq!(read_varint(&out, &mut p), 4);
        assert_eq!(read_varint(&out, &mut p), 300);
        assert_eq!(read_varint(&out, &mut p), 2000); // zigzag(1000)
        assert_eq!(read_varint(&out, &mut p), 6); // zigzag(3): the deltas are 6, 6, 3, ...
        assert_eq!(&out[p..p + 4], &[2, 2, 2, 2]); // 3 over the minimum: 2 bits
    }
}

