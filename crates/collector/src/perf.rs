//! perf_event_open: the attribute block, the system call, ioctls and the mmap ring.

use std::sync::atomic::{fence, Ordering};

pub const TYPE_SOFTWARE: u32 = 1;
pub const TYPE_TRACEPOINT: u32 = 2;

pub const SW_CPU_CLOCK: u64 = 0;
pub const SW_TASK_CLOCK: u64 = 1;
pub const SW_PAGE_FAULTS: u64 = 2;
pub const SW_CONTEXT_SWITCHES: u64 = 3;
pub const SW_CPU_MIGRATIONS: u64 = 4;
pub const SW_PAGE_FAULTS_MIN: u64 = 5;
pub const SW_PAGE_FAULTS_MAJ: u64 = 6;
pub const SW_DUMMY: u64 = 9;

pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_RAW: u64 = 1 << 10;

pub const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;

// attr.flags bits
pub const F_DISABLED: u64 = 1 << 0;
pub const F_INHERIT: u64 = 1 << 1;
pub const F_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const F_EXCLUDE_HV: u64 = 1 << 6;
pub const F_FREQ: u64 = 1 << 10;
pub const F_WATERMARK: u64 = 1 << 14;
pub const F_USE_CLOCKID: u64 = 1 << 25;

pub const RECORD_LOST: u32 = 2;
pub const RECORD_SAMPLE: u32 = 9;
pub const MISC_CPUMODE_MASK: u16 = 7;
pub const MISC_KERNEL: u16 = 1;

pub const FLAG_FD_NO_GROUP: libc::c_ulong = 1;
pub const FLAG_FD_OUTPUT: libc::c_ulong = 2;
pub const FLAG_FD_CLOEXEC: libc::c_ulong = 8;

const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// struct perf_event_attr (PERF_ATTR_SIZE_VER8, 136 bytes).
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct Attr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved2: u16,
    pub aux_sample_size: u32,
    pub reserved3: u32,
    pub sig_data: u64,
    pub config3: u64,
}
const _: () = assert!(std::mem::size_of::<Attr>() == 136);

impl Attr {
    pub fn new(type_: u32, config: u64) -> Attr {
        Attr { type_, size: std::mem::size_of::<Attr>() as u32, config, ..Default::default() }
    }
}

/// Opens one event; Err(errno) on failure.
pub fn open(attr: &Attr, pid: i32, cpu: i32, group: i32) -> Result<i32, i32> {
    // SAFETY: attr points to a valid perf_event_attr of the size it states.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr as *const Attr, pid, cpu, group, FLAG_FD_CLOEXEC) };
    if fd < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    } else {
        Ok(fd as i32)
    }
}

/// Opens one event writing into the ring of `out` from the start (PERF_FLAG_FD_OUTPUT: no
/// SET_OUTPUT ioctl), as a member of `out`'s group when `join`. A kernel refusing the flag gets
/// the open and the ioctl apart.
pub fn open_into(attr: &Attr, pid: i32, cpu: i32, out: i32, join: bool) -> Result<i32, i32> {
    let flags = FLAG_FD_CLOEXEC | FLAG_FD_OUTPUT | if join { 0 } else { FLAG_FD_NO_GROUP };
    // SAFETY: attr points to a valid perf_event_attr of the size it states.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr as *const Attr, pid, cpu, out, flags) };
    if fd >= 0 {
        return Ok(fd as i32);
    }
    let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    if e != libc::EINVAL {
        return Err(e);
    }
    let fd = open(attr, pid, cpu, if join { out } else { -1 })?;
    if let Err(e) = set_output(fd, out) {
        close(fd);
        return Err(e);
    }
    Ok(fd)
}

pub fn close(fd: i32) {
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
}

pub fn enable(fd: i32) {
    // SAFETY: plain ioctl on our fd.
    unsafe { libc::ioctl(fd, IOC_ENABLE as _, 0) };
}

pub fn disable(fd: i32) {
    // SAFETY: plain ioctl on our fd.
    unsafe { libc::ioctl(fd, IOC_DISABLE as _, 0) };
}

pub fn set_output(fd: i32, target: i32) -> Result<(), i32> {
    // SAFETY: plain ioctl on our fds.
    if unsafe { libc::ioctl(fd, IOC_SET_OUTPUT as _, target) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    Ok(())
}

/// Reads a counter opened with read_format = TOTAL_TIME_ENABLED: (value, time enabled).
pub fn read_counter(fd: i32) -> Option<(u64, u64)> {
    let mut buf = [0u64; 2];
    // SAFETY: buf is 16 writable bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, 16) };
    (n == 16).then_some((buf[0], buf[1]))
}

/// The mmap ring of one event (its metadata page and 2^n data pages).
pub struct Ring {
    base: *mut u8,
    len: usize,
    data: *const u8,
    size: u64,
}

// data_head / data_tail offsets inside struct perf_event_mmap_page.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

impl Ring {
    pub fn map(fd: i32, data_bytes: usize) -> Result<Ring, i32> {
        let page = 4096usize;
        let len = page + data_bytes;
        // SAFETY: mapping a perf fd as the kernel documents.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
        }
        let base = p as *mut u8;
        Ok(Ring { base, len, data: unsafe { base.add(page) }, size: data_bytes as u64 })
    }

    pub fn head(&self) -> u64 {
        // SAFETY: inside the metadata page.
        let h = unsafe { std::ptr::read_volatile(self.base.add(DATA_HEAD) as *const u64) };
        fence(Ordering::Acquire);
        h
    }

    pub fn tail(&self) -> u64 {
        // SAFETY: inside the metadata page; only we write it.
        unsafe { std::ptr::read_volatile(self.base.add(DATA_TAIL) as *const u64) }
    }

    pub fn set_tail(&self, tail: u64) {
        fence(Ordering::Release);
        // SAFETY: inside the metadata page.
        unsafe { std::ptr::write_volatile(self.base.add(DATA_TAIL) as *mut u64, tail) };
    }

    /// Calls `f(type, misc, body)` for each record in [from, to); records that wrap around the
    /// end of the ring are copied into `scratch` first. Returns the position reached.
    pub fn walk(&self, from: u64, to: u64, scratch: &mut Vec<u8>, mut f: impl FnMut(u32, u16, &[u8])) -> u64 {
        // the data area is a power of two: a mask, not a division per byte (the drain's hot loop)
        let size = self.size as usize;
        let mask = size - 1;
        let mut pos = from;
        while pos + 8 <= to {
            let off = pos as usize & mask;
            // header: u32 type, u16 misc, u16 size (8-aligned, so it never wraps itself)
            // SAFETY: off + 8 <= size since records and the ring are 8-byte aligned.
            let hdr = unsafe { std::ptr::read_unaligned(self.data.add(off) as *const u64) };
            let typ = hdr as u32;
            let misc = (hdr >> 32) as u16;
            let rsize = (hdr >> 48) as usize;
            if rsize < 8 || pos + rsize as u64 > to {
                break;
            }
            if off + rsize <= size {
                // SAFETY: the record lies inside the data area.
                let body = unsafe { std::slice::from_raw_parts(self.data.add(off + 8), rsize - 8) };
                f(typ, misc, body);
            } else {
                // SAFETY: two slices inside the data area: the record's end and its wrapped rest.
                let (a, b) = unsafe {
                    (std::slice::from_raw_parts(self.data.add(off + 8), size - off - 8), std::slice::from_raw_parts(self.data, off + rsize - size))
                };
                scratch.clear();
                scratch.extend_from_slice(a);
                scratch.extend_from_slice(b);
                f(typ, misc, scratch);
            }
            pos += rsize as u64;
        }
        pos
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    /// A ring over anonymous memory (metadata page + `size` data bytes), as the kernel lays it out.
    fn ring(size: usize) -> Ring {
        // SAFETY: a fresh private anonymous mapping, unmapped by Ring's Drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), 4096 + size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as *mut u8;
        Ring { base, len: 4096 + size, data: unsafe { base.add(4096) }, size: size as u64 }
    }

    /// Writes a record of `words` 8-byte words (header included) at `pos`, its body counting up from `seed`.
    fn put(r: &Ring, pos: u64, typ: u32, words: usize, seed: u8) {
        let mut rec = vec![0u8; words * 8];
        rec[0..4].copy_from_slice(&typ.to_le_bytes());
        rec[4..6].copy_from_slice(&7u16.to_le_bytes());
        rec[6..8].copy_from_slice(&((words * 8) as u16).to_le_bytes());
        for (i, b) in rec[8..].iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        for (i, &b) in rec.iter().enumerate() {
            // SAFETY: index reduced modulo the data size.
            unsafe { *(r.data as *mut u8).add((pos as usize + i) % r.size as usize) = b };
        }
    }

    #[test]
    fn records_are_walked_whole_across_the_end_of_the_ring() {
        let r = ring(256);
        // positions run on past the size as the kernel's do: the 48-byte record at 224 wraps at 256
        put(&r, 200, 9, 3, 1);
        put(&r, 224, 9, 6, 50);
        put(&r, 272, 2, 2, 90);
        let mut seen = vec![];
        let mut scratch = vec![];
        let end = r.walk(200, 288, &mut scratch, |t, m, body| seen.push((t, m, body.to_vec())));
        assert_eq!(end, 288);
        let body = |n: usize, seed: u8| (0..n).map(|i| seed.wrapping_add(i as u8)).collect::<Vec<u8>>();
        assert_eq!(seen, vec![(9, 7, body(16, 1)), (9, 7, body(40, 50)), (2, 7, body(8, 90))]);
        // a record not wholly written yet is left for the next walk
        let mut n = 0;
        assert_eq!(r.walk(200, 280, &mut scratch, |_, _, _| n += 1), 272);
        assert_eq!(n, 2);
    }
}
