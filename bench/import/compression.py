"""bench/import/compression: what each Parquet codec and writer costs the import, in CPU time
and bytes.

Builds the tables of the bench's synthetic trace once (python bench/import/run.py --keep makes
it), then writes every table with each codec as the importer writes them (same encodings,
statistics and row groups) and prints JSON: CPU seconds and bytes per codec, for app_events
and for all tables together. The writers: the hand-written native one (crates/native/src/
parquet/), pyarrow's, and, where oslens._native was built with the `parquet-crate` feature,
Apache Arrow's Rust `parquet` crate (crate-lz4: bench/import/crate_writer.rs; build it with
`cargo build --release -p oslens-native --features parquet-crate` and install the library as
`make native` does). --repeat N writes each N times and keeps the median CPU time.

Usage: python bench/import/compression.py [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

# (codec, level, writer): the importer writes lz4 with the native writer; "crate" is Apache
# Arrow's Rust parquet crate; the rest are pyarrow's, with the same encodings and statistics
CODECS = [("lz4", None, "native"), ("lz4", None, "crate"), ("lz4", None, "pyarrow"), ("snappy", None, "pyarrow"),
          ("zstd", 1, "pyarrow"), ("zstd", 3, "pyarrow"), ("none", None, "pyarrow")]


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write_with_crate(path: Path, table) -> None:
    """Writes `table` as importer.write_table does, through the parquet crate."""
    import crate_writer
    from oslens.store import parquet_options, schema

    table = parquet_options.required_where_full(table)
    stats = {f.name for f in table.schema if parquet_options.prunes(f.name) and str(parquet_options.value_type(f.type)) == "int64"}
    crate_writer.write_with_crate(path, table, schema.DELTA_COLUMNS, stats, parquet_options.ROW_GROUP)


def write_one(path: Path, table, codec: str, level: int | None, writer: str) -> None:
    from oslens.store import importer

    if writer == "crate":
        write_with_crate(path, table)
    else:
        importer.write_table(path, table, compression=codec, level=level, native=writer == "native")


def write_all(tables: dict, folder: Path, codec: str, level: int | None, writer: str, repeat: int) -> dict:
    out = {}
    for name, table in tables.items():
        path = folder / f"{name}.parquet"
        times = []
        for _ in range(repeat):
            c = cpu_s()
            write_one(path, table, codec, level, writer)
            times.append(cpu_s() - c)
        out[name] = (statistics.median(times), path.stat().st_size)
        path.unlink()
    return out


def main() -> int:
    import crate_writer
    from oslens.store import app_tables, importer, salvage

    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--writers", default="native,crate,pyarrow")
    args = ap.parse_args()
    trace = Path(os.environ.get("OSLENS_BENCH_DIR", "/tmp")) / "oslens-bench-import" / f"trace-{args.records}"
    if not (trace / "raw").is_dir():
        print(f"no trace at {trace}: run bench/import/run.py --keep first", file=sys.stderr)
        return 2
    # in memory: every writer writes the same Arrow tables
    built = importer.build_tables(trace, salvage.Losses(), extensions=False)
    tables = {k: v.read() if isinstance(v, app_tables.WrittenTable) else v for k, v in built.items() if not k.startswith("_")}
    result = {"records": built["_records"], "repeat": args.repeat, "codecs": {}}
    with tempfile.TemporaryDirectory(dir=trace) as tmp:
        for codec, level, writer in CODECS:
            if writer not in args.writers.split(",") or (writer == "crate" and not crate_writer.crate_available()):
                continue
            got = write_all(tables, Path(tmp), codec, level, writer, args.repeat)
            label = f"{writer}-" + (codec if level is None else f"{codec}-{level}")
            result["codecs"][label] = {
                "app_events_cpu_s": round(got["app_events"][0], 3), "app_events_mib": round(got["app_events"][1] / 2**20, 1),
                "all_cpu_s": round(sum(v[0] for v in got.values()), 3),
                "all_mib": round(sum(v[1] for v in got.values()) / 2**20, 1),
                "tables": {k: {"cpu_s": round(v[0], 3), "mib": round(v[1] / 2**20, 1)} for k, v in got.items() if v[1] >= 1 << 20},
            }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
