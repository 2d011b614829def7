"""`oslens bench`: the OS micro-benchmark suite of Russo, Madany and Campbell (1990), rebuilt for
Linux with repetitions, confidence intervals, noise detection and comparisons.

The C programs under osbench/ time the operations; this package runs them (registry, runner),
summarises the repetitions (stats), watches the machine for noise (noise), changes and restores
the scheduler settings the time-slice benchmark needs (settings), stores and compares results
(results) and prints them (display). docs/bench.md describes every method."""
