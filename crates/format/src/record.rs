//! One 32-byte record.
//!
//! ```text
//! offset 0  ts    u64  raw clock value (TSC ticks or CLOCK_MONOTONIC ns; the header says which)
//!        8  id    u32  instrument / region / event id, or a task id for kernel records
//!       12  cpu   u16  CPU the record was written on
//!       14  kind  u8   see `kinds`
//!       15  check u8   `check_byte`: the XOR of the other 31 bytes, xor 0xA5 (format 2: `Check::Sum`)
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

/// How a record's check byte is computed; the chunk header's format version says which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Format 3: the XOR of the other 31 bytes, so every change of a single byte (the check
    /// byte's own included) is detected, whatever the record holds.
    Fold,
    /// Format 2: a byte sum taken through a multiply, whose carries let about 1 in 50,000
    /// single-byte changes through; kept to read chunks written by older recorders.
    Sum,
}

impl Check {
    /// The check of a format version; `None` for versions this reader does not know.
    pub fn for_version(version: u32) -> Option<Check> {
        match version {
            3 => Some(Check::Fold),
            2 => Some(Check::Sum),
            _ => None,
        }
    }

    #[inline(always)]
    pub fn compute(self, ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> u8 {
        match self {
            Check::Fold => check_byte(ts, id, cpu, kind, a, b),
            Check::Sum => sum_check_byte(ts, id, cpu, kind, a, b),
        }
    }

    /// Whether a record's check byte matches (never for an all-zero slot: `kind` 0).
    pub fn accepts(self, r: &Record) -> bool {
        r.kind != 0 && r.check == self.compute(r.ts, r.id, r.cpu, r.kind, r.a, r.b)
    }
}

/// The XOR of the four words (kind and id word without the check byte): byte j of it is the
/// XOR of byte j of each word.
#[inline(always)]
fn words_xor(ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> u64 {
    ts ^ a ^ b ^ (id as u64 | (cpu as u64) << 32 | (kind as u64) << 48)
}

/// The check of format 3: the XOR of the 31 other bytes (the words' XOR folded to one byte),
/// xor 0xA5 so an all-zero slot never validates. A changed byte changes it by exactly that
/// byte's change, so no single-byte damage passes. oslens.h computes the same inline, folding
/// toward the top byte (three shifts and xors; bench/record_cost measured it against the
/// multiply of format 2: docs/recorder.md).
#[inline(always)]
pub fn check_byte(ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> u8 {
    let mut x = words_xor(ts, id, cpu, kind, a, b);
    x ^= x >> 32;
    x ^= x >> 16;
    x ^= x >> 8;
    (x as u8) ^ 0xA5
}

/// The check of format 2 (see `Check::Sum`).
pub fn sum_check_byte(ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> u8 {
    let x = words_xor(ts, id, cpu, kind, a, b);
    ((x.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u8) ^ 0xA5
}

impl Record {
    #[inline(always)]
    pub fn new(ts: u64, id: u32, cpu: u16, kind: u8, a: u64, b: u64) -> Record {
        Record { ts, id, cpu, kind, check: check_byte(ts, id, cpu, kind, a, b), a, b }
    }

    /// Whether the check byte matches, by the current format's check.
    pub fn is_valid(&self) -> bool {
        Check::Fold.accepts(self)
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

    /// Inlined: the importer decodes every record through it (bench/import).
    #[inline(always)]
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
    continuation_check_with(Check::Fold, raw)
}

/// A continuation record's check by `check` (its kind byte taken as CONT).
pub fn continuation_check_with(check: Check, raw: &[u8]) -> u8 {
    let r = Record::from_bytes(raw);
    check.compute(r.ts, r.id, r.cpu, crate::kinds::CONT, r.a, r.b)
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

    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// As the reader validates a slot: a continuation by its own check, anything else as a record.
    fn slot_valid(raw: &[u8; RECORD_SIZE]) -> bool {
        if raw[14] == crate::kinds::CONT {
            continuation_check(raw) == raw[15]
        } else {
            Record::from_bytes(raw).is_valid()
        }
    }

    /// Every value of every one of the 32 bytes (the kind and check bytes included) of records
    /// of every kind and of continuation records, with edge values and pseudo-random ones: the
    /// check rejects each change.
    #[test]
    fn check_catches_every_single_byte_change() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let mut slots = vec![
            Record::new(0, 0, 0, 1, 0, 0).to_bytes(),
            Record::new(u64::MAX, u32::MAX, u16::MAX, 255, u64::MAX, u64::MAX).to_bytes(),
            // the record the flaky end-to-end test damaged: a TSC timestamp of a few hours' uptime
            Record::new(346_000_000_000, 3, 1, crate::kinds::EVENT, 0, 0).to_bytes(),
        ];
        for kind in (1..=255u8).filter(|&k| k != crate::kinds::CONT) {
            slots.push(Record::new(next(), next() as u32, next() as u16, kind, next(), next()).to_bytes());
        }
        let payload: Vec<u8> = (0..300).map(|_| next() as u8).collect();
        slots.extend(continuation_records(&payload));
        slots.push(continuation_record(&[0u8; 30]));
        let mut tried = 0u64;
        for bytes in &slots {
            assert!(slot_valid(bytes));
            for at in 0..RECORD_SIZE {
                for flip in 1..=255u8 {
                    let mut damaged = *bytes;
                    damaged[at] ^= flip;
                    tried += 1;
                    assert!(!slot_valid(&damaged), "byte {at} ^ {flip:#04x} of {bytes:?} passed the check");
                }
            }
        }
        assert_eq!(tried, slots.len() as u64 * 32 * 255);
    }

    /// The check of format 2 stays as it was, so chunks written before format 3 still read:
    /// a value computed by hand from its definition, and its known weakness (a carry lets a
    /// single-byte change through), which is why format 3 replaced it.
    #[test]
    fn the_format_2_check_is_kept_for_old_chunks() {
        let (ts, id, cpu, kind, a, b) = (0x0102_0304_0506_0708u64, 9u32, 1u16, 3u8, 0u64, 0u64);
        let x = words_xor(ts, id, cpu, kind, a, b);
        let sum: u64 = x.to_le_bytes().iter().map(|&v| v as u64).sum();
        assert_eq!(sum_check_byte(ts, id, cpu, kind, a, b), (sum as u8) ^ 0xA5);
        assert_eq!(Check::for_version(2), Some(Check::Sum));
        assert_eq!(Check::for_version(3), Some(Check::Fold));
        assert_eq!(Check::for_version(1), None);
        let mut next = xorshift(0x1234_5678_9ABC_DEF1);
        let missed = (0..2000).any(|_| {
            let r = Record { ts: next(), id: next() as u32, cpu: next() as u16, kind: 3, check: 0, a: next(), b: next() };
            let check = sum_check_byte(r.ts, r.id, r.cpu, r.kind, r.a, r.b);
            (0..8).any(|byte| (1..=255u64).any(|f| sum_check_byte(r.ts ^ (f << (8 * byte)), r.id, r.cpu, r.kind, r.a, r.b) == check))
        });
        assert!(missed, "the multiply's carries let some single-byte change through");
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
