//! The recorder exposed to Python programs (owned by auto-instrumentation).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
