"""What-if scheduling: predict a recorded program under another scheduling policy.

`extract` turns a trace's scheduling tables into a workload (per task: CPU bursts, blocking
intervals, who woke whom), `engine` replays that workload in the Rust core under a policy
(`spec` parses it, `policy` gives the form the core runs), `predict`
compares prediction with the recording (with bounds from the trace's own variability), `gantt`
draws it and `validate` checks predictions against real runs under Linux's own policies.
See docs/whatif.md."""
