//! Python buffers in and out: a buffer checked for the size and access the native code needs,
//! and a natively built column handed back through the buffer protocol.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pub fn buffer_ptr(buf: &PyBuffer<u8>, bytes: usize, what: &str, writable: bool) -> PyResult<usize> {
    if !buf.is_c_contiguous() || buf.len_bytes() != bytes || (writable && buf.readonly()) {
        return Err(PyValueError::new_err(format!(
            "split_records: {what} must be a {}contiguous buffer of {bytes} bytes",
            if writable { "writable " } else { "" }
        )));
    }
    Ok(buf.buf_ptr() as usize)
}


/// A column built natively, handed to Python through the buffer protocol (read-only; numpy
/// views it with frombuffer, no copy).
#[pyclass(frozen, module = "oslens._native")]
pub struct ColumnBuffer {
    pub data: Col,
}

pub enum Col {
    I64(Vec<i64>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    U8(Vec<u8>),
}

impl Col {
    fn bytes(&self) -> &[u8] {
        fn b<T>(v: &[T]) -> &[u8] {
            // SAFETY: plain integers: any value is its bytes; the slice covers the vector.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match self {
            Col::I64(v) => b(v),
            Col::I32(v) => b(v),
            Col::U64(v) => b(v),
            Col::U8(v) => b(v),
        }
    }
}

#[pymethods]
impl ColumnBuffer {
    /// # Safety
    /// Called by Python with a valid Py_buffer to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        // SAFETY: the column belongs to this frozen object.
        unsafe { export_bytes(slf.as_any(), slf.get().data.bytes(), view, flags) }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.bytes().len()
    }
}

/// Fills a Py_buffer with `data`, which `owner` (a frozen object) owns.
///
/// # Safety
/// `view` is a valid Py_buffer to fill, and `data` lives as long as `owner`.
pub unsafe fn export_bytes(owner: &Bound<'_, PyAny>, data: &[u8], view: *mut pyo3::ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
    // SAFETY: the buffer points into memory `owner` owns and never changes; PyBuffer_FillInfo
    // takes a reference to `owner`, which keeps it alive while the view exists.
    let rc = unsafe {
        pyo3::ffi::PyBuffer_FillInfo(view, owner.as_ptr(), data.as_ptr() as *mut std::os::raw::c_void, data.len() as pyo3::ffi::Py_ssize_t, 1, flags)
    };
    if rc != 0 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}
