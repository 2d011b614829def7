//! oslens._native.whatif_simulate: the what-if simulator, the only engine `oslens whatif` runs
//! (python/oslens_testing/whatif/sim.py is its test oracle; docs/whatif.md). Python passes the workload as tuples and
//! the policy as a name and parameters, and gets per-task figures back.

mod policies;
mod sim;
mod task;

use policies::{Kind, Policy};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sim::Sim;
use task::{BlockSpec, TaskSpec};

/// (bursts, blocks [(kind, duration)], arrival, arrival_dep, block_deps [(block, task, burst, offset)],
///  cpus mask [64 CPUs a word; empty: any], nice, background, until)
type TaskTuple = (Vec<i64>, Vec<(u8, i64)>, i64, Option<(usize, usize, i64)>, Vec<(usize, usize, usize, i64)>, Vec<u64>, i64, bool, i64);

fn get<'py, T: FromPyObject<'py>>(params: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    params
        .get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("whatif_simulate: parameter {key} missing")))?
        .extract()
}

fn policy(name: &str, p: &Bound<'_, PyDict>) -> PyResult<Policy> {
    let period: Option<i64> = p.get_item("period")?.map(|v| v.extract::<Option<i64>>()).transpose()?.flatten();
    let kind = match name {
        "fifo" => Kind::Fifo { lifo: false },
        "lifo" => Kind::Fifo { lifo: true },
        "rr" => Kind::Rr { q: get(p, "q")? },
        "sjf" => Kind::Sjf,
        "srt" => Kind::Srt { oracle: get(p, "oracle")?, alpha: get(p, "alpha")?, init: get(p, "init")? },
        "hrrn" => Kind::Hrrn,
        "mlfq" => Kind::Mlfq { levels: get(p, "levels")?, q: get(p, "q")?, allot: get(p, "allot")? },
        "unix" => Kind::Unix { q: get(p, "q")?, tick: get(p, "tick")? },
        "eevdf" => Kind::Eevdf {
            slice: get(p, "slice")?,
            bg_slice: get(p, "bg_slice")?,
            tick: get(p, "tick")?,
            wakeup_preempt: get(p, "wakeup_preempt")?,
            wake_resched: get(p, "wake_resched")?,
            parity: get(p, "parity")?,
        },
        "rt" => Kind::Rt { q: get(p, "q")?, tick: get(p, "tick")?, rr: get(p, "rr")? },
        _ => return Err(PyValueError::new_err(format!("whatif_simulate: no native policy {name}"))),
    };
    Ok(Policy::new(kind, period))
}

/// whatif_simulate(tasks, ncpus, policy, params, switch_ns, migrate_ns, keep_segments) -> dict
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn whatif_simulate<'py>(
    py: Python<'py>,
    tasks: Vec<TaskTuple>,
    ncpus: usize,
    policy_name: &str,
    params: &Bound<'py, PyDict>,
    switch_ns: i64,
    migrate_ns: i64,
    keep_segments: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let pol = policy(policy_name, params)?;
    let specs: Vec<TaskSpec> = tasks
        .into_iter()
        .map(|(bursts, blocks, arrival, arrival_dep, block_deps, cpus, nice, background, until)| TaskSpec {
            bursts,
            blocks: blocks.into_iter().map(|(kind, duration)| BlockSpec { kind, duration }).collect(),
            arrival,
            arrival_dep,
            block_deps,
            cpus,
            nice,
            background,
            until,
        })
        .collect();
    let out = py.allow_threads(|| Sim::new(specs, ncpus, pol, switch_ns, migrate_ns, keep_segments).run());
    let d = PyDict::new(py);
    macro_rules! col {
        ($name:literal, $f:expr) => {
            d.set_item($name, out.tasks.iter().map($f).collect::<Vec<i64>>())?;
        };
    }
    col!("state", |t| t.state as i64);
    col!("done_at", |t| t.done_at);
    col!("first_run", |t| t.first_run);
    col!("arrived_at", |t| t.arrived_at);
    col!("waiting", |t| t.waiting);
    col!("dispatches", |t| t.dispatches);
    col!("voluntary", |t| t.voluntary);
    col!("involuntary", |t| t.involuntary);
    d.set_item("decisions", out.decisions)?;
    d.set_item("switches", out.switches)?;
    d.set_item("segments", out.segments)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(whatif_simulate, m)?)?;
    // the numbers whatif_simulate takes and gives back, named once here for Python
    let states = PyDict::new(m.py());
    for (name, v) in [("not_arrived", task::NOT_ARRIVED), ("ready", task::READY), ("running", task::RUNNING), ("blocked", task::BLOCKED), ("done", task::DONE)] {
        states.set_item(name, v)?;
    }
    m.add("WHATIF_STATES", states)?;
    let blocks = PyDict::new(m.py());
    for (name, v) in [("fixed", task::BLOCK_FIXED), ("dep", task::BLOCK_DEP), ("until", task::BLOCK_UNTIL), ("yield", task::BLOCK_YIELD)] {
        blocks.set_item(name, v)?;
    }
    m.add("WHATIF_BLOCK_KINDS", blocks)?;
    m.add("WHATIF_NICE_WEIGHT", policies::NICE_WEIGHT.to_vec())?;
    Ok(())
}
