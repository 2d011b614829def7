"""A running Python program for `oslens record -p` (tests/test_attach.py), the Python twin of
tests/c/attach_target.c: THREADS threads each run BATCHES batches, each a region "batch" around a
few getpid calls and an event "batch_done" (its number), then a 1 ms sleep, noting each batch's CLOCK_MONOTONIC start; at the end the
log goes to LOG ("batch tid t0" per batch) and one line to stdout that does not depend on timing.
Started outside `oslens record`, its instruments (oslens.instrument) are dormant until an attach.
usage: python -m oslens_testing.attach_target THREADS BATCHES LOG"""

from __future__ import annotations

import os
import sys
import threading
import time

import oslens

GETPIDS = 20


def _work(batches: int, log: list) -> None:
    tid, starts = threading.get_native_id(), []
    for b in range(batches):
        starts.append(time.monotonic_ns())
        with oslens.region("batch"):
            for _ in range(GETPIDS):
                os.getpid()
        oslens.event("batch_done", b.to_bytes(4, "little"))  # one name over every attach session (its id is cached)
        if b + 1 < batches:
            time.sleep(0.001)
    log.append((tid, starts))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: attach_target THREADS BATCHES LOG", file=sys.stderr)
        return 2
    threads, batches, path = int(argv[0]), int(argv[1]), argv[2]
    log: list = []
    workers = [threading.Thread(target=_work, args=(batches, log)) for _ in range(threads)]
    for w in workers:
        w.start()
    print(f"ready {os.getpid()}", flush=True)
    for w in workers:
        w.join()
    with open(path, "w") as f:
        for tid, starts in log:
            f.writelines(f"batch {tid} {t0}\n" for t0 in starts)
    print(f"done {threads} threads x {batches} batches")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
