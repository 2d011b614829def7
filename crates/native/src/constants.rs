//! The raw format's constants as attributes of `oslens._native`, so that Python names them from
//! crates/format instead of copying the numbers (docs/architecture.md).

use oslens_format::header::{offset, CLOCK_MONOTONIC_NS, CLOCK_TSC, HEADER_SIZE, SOURCE_APP_THREAD, SOURCE_KERNEL_CPU};
use oslens_format::record::CONT_PAYLOAD;
use oslens_format::{kernel, kind_names, kinds, Record, RECORD_SIZE};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;

/// A kind's name when it has one: kind_name falls back to a placeholder for unassigned values.
fn named_kinds() -> Vec<(&'static str, u8)> {
    let unassigned = kind_names::kind_name(255);
    (1..=255u8).map(|k| (kind_names::kind_name(k), k)).filter(|(n, _)| *n != unassigned).collect()
}

/// The numpy type of an unsigned little-endian field of `size` bytes.
fn unsigned(size: usize) -> &'static str {
    match size {
        1 => "u1",
        2 => "<u2",
        4 => "<u4",
        _ => "<u8",
    }
}

/// A record's fields as (name, byte offset, numpy type), from the `Record` struct itself, so that
/// `capture/raw.py`'s RECORD_DTYPE is the layout the recorder writes.
fn record_fields() -> Vec<(&'static str, usize, &'static str)> {
    let r = Record::default();
    macro_rules! field {
        ($f:ident) => {
            (stringify!($f), std::mem::offset_of!(Record, $f), unsigned(std::mem::size_of_val(&r.$f)))
        };
    }
    vec![field!(ts), field!(id), field!(cpu), field!(kind), field!(check), field!(a), field!(b)]
}

/// The kernel record kinds' declaration (crates/format/src/kernel.rs): {kind name: {"kind": n,
/// "fields": {field: (word, shift, bits, signed)}}}, fields in declaration order, from which
/// python/oslens/store/kernel_layout.py builds its numpy and SQL readers.
fn kernel_kinds<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for k in kernel::KINDS {
        let fields = PyDict::new(py);
        for f in k.fields {
            fields.set_item(f.name, (f.word.name(), f.shift, f.bits, f.signed))?;
        }
        let d = PyDict::new(py);
        d.set_item("kind", k.kind)?;
        d.set_item("fields", fields)?;
        out.set_item(k.name, d)?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("RECORD_FIELDS", record_fields())?;
    m.add("RECORD_SIZE", RECORD_SIZE)?;
    m.add("HEADER_SIZE", HEADER_SIZE)?;
    m.add("FORMAT_VERSION", oslens_format::VERSION)?;
    m.add("CONT_PAYLOAD", CONT_PAYLOAD)?;
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
    m.add("THREAD_END_OWN_CHUNK", kinds::THREAD_END_OWN_CHUNK)?;
    let kernel_classes = PyDict::new(py);
    kernel_classes.set_item("task", kernel::NAME_TASK)?;
    kernel_classes.set_item("exec", kernel::NAME_EXEC)?;
    kernel_classes.set_item("irq", kernel::NAME_IRQ)?;
    m.add("KERNEL_NAME_CLASSES", kernel_classes)?;
    m.add("KERNEL_KINDS", kernel_kinds(py)?)?;
    m.add("KERNEL_STATE_BITS", kernel::STATE_BITS.to_vec())?;
    m.add("KERNEL_STATE_PREEMPTED", kernel::STATE_PREEMPTED)?;
    m.add("KERNEL_STATE_ASLEEP", kernel::STATE_ASLEEP)?;
    m.add("KERNEL_PIDNS_OUTSIDE", kernel::PIDNS_OUTSIDE)?;
    let rw = PyDict::new(py);
    for (name, bit) in [("write", kernel::RW_WRITE), ("read", kernel::RW_READ), ("discard", kernel::RW_DISCARD),
                        ("flush", kernel::RW_FLUSH), ("sync", kernel::RW_SYNC), ("meta", kernel::RW_META),
                        ("ahead", kernel::RW_AHEAD), ("fua", kernel::RW_FUA)] {
        rw.set_item(name, bit)?;
    }
    m.add("BLOCK_RW_FLAGS", rw)?;
    let counters: BTreeMap<u32, &str> =
        (1..64).map(|id| (id, kernel::counter_name(id))).filter(|(_, n)| *n != "unknown").collect();
    m.add("KERNEL_COUNTER_NAMES", counters)?;
    let offsets = PyDict::new(py);
    offsets.set_item("ring_self_copies", offset::RING_SELF_COPIES)?;
    offsets.set_item("helper_cpu_ns", offset::HELPER_CPU_NS)?;
    offsets.set_item("helper_copies", offset::HELPER_COPIES)?;
    // what the flight recorder (capture/flight.py) reads and writes to copy an open chunk
    for (name, at) in [("capacity", offset::CAPACITY), ("committed", offset::COMMITTED), ("closed", offset::CLOSED),
                       ("clock", offset::CLOCK), ("calib0_tsc", offset::CALIB0_TSC), ("calib0_ns", offset::CALIB0_NS),
                       ("calib1_tsc", offset::CALIB1_TSC), ("calib1_ns", offset::CALIB1_NS),
                       ("stage_slots", offset::STAGE_SLOTS), ("stage_slot_records", offset::STAGE_SLOT_RECORDS),
                       ("stage_descriptors", oslens_format::header::stage::DESCRIPTORS),
                       ("stage_descriptor_size", oslens_format::header::stage::DESCRIPTOR_SIZE)] {
        offsets.set_item(name, at)?;
    }
    m.add("HEADER_OFFSETS", offsets)?;
    use oslens_format::header::stage;
    m.add("STAGE_STATES", [("free", stage::FREE), ("writing", stage::WRITING), ("full", stage::FULL), ("copying", stage::COPYING)].into_iter().collect::<BTreeMap<&str, u32>>())?;
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
    fn the_record_fields_tile_the_record() {
        let fields = record_fields();
        let sizes = |t: &str| t.trim_start_matches(['<', 'u']).parse::<usize>().unwrap();
        let mut end = 0;
        for (_, off, typ) in &fields {
            assert_eq!(*off, end);
            end += sizes(typ);
        }
        assert_eq!(end, RECORD_SIZE);
        assert_eq!(fields[3], ("kind", 14, "u1"));
    }

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
