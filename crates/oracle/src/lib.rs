//! oslens_testing._oracle: what the tests' numpy table builders (python/oslens_testing/store/)
//! need from native code, apart from the product extension oslens._native so that the installed
//! package carries no test code. `make native` builds it into python/oslens_testing/, which the
//! wheel leaves out. The buffer checks and the name map are the product's own files (compiled
//! here too): they read the inputs, they are not what the oracle checks.

#[path = "../../native/src/names.rs"]
mod names;
#[allow(dead_code)] // ColumnBuffer: the product's
#[path = "../../native/src/py_buffers.rs"]
mod py_buffers;
mod py_oracle;

use pyo3::prelude::*;

#[pymodule]
fn _oracle(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(py_oracle::split_records, m)?)?;
    m.add_function(wrap_pyfunction!(py_oracle::pair_nested, m)?)?;
    m.add_function(wrap_pyfunction!(py_oracle::pair_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(py_oracle::lock_requests, m)?)?;
    m.add_function(wrap_pyfunction!(py_oracle::event_offsets, m)?)?;
    Ok(())
}
