"""What the tests need and the product must not carry: the oracles (independent versions of what
the native code computes, held to it byte for byte), synthetic traces and workloads, the fake
sysfs tree, the Python what-if simulator, and `_oracle` (their native helpers, built by `make`
from crates/oracle). The wheel leaves this package out (setup.py), and no module of `oslens`
imports it (tests/test_layers.py)."""
