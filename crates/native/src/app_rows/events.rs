//! app_events, one row per record, written a page at a time from buffers of one page's rows
//! that are refilled for the next, never laid out whole in memory: every fresh 4 KiB page costs
//! a page fault on first touch (docs/trace-schema.md, "Import memory").

use super::columns::{bytes_of, named, plain_col as col, Dicts};
use super::flags::{decide, Flags, PassErr, N_INSTRUMENT, N_PAYLOAD};
use crate::parquet::{self, Column, Dictionary};
use oslens_format::kinds;
use oslens_format::record::Record;
use std::collections::HashMap;

/// The rows of app_events of one row group: buffers of the group's size, written by index
/// and reused for every group.
#[derive(Default)]
struct Group {
    len: usize,
    cap: usize,
    ts: Vec<i64>,
    g: Vec<i32>,
    cpu: Vec<u16>,
    cpu_top: u16,
    name: Vec<i32>,
    name_valid: Vec<u8>,
    name_nulls: usize,
    kind: Vec<u8>,
    value: Vec<i64>,
    offsets: Vec<u64>,
    data: Vec<u8>,
    pay_valid: Vec<u8>,
    pay_nulls: usize,
    id: Vec<u32>,
    cpu_wide: Vec<i64>,
    /// compensated times (empty: no compensation)
    ts_comp: Vec<i64>,
}

impl Group {
    fn new(rows: usize) -> Group {
        let mut g = Group {
            ts: vec![0; rows],
            g: vec![0; rows],
            cpu: vec![0; rows],
            name: vec![0; rows],
            name_valid: vec![0; rows.div_ceil(64) * 8],
            kind: vec![0; rows],
            value: vec![0; rows],
            offsets: vec![0; rows + 1],
            data: Vec::with_capacity(rows),
            pay_valid: vec![0; rows.div_ceil(64) * 8],
            id: vec![0; rows],
            ..Default::default()
        };
        g.clear();
        g
    }

    /// Stores the validity bits of the word holding `row` (bits past the rows written are 0).
    #[inline(always)]
    fn store_bits(&mut self, row: usize, name: &mut u64, pay: &mut u64) {
        let at = (row >> 6) * 8;
        self.name_valid[at..at + 8].copy_from_slice(&name.to_le_bytes());
        self.pay_valid[at..at + 8].copy_from_slice(&pay.to_le_bytes());
        (*name, *pay) = (0, 0);
    }

    fn clear(&mut self) {
        self.len = 0;
        self.name_nulls = 0;
        self.pay_nulls = 0;
        self.data.clear();
    }

    fn len(&self) -> usize {
        self.len
    }

    fn full(&self) -> bool {
        self.len == self.cap
    }
}

/// app_events' columns over one group's buffers, in oslens.store.schema's order, as oslens.store.native_parquet describes the
/// table app_tables.build makes (dictionary pid, tid, cpu, instrument and kind; ts delta-encoded;
/// min/max statistics for ts, pid, tid and cpu).
fn columns<'a>(grp: &'a Group, d: &'a Dicts, nullable: [bool; 2], cpu_dict: &'a [u8], comp: bool) -> Vec<Column<'a>> {
    let n = grp.len;
    let dict = |(count, plain): (usize, &'a [u8])| Some(Dictionary { count, plain });
    let cpu = if grp.cpu_top < 1 << 15 {
        let top = grp.cpu_top as usize;
        Column { dict: Some(Dictionary { count: top + 1, plain: &cpu_dict[..(top + 1) * 8] }), stats: true, ..col(parquet::INT64, None, bytes_of(&grp.cpu[..n]), 2) }
    } else {
        Column { stats: true, ..col(parquet::INT64, None, bytes_of(&grp.cpu_wide), 8) }
    };
    let mut cols = vec![
        Column { delta: true, stats: true, ..col(parquet::INT64, None, bytes_of(&grp.ts[..n]), 8) },
        Column { dict: dict(d.pid), stats: true, ..col(parquet::INT64, None, bytes_of(&grp.g[..n]), 4) },
        Column { dict: dict(d.tid), stats: true, ..col(parquet::INT64, None, bytes_of(&grp.g[..n]), 4) },
        cpu,
        Column {
            dict: dict(d.instrument),
            validity: nullable[0].then_some(&grp.name_valid[..n.div_ceil(8)]),
            ..col(parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(&grp.name[..n]), 4)
        },
        Column { dict: dict(d.kind), ..col(parquet::BYTE_ARRAY, Some(parquet::UTF8), &grp.kind[..n], 1) },
        col(parquet::INT64, None, bytes_of(&grp.value[..n]), 8),
        Column {
            data: Some(&grp.data),
            validity: nullable[1].then_some(&grp.pay_valid[..n.div_ceil(8)]),
            ..col(parquet::BYTE_ARRAY, None, bytes_of(&grp.offsets[..n + 1]), 8)
        },
        col(parquet::INT32, Some(parquet::UINT_32), bytes_of(&grp.id[..n]), 4),
    ];
    if comp {
        // oslens.store.compensation's column, appended after the table's own
        cols.push(Column { delta: true, stats: true, ..col(parquet::INT64, None, bytes_of(&grp.ts_comp[..n]), 8) });
    }
    cols
}

/// The app_events writer: the page being filled, where the row group stands, and the file.
pub struct Events<'a> {
    dicts: &'a Dicts<'a>,
    grp: Group,
    writer: Option<parquet::Writer<std::fs::File>>,
    group_rows: usize,
    in_group: usize,
    /// the nullability of the last page written (instrument, payload): the footer's
    last_cols: Option<[bool; 2]>,
    /// validity bits of the current 64 rows, stored a word at a time (a byte's
    /// read-modify-write for each row made each row wait on the previous one's store)
    name_bits: u64,
    pay_bits: u64,
    /// the CPU column's dictionary: 0..=the largest CPU number of all records (as
    /// app_tables._small_ints makes it)
    cpu_dict: Vec<i64>,
    comp: bool,
}

impl<'a> Events<'a> {
    /// `total` records at most, in row groups of `group_rows`; with `comp` a compensated column.
    pub fn new(dicts: &'a Dicts<'a>, file: Option<std::fs::File>, group_rows: usize, total: usize, cpu_top: u16, comp: bool) -> std::io::Result<Events<'a>> {
        let mut grp = Group::new(parquet::PAGE_ROWS.min(group_rows).min(total).max(1));
        grp.cpu_top = cpu_top;
        if comp {
            grp.ts_comp = vec![0; grp.ts.len()];
        }
        grp.cap = grp.ts.len().min(group_rows);
        let writer = file.map(parquet::Writer::new_file).transpose()?;
        Ok(Events { dicts, grp, writer, group_rows, in_group: 0, last_cols: None, name_bits: 0, pay_bits: 0, cpu_dict: (0..1i64 << 15).collect(), comp })
    }

    /// Adds a record's row (`payload`: the chunk's long event payloads and the record's index),
    /// writing the page when it is full.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn push(&mut self, r: &Record, (ts, ts_comp): (i64, i64), value: i64, g: i32, name: i32, payload: (&HashMap<usize, Vec<u8>>, usize), flags: &mut Flags) -> Result<(), PassErr> {
        let grp = &mut self.grp;
        let row = grp.len;
        grp.ts[row] = ts;
        grp.g[row] = g;
        grp.cpu[row] = r.cpu;
        let bit = row & 63;
        self.name_bits |= ((name >= 0) as u64) << bit;
        self.pay_bits |= ((r.kind == kinds::EVENT) as u64) << bit;
        if bit == 63 {
            grp.store_bits(row, &mut self.name_bits, &mut self.pay_bits);
        }
        grp.name_nulls += (name < 0) as usize;
        grp.name[row] = name.max(0);
        grp.kind[row] = r.kind;
        grp.value[row] = value;
        grp.id[row] = r.id;
        if r.kind == kinds::EVENT {
            let (len, first) = (r.a, r.b.to_le_bytes());
            if len <= 8 {
                grp.data.extend_from_slice(&first[..len as usize]);
            } else {
                let p: &[u8] = payload.0.get(&payload.1).map(|v| &v[..]).unwrap_or(&first);
                grp.data.extend_from_slice(&p[..p.len().min(len.min(usize::MAX as u64) as usize)]);
            }
        } else {
            grp.pay_nulls += 1;
        }
        grp.offsets[row + 1] = grp.data.len() as u64;
        if self.comp {
            grp.ts_comp[row] = ts_comp;
        }
        grp.len = row + 1;
        if grp.full() {
            self.flush_page(flags)?;
        }
        Ok(())
    }

    /// Writes the page's rows (their validity bits stored first).
    fn flush_page(&mut self, flags: &mut Flags) -> Result<(), PassErr> {
        let grp = &mut self.grp;
        if grp.len & 63 != 0 {
            grp.store_bits(grp.len - 1, &mut self.name_bits, &mut self.pay_bits);
        }
        let n = [decide(flags, N_INSTRUMENT, grp.name_nulls)?, decide(flags, N_PAYLOAD, grp.pay_nulls)?];
        if let Some(w) = self.writer.as_mut() {
            if grp.cpu_top >= 1 << 15 {
                grp.cpu_wide.clear();
                grp.cpu_wide.extend(grp.cpu[..grp.len].iter().map(|&c| c as i64));
            }
            let cols = columns(grp, self.dicts, n, bytes_of(&self.cpu_dict), self.comp);
            w.pages(&cols, 0, grp.len())?;
            self.in_group += grp.len();
            if self.in_group == self.group_rows {
                w.end_group()?;
                self.in_group = 0;
            }
        }
        self.last_cols = Some(n);
        grp.clear();
        // the next page: PAGE_ROWS rows, or what the row group has room for
        grp.cap = grp.ts.len().min(self.group_rows - self.in_group);
        Ok(())
    }

    /// Writes the last page and the file's footer.
    pub fn finish(mut self, flags: &mut Flags) -> Result<(), PassErr> {
        if self.grp.len() > 0 {
            self.flush_page(flags)?;
        }
        if let Some(mut w) = self.writer.take() {
            let n = self.last_cols.unwrap_or([false, false]);
            w.end_group()?;
            w.finish(&named("app_events", columns(&self.grp, self.dicts, n, bytes_of(&self.cpu_dict), self.comp), self.dicts)?)?;
        }
        Ok(())
    }
}
