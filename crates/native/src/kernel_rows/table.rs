//! A kernel table being written: its rows gathered a page at a time in typed buffers, written to
//! Parquet (crate::parquet) through app_rows' Sink when a page is full, its columns named from
//! oslens.store.schema's declaration.

use crate::app_rows::{columns, Declared, Sink};
use crate::parquet::{self, Column};

/// A code -> text dictionary of a string column: the sorted codes and their texts PLAIN-encoded,
/// given by the importer (the texts are made in Python, from the codes the scan found).
#[derive(Default, Clone)]
pub struct Dict {
    pub codes: Vec<i64>,
    pub count: usize,
    pub plain: Vec<u8>,
}

impl Dict {
    /// The index of `code` (codes the scan did not see cannot occur: index 0 keeps the file valid).
    pub fn index(&self, code: i64) -> u32 {
        self.codes.binary_search(&code).map(|i| i as u32).unwrap_or(0)
    }
}

/// One column's values for the page being gathered.
pub enum Buf {
    I64(Vec<i64>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    /// dictionary indices, and which of the pass's dictionaries
    Dict(Vec<u32>, usize),
    /// nullable i64: values and validity
    Opt(Vec<i64>, Vec<bool>),
}

impl Buf {
    fn clear(&mut self) {
        match self {
            Buf::I64(v) => v.clear(),
            Buf::U64(v) => v.clear(),
            Buf::Bool(v) => v.clear(),
            Buf::Dict(v, _) => v.clear(),
            Buf::Opt(v, ok) => {
                v.clear();
                ok.clear()
            }
        }
    }
}

fn bitmap(bits: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; bits.len().div_ceil(8)];
    for (i, _) in bits.iter().enumerate().filter(|(_, &b)| b) {
        out[i >> 3] |= 1 << (i & 7);
    }
    out
}

/// A table written while the pass runs: `b` holds the page being gathered.
pub struct Table {
    pub name: &'static str,
    pub b: Vec<Buf>,
    /// per column (delta-encoded, with statistics), as parquet_options decides for pyarrow
    enc: Vec<(bool, bool)>,
    sink: Sink,
    n: usize,
}

impl Table {
    pub fn new(name: &'static str, b: Vec<Buf>, enc: Vec<(bool, bool)>, path: &str, group_rows: usize) -> std::io::Result<Table> {
        let sink = Sink::new(std::fs::File::create(path)?, group_rows)?;
        Ok(Table { name, b, enc, sink, n: 0 })
    }

    /// Counts the row just pushed into every buffer; writes the page when it is full.
    pub fn row(&mut self, dicts: &[Dict], declared: &Declared) -> std::io::Result<()> {
        self.n += 1;
        if self.n >= self.sink.cap() {
            self.flush(dicts, declared)?;
        }
        Ok(())
    }

    fn bitmaps(&self) -> Vec<Vec<u8>> {
        self.b
            .iter()
            .map(|b| match b {
                Buf::Bool(v) | Buf::Opt(_, v) => bitmap(v),
                _ => Vec::new(),
            })
            .collect()
    }

    fn flush(&mut self, dicts: &[Dict], declared: &Declared) -> std::io::Result<()> {
        if self.n == 0 {
            return Ok(());
        }
        let bits = self.bitmaps();
        let cols = columns_of(self.name, &self.b, &self.enc, &bits, dicts, declared)?;
        self.sink.page(&cols, self.n)?;
        drop(cols);
        self.b.iter_mut().for_each(Buf::clear);
        self.n = 0;
        Ok(())
    }

    /// Writes the last page and the footer; returns the rows written.
    pub fn finish(mut self, dicts: &[Dict], declared: &Declared) -> std::io::Result<usize> {
        self.flush(dicts, declared)?;
        let bits = self.bitmaps();
        let cols = columns_of(self.name, &self.b, &self.enc, &bits, dicts, declared)?;
        let written = self.sink.written;
        self.sink.w.finish(&cols)?;
        Ok(written)
    }
}

/// The page's columns (the footer's, when empty), named as `table` declares them.
fn columns_of<'a>(table: &str, b: &'a [Buf], enc: &[(bool, bool)], bits: &'a [Vec<u8>], dicts: &'a [Dict], declared: &Declared) -> std::io::Result<Vec<Column<'a>>> {
    let cols = b
        .iter()
        .zip(enc)
        .zip(bits)
        .map(|((b, &(delta, stats)), bm)| match b {
            Buf::I64(v) => columns::i64_col(v, delta, stats),
            Buf::U64(v) => columns::plain_col(parquet::INT64, Some(parquet::UINT_64), columns::bytes_of(v), 8),
            Buf::Bool(_) => columns::plain_col(parquet::BOOLEAN, None, bm, 1),
            Buf::Dict(v, d) => {
                let d = &dicts[*d];
                columns::dict_col(parquet::BYTE_ARRAY, Some(parquet::UTF8), columns::bytes_of(v), 4, (d.count, &d.plain), false)
            }
            Buf::Opt(v, _) => Column { validity: Some(bm), ..columns::i64_col(v, delta, stats) },
        })
        .collect();
    columns::named_in("kernel_pass", table, cols, declared)
}
