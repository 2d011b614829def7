//! The numpy table builders' native helpers (oslens_testing.store.app_tables_oracle, the test
//! oracle of the native pass): records split into columns, begin/end pairing, lock requests, event
//! offsets. The pairing here is its own (`pair_group`), not the native pass's `pairing::pair_thread`,
//! so that a fault in the pass's pairing cannot hide in the oracle.

use crate::names::NameMap;
use crate::py_buffers::buffer_ptr;
use oslens_format::{kinds, Record, RECORD_SIZE};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// split_records(records, ts, kind, ident, cpu, value, name, name_keys, name_values, clock=None)
/// -> records per kind (256 counts): one pass over n 32-byte records (a chunk's `records`)
/// writing each field into its own contiguous column: ts (int64), kind (uint8), ident (uint32),
/// cpu (uint16), value (int64: the `a` word), name (int32: name_values[j] where
/// name_keys[j] == kind << 48 | id, else -1; name_keys uint64, name_values int32). With
/// clock = (r0, n0, slope, intercept) the raw TSC is converted to CLOCK_MONOTONIC ns as numpy's
/// `n0 + rint((ts - r0) * slope + intercept)` does, and the tick counts of TIMER_STOP and PAUSE
/// records as `rint(a * slope)` (bit for bit the same arithmetic: two separately rounded f64
/// operations, ties to even).
#[pyfunction]
#[pyo3(signature = (records, ts, kind, ident, cpu, value, name, name_keys, name_values, clock=None))]
#[allow(clippy::too_many_arguments)]
pub fn split_records(
    py: Python<'_>,
    records: PyBuffer<u8>,
    ts: PyBuffer<u8>,
    kind: PyBuffer<u8>,
    ident: PyBuffer<u8>,
    cpu: PyBuffer<u8>,
    value: PyBuffer<u8>,
    name: PyBuffer<u8>,
    name_keys: PyBuffer<u8>,
    name_values: PyBuffer<u8>,
    clock: Option<(i64, i64, f64, f64)>,
) -> PyResult<Vec<u64>> {
    if records.len_bytes() % RECORD_SIZE != 0 {
        return Err(PyValueError::new_err("split_records: records must be a whole number of 32-byte records"));
    }
    let n = records.len_bytes() / RECORD_SIZE;
    let names = name_values.len_bytes() / 4;
    let rp = buffer_ptr(&records, n * RECORD_SIZE, "records", false)?;
    let tp = buffer_ptr(&ts, n * 8, "ts", true)?;
    let kp = buffer_ptr(&kind, n, "kind", true)?;
    let ip = buffer_ptr(&ident, n * 4, "ident", true)?;
    let cp = buffer_ptr(&cpu, n * 2, "cpu", true)?;
    let vp = buffer_ptr(&value, n * 8, "value", true)?;
    let np_ = buffer_ptr(&name, n * 4, "name", true)?;
    if tp % 8 != 0 || ip % 4 != 0 || cp % 2 != 0 || vp % 8 != 0 || np_ % 4 != 0 {
        return Err(PyValueError::new_err("split_records: the columns must be aligned to their item size"));
    }
    let nkp = buffer_ptr(&name_keys, names * 8, "name_keys", false)?;
    let nvp = buffer_ptr(&name_values, names * 4, "name_values", false)?;
    Ok(py.allow_threads(move || {
        // SAFETY: every buffer was checked to be contiguous and of the size used here, and the
        // outputs writable; all access is byte-wise (no alignment assumed).
        let rec = unsafe { std::slice::from_raw_parts(rp as *const u8, n * RECORD_SIZE) };
        let map = unsafe {
            NameMap::new(std::slice::from_raw_parts(nkp as *const u8, names * 8), std::slice::from_raw_parts(nvp as *const u8, names * 4))
        };
        // typed views of the columns (alignment checked before the GIL was released)
        let (ts, kind, ident, cpu, value, name) = unsafe {
            (
                std::slice::from_raw_parts_mut(tp as *mut i64, n),
                std::slice::from_raw_parts_mut(kp as *mut u8, n),
                std::slice::from_raw_parts_mut(ip as *mut u32, n),
                std::slice::from_raw_parts_mut(cp as *mut u16, n),
                std::slice::from_raw_parts_mut(vp as *mut i64, n),
                std::slice::from_raw_parts_mut(np_ as *mut i32, n),
            )
        };
        let mut counts = vec![0u64; 256];
        let (tsc, (r0, n0, slope, intercept)) = match clock {
            Some(c) => (true, c),
            None => (false, (0, 0, 1.0, 0.0)),
        };
        for (i, raw) in rec.chunks_exact(RECORD_SIZE).enumerate() {
            let r = Record::from_bytes(raw);
            let (k, a) = (r.kind, r.a as i64);
            counts[k as usize] += 1;
            kind[i] = k;
            ident[i] = r.id;
            cpu[i] = r.cpu;
            name[i] = if names == 0 { -1 } else { map.get((k as u64) << 48 | r.id as u64) };
            if tsc {
                let d = (r.ts as i64).wrapping_sub(r0) as f64;
                ts[i] = ((d * slope + intercept).round_ties_even() as i64).wrapping_add(n0);
                value[i] = if k == kinds::TIMER_STOP || k == kinds::PAUSE { (a as f64 * slope).round_ties_even() as i64 } else { a };
            } else {
                ts[i] = r.ts as i64;
                value[i] = a;
            }
        }
        counts
    }))
}

/// One thread's begin/end events, `n` of them (is_begin(j), key(j)): a begin is closed by the
/// next end at its nesting level over all keys (a stack); where that pairs different keys, or an
/// end closes nothing, each key gets a stack of its own. Returns (for each event: the event that
/// closes it, or -1; for each event: is it an end that closed a begin).
fn pair_group(n: usize, is_begin: impl Fn(usize) -> bool, key: impl Fn(usize) -> u64) -> (Vec<i64>, Vec<bool>) {
    let mut m = vec![-1i64; n];
    let mut end_used = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut bad = false;
    for i in 0..n {
        if is_begin(i) {
            stack.push(i);
        } else if let Some(b) = stack.pop() {
            m[b] = i as i64;
            end_used[i] = true;
            bad |= key(b) != key(i);
        } else {
            bad = true;
        }
    }
    if bad {
        m.fill(-1);
        end_used.fill(false);
        let mut stacks: std::collections::HashMap<u64, Vec<usize>> = std::collections::HashMap::new();
        for i in 0..n {
            let st = stacks.entry(key(i)).or_default();
            if is_begin(i) {
                st.push(i);
            } else if let Some(b) = st.pop() {
                m[b] = i as i64;
                end_used[i] = true;
            }
        }
    }
    (m, end_used)
}

/// pair_nested(g, key, is_begin, match, depth) -> unmatched ends: begin/end pairing as
/// oslens_testing.store.pairing.pair_nested does it, in one pass per thread. g (int32, non-decreasing
/// thread index), key (uint64), is_begin (uint8 0/1) are read; match and depth (int64) written:
/// a begin is closed by the next end at its nesting level over all keys of its thread (a stack);
/// a thread where that pairs different keys, or where an end closes nothing, is paired again
/// with one stack per key. depth = begins open (not closed by a paired end) before each record,
/// counting the record itself, minus one.
#[pyfunction]
pub fn pair_nested(
    py: Python<'_>,
    g: PyBuffer<u8>,
    key: PyBuffer<u8>,
    is_begin: PyBuffer<u8>,
    matched: PyBuffer<u8>,
    depth: PyBuffer<u8>,
) -> PyResult<u64> {
    let n = is_begin.len_bytes();
    let gp = buffer_ptr(&g, n * 4, "g", false)?;
    let kp = buffer_ptr(&key, n * 8, "key", false)?;
    let bp = buffer_ptr(&is_begin, n, "is_begin", false)?;
    let mp = buffer_ptr(&matched, n * 8, "match", true)?;
    let dp = buffer_ptr(&depth, n * 8, "depth", true)?;
    Ok(py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; unaligned reads and writes only.
        let (gb, kb, begin) = unsafe {
            (
                std::slice::from_raw_parts(gp as *const u8, n * 4),
                std::slice::from_raw_parts(kp as *const u8, n * 8),
                std::slice::from_raw_parts(bp as *const u8, n),
            )
        };
        let (mb, db) = unsafe {
            (std::slice::from_raw_parts_mut(mp as *mut u8, n * 8), std::slice::from_raw_parts_mut(dp as *mut u8, n * 8))
        };
        let gi = |i: usize| i32::from_le_bytes(gb[i * 4..i * 4 + 4].try_into().unwrap());
        let ki = |i: usize| u64::from_le_bytes(kb[i * 8..i * 8 + 8].try_into().unwrap());
        let mut unmatched = 0u64;
        let mut start = 0;
        while start < n {
            let g0 = gi(start);
            let mut end = start + 1;
            while end < n && gi(end) == g0 {
                end += 1;
            }
            let (m, end_used) = pair_group(end - start, |j| begin[start + j] != 0, |j| ki(start + j));
            let mut open = 0i64;
            for i in start..end {
                if begin[i] != 0 {
                    open += 1;
                } else if end_used[i - start] {
                    open -= 1;
                } else {
                    unmatched += 1;
                }
                let mi = if m[i - start] >= 0 { m[i - start] + start as i64 } else { -1 };
                db[i * 8..i * 8 + 8].copy_from_slice(&(open - 1).to_le_bytes());
                mb[i * 8..i * 8 + 8].copy_from_slice(&mi.to_le_bytes());
            }
            start = end;
        }
        unmatched
    }))
}

/// pair_kinds(kind, g, key, key_width, begin_kind, end_kind, begins, ends, depth) -> unmatched
/// ends: pair_nested over the records of two kinds among all records, without selecting them
/// first. kind (uint8), g (int32, non-decreasing thread index) and key (key_width = 4 or 8
/// bytes per record, unsigned) are read for every record; for each begin_kind record, in
/// record order, begins gets its row, ends the row of the end_kind record that closes it (-1:
/// never closed) and depth the number of its thread's begins open before it (int64 each, as
/// many as there are begin_kind records). Pairing as pair_nested: a stack per thread over all
/// keys, redone with a stack per key in a thread where that pairs different keys or an end
/// closes nothing.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn pair_kinds(
    py: Python<'_>,
    kind: PyBuffer<u8>,
    g: PyBuffer<u8>,
    key: PyBuffer<u8>,
    key_width: usize,
    begin_kind: u8,
    end_kind: u8,
    begins: PyBuffer<u8>,
    ends: PyBuffer<u8>,
    depth: PyBuffer<u8>,
) -> PyResult<u64> {
    let n = kind.len_bytes();
    if key_width != 4 && key_width != 8 {
        return Err(PyValueError::new_err("pair_kinds: key_width must be 4 or 8"));
    }
    let nb = begins.len_bytes() / 8;
    let kp = buffer_ptr(&kind, n, "kind", false)?;
    let gp = buffer_ptr(&g, n * 4, "g", false)?;
    let yp = buffer_ptr(&key, n * key_width, "key", false)?;
    let bp = buffer_ptr(&begins, nb * 8, "begins", true)?;
    let ep = buffer_ptr(&ends, nb * 8, "ends", true)?;
    let dp = buffer_ptr(&depth, nb * 8, "depth", true)?;
    let got = py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; byte-wise access only.
        let (kb, gb, yb) = unsafe {
            (
                std::slice::from_raw_parts(kp as *const u8, n),
                std::slice::from_raw_parts(gp as *const u8, n * 4),
                std::slice::from_raw_parts(yp as *const u8, n * key_width),
            )
        };
        let (bo, eo, dout) = unsafe {
            (
                std::slice::from_raw_parts_mut(bp as *mut u8, nb * 8),
                std::slice::from_raw_parts_mut(ep as *mut u8, nb * 8),
                std::slice::from_raw_parts_mut(dp as *mut u8, nb * 8),
            )
        };
        let gi = |i: usize| i32::from_le_bytes(gb[i * 4..i * 4 + 4].try_into().unwrap());
        let ki = |i: usize| {
            if key_width == 8 {
                u64::from_le_bytes(yb[i * 8..i * 8 + 8].try_into().unwrap())
            } else {
                u32::from_le_bytes(yb[i * 4..i * 4 + 4].try_into().unwrap()) as u64
            }
        };
        let mut out = 0usize; // begins written
        let mut unmatched = 0u64;
        let mut ev: Vec<usize> = Vec::new(); // the thread's begin/end rows
        let mut i = 0;
        while i <= n {
            // gather one thread's events
            let at_end = i == n;
            if !at_end && kb[i] != begin_kind && kb[i] != end_kind {
                i += 1;
                continue;
            }
            if (at_end || (!ev.is_empty() && gi(i) != gi(ev[0]))) && !ev.is_empty() {
                let (m, end_used) = pair_group(ev.len(), |j| kb[ev[j]] == begin_kind, |j| ki(ev[j]));
                let mut open = 0i64;
                for (j, &r) in ev.iter().enumerate() {
                    if kb[r] == begin_kind {
                        if out < nb {
                            let e = if m[j] >= 0 { ev[m[j] as usize] as i64 } else { -1 };
                            bo[out * 8..out * 8 + 8].copy_from_slice(&(r as i64).to_le_bytes());
                            eo[out * 8..out * 8 + 8].copy_from_slice(&e.to_le_bytes());
                            dout[out * 8..out * 8 + 8].copy_from_slice(&open.to_le_bytes());
                        }
                        out += 1;
                        open += 1;
                    } else if end_used[j] {
                        open -= 1;
                    } else {
                        unmatched += 1;
                    }
                }
                ev.clear();
            }
            if at_end {
                break;
            }
            ev.push(i);
            i += 1;
        }
        (out, unmatched)
    });
    if got.0 != nb {
        return Err(PyValueError::new_err(format!("pair_kinds: {} begins found, room for {nb}", got.0)));
    }
    Ok(got.1)
}

/// lock_requests(kind, g, addr, ts, request, stuck) -> stuck requests: when each lock
/// acquisition was asked for, in one pass over all records. kind (uint8), g (int32 thread
/// index), addr (uint64: the `a` word) and ts (int64) are read for every record; among the
/// sync records (kinds LOCK_REQUEST..=COND_WAIT_EXIT, in record order) an acquisition right
/// after a request of the same thread and object was asked for at the request's time, else at
/// its own. request (int64, one per LOCK_ACQUIRE record in order) gets that time; stuck (int64,
/// room for one per LOCK_REQUEST) the rows of the requests not followed so by an acquisition.
#[pyfunction]
pub fn lock_requests(
    py: Python<'_>,
    kind: PyBuffer<u8>,
    g: PyBuffer<u8>,
    addr: PyBuffer<u8>,
    ts: PyBuffer<u8>,
    request: PyBuffer<u8>,
    stuck: PyBuffer<u8>,
) -> PyResult<usize> {
    let n = kind.len_bytes();
    let (n_acq, n_req) = (request.len_bytes() / 8, stuck.len_bytes() / 8);
    let kp = buffer_ptr(&kind, n, "kind", false)?;
    let gp = buffer_ptr(&g, n * 4, "g", false)?;
    let ap = buffer_ptr(&addr, n * 8, "addr", false)?;
    let tp = buffer_ptr(&ts, n * 8, "ts", false)?;
    let rp = buffer_ptr(&request, n_acq * 8, "request", true)?;
    let sp = buffer_ptr(&stuck, n_req * 8, "stuck", true)?;
    let got = py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; byte-wise access only.
        let (kb, gb, ab, tb) = unsafe {
            (
                std::slice::from_raw_parts(kp as *const u8, n),
                std::slice::from_raw_parts(gp as *const u8, n * 4),
                std::slice::from_raw_parts(ap as *const u8, n * 8),
                std::slice::from_raw_parts(tp as *const u8, n * 8),
            )
        };
        let (ro, so) = unsafe {
            (std::slice::from_raw_parts_mut(rp as *mut u8, n_acq * 8), std::slice::from_raw_parts_mut(sp as *mut u8, n_req * 8))
        };
        let gi = |i: usize| i32::from_le_bytes(gb[i * 4..i * 4 + 4].try_into().unwrap());
        let ai = |i: usize| u64::from_le_bytes(ab[i * 8..i * 8 + 8].try_into().unwrap());
        let ti = |i: usize| i64::from_le_bytes(tb[i * 8..i * 8 + 8].try_into().unwrap());
        let same = |p: usize, i: usize| gi(p) == gi(i) && ai(p) == ai(i);
        let (mut acquired, mut stuck_n) = (0usize, 0usize);
        let put = |o: &mut [u8], at: &mut usize, v: i64| {
            if *at * 8 + 8 <= o.len() {
                o[*at * 8..*at * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
            *at += 1;
        };
        let mut last: Option<usize> = None; // the previous sync record
        for (i, &k) in kb.iter().enumerate() {
            if !(kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT).contains(&k) {
                continue;
            }
            let asked = last.filter(|&p| kb[p] == kinds::LOCK_REQUEST && same(p, i));
            if let Some(p) = last.filter(|&p| kb[p] == kinds::LOCK_REQUEST) {
                if !(k == kinds::LOCK_ACQUIRE && same(p, i)) {
                    put(so, &mut stuck_n, p as i64);
                }
            }
            if k == kinds::LOCK_ACQUIRE {
                put(ro, &mut acquired, ti(asked.unwrap_or(i)));
            }
            last = Some(i);
        }
        if let Some(p) = last.filter(|&p| kb[p] == kinds::LOCK_REQUEST) {
            put(so, &mut stuck_n, p as i64);
        }
        (acquired, stuck_n)
    });
    if got.0 != n_acq || got.1 > n_req {
        return Err(PyValueError::new_err(format!("lock_requests: {} acquisitions and {} requests do not fit", got.0, got.1)));
    }
    Ok(got.1)
}

/// event_offsets(kind, lens, offsets, validity): the offsets (int32, n + 1) and validity bitmap
/// (n bits, LSB first) of a binary column that holds a value for each EVENT record and null
/// elsewhere; lens (int64) are the values' lengths in record order, one per EVENT record.
#[pyfunction]
pub fn event_offsets(py: Python<'_>, kind: PyBuffer<u8>, lens: PyBuffer<u8>, offsets: PyBuffer<u8>, validity: PyBuffer<u8>) -> PyResult<()> {
    let n = kind.len_bytes();
    let ne = lens.len_bytes() / 8;
    let kp = buffer_ptr(&kind, n, "kind", false)?;
    let lp = buffer_ptr(&lens, ne * 8, "lens", false)?;
    let op = buffer_ptr(&offsets, (n + 1) * 4, "offsets", true)?;
    let vp = buffer_ptr(&validity, n.div_ceil(8), "validity", true)?;
    py.allow_threads(move || {
        // SAFETY: sizes and writability checked above; byte-wise access only.
        let (kb, lb) = unsafe { (std::slice::from_raw_parts(kp as *const u8, n), std::slice::from_raw_parts(lp as *const u8, ne * 8)) };
        let (ob, vb) = unsafe {
            (std::slice::from_raw_parts_mut(op as *mut u8, (n + 1) * 4), std::slice::from_raw_parts_mut(vp as *mut u8, n.div_ceil(8)))
        };
        vb.fill(0);
        let (mut off, mut e) = (0i64, 0usize);
        ob[..4].copy_from_slice(&0i32.to_le_bytes());
        for (i, &k) in kb.iter().enumerate() {
            if k == kinds::EVENT && e < ne {
                off += i64::from_le_bytes(lb[e * 8..e * 8 + 8].try_into().unwrap());
                e += 1;
                vb[i >> 3] |= 1 << (i & 7);
            }
            ob[(i + 1) * 4..(i + 2) * 4].copy_from_slice(&(off as i32).to_le_bytes());
        }
        if e != ne || off > i32::MAX as i64 {
            return Err(PyValueError::new_err(format!("event_offsets: {e} events for {ne} lengths, {off} bytes")));
        }
        Ok(())
    })
}

