//! How much of a file system a trace leaves free. The recorder and the kernel collector reserve
//! file space for their chunks ahead of writing (so a full disk never raises SIGBUS); they stop
//! reserving where this margin begins, so that `oslens record` can still write meta.json and
//! import the tables beside a trace that filled the disk (the import needs room to build them:
//! 70,000 records needed more than 0.9 MiB).

/// Bytes kept free on a file system of `fs_bytes`: a quarter of it, between 1 MiB and 256 MiB.
pub fn margin_bytes(fs_bytes: u64) -> u64 {
    (fs_bytes / 4).clamp(1 << 20, 256 << 20)
}

/// True when `len` more bytes may be reserved on a file system of `fs_bytes` with `free` bytes
/// available; a file system that reports no size (unknown) always takes them.
pub fn may_reserve(fs_bytes: u64, free: u64, len: u64) -> bool {
    fs_bytes == 0 || free >= len.saturating_add(margin_bytes(fs_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_kept_free_within_bounds() {
        assert_eq!(margin_bytes(6 << 20), 1536 << 10);
        assert_eq!(margin_bytes(1 << 20), 1 << 20);
        assert_eq!(margin_bytes(1 << 40), 256 << 20);
        assert!(may_reserve(6 << 20, 3 << 20, 1 << 20));
        assert!(!may_reserve(6 << 20, 2 << 20, 1 << 20));
        assert!(may_reserve(0, 0, 1 << 20));
    }
}
