"""The `meta` table: meta.json flattened with dots, plus the store's own keys (docs/trace-schema.md)."""

from __future__ import annotations

import json

import pyarrow as pa


def flatten(prefix: str, value, out: dict) -> None:
    """Adds `value` to `out` under `prefix`, a dict's items under `prefix.key`: lists as JSON, the rest as text."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(value)
    elif value is None:
        out[prefix] = None
    elif isinstance(value, bool):
        out[prefix] = "true" if value else "false"
    else:
        out[prefix] = str(value)


def meta_table(meta: dict, extra: dict) -> pa.Table:
    flat: dict = {}
    flatten("", {k: v for k, v in meta.items() if k not in ("threads", "damage")}, flat)
    machine = meta.get("machine") or {}
    if machine.get("hostname"):
        flat.setdefault("hostname", str(machine["hostname"]))
    for k, v in extra.items():
        flat[k] = None if v is None else str(v)
    keys = sorted(flat)
    return pa.table({"key": pa.array(keys, pa.string()), "value": pa.array([flat[k] for k in keys], pa.string())})
