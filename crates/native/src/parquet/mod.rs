//! A Parquet writer for the store's large tables: the few column shapes the importer builds
//! (64- and 32-bit integers, booleans, byte arrays, dictionary-encoded strings or integers,
//! nullable or not), written straight from the Arrow buffers Python hands over. It exists for
//! speed: it encodes a column in one pass without the generic machinery of a full writer.
//!
//! Format (parquet-format 2.x, data pages v1): each column chunk holds an optional dictionary
//! page (PLAIN) then data pages of at most PAGE_ROWS rows; definition levels (nullable columns
//! only) and dictionary indices use the RLE / bit-packed hybrid; integers PLAIN or
//! DELTA_BINARY_PACKED; every page is LZ4_RAW compressed. The footer is Thrift compact.
//!
//! Why not Apache Arrow's `parquet` crate: on the bench's tables (20 M records) with the same
//! encodings and LZ4 it took 3.46 CPU-s against this writer's 0.75 (4.6x) for the same bytes,
//! mostly re-hashing every value of dictionary columns, and added 3.8 min to a clean build of
//! this crate (docs/trace-schema.md, bench/import/parquet-crate.json; crate_writer.rs behind
//! the `parquet-crate` feature keeps the comparison runnable).

use std::io::{Result, Write};

pub const PAGE_ROWS: usize = 1 << 16;

// Thrift compact protocol field types
pub(crate) const T_I32: u8 = 5;
pub(crate) const T_I64: u8 = 6;
pub(crate) const T_BINARY: u8 = 8;
pub(crate) const T_LIST: u8 = 9;
pub(crate) const T_STRUCT: u8 = 12;

// parquet.thrift enums
pub const INT64: i32 = 2;
pub const INT32: i32 = 1;
pub const UTF8: i32 = 0;
pub const UINT_32: i32 = 13;
pub const UINT_64: i32 = 14;
pub const BOOLEAN: i32 = 0;
pub const BYTE_ARRAY: i32 = 6;
const PLAIN: i32 = 0;
const RLE: i32 = 3;
const DELTA_BINARY_PACKED: i32 = 5;
const RLE_DICTIONARY: i32 = 8;
const LZ4_RAW: i32 = 7;
const DATA_PAGE: i32 = 0;
const DICTIONARY_PAGE: i32 = 2;

mod encoding;
mod thrift;

use encoding::*;
pub use thrift::Thrift;

/// A column as the writer reads it. Values are indexed from `offset` (Arrow array offset).
pub struct Column<'a> {
    pub name: String,
    pub physical: i32,
    pub converted: Option<i32>,
    pub validity: Option<&'a [u8]>,
    pub offset: usize,
    pub values: &'a [u8],
    pub width: usize,
    pub data: Option<&'a [u8]>,
    pub dict: Option<Dictionary<'a>>,
    pub delta: bool,
    pub stats: bool,
}

/// Dictionary values, PLAIN-encoded: the dictionary page of every row group.
pub struct Dictionary<'a> {
    pub count: usize,
    pub plain: &'a [u8],
}

impl Column<'_> {
    fn uint(&self, i: usize) -> u64 {
        let j = (self.offset + i) * self.width;
        let b = &self.values[j..j + self.width];
        match self.width {
            1 => b[0] as u64,
            2 => u16::from_le_bytes([b[0], b[1]]) as u64,
            4 => u32::from_le_bytes(b.try_into().unwrap()) as u64,
            _ => u64::from_le_bytes(b.try_into().unwrap()),
        }
    }

    fn i64(&self, i: usize) -> i64 {
        let j = (self.offset + i) * 8;
        i64::from_le_bytes(self.values[j..j + 8].try_into().unwrap())
    }

    /// The values of rows lo..hi (or of `rows`, the valid ones, when some are null) as i64.
    fn i64s(&self, lo: usize, hi: usize, rows: Option<&[usize]>, out: &mut Vec<i64>) {
        out.clear();
        match rows {
            None => out.extend(
                self.values[(self.offset + lo) * 8..(self.offset + hi) * 8].chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())),
            ),
            Some(r) => out.extend(r.iter().map(|&i| self.i64(i))),
        }
    }

    /// The values of rows lo..hi read in place as `T`, where the buffer is aligned for it and
    /// the machine little-endian (Arrow buffers are 64-byte aligned): no copy to encode them.
    fn in_place<T: Copy>(&self, lo: usize, hi: usize) -> Option<&[T]> {
        let w = std::mem::size_of::<T>();
        if !cfg!(target_endian = "little") || self.width != w {
            return None;
        }
        let bytes = &self.values[(self.offset + lo) * w..(self.offset + hi) * w];
        // SAFETY: T is a plain integer type (i64 or u32 here): every bit pattern is a value.
        let (pre, mid, post) = unsafe { bytes.align_to::<T>() };
        (pre.is_empty() && post.is_empty()).then_some(mid)
    }

    /// Dictionary indices of rows lo..hi (or of `rows`) as u32.
    fn indices(&self, lo: usize, hi: usize, rows: Option<&[usize]>, out: &mut Vec<u32>) {
        let (a, b) = ((self.offset + lo) * self.width, (self.offset + hi) * self.width);
        out.clear();
        match (rows, self.width) {
            (None, 1) => out.extend(self.values[a..b].iter().map(|&x| x as u32)),
            (None, 2) => out.extend(self.values[a..b].chunks_exact(2).map(|x| u16::from_le_bytes([x[0], x[1]]) as u32)),
            (None, 4) => out.extend(self.values[a..b].chunks_exact(4).map(|x| u32::from_le_bytes(x.try_into().unwrap()))),
            (None, _) => out.extend((lo..hi).map(|i| self.uint(i) as u32)),
            (Some(r), _) => out.extend(r.iter().map(|&i| self.uint(i) as u32)),
        }
    }

    /// Appends the encoding of the values of rows lo..hi (of the valid `rows` where some are
    /// null) to `out`; returns their min and max where statistics are asked for.
    fn encode_values(&self, out: &mut Vec<u8>, lo: usize, hi: usize, rows: Option<&[usize]>, tmp: &mut Temp) -> Result<Option<(i64, i64)>> {
        if let Some(d) = &self.dict {
            let bw = bit_width(d.count.saturating_sub(1) as u64).max(1);
            out.push(bw as u8);
            let idx: &[u32] = match (rows, self.in_place::<u32>(lo, hi)) {
                (None, Some(v)) => v,
                _ => {
                    self.indices(lo, hi, rows, &mut tmp.idx);
                    &tmp.idx
                }
            };
            // an index past the dictionary would not fit the bit width (and corrupt its
            // neighbours); Arrow's signed indices read as u32 are past it when negative
            if max_u32(idx).is_some_and(|m| m as usize >= d.count) {
                let what = format!("column {}: an index past the end of its dictionary", self.name);
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, what));
            }
            rle_hybrid(out, idx, bw);
            return Ok(None);
        }
        let each = |f: &mut dyn FnMut(usize)| match rows {
            None => (lo..hi).for_each(f),
            Some(r) => r.iter().for_each(|&i| f(i)),
        };
        Ok(match self.physical {
            BOOLEAN => {
                let mut p = BitPacker::new(out, 1);
                each(&mut |i| {
                    let j = self.offset + i;
                    p.put((self.values[j >> 3] >> (j & 7) & 1) as u64);
                });
                p.finish();
                None
            }
            BYTE_ARRAY => {
                let data = self.data.unwrap_or(&[]);
                each(&mut |i| {
                    let (s, e) = (self.uint(i) as usize, self.uint(i + 1) as usize);
                    out.extend_from_slice(&((e - s) as u32).to_le_bytes());
                    out.extend_from_slice(&data[s..e]);
                });
                None
            }
            INT64 if self.delta || self.stats => {
                let vals: &[i64] = match (rows, self.in_place::<i64>(lo, hi)) {
                    (None, Some(v)) => v,
                    _ => {
                        self.i64s(lo, hi, rows, &mut tmp.vals);
                        &tmp.vals
                    }
                };
                if self.delta {
                    delta_binary_packed(out, vals);
                } else {
                    vals.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
                }
                self.stats_of(vals)
            }
            _ => {
                let w = self.width;
                each(&mut |i| out.extend_from_slice(&self.values[(self.offset + i) * w..(self.offset + i + 1) * w]));
                None
            }
        })
    }

    fn is_plain_i64(&self) -> bool {
        self.physical == INT64 && self.converted.is_none() && self.dict.is_none()
    }

    fn stats_of(&self, vals: &[i64]) -> Option<(i64, i64)> {
        if !(self.stats && self.is_plain_i64()) || vals.is_empty() {
            return None;
        }
        Some(min_max(bytemuck_i64(vals)))
    }

    /// min and max of a required column's rows lo..hi, read in place.
    fn raw_stats(&self, lo: usize, hi: usize) -> Option<(i64, i64)> {
        if !(self.stats && self.is_plain_i64()) || lo == hi {
            return None;
        }
        let bytes = &self.values[(self.offset + lo) * 8..(self.offset + hi) * 8];
        Some(min_max(bytes))
    }

    /// Bounds of a dictionary column of integers: the dictionary's own min and max.
    fn dict_stats(&self) -> Option<(i64, i64)> {
        let d = self.dict.as_ref()?;
        if !self.stats || self.physical != INT64 || self.converted.is_some() || d.count == 0 {
            return None;
        }
        Some(min_max(d.plain))
    }

    /// A required PLAIN column's rows lo..hi: the page body as it lies in the buffer.
    fn raw_page(&self, lo: usize, hi: usize) -> Option<&[u8]> {
        let plain = self.dict.is_none() && !self.delta && self.physical != BOOLEAN && self.physical != BYTE_ARRAY;
        (plain && self.validity.is_none()).then(|| &self.values[(self.offset + lo) * self.width..(self.offset + hi) * self.width])
    }
}


/// Buffers reused from page to page and column to column (a fresh large buffer costs a page
/// fault per 4 KiB on first touch).
#[derive(Default)]
pub struct Temp {
    body: Vec<u8>,
    levels: Vec<u8>,
    rows: Vec<usize>,
    idx: Vec<u32>,
    vals: Vec<i64>,
    packed: Vec<u8>,
}

/// Where a column chunk went, for the footer.
#[derive(Default)]
struct ChunkMeta {
    start: u64,
    dict_offset: Option<u64>,
    data_offset: u64,
    values: i64,
    uncompressed: i64,
    compressed: i64,
    encodings: Vec<i32>,
    min_max: Option<(i64, i64)>,
    nulls: i64,
}

struct Out<W: Write> {
    w: W,
    pos: u64,
}

impl<W: Write> Out<W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.w.write_all(b)?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// One page: header then the LZ4_RAW body. Returns (uncompressed, compressed) sizes with headers.
    fn page(&mut self, body: &[u8], packed: &mut Vec<u8>, header: impl Fn(&mut Thrift, i32, i32)) -> std::io::Result<(i64, i64)> {
        let need = lz4_flex::block::get_maximum_output_size(body.len());
        if packed.len() < need {
            packed.resize(need, 0);
        }
        let n = lz4_flex::block::compress_into(body, packed).map_err(std::io::Error::other)?;
        let mut t = Thrift::default();
        header(&mut t, body.len() as i32, n as i32);
        self.put(&t.buf)?;
        self.put(&packed[..n])?;
        Ok(((t.buf.len() + body.len()) as i64, (t.buf.len() + n) as i64))
    }
}

fn write_chunk<W: Write>(out: &mut Out<W>, c: &Column, lo: usize, hi: usize, tmp: &mut Temp) -> std::io::Result<ChunkMeta> {
    let mut m = chunk_start(out, c, tmp)?;
    chunk_pages(out, c, lo, hi, &mut m, tmp)?;
    Ok(m)
}

/// A column chunk's start: its dictionary page, if any.
fn chunk_start<W: Write>(out: &mut Out<W>, c: &Column, tmp: &mut Temp) -> std::io::Result<ChunkMeta> {
    let mut m = ChunkMeta {
        start: out.pos,
        dict_offset: None,
        data_offset: 0,
        values: 0,
        uncompressed: 0,
        compressed: 0,
        encodings: vec![RLE],
        min_max: None,
        nulls: 0,
    };
    if let Some(d) = &c.dict {
        m.min_max = c.dict_stats();
        m.dict_offset = Some(out.pos);
        let (u, z) = out.page(d.plain, &mut tmp.packed, |t, u, z| {
            t.i32(1, DICTIONARY_PAGE);
            t.i32(2, u);
            t.i32(3, z);
            t.begin(Some(7));
            t.i32(1, d.count as i32);
            t.i32(2, PLAIN);
            t.end();
            t.buf.push(0);
        })?;
        m.uncompressed += u;
        m.compressed += z;
        m.encodings.extend([PLAIN, RLE_DICTIONARY]);
    } else {
        m.encodings.push(if c.delta { DELTA_BINARY_PACKED } else { PLAIN });
    }
    m.data_offset = out.pos;
    Ok(m)
}

/// Rows lo..hi of a column as data pages of at most PAGE_ROWS rows, appended to its chunk.
fn chunk_pages<W: Write>(out: &mut Out<W>, c: &Column, lo: usize, hi: usize, m: &mut ChunkMeta, tmp: &mut Temp) -> std::io::Result<()> {
    let encoding = if c.dict.is_some() { RLE_DICTIONARY } else if c.delta { DELTA_BINARY_PACKED } else { PLAIN };
    m.values += (hi - lo) as i64;
    let mut body = std::mem::take(&mut tmp.body);
    let (mut levels, mut rows) = (std::mem::take(&mut tmp.levels), std::mem::take(&mut tmp.rows));
    let mut s = lo;
    while s < hi {
        let e = (s + PAGE_ROWS).min(hi);
        body.clear();
        let mut some_null = false;
        if let Some(bitmap) = c.validity {
            rows.clear();
            valid_rows(bitmap, c.offset, s, e, &mut rows);
            m.nulls += (e - s - rows.len()) as i64;
            some_null = rows.len() < e - s;
            levels.clear();
            definition_levels(&mut levels, bitmap, c.offset + s, e - s);
            body.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            body.extend_from_slice(&levels);
        }
        let page_body: &[u8] = match c.raw_page(s, e) {
            Some(raw) => {
                m.min_max = merge(m.min_max, c.raw_stats(s, e));
                raw
            }
            None => {
                let mm = c.encode_values(&mut body, s, e, some_null.then_some(&rows[..]), tmp)?;
                m.min_max = merge(m.min_max, mm);
                &body
            }
        };
        let rows_in_page = (e - s) as i32;
        let (u, z) = out.page(page_body, &mut tmp.packed, |t, u, z| {
            t.i32(1, DATA_PAGE);
            t.i32(2, u);
            t.i32(3, z);
            t.begin(Some(5));
            t.i32(1, rows_in_page);
            t.i32(2, encoding);
            t.i32(3, RLE);
            t.i32(4, RLE);
            t.end();
            t.buf.push(0);
        })?;
        m.uncompressed += u;
        m.compressed += z;
        s = e;
    }
    (tmp.body, tmp.levels, tmp.rows) = (body, levels, rows);
    Ok(())
}

fn column_meta(t: &mut Thrift, c: &Column, m: &ChunkMeta) {
    t.begin(None); // ColumnChunk
    t.i64(2, m.start as i64);
    t.begin(Some(3)); // ColumnMetaData
    t.i32(1, c.physical);
    t.list(2, T_I32, m.encodings.len());
    for &e in &m.encodings {
        t.elem_i32(e);
    }
    t.list(3, T_BINARY, 1);
    t.elem_binary(c.name.as_bytes());
    t.i32(4, LZ4_RAW);
    t.i64(5, m.values);
    t.i64(6, m.uncompressed);
    t.i64(7, m.compressed);
    t.i64(9, m.data_offset as i64);
    if let Some(d) = m.dict_offset {
        t.i64(11, d as i64);
    }
    if c.stats || c.validity.is_some() {
        t.begin(Some(12)); // Statistics
        if let Some((lo, hi)) = m.min_max {
            t.binary(1, &hi.to_le_bytes());
            t.binary(2, &lo.to_le_bytes());
        }
        t.i64(3, m.nulls);
        if let Some((lo, hi)) = m.min_max {
            t.binary(5, &hi.to_le_bytes());
            t.binary(6, &lo.to_le_bytes());
        }
        t.end();
    }
    t.end();
    t.end();
}

fn footer(columns: &[Column], groups: &[(usize, Vec<ChunkMeta>)], rows: usize) -> Vec<u8> {
    let mut t = Thrift::default();
    t.i32(1, 1);
    t.list(2, T_STRUCT, columns.len() + 1);
    t.begin(None);
    t.binary(4, b"schema");
    t.i32(5, columns.len() as i32);
    t.end();
    for c in columns {
        t.begin(None);
        t.i32(1, c.physical);
        t.i32(3, if c.validity.is_some() { 1 } else { 0 });
        t.binary(4, c.name.as_bytes());
        if let Some(ct) = c.converted {
            t.i32(6, ct);
        }
        t.end();
    }
    t.i64(3, rows as i64);
    t.list(4, T_STRUCT, groups.len());
    for (n, metas) in groups {
        t.begin(None);
        t.list(1, T_STRUCT, metas.len());
        for (c, m) in columns.iter().zip(metas) {
            column_meta(&mut t, c, m);
        }
        t.i64(2, metas.iter().map(|m| m.uncompressed).sum());
        t.i64(3, *n as i64);
        t.end();
    }
    t.binary(6, b"oslens");
    t.list(7, T_STRUCT, columns.len());
    for _ in columns {
        t.begin(None); // ColumnOrder: TYPE_ORDER
        t.begin(Some(1));
        t.end();
        t.end();
    }
    t.buf.push(0);
    t.buf
}

/// A column's pages of the open row group held in memory up to this many bytes; past it they
/// go to the writer's spill file (Spill), so a group of ROW_GROUP rows of every streamed table
/// is not held in memory (docs/trace-schema.md, "Import memory").
const SPILL_AT: usize = 256 << 10;

/// An unnamed temporary file (O_TMPFILE, never seen in a folder) holding the open row group's
/// pages column by column, in stretches: (column, offset, length) in the order written.
struct Spill {
    f: std::fs::File,
    len: u64,
    parts: Vec<(usize, u64, usize)>,
}

impl Spill {
    /// A spill file in `dir`, None where its file system has no O_TMPFILE (pages then stay in
    /// memory).
    fn open(dir: &std::path::Path) -> Option<Spill> {
        let f = crate::anon_file::anonymous_file(dir, None).ok()?;
        Some(Spill { f, len: 0, parts: Vec::new() })
    }

    fn put(&mut self, col: usize, b: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.f.write_all_at(b, self.len)?;
        self.parts.push((col, self.len, b.len()));
        self.len += b.len() as u64;
        Ok(())
    }

    /// Column `col`'s stretches copied to `out` in order (`buf`: scratch).
    fn copy<W: Write>(&self, col: usize, out: &mut Out<W>, buf: &mut Vec<u8>) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        for &(_, at, n) in self.parts.iter().filter(|p| p.0 == col) {
            buf.resize(n, 0);
            self.f.read_exact_at(buf, at)?;
            out.put(buf)?;
        }
        Ok(())
    }

    /// Emptied for the next row group.
    fn clear(&mut self) -> std::io::Result<()> {
        self.parts.clear();
        self.len = 0;
        self.f.set_len(0)
    }
}

/// A Parquet file written row group by row group: each group's columns may come from buffers
/// that are refilled for the next (the footer keeps only where each column chunk went). Every
/// group must describe the same columns (names, types, nullability) in the same order.
pub struct Writer<W: Write> {
    out: Out<std::io::BufWriter<W>>,
    groups: Vec<(usize, Vec<ChunkMeta>)>,
    tmp: Temp,
    rows: usize,
    /// The row group being written page by page: each column's chunk so far (offsets from the
    /// start of the chunk; its bytes past SPILL_AT in `spill`, the rest in its buffer), and its
    /// rows.
    open: Vec<(Out<Vec<u8>>, ChunkMeta)>,
    open_rows: usize,
    /// (None: not opened yet, or O_TMPFILE unsupported)
    spill: Option<Spill>,
    spill_tried: bool,
    /// where the spill goes: beside the file written (new_file), else $TMPDIR
    spill_dir: Option<std::path::PathBuf>,
}

impl Writer<std::fs::File> {
    /// A writer to a file, whose open row groups spill beside it.
    pub fn new_file(f: std::fs::File) -> std::io::Result<Self> {
        let dir = crate::anon_file::folder_of(&f);
        let mut w = Writer::new(f)?;
        w.spill_dir = dir;
        Ok(w)
    }
}

impl<W: Write> Writer<W> {
    pub fn new(w: W) -> std::io::Result<Self> {
        let mut out = Out { w: std::io::BufWriter::with_capacity(1 << 20, w), pos: 0 };
        out.put(b"PAR1")?;
        Ok(Writer { out, groups: Vec::new(), tmp: Temp::default(), rows: 0, open: Vec::new(), open_rows: 0, spill: None, spill_tried: false, spill_dir: None })
    }

    /// What the file is written to (the sync table's spill is made beside it).
    pub fn get_ref(&self) -> &W {
        self.out.w.get_ref()
    }

    /// Appends rows lo..hi of `columns` to the open row group (opening one if none is), as
    /// data pages of at most PAGE_ROWS rows. Each column's pages are kept in memory,
    /// compressed, until end_group writes the column chunks one after another: the rows'
    /// buffers can be refilled for the next pages. A group written in calls of PAGE_ROWS rows
    /// has the pages `group` gives it.
    pub fn pages(&mut self, columns: &[Column], lo: usize, hi: usize) -> std::io::Result<()> {
        if self.open_rows == 0 {
            let mut open = std::mem::take(&mut self.open);
            open.resize_with(columns.len(), || (Out { w: Vec::new(), pos: 0 }, ChunkMeta::default()));
            for ((buf, m), c) in open.iter_mut().zip(columns) {
                buf.w.clear();
                buf.pos = 0;
                *m = chunk_start(buf, c, &mut self.tmp)?;
            }
            self.open = open;
        }
        for ((col, (buf, m)), c) in self.open.iter_mut().enumerate().zip(columns) {
            chunk_pages(buf, c, lo, hi, m, &mut self.tmp)?;
            if buf.w.len() >= SPILL_AT {
                if !self.spill_tried {
                    self.spill_tried = true;
                    self.spill = Spill::open(self.spill_dir.as_deref().unwrap_or(&std::env::temp_dir()));
                }
                if let Some(sp) = self.spill.as_mut() {
                    sp.put(col, &buf.w)?;
                    buf.w.clear();
                }
            }
        }
        self.open_rows += hi - lo;
        Ok(())
    }

    /// Writes the open row group (if any rows were added) to the file.
    pub fn end_group(&mut self) -> std::io::Result<()> {
        if self.open_rows == 0 {
            return Ok(());
        }
        let mut metas = Vec::with_capacity(self.open.len());
        let mut scratch = std::mem::take(&mut self.tmp.packed);
        for (col, (buf, m)) in self.open.iter_mut().enumerate() {
            let base = self.out.pos;
            if let Some(sp) = &self.spill {
                sp.copy(col, &mut self.out, &mut scratch)?;
            }
            self.out.put(&buf.w)?;
            let mut m = std::mem::take(m);
            m.start += base;
            m.data_offset += base;
            m.dict_offset = m.dict_offset.map(|d| d + base);
            metas.push(m);
        }
        self.tmp.packed = scratch;
        if let Some(sp) = self.spill.as_mut() {
            sp.clear()?;
        }
        self.groups.push((self.open_rows, metas));
        self.rows += self.open_rows;
        self.open_rows = 0;
        Ok(())
    }

    /// Writes rows lo..hi of `columns` as one row group.
    pub fn group(&mut self, columns: &[Column], lo: usize, hi: usize) -> std::io::Result<()> {
        let metas = columns.iter().map(|c| write_chunk(&mut self.out, c, lo, hi, &mut self.tmp)).collect::<std::io::Result<Vec<_>>>()?;
        self.groups.push((hi - lo, metas));
        self.rows += hi - lo;
        Ok(())
    }

    /// The footer (the schema from `columns`) and the closing magic.
    pub fn finish(mut self, columns: &[Column]) -> std::io::Result<()> {
        self.end_group()?;
        let f = footer(columns, &self.groups, self.rows);
        self.out.put(&f)?;
        self.out.put(&(f.len() as u32).to_le_bytes())?;
        self.out.put(b"PAR1")?;
        self.out.w.flush()
    }
}

/// Writes `rows` rows of `columns` to `w` in row groups of `group_rows`.
pub fn write<W: Write>(w: W, columns: &[Column], rows: usize, group_rows: usize) -> std::io::Result<()> {
    let mut wr = Writer::new(w)?;
    let mut lo = 0;
    while lo < rows {
        let hi = (lo + group_rows.max(1)).min(rows);
        wr.group(columns, lo, hi)?;
        lo = hi;
    }
    wr.finish(columns)
}


#[cfg(test)]
mod tests {
    use super::*;

    fn int64<'a>(name: &str, v: &'a [u8], delta: bool) -> Column<'a> {
        Column { name: name.into(), physical: INT64, converted: None, validity: None, offset: 0, values: v, width: 8, data: None, dict: None, delta, stats: true }
    }

    /// A row group written a page at a time, its columns' pages past SPILL_AT going through the
    /// spill file, is the file written whole, byte for byte (two groups: the spill emptied).
    #[test]
    fn pages_spilled_to_the_temporary_file_give_the_bytes_of_the_whole_table() {
        let n = 5 * PAGE_ROWS + 123;
        let noisy: Vec<i64> = (0..n as i64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15u64 as i64)).collect();
        let steps: Vec<i64> = (0..n as i64).map(|i| 1_000_000 + 3 * i + i % 7).collect();
        let (a, b): (Vec<u8>, Vec<u8>) = (noisy.iter().flat_map(|v| v.to_le_bytes()).collect(), steps.iter().flat_map(|v| v.to_le_bytes()).collect());
        let cols = [int64("noisy", &a, false), int64("steps", &b, true)];
        let group = 3 * PAGE_ROWS;
        let mut whole = Vec::new();
        write(&mut whole, &cols, n, group).unwrap();
        let mut paged = Vec::new();
        let mut w = Writer::new(&mut paged).unwrap();
        let mut lo = 0;
        while lo < n {
            let hi = (lo + PAGE_ROWS).min(n);
            w.pages(&cols, lo, hi).unwrap();
            if hi % group == 0 || hi == n {
                assert!(w.spill.as_ref().is_some_and(|s| s.len > 0), "pages spilled at {hi}");
                w.end_group().unwrap();
            }
            lo = hi;
        }
        w.finish(&cols).unwrap();
        assert_eq!(whole.len(), paged.len());
        assert!(whole == paged);
    }
}
