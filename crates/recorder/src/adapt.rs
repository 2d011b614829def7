//! The kernel adaptation call (Krintz & Wolski): `osl_adapt("compute")` switches the calling
//! thread to the OS policy that the plan loaded by `oslens tune` gives that phase.
//!
//! `oslens tune` writes a resolved plan (JSON) and names it in `OSLENS_PLAN`; every phase in
//! it is fully specified for the knobs the plan controls, so switching to a phase gives the
//! same state whatever came before:
//!
//! ```json
//! {"version": 1, "phases": {"compute": {"sched": true, "class": "batch", "policy": 3,
//!   "priority": 0, "slice_ns": 20000000, "nice": null, "affinity": [0, 1], "thp_disable": null}}}
//! ```
//!
//! `nice: null` keeps the thread's nice; `affinity: null` / `thp_disable: null` leave those
//! alone. A phase the plan does not name gets the `default` phase. Without `OSLENS_PLAN` the
//! call does nothing and returns 0. Only per-task settings are changed here; global ones are
//! applied (and restored) by `oslens tune`.
//!
//! Every call is recorded as an ADAPT record: id = phase name id, a = 0 or the first errno,
//! b = policy bits (the layout is `policy_bits` below, and python/oslens/control/apply.py).

use oslens_format::kinds;
use std::collections::HashMap;
use std::sync::OnceLock;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Phase {
    sched: bool,
    policy: u32,
    priority: u32,
    slice_ns: u64,
    nice: Option<i32>,
    affinity: Option<Vec<usize>>,
    thp_disable: Option<bool>,
}

type Plan = HashMap<String, Phase>;

/// Loaded once per process: Ok(None) = no plan (OSLENS_PLAN unset), Err(errno) = unusable.
static PLAN: OnceLock<Result<Option<Plan>, i32>> = OnceLock::new();

pub fn adapt(phase: &str) -> i32 {
    let plan = PLAN.get_or_init(|| match std::env::var_os("OSLENS_PLAN") {
        None => Ok(None),
        Some(p) if p.is_empty() => Ok(None),
        Some(p) => match std::fs::read_to_string(&p) {
            Ok(text) => parse_plan(&text).map(Some).ok_or(libc::EINVAL),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::ENOENT)),
        },
    });
    let (err, bits) = match plan {
        Ok(None) => return 0,
        Err(e) => (*e, 0),
        Ok(Some(plan)) => match plan.get(phase).or_else(|| plan.get("default")) {
            None => (libc::ENOENT, 0),
            Some(p) => apply(p),
        },
    };
    let id = crate::name_id(kinds::NAME_PHASE, phase);
    crate::record_raw(kinds::ADAPT, id, err as u64, bits);
    err
}

// --- applying -----------------------------------------------------------------------------

#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)
}

fn current_nice() -> i32 {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: attr is a valid, writable sched_attr of `size` bytes.
    let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut SchedAttr, size, 0) };
    if rc == 0 {
        attr.sched_nice
    } else {
        0
    }
}

/// Applies every part of a phase to the calling thread; returns (first errno or 0, bits).
pub(crate) fn apply(p: &Phase) -> (i32, u64) {
    let mut first = 0;
    let (mut sched_ok, mut aff_ok, mut thp_ok) = (false, false, false);
    let mut nice_used = 0;
    if p.sched {
        let nice = p.nice.unwrap_or_else(current_nice);
        nice_used = nice;
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: p.policy,
            sched_nice: nice,
            sched_priority: p.priority,
            sched_runtime: p.slice_ns,
            ..Default::default()
        };
        // SAFETY: attr is a valid sched_attr (VER0 size) for the calling thread (tid 0).
        let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
        if rc == 0 {
            sched_ok = true;
        } else {
            first = errno();
        }
    }
    if let Some(cpus) = &p.affinity {
        // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                if c < libc::CPU_SETSIZE as usize {
                    libc::CPU_SET(c, &mut set);
                }
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if rc == 0 {
            aff_ok = true;
        } else if first == 0 {
            first = errno();
        }
    }
    if let Some(disable) = p.thp_disable {
        // SAFETY: PR_SET_THP_DISABLE takes an integer flag and ignores the rest.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, disable as libc::c_ulong, 0, 0, 0) };
        if rc == 0 {
            thp_ok = true;
        } else if first == 0 {
            first = errno();
        }
    }
    (first, policy_bits(p, sched_ok, aff_ok, thp_ok, nice_used))
}

/// bits 0-3 policy, 4 sched applied, 5 affinity applied, 6 THP prctl applied, 7 THP disabled,
/// 8-15 nice + 20, 16-23 real-time priority, 24-55 slice in µs (0 = kernel default).
pub(crate) fn policy_bits(p: &Phase, sched_ok: bool, aff_ok: bool, thp_ok: bool, nice_used: i32) -> u64 {
    let mut bits = 0u64;
    if p.sched {
        bits |= (p.policy & 0xF) as u64;
        if sched_ok {
            bits |= 1 << 4;
        }
        let nice = p.nice.unwrap_or(nice_used);
        bits |= (((nice + 20) as u64) & 0xFF) << 8;
        bits |= ((p.priority & 0xFF) as u64) << 16;
        bits |= ((p.slice_ns / 1000) & 0xFFFF_FFFF) << 24;
    }
    if aff_ok {
        bits |= 1 << 5;
    }
    if thp_ok {
        bits |= 1 << 6;
        if p.thp_disable == Some(true) {
            bits |= 1 << 7;
        }
    }
    bits
}

// --- the resolved plan ---------------------------------------------------------------------

pub(crate) fn parse_plan(text: &str) -> Option<Plan> {
    let doc = Json::parse(text)?;
    let phases = doc.get("phases")?.as_obj()?;
    let mut plan = HashMap::new();
    for (name, v) in phases {
        plan.insert(name.clone(), parse_phase(v)?);
    }
    Some(plan)
}

fn parse_phase(v: &Json) -> Option<Phase> {
    let num = |k: &str| v.get(k).and_then(Json::as_f64);
    let sched = matches!(v.get("sched"), Some(Json::Bool(true)));
    let affinity = match v.get("affinity") {
        None | Some(Json::Null) => None,
        Some(Json::Arr(items)) => {
            Some(items.iter().map(|c| c.as_f64().filter(|x| *x >= 0.0).map(|x| x as usize)).collect::<Option<Vec<_>>>()?)
        }
        _ => return None,
    };
    let thp_disable = match v.get("thp_disable") {
        None | Some(Json::Null) => None,
        Some(Json::Bool(b)) => Some(*b),
        _ => return None,
    };
    let nice = match v.get("nice") {
        None | Some(Json::Null) => None,
        Some(n) => Some(n.as_f64()? as i32),
    };
    Some(Phase {
        sched,
        policy: if sched { num("policy")? as u32 } else { 0 },
        priority: num("priority").unwrap_or(0.0) as u32,
        slice_ns: num("slice_ns").unwrap_or(0.0) as u64,
        nice,
        affinity,
        thp_disable,
    })
}

/// A small JSON reader: enough for the resolved plan (the recorder has no serde).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn parse(text: &str) -> Option<Json> {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        let v = p.value(0)?;
        p.ws();
        (p.i == p.s.len()).then_some(v)
    }
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(items) => items.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    fn as_obj(&self) -> Option<&Vec<(String, Json)>> {
        match self {
            Json::Obj(items) => Some(items),
            _ => None,
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Num(x) => Some(*x),
            _ => None,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }
    fn value(&mut self, depth: usize) -> Option<Json> {
        if depth > 64 {
            return None;
        }
        self.ws();
        match *self.s.get(self.i)? {
            b'{' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat("}") {
                    return Some(Json::Obj(items));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.ws();
                    if !self.eat(":") {
                        return None;
                    }
                    items.push((k, self.value(depth + 1)?));
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    return self.eat("}").then_some(Json::Obj(items));
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat("]") {
                    return Some(Json::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat(",") {
                        continue;
                    }
                    return self.eat("]").then_some(Json::Arr(items));
                }
            }
            b'"' => self.string().map(Json::Str),
            b't' => self.eat("true").then_some(Json::Bool(true)),
            b'f' => self.eat("false").then_some(Json::Bool(false)),
            b'n' => self.eat("null").then_some(Json::Null),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && matches!(self.s[self.i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    self.i += 1;
                }
                std::str::from_utf8(&self.s[start..self.i]).ok()?.parse().ok().map(Json::Num)
            }
        }
    }
    fn hex4(&mut self) -> Option<u32> {
        let h = std::str::from_utf8(self.s.get(self.i..self.i + 4)?).ok()?;
        self.i += 4;
        u32::from_str_radix(h, 16).ok()
    }
    fn string(&mut self) -> Option<String> {
        if !self.eat("\"") {
            return None;
        }
        let mut out = Vec::new();
        loop {
            let c = *self.s.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    let e = *self.s.get(self.i)?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.eat("\\u") {
                                let lo = self.hex4()?;
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo.checked_sub(0xDC00)? & 0x3FF);
                            }
                            char::from_u32(cp)?
                        }
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                _ => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"{"version": 1, "plan": "x.toml", "phases": {
      "default": {"sched": true, "class": "other", "policy": 0, "priority": 0, "slice_ns": 0, "nice": null,
                  "affinity": null, "thp_disable": null},
      "compute": {"sched": true, "class": "batch", "policy": 3, "priority": 0, "slice_ns": 20000000,
                  "nice": 5, "affinity": [0], "thp_disable": true},
      "caf\u00e9": {"sched": false, "affinity": null, "thp_disable": false}},
      "globals": {"memory_max": 1048576, "readahead_kb": {"vda": 128}}, "phase_names": ["a", "b"]}"#;

    #[test]
    fn parses_the_resolved_plan() {
        let plan = parse_plan(PLAN).expect("plan parses");
        assert_eq!(plan.len(), 3);
        let c = &plan["compute"];
        assert!(c.sched);
        assert_eq!((c.policy, c.slice_ns, c.nice), (3, 20_000_000, Some(5)));
        assert_eq!(c.affinity, Some(vec![0]));
        assert_eq!(c.thp_disable, Some(true));
        assert_eq!(plan["default"].nice, None);
        assert!(!plan["café"].sched);
        assert_eq!(plan["café"].thp_disable, Some(false));
    }

    #[test]
    fn rejects_bad_json() {
        for bad in ["", "{", r#"{"phases": 3}"#, r#"{"phases": {"a": {"sched": true}}}"#, r#"{"phases": {}} x"#,
                    r#"{"phases": {"a": {"affinity": [-1]}}}"#] {
            assert!(parse_plan(bad).is_none(), "{bad}");
        }
        assert_eq!(parse_plan(r#"{"phases": {}}"#).map(|p| p.len()), Some(0));
    }

    #[test]
    fn bits_match_the_python_layout() {
        let plan = parse_plan(PLAN).unwrap();
        // the same vector is asserted in python/oslens/control/test_apply.py
        assert_eq!(policy_bits(&plan["compute"], true, true, true, 0), 0x0000_4E20_0019_F3);
        assert_eq!(policy_bits(&plan["default"], false, false, false, 2), 0x1600);
    }

    #[test]
    fn applies_to_the_calling_thread() {
        let phase = Phase { sched: true, policy: 3, priority: 0, slice_ns: 20_000_000, nice: None, affinity: None, thp_disable: None };
        let got = std::thread::spawn(move || {
            let (err, bits) = apply(&phase);
            let mut attr = SchedAttr::default();
            let rc = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut SchedAttr, 48u32, 0) };
            assert_eq!(rc, 0);
            (err, bits, attr.sched_policy, attr.sched_runtime)
        })
        .join()
        .unwrap();
        assert_eq!(got.0, 0);
        assert_eq!(got.1 & 0x1F, 0x13);
        assert_eq!(got.2, 3);
        // Linux >= 6.12 reports the custom slice; older kernels ignore sched_runtime.
        assert!(got.3 == 20_000_000 || got.3 == 0, "runtime {}", got.3);
    }
}
