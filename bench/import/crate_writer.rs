//! write_parquet_crate: the store's tables written through Apache Arrow's `parquet` crate (the
//! `parquet-crate` feature, off by default), with the encodings, statistics, page and row-group
//! sizes of the hand-written writer (parquet/), to measure one against the other
//! (bench/import/compression.py). Columns come from pyarrow through the Arrow C data interface,
//! without copies.

use std::fs::File;
use std::sync::Arc;

use arrow_array::ffi::{from_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{make_array, ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use parquet::arrow::arrow_writer::{ArrowWriter, ArrowWriterOptions};
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One column exported by pyarrow's Array._export_to_c into the structs at these addresses.
fn import_column(array_addr: usize, schema_addr: usize) -> PyResult<ArrayRef> {
    // SAFETY: Python exported a live array into these structs and hands them over; from_raw
    // moves them out (their release callbacks now run when the Rust array is dropped).
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(array_addr as *mut FFI_ArrowArray);
        let schema = FFI_ArrowSchema::from_raw(schema_addr as *mut FFI_ArrowSchema);
        from_ffi(array, &schema)
    };
    data.map(make_array).map_err(|e| PyValueError::new_err(format!("write_parquet_crate: {e}")))
}

fn properties(names: &[String], dictionary: &[String], delta: &[String], stats: &[String], group_rows: usize) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::LZ4_RAW)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_max_row_group_row_count(Some(group_rows))
        .set_data_page_row_count_limit(1 << 20)
        .set_data_page_size_limit(1 << 30)
        .set_dictionary_page_size_limit(1 << 30)
        .set_offset_index_disabled(true);
    for name in names {
        let path = ColumnPath::from(name.as_str());
        if dictionary.contains(name) {
            b = b.set_column_dictionary_enabled(path.clone(), true);
        } else {
            let encoding = if delta.contains(name) { Encoding::DELTA_BINARY_PACKED } else { Encoding::PLAIN };
            b = b.set_column_encoding(path.clone(), encoding);
        }
        if stats.contains(name) {
            b = b.set_column_statistics_enabled(path, EnabledStatistics::Chunk);
        }
    }
    b.build()
}

/// write_parquet_crate(path, columns, group_rows, dictionary, delta, stats): `columns` is a list
/// of (name, nullable, ArrowArray address, ArrowSchema address); the name lists say which
/// columns are dictionary-encoded, DELTA_BINARY_PACKED, and given min/max statistics.
#[pyfunction]
pub fn write_parquet_crate(
    py: Python<'_>,
    path: &str,
    columns: Vec<(String, bool, usize, usize)>,
    group_rows: usize,
    dictionary: Vec<String>,
    delta: Vec<String>,
    stats: Vec<String>,
) -> PyResult<()> {
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    for (name, nullable, array_addr, schema_addr) in &columns {
        let array = import_column(*array_addr, *schema_addr)?;
        fields.push(Field::new(name, array.data_type().clone(), *nullable));
        arrays.push(array);
    }
    let names: Vec<String> = columns.iter().map(|c| c.0.clone()).collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let props = properties(&names, &dictionary, &delta, &stats, group_rows);
    py.allow_threads(|| -> Result<(), parquet::errors::ParquetError> {
        let options = ArrowWriterOptions::new().with_properties(props).with_skip_arrow_metadata(true);
        let mut w = ArrowWriter::try_new_with_options(File::create(path)?, schema, options)?;
        w.write(&batch)?;
        w.close()?;
        Ok(())
    })
    .map_err(|e| PyValueError::new_err(format!("write_parquet_crate: {path}: {e}")))
}
