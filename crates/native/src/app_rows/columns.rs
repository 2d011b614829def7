//! What every table the pass writes is made of: Parquet columns over the pass's buffers (their
//! dictionaries, validity bitmaps and encodings), and the sink a streamed table is written to a
//! page at a time.

use crate::parquet::{self, Column, Dictionary};

/// The dictionaries of app_events' dictionary columns, PLAIN-encoded.
pub struct Dicts<'a> {
    pub pid: (usize, &'a [u8]),
    pub tid: (usize, &'a [u8]),
    pub instrument: (usize, &'a [u8]),
    pub kind: (usize, &'a [u8]),
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

pub fn plain_col<'a>(name: &str, physical: i32, converted: Option<i32>, values: &'a [u8], width: usize) -> Column<'a> {
    Column {
        name: name.to_string(),
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

pub fn i64_col<'a>(name: &str, v: &'a [i64], delta: bool, stats: bool) -> Column<'a> {
    Column { delta, stats, ..plain_col(name, parquet::INT64, None, bytes_of(v), 8) }
}

pub fn dict_col<'a>(name: &str, physical: i32, converted: Option<i32>, values: &'a [u8], width: usize, dict: (usize, &'a [u8]), stats: bool) -> Column<'a> {
    Column { dict: Some(Dictionary { count: dict.0, plain: dict.1 }), stats, ..plain_col(name, physical, converted, values, width) }
}

pub fn who<'a>(g: &'a [i32], d: &'a Dicts) -> [Column<'a>; 2] {
    [dict_col("pid", parquet::INT64, None, bytes_of(g), 4, d.pid, true), dict_col("tid", parquet::INT64, None, bytes_of(g), 4, d.tid, true)]
}

pub fn name_col<'a>(name: &str, v: &'a [i32], d: &'a Dicts, validity: Option<&'a [u8]>) -> Column<'a> {
    Column { validity, ..dict_col(name, parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(v), 4, d.instrument, false) }
}

pub fn reason_col<'a>(v: &'a [u64], r: &'a Reasons) -> Column<'a> {
    dict_col("reason", parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(v), 8, (r.count, &r.plain), false)
}

/// The compensated columns delta-encoded (oslens.store.compensation.DELTA_COLUMNS): those of
/// the times that are (ts, begin_ns, start_ns, request_ns).
pub const COMP_DELTA: [&str; 8] = ["ts_comp_ns", "begin_comp_ns", "start_comp_ns", "request_comp_ns", "end_comp_ns", "stop_comp_ns", "acquire_comp_ns", "release_comp_ns"];

/// PLAIN byte arrays: each value's length, then its bytes.
pub fn plain_strings<S: AsRef<str>>(out: &mut Vec<u8>, values: impl IntoIterator<Item = S>) {
    for v in values {
        out.extend_from_slice(&(v.as_ref().len() as u32).to_le_bytes());
        out.extend_from_slice(v.as_ref().as_bytes());
    }
}

