//! One 32-byte record.
//!
//! ```text
//! offset 0  ts    u64  raw clock value (TSC ticks or CLOCK_MONOTONIC ns; the header says which)
//!        8  id    u32  instrument / region / event id, or a task id for kernel records
//!       12  cpu   u16  CPU the record was written on
//!       14  kind  u8   see `kinds`
//!       15  check u8   `check_byte` of the other 31 bytes
//!       16  a     u64  kind-specific
//!       24  b     u64  kind-specific
//! ```
//! A continuation record (`kinds::CONT`) carries 30 bytes of payload in every byte but `kind`
//! and `check`, so names and event payloads of any length fit the fixed layout.

pub const RECORD_SIZE: usize = 32;
/// Payload bytes carried by one continuation record.
pub const CONT_PAYLOAD: usize = 30;

#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub ts: u64,
    pub id: u32,
    pub cpu: u16,
    pub kind: u8,
    pub check: u8,
    pub a: u64,
    pub b: u64,
}

const _: () = assert!(std::mem::size_of::<Record>() == RECORD_SIZE);

/// A check over the 31 other bytes: the byte sum of the XOR of the four words (kind and id
/// words without the check): a damaged byte changes it unless carries inside the multiply
/// happen to cancel the change (about 1 in 50,000 single-byte damages of random records; the
/// unit test below counts them); 0xA5 is mixed in so an all-zero slot never validates. Cheap enough for the inlined hot path in oslens.h, which
/// computes the same (a multiply instead of the shift-and-xor folds of format version 1).
#[inline(always)]
pub fn check_byte(ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> u8 {
    let x = ts ^ a ^ b ^ (id as u64 | (cpu as u64) << 32 | (kind as u64) << 48);
    ((x.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u8) ^ 0xA5
}

impl Record {
    #[inline(always)]
    pub fn new(ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> Record {
        Record { ts, id, cpu, kind, check: check_byte(ts, id, cpu, kind, a, b), a, b }
    }

    pub fn is_valid(&self) -> bool {
        self.kind != 0 && self.check == check_byte(self.ts, self.id, self.cpu, self.kind, self.a, self.b)
    }

    pub fn to_bytes(&self) -> [u8; RECORD_SIZE] {
        let mut out = [0u8; RECORD_SIZE];
        out[0..8].copy_from_slice(&self.ts.to_le_bytes());
        out[8..12].copy_from_slice(&self.id.to_le_bytes());
        out[12..14].copy_from_slice(&self.cpu.to_le_bytes());
        out[14] = self.kind;
        out[15] = self.check;
        out[16..24].copy_from_slice(&self.a.to_le_bytes());
        out[24..32].copy_from_slice(&self.b.to_le_bytes());
        out
    }

    pub fn from_bytes(raw: &[u8]) -> Record {
        let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
        Record {
            ts: u64_at(0),
            id: u32::from_le_bytes(raw[8..12].try_into().unwrap()),
            cpu: u16::from_le_bytes(raw[12..14].try_into().unwrap()),
            kind: raw[14],
            check: raw[15],
            a: u64_at(16),
            b: u64_at(24),
        }
    }
}

/// Continuation records for `payload`, in order.
pub fn continuation_records(payload: &[u8]) -> Vec<[u8; RECORD_SIZE]> {
    payload.chunks(CONT_PAYLOAD).map(continuation_record).collect()
}

/// One continuation record holding up to 30 bytes.
pub fn continuation_record(part: &[u8]) -> [u8; RECORD_SIZE] {
    let mut out = [0u8; RECORD_SIZE];
    let (head, tail) = part.split_at(part.len().min(14));
    out[..head.len()].copy_from_slice(head);
    out[16..16 + tail.len()].copy_from_slice(tail);
    out[14] = crate::kinds::CONT;
    out[15] = continuation_check(&out);
    out
}

pub fn continuation_check(raw: &[u8]) -> u8 {
    let r = Record::from_bytes(raw);
    check_byte(r.ts, r.id, r.cpu, crate::kinds::CONT, r.a, r.b)
}

/// The 30 payload bytes of a continuation record.
pub fn continuation_payload(raw: &[u8]) -> impl Iterator<Item = u8> + '_ {
    raw[0..14].iter().chain(raw[16..32].iter()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_check() {
        let r = Record::new(123456789, 7, 3, 5, 42, u64::MAX);
        let back = Record::from_bytes(&r.to_bytes());
        assert_eq!(r, back);
        assert!(back.is_valid());
        let mut bytes = r.to_bytes();
        bytes[20] ^= 0x10;
        assert!(!Record::from_bytes(&bytes).is_valid());
        assert!(!Record::from_bytes(&[0u8; 32]).is_valid());
    }

    /// Every single-byte change of every byte of many pseudo-random records: the byte sum
    /// misses one only when carries inside the multiply cancel it (about 1 in 50,000).
    #[test]
    fn check_catches_single_byte_damage() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut tried, mut missed) = (0u64, 0u64);
        for _ in 0..200 {
            let r = Record::new(next(), next() as u32, next() as u16, 3, next(), next());
            let bytes = r.to_bytes();
            for at in (0..32).filter(|&i| i != 14 && i != 15) {
                for flip in 1..=255u8 {
                    let mut damaged = bytes;
                    damaged[at] ^= flip;
                    tried += 1;
                    missed += Record::from_bytes(&damaged).is_valid() as u64;
                }
            }
        }
        assert_eq!(tried, 200 * 30 * 255);
        assert!(missed * 20_000 < tried, "missed {missed} of {tried}");
    }

    #[test]
    fn continuation_carries_30_bytes() {
        let payload: Vec<u8> = (0..75u8).collect();
        let recs = continuation_records(&payload);
        assert_eq!(recs.len(), 3);
        let back: Vec<u8> = recs.iter().flat_map(|r| continuation_payload(r).collect::<Vec<_>>()).take(75).collect();
        assert_eq!(back, payload);
        for r in &recs {
            assert_eq!(continuation_check(r), r[15]);
        }
    }
}
