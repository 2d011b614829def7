//! Parquet files written from Python: column specs (dicts of buffers) checked and handed to
//! the native writer (parquet/).

use crate::parquet;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One column for write_parquet, as Python describes it (a dict): name, physical (parquet type
/// number), converted (converted type or None), values (buffer), width (bytes per value: 8, 4;
/// dictionary indices 1-8; byte-array offsets 4 or 8; 0 for booleans, one bit each), offset
/// (the Arrow array offset), validity (Arrow validity bitmap, or None when no value is null),
/// data (byte-array data), dict_count and dict_plain (dictionary values PLAIN-encoded), delta
/// (DELTA_BINARY_PACKED) and stats (min/max statistics).
struct ColumnSpec {
    name: String,
    physical: i32,
    converted: Option<i32>,
    values: PyBuffer<u8>,
    width: usize,
    offset: usize,
    validity: Option<PyBuffer<u8>>,
    data: Option<PyBuffer<u8>>,
    dict: Option<(usize, PyBuffer<u8>)>,
    delta: bool,
    stats: bool,
}

fn column_spec(d: &Bound<'_, PyDict>) -> PyResult<ColumnSpec> {
    let item = |k: &str| d.get_item(k)?.ok_or_else(|| PyValueError::new_err(format!("write_parquet: column lacks {k}")));
    let opt_buf = |k: &str| -> PyResult<Option<PyBuffer<u8>>> {
        match d.get_item(k)? {
            Some(v) if !v.is_none() => Ok(Some(PyBuffer::get(&v)?)),
            _ => Ok(None),
        }
    };
    let dict_count: Option<usize> = d.get_item("dict_count")?.map(|v| v.extract()).transpose()?;
    Ok(ColumnSpec {
        name: item("name")?.extract()?,
        physical: item("physical")?.extract()?,
        converted: d.get_item("converted")?.map(|v| v.extract()).transpose()?.flatten(),
        values: PyBuffer::get(&item("values")?)?,
        width: item("width")?.extract()?,
        offset: item("offset")?.extract()?,
        validity: opt_buf("validity")?,
        data: opt_buf("data")?,
        dict: match (dict_count, opt_buf("dict_plain")?) {
            (Some(n), Some(b)) => Some((n, b)),
            _ => None,
        },
        delta: item("delta")?.extract()?,
        stats: item("stats")?.extract()?,
    })
}

/// A read-only view of a contiguous buffer that Python keeps alive during the call.
fn view(b: &PyBuffer<u8>) -> PyResult<&'static [u8]> {
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err("write_parquet: buffers must be contiguous"));
    }
    // SAFETY: the PyBuffer holds the exporter for the whole call; the slice is not kept after it.
    Ok(unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) })
}

/// Checks that every row the writer will read lies inside the buffers (no panic later).
fn checked_column(s: &ColumnSpec, rows: usize) -> PyResult<parquet::Column<'static>> {
    let end = s.offset + rows;
    let values = view(&s.values)?;
    let bad = |what: &str| Err(PyValueError::new_err(format!("write_parquet: column {}: {what}", s.name)));
    let value_bytes = match (s.physical, &s.data) {
        (parquet::BOOLEAN, _) => end.div_ceil(8),
        (parquet::BYTE_ARRAY, Some(_)) if s.dict.is_none() => (end + 1) * s.width,
        _ => end * s.width,
    };
    if !matches!(s.width, 0 | 1 | 2 | 4 | 8) || values.len() < value_bytes {
        return bad("values too short");
    }
    let validity = s.validity.as_ref().map(view).transpose()?;
    if validity.is_some_and(|v| v.len() < end.div_ceil(8)) {
        return bad("validity too short");
    }
    let data = s.data.as_ref().map(view).transpose()?;
    if let Some(d) = data {
        let last = |i: usize| {
            let b = &values[i * s.width..(i + 1) * s.width];
            if s.width == 4 { u32::from_le_bytes(b.try_into().unwrap()) as usize } else { u64::from_le_bytes(b.try_into().unwrap()) as usize }
        };
        if s.width < 4 || last(end) > d.len() || (s.offset..end).any(|i| last(i) > last(i + 1)) {
            return bad("byte-array offsets out of order or past the data");
        }
    }
    let dict = match &s.dict {
        Some((n, b)) => Some(parquet::Dictionary { count: *n, plain: view(b)? }),
        None => None,
    };
    Ok(parquet::Column {
        name: s.name.clone(),
        physical: s.physical,
        converted: s.converted,
        validity,
        offset: s.offset,
        values,
        width: s.width,
        data,
        dict,
        delta: s.delta,
        stats: s.stats,
    })
}

/// write_parquet(path, rows, columns, group_rows): writes a Parquet file of `rows` rows from
/// column descriptions (see ColumnSpec) in row groups of `group_rows`.
#[pyfunction]
pub fn write_parquet(py: Python<'_>, path: &str, rows: usize, columns: Vec<Bound<'_, PyDict>>, group_rows: usize) -> PyResult<()> {
    let specs = columns.iter().map(column_spec).collect::<PyResult<Vec<_>>>()?;
    let cols = specs.iter().map(|s| checked_column(s, rows)).collect::<PyResult<Vec<_>>>()?;
    py.allow_threads(|| {
        let f = std::fs::File::create(path)?;
        parquet::write(f, &cols, rows, group_rows).inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })
    })
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => PyValueError::new_err(format!("write_parquet: {e}")),
        _ => PyOSError::new_err(format!("{path}: {e}")),
    })
}


fn io_err(path: &str, e: std::io::Error) -> PyErr {
    match e.kind() {
        std::io::ErrorKind::InvalidData => PyValueError::new_err(format!("ParquetStream: {e}")),
        _ => PyOSError::new_err(format!("{path}: {e}")),
    }
}

/// ParquetStream(path, group_rows): a Parquet file written from Python a page at a time, with
/// the pages, row groups and footer write_parquet gives the whole table (a table rewritten
/// batch by batch without holding it: oslens.store.symbols). Every call describes the same
/// columns (names, types, nullability).
#[pyclass(module = "oslens._native")]
pub struct ParquetStream {
    w: Option<parquet::Writer<std::fs::File>>,
    path: String,
    group_rows: usize,
    in_group: usize,
}

#[pymethods]
impl ParquetStream {
    #[new]
    fn new(path: String, group_rows: usize) -> PyResult<Self> {
        let w = std::fs::File::create(&path).and_then(parquet::Writer::new_file).map_err(|e| io_err(&path, e))?;
        Ok(ParquetStream { w: Some(w), path, group_rows: group_rows.max(1), in_group: 0 })
    }

    /// write(rows, columns, last=False) -> the rows written: rows 0..rows of `columns` (see
    /// write_parquet) as whole pages (PAGE_ROWS rows, or what the row group has room for); the
    /// rows after the last whole page are left to the next call, or written too with `last`.
    #[pyo3(signature = (rows, columns, last = false))]
    fn write(&mut self, py: Python<'_>, rows: usize, columns: Vec<Bound<'_, PyDict>>, last: bool) -> PyResult<usize> {
        let specs = columns.iter().map(column_spec).collect::<PyResult<Vec<_>>>()?;
        let cols = specs.iter().map(|s| checked_column(s, rows)).collect::<PyResult<Vec<_>>>()?;
        let (group_rows, mut in_group) = (self.group_rows, self.in_group);
        let w = self.w.as_mut().ok_or_else(|| PyValueError::new_err("ParquetStream: already finished"))?;
        let done = py.allow_threads(|| -> std::io::Result<usize> {
            let mut lo = 0;
            loop {
                let cap = parquet::PAGE_ROWS.min(group_rows - in_group);
                let n = cap.min(rows - lo);
                if n == 0 || (n < cap && !last) {
                    return Ok(lo);
                }
                w.pages(&cols, lo, lo + n)?;
                lo += n;
                in_group += n;
                if in_group == group_rows {
                    w.end_group()?;
                    in_group = 0;
                }
            }
        });
        self.in_group = in_group;
        done.map_err(|e| io_err(&self.path, e))
    }

    /// finish(columns): the open row group, and the footer with the schema of `columns` (their
    /// rows are not read: an empty slice of the table will do).
    fn finish(&mut self, py: Python<'_>, columns: Vec<Bound<'_, PyDict>>) -> PyResult<()> {
        let specs = columns.iter().map(column_spec).collect::<PyResult<Vec<_>>>()?;
        let cols = specs.iter().map(|s| checked_column(s, 0)).collect::<PyResult<Vec<_>>>()?;
        let w = self.w.take().ok_or_else(|| PyValueError::new_err("ParquetStream: already finished"))?;
        py.allow_threads(|| w.finish(&cols)).map_err(|e| io_err(&self.path, e))
    }
}
