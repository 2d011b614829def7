//! Where the pass's records come from: each chunk's records held in memory for the whole pass
//! or read again when the pass reaches it (docs/trace-schema.md, "Import memory").

use crate::names::NameMap;
use std::collections::HashMap;

/// One chunk's records, in the order the threads' records are laid end to end.
pub struct Chunk<'a> {
    pub records: Source<'a>,
    pub g: usize,
    pub tsc: bool,
    pub names: &'a NameMap,
    pub has_names: bool,
    /// Event payloads longer than 8 bytes, by record index in the chunk.
    pub payloads: &'a HashMap<usize, Vec<u8>>,
    /// The chunk's records per kind and their largest CPU number where known (scan_records),
    /// else counted here.
    pub counts: Option<(&'a [u64], u16)>,
    /// The (name key, address) pairs of its sync records that begin a row (Scan::sync, laid
    /// flat) where known: with every chunk's, sync's object dictionary is known before the pass.
    pub sync_keys: Option<&'a [u64]>,
}

/// Where a chunk's records come from: held in memory for the whole pass, or read again when the
/// pass reaches the chunk and let go after it, so the import holds a bounded share of the
/// records at once (oslens.store.importer.HELD_BYTES; docs/trace-schema.md, "Import memory").
pub enum Source<'a> {
    Held(&'a [u8]),
    /// The chunk's byte length and what reads its records again.
    Reload(usize, &'a dyn Reload),
}

/// Reads a chunk's records again (the importer's reader, through Python).
pub trait Reload: Sync {
    fn reload(&self) -> std::io::Result<Box<dyn std::ops::Deref<Target = [u8]> + '_>>;
}

/// A chunk's records while the pass reads them.
pub enum Records<'a> {
    Held(&'a [u8]),
    Loaded(Box<dyn std::ops::Deref<Target = [u8]> + 'a>, usize),
}

impl std::ops::Deref for Records<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Records::Held(r) => r,
            Records::Loaded(b, n) => &b[..*n],
        }
    }
}

impl<'a> Chunk<'a> {
    /// The chunk's length in bytes (whole records).
    pub fn len(&self) -> usize {
        match self.records {
            Source::Held(r) => r.len(),
            Source::Reload(n, _) => n,
        }
    }

    /// The chunk's records; read again where they were let go (Source::read).
    pub fn records(&self) -> std::io::Result<Records<'a>> {
        self.records.read()
    }
}

impl<'a> Source<'a> {
    /// The records; read again where they were let go. The records read again are those first
    /// read (a chunk only grows past its committed count while a recorder still writes it):
    /// fewer is an error.
    pub fn read(&self) -> std::io::Result<Records<'a>> {
        match *self {
            Source::Held(r) => Ok(Records::Held(r)),
            Source::Reload(n, from) => {
                let got = from.reload()?;
                if got.len() < n {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a chunk had {} bytes of records when read again, {n} when first read", got.len()),
                    ));
                }
                Ok(Records::Loaded(got, n))
            }
        }
    }
}
