//! The raw chunk format shared by every writer (the in-process recorder, the kernel collector)
//! and the reader.
//!
//! A chunk is one file: a 4096-byte header followed by fixed 32-byte records. Fixed-size records
//! make salvage trivial: a damaged record is skipped and the reader resynchronises on the next
//! slot. Each record carries a check byte (the XOR of its other bytes) so any flipped byte is
//! detected, a timestamp outside its chunk's time range counts as damage too, and the
//! header's `committed` field says how many slots the writer finished; slots past it are ignored.
//! All integers are little-endian.

pub mod hash;
pub mod header;
pub mod kernel;
pub mod kernel_layout;
pub mod kind_names;
pub mod kinds;
pub mod object;
pub mod reader;
pub mod record;
pub mod space;

pub use header::{ChunkHeader, HEADER_SIZE, MAGIC, VERSION};
pub use reader::{read_chunk, Chunk, Damage, Validator};
pub use record::{Check, Record, RECORD_SIZE};
