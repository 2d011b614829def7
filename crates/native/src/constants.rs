//! The raw format's constants as attributes of `oslens._native`, so that Python names them from
//! crates/format instead of copying the numbers (docs/architecture.md).

use oslens_format::header::{offset, CLOCK_MONOTONIC_NS, CLOCK_TSC, SOURCE_APP_THREAD, SOURCE_KERNEL_CPU};
use oslens_format::{kernel, kinds};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;

/// A kind's name when it has one: kind_name falls back to a placeholder for unassigned values.
fn named_kinds() -> Vec<(&'static str, u8)> {
    let unassigned = kinds::kind_name(255);
    (1..=255u8).map(|k| (kinds::kind_name(k), k)).filter(|(n, _)| *n != unassigned).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let kinds_by_name = PyDict::new(py);
    for (name, k) in named_kinds() {
        kinds_by_name.set_item(name, k)?;
    }
    m.add("KINDS", kinds_by_name)?;
    let classes = PyDict::new(py);
    for (id, name) in kinds::NAME_CLASSES {
        classes.set_item(id, name)?;
    }
    m.add("NAME_CLASSES", classes)?;
    m.add("NAME_CLASS_OF_KIND", kinds::NAME_CLASS_OF_KIND.into_iter().collect::<BTreeMap<u8, u64>>())?;
    m.add("COUNTER_REASONS", kinds::COUNTER_REASONS.into_iter().collect::<BTreeMap<u64, &str>>())?;
    m.add("PAUSE_REASONS", kinds::PAUSE_REASONS.into_iter().collect::<BTreeMap<u64, &str>>())?;
    let kernel_classes = PyDict::new(py);
    kernel_classes.set_item("task", kernel::NAME_TASK)?;
    kernel_classes.set_item("exec", kernel::NAME_EXEC)?;
    kernel_classes.set_item("irq", kernel::NAME_IRQ)?;
    m.add("KERNEL_NAME_CLASSES", kernel_classes)?;
    let offsets = PyDict::new(py);
    offsets.set_item("ring_self_copies", offset::RING_SELF_COPIES)?;
    offsets.set_item("helper_cpu_ns", offset::HELPER_CPU_NS)?;
    offsets.set_item("helper_copies", offset::HELPER_COPIES)?;
    m.add("HEADER_OFFSETS", offsets)?;
    m.add("CLOCK_TSC", CLOCK_TSC)?;
    m.add("CLOCK_MONOTONIC_NS", CLOCK_MONOTONIC_NS)?;
    m.add("SOURCE_APP_THREAD", SOURCE_APP_THREAD)?;
    m.add("SOURCE_KERNEL_CPU", SOURCE_KERNEL_CPU)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_application_kind_is_named_once() {
        let named = named_kinds();
        assert!(named.contains(&("adapt", kinds::ADAPT)));
        assert!(named.contains(&("process_exec", kinds::PROCESS_EXEC)));
        let mut names: Vec<_> = named.iter().map(|(n, _)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), named.len());
    }
}
