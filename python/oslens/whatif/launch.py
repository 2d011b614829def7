"""`python3 -I -S launch.py CLASS PRIO NICE SLICE_NS CPUS -- CMD`: put this process under a
scheduling policy, then become CMD (exec), so only the program, not the recorder or the collector
that `oslens record` starts beside it, runs under the policy being validated. Standalone (os and
ctypes only, no oslens import) so that what runs before the exec is a few milliseconds; the
system-call numbers are those of oslens.control.kernel, checked by test_launch.py."""

import ctypes
import os
import platform
import struct
import sys

CLASSES = {"other": 0, "fifo": 1, "rr": 2, "batch": 3, "idle": 5}
SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}


def set_policy(cls: str, prio: int, nice: int, slice_ns: int) -> int:
    """sched_setattr(0, {size 48, policy, flags 0, nice, priority, runtime, 0, 0}); 0 or an errno."""
    attr = struct.pack("IIqiIQQQ", 48, CLASSES[cls], 0, nice, prio, slice_ns, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, len(attr))
    rc = libc.syscall(ctypes.c_long(SCHED_SETATTR[platform.machine()]), ctypes.c_int(0), buf, ctypes.c_uint(0))
    return 0 if rc == 0 else ctypes.get_errno()


def parse_cpus(text: str) -> set[int]:
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 7 or argv[5] != "--" or argv[0] not in CLASSES:
        print("usage: launch.py CLASS PRIO NICE SLICE_NS CPUS -- CMD", file=sys.stderr)
        return 2
    cls, prio, nice, slice_ns, cpus = argv[0], int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    err = set_policy(cls, prio, nice, slice_ns)
    if err:
        print(f"oslens: whatif: cannot set {cls} (priority {prio}, nice {nice}, slice {slice_ns} ns): "
              f"{os.strerror(err)}; run as root", file=sys.stderr)
        return 126
    if cpus != "-":
        os.sched_setaffinity(0, parse_cpus(cpus))
    try:
        os.execvp(argv[6], argv[6:])
    except OSError as e:
        print(f"oslens: whatif: cannot run {argv[6]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
