"""bench/import/compression: what each Parquet codec costs the import, in CPU time and bytes.

Builds the tables of the bench's synthetic trace once (python bench/import/run.py --keep makes
it), then writes every table with each codec as the importer writes them (same encodings,
statistics and row groups) and prints JSON: CPU seconds and bytes per codec, for app_events
and for all tables together.

Usage: python bench/import/compression.py [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

# (codec, level, native writer): the importer writes lz4 with the native writer; the rest are
# pyarrow's, with the same encodings and statistics
CODECS = [("lz4", None, True), ("lz4", None, False), ("snappy", None, False), ("zstd", 1, False), ("zstd", 3, False),
          ("none", None, False)]


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write_all(tables: dict, folder: Path, codec: str, level: int | None, native: bool) -> dict:
    from oslens.store import importer

    out = {}
    for name, table in tables.items():
        path = folder / f"{name}.parquet"
        c = cpu_s()
        importer.write_table(path, table, compression=codec, level=level, native=native)
        out[name] = (cpu_s() - c, path.stat().st_size)
        path.unlink()
    return out


def main() -> int:
    from oslens.store import importer, salvage

    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000_000)
    args = ap.parse_args()
    trace = Path(os.environ.get("OSLENS_BENCH_DIR", "/tmp")) / "oslens-bench-import" / f"trace-{args.records}"
    if not (trace / "raw").is_dir():
        print(f"no trace at {trace}: run bench/import/run.py --keep first", file=sys.stderr)
        return 2
    built = importer.build_tables(trace, salvage.Losses(), extensions=False)
    tables = {k: v for k, v in built.items() if not k.startswith("_")}
    result = {"records": built["_records"], "codecs": {}}
    with tempfile.TemporaryDirectory(dir=trace) as tmp:
        for codec, level, native in CODECS:
            got = write_all(tables, Path(tmp), codec, level, native)
            label = ("native-" if native else "pyarrow-") + (codec if level is None else f"{codec}-{level}")
            result["codecs"][label] = {
                "app_events_cpu_s": round(got["app_events"][0], 3), "app_events_mib": round(got["app_events"][1] / 2**20, 1),
                "all_cpu_s": round(sum(v[0] for v in got.values()), 3),
                "all_mib": round(sum(v[1] for v in got.values()) / 2**20, 1),
            }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
