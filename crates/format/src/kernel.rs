//! Kernel record kinds (64..=127), written by the kernel collector into per-CPU chunks whose
//! header has source = SOURCE_KERNEL_CPU and clock = CLOCK_MONOTONIC_NS.
//! The collector owns this file: each kind documents its id / a / b fields.

pub fn kind_name(_kind: u8) -> &'static str {
    "unknown"
}
