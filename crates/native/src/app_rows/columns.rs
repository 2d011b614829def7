//! What every table the pass writes is made of: Parquet columns over the pass's buffers (their
//! dictionaries, validity bitmaps and encodings), and the sink a streamed table is written to a
//! page at a time.

use crate::parquet::{self, Column, Dictionary};
use std::collections::HashMap;

/// Each table's columns as oslens.store.schema declares them, (name, Arrow type) in order,
/// given by the importer: the pass builds its columns in that order, unnamed, and names them
/// from here when it writes a file's footer, so no column name is written in Rust.
pub type Declared = HashMap<String, Vec<(String, String)>>;

/// The dictionaries of app_events' dictionary columns, PLAIN-encoded, and the tables' declared
/// columns.
pub struct Dicts<'a> {
    pub pid: (usize, &'a [u8]),
    pub tid: (usize, &'a [u8]),
    pub instrument: (usize, &'a [u8]),
    pub kind: (usize, &'a [u8]),
    pub declared: &'a Declared,
}

/// The physical and converted Parquet types of a declared Arrow type (oslens.store.schema's).
fn parquet_type(arrow: &str) -> Option<(i32, Option<i32>)> {
    Some(match arrow {
        "int64" => (parquet::INT64, None),
        "uint64" => (parquet::INT64, Some(parquet::UINT_64)),
        "int32" => (parquet::INT32, None),
        "uint32" => (parquet::INT32, Some(parquet::UINT_32)),
        "string" => (parquet::BYTE_ARRAY, Some(parquet::UTF8)),
        "binary" => (parquet::BYTE_ARRAY, None),
        "bool" => (parquet::BOOLEAN, None),
        _ => return None,
    })
}

/// `cols` named as `table`'s declared columns, after checking they are as many and each of its
/// declared type (an error otherwise: the pass and the declaration disagree).
pub fn named<'a>(table: &str, cols: Vec<Column<'a>>, d: &Dicts) -> std::io::Result<Vec<Column<'a>>> {
    named_in("app_pass", table, cols, d.declared)
}

/// named() against the declared columns themselves (the kernel pass has no app dictionaries);
/// errors name `pass`.
pub fn named_in<'a>(pass: &str, table: &str, mut cols: Vec<Column<'a>>, declared: &Declared) -> std::io::Result<Vec<Column<'a>>> {
    let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{pass}: table {table}: {why}"));
    let decl = declared.get(table).ok_or_else(|| bad("no declared columns given".into()))?;
    if decl.len() != cols.len() {
        return Err(bad(format!("{} columns declared, {} built", decl.len(), cols.len())));
    }
    for (c, (name, arrow)) in cols.iter_mut().zip(decl) {
        if parquet_type(arrow) != Some((c.physical, c.converted)) {
            return Err(bad(format!("column {name} is declared {arrow}, built as Parquet type {} ({:?})", c.physical, c.converted)));
        }
        c.name = name.clone();
    }
    Ok(cols)
}

pub fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain integers: any value is its bytes; the slice covers exactly the vector.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// A derived table written a page at a time while the pass runs.
pub struct Sink {
    pub w: parquet::Writer<std::fs::File>,
    in_group: usize,
    group_rows: usize,
    /// rows written so far
    pub written: usize,
}

impl Sink {
    pub fn new(f: std::fs::File, group_rows: usize) -> std::io::Result<Sink> {
        Ok(Sink { w: parquet::Writer::new_file(f)?, in_group: 0, group_rows: group_rows.max(1), written: 0 })
    }

    /// Rows the next page holds: PAGE_ROWS, or what the row group has room for.
    pub fn cap(&self) -> usize {
        parquet::PAGE_ROWS.min(self.group_rows - self.in_group)
    }

    pub fn page(&mut self, cols: &[Column], n: usize) -> std::io::Result<()> {
        self.w.pages(cols, 0, n)?;
        self.in_group += n;
        self.written += n;
        if self.in_group == self.group_rows {
            self.w.end_group()?;
            self.in_group = 0;
        }
        Ok(())
    }
}

/// A small dictionary of codes (counter and pause reasons): the sorted codes and their labels,
/// PLAIN-encoded (app_tables._small_dict).
#[derive(Default)]
pub struct Reasons {
    pub codes: Vec<u64>,
    pub count: usize,
    pub plain: Vec<u8>,
}

impl Reasons {
    pub fn index(&self, b: u64) -> u64 {
        self.codes.binary_search(&b).map(|i| i as u64).unwrap_or(u64::MAX)
    }
}

/// The validity bitmap of a page of name indices (-1: no name); returns the nulls.
pub fn name_validity(names: &[i32], bits: &mut Vec<u8>) -> usize {
    bits.clear();
    bits.resize(names.len().div_ceil(8), 0);
    let mut nulls = 0;
    for (i, &n) in names.iter().enumerate() {
        if n >= 0 {
            bits[i >> 3] |= 1 << (i & 7);
        } else {
            nulls += 1;
        }
    }
    nulls
}

/// A column without its name (named() gives it its declared one).
pub fn plain_col(physical: i32, converted: Option<i32>, values: &[u8], width: usize) -> Column<'_> {
    Column {
        name: String::new(),
        physical,
        converted,
        validity: None,
        offset: 0,
        values,
        width,
        data: None,
        dict: None,
        delta: false,
        stats: false,
    }
}

pub fn i64_col(v: &[i64], delta: bool, stats: bool) -> Column<'_> {
    Column { delta, stats, ..plain_col(parquet::INT64, None, bytes_of(v), 8) }
}

pub fn dict_col<'a>(physical: i32, converted: Option<i32>, values: &'a [u8], width: usize, dict: (usize, &'a [u8]), stats: bool) -> Column<'a> {
    Column { dict: Some(Dictionary { count: dict.0, plain: dict.1 }), stats, ..plain_col(physical, converted, values, width) }
}

pub fn who<'a>(g: &'a [i32], d: &'a Dicts) -> [Column<'a>; 2] {
    [dict_col(parquet::INT64, None, bytes_of(g), 4, d.pid, true), dict_col(parquet::INT64, None, bytes_of(g), 4, d.tid, true)]
}

pub fn name_col<'a>(v: &'a [i32], d: &'a Dicts, validity: Option<&'a [u8]>) -> Column<'a> {
    Column { validity, ..dict_col(parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(v), 4, d.instrument, false) }
}

pub fn reason_col<'a>(v: &'a [u64], r: &'a Reasons) -> Column<'a> {
    dict_col(parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(v), 8, (r.count, &r.plain), false)
}

/// PLAIN byte arrays: each value's length, then its bytes.
pub fn plain_strings<S: AsRef<str>>(out: &mut Vec<u8>, values: impl IntoIterator<Item = S>) {
    for v in values {
        out.extend_from_slice(&(v.as_ref().len() as u32).to_le_bytes());
        out.extend_from_slice(v.as_ref().as_bytes());
    }
}

