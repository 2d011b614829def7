#!/usr/bin/env python3
"""What `oslens.event(name)` costs a Python program, dormant (started outside `oslens record`)
and recording (under `oslens record --no-kernel`), next to an empty Python call, measured with
timeit (best of REPEAT x NUMBER calls, ns per call). `per_call_lookup` is the event as it was
before issue 31's cache: a Python function that names the event on every call (a names-table
look-up in the recorder) before recording it; `event` is today's (one look-up per name and
session), so before/after is a ratio within one run.

Prints one JSON object. usage: run.py [--number 300000] [--repeat 7]"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"


def measure(number: int, repeat: int) -> dict:
    """ns per call of each form, in this process (dormant or recording as started)."""
    import oslens
    from oslens import _native, instrument

    def empty(name, payload=b""):
        return None

    def per_call_lookup(name, payload=b""):  # oslens.instrument.event before the cache
        if _native.dormant():
            return
        ident = _native.define_name(instrument.NAME_EVENT, name)
        if isinstance(payload, str):
            payload = payload.encode()
        _native.event(ident, payload)

    forms = {"empty_python_call": empty, "per_call_lookup": per_call_lookup, "event": oslens.event}
    out = {"recording": instrument.enabled()}
    for label, fn in forms.items():
        best = min(timeit.repeat(lambda: fn("checkpoint"), number=number, repeat=repeat))
        out[label + "_ns"] = round(best / number * 1e9, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--inner", type=Path, help=argparse.SUPPRESS)  # write this process's figures here
    args = ap.parse_args()
    if args.inner:
        args.inner.write_text(json.dumps(measure(args.number, args.repeat)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="oslens-pyevent-"))
    me = [sys.executable, __file__, "--number", str(args.number), "--repeat", str(args.repeat), "--inner"]
    dormant_env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    subprocess.run([*me, str(work / "dormant.json")], check=True, env=dormant_env)
    subprocess.run([str(OSLENS), "record", "--no-kernel", "--no-import", "-f", "-o", str(work / "trace"), "--",
                    *me, str(work / "recording.json")], check=True, capture_output=True, env=dormant_env)
    result = {"benchmark": "python_event", "number": args.number, "repeat": args.repeat,
              "load_average": os.getloadavg(), "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
              "python": sys.version.split()[0],
              "dormant": json.loads((work / "dormant.json").read_text()),
              "recording": json.loads((work / "recording.json").read_text())}
    subprocess.run(["rm", "-rf", str(work)], check=False)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
