"""Adding to a trace's meta after its import (the record's cross-check is computed from the
imported tables): meta.json, the meta table and the manifest's fingerprint stay in step, so the
tables stay current and are not imported again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from oslens.store import importer
from oslens.store.meta_table import flatten


def add(trace: Path, key: str, value) -> None:
    """meta.json[key] = value, and its flattened `key.*` rows in TRACE/tables/meta.parquet."""
    trace = Path(trace)
    meta_path = trace / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta[key] = value
    tmp = trace / "meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
    tmp.replace(meta_path)
    tables = importer.tables_dir(trace)
    manifest = importer.read_manifest(trace)
    if manifest is None or not (tables / "meta.parquet").is_file():
        return  # not imported: the import will take the key from meta.json
    flat: dict = {}
    flatten(key, value, flat)
    old = pq.read_table(tables / "meta.parquet").to_pylist()
    rows = {r["key"]: r["value"] for r in old if not (r["key"] == key or r["key"].startswith(key + "."))}
    rows.update(flat)
    keys = sorted(rows)
    table = pa.table({"key": pa.array(keys, pa.string()), "value": pa.array([rows[k] for k in keys], pa.string())})
    pq.write_table(table, tables / "meta.parquet.tmp")
    (tables / "meta.parquet.tmp").replace(tables / "meta.parquet")
    manifest["fingerprint"] = importer.fingerprint(trace)
    if "files" in manifest:  # the rewritten table's size and CRC-32, or it reads as damaged
        manifest["files"]["meta"] = importer.table_file(tables / "meta.parquet")
    (tables / importer.MANIFEST).write_text(json.dumps(manifest, indent=1))
