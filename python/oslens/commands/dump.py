"""`oslens dump TRACE`: every raw record, one per line, for debugging and scripts."""

import json
import sys

import numpy as np

from oslens import _native
from oslens.capture import ledger, raw

NAME = "dump"
HELP = "print every raw record of a trace, one per line (text or --json)"

_NAME_CLASS_OF_KIND = dict(_native.NAME_CLASS_OF_KIND)


def add_arguments(parser):
    parser.add_argument("trace", help="trace directory")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--no-sort", action="store_true", help="chunk by chunk instead of by time")


def decoded_records(trace):
    """Yields (ts_ns, dict) for every record; names resolved, raw clock converted."""
    chunks = raw.read_chunks(trace)
    # threads that recorded nothing of their own, from their processes' ledgers, as the import
    # reads them (the ledger's own records are not repeated)
    chunks += ledger.thread_chunks(chunks)
    meta = raw.read_meta(trace)
    clock = raw.clock_for(chunks, meta)
    names = raw.name_table(chunks)
    for chunk in chunks:
        h = chunk.header or {}
        recs = chunk.records
        if h.get("clock", raw.CLOCK_TSC) == raw.CLOCK_TSC:
            ts = clock.to_ns(recs["ts"])
        else:
            ts = recs["ts"].astype(np.int64)
        table = names.get(chunk.pid, {})
        thread_name = h.get("name", "")
        in_ledger = ledger.is_names_chunk(chunk)
        for i, rec in enumerate(recs):
            kind = int(rec["kind"])
            if kind == raw.NAME or (in_ledger and ledger.is_ledger_record(kind, int(rec["id"]))):
                continue
            ident = int(rec["id"])
            cls = _NAME_CLASS_OF_KIND.get(kind)
            entry = {
                "ts": int(ts[i]),
                "pid": chunk.pid,
                # kernel records name their task in `id`
                "tid": chunk.tid if h.get("source", 1) == raw.SOURCE_APP_THREAD else ident,
                "thread": thread_name,
                "cpu": int(rec["cpu"]),
                "kind": _native.kind_name(kind),
                "id": ident,
                "name": table.get((cls, ident)) if cls else None,
                "value": int(rec["a"]),
                "b": int(rec["b"]),
            }
            if kind == raw.EVENT:
                payload = chunk.payloads.get(i)
                if payload is None:
                    payload = int(rec["b"]).to_bytes(8, "little")[: int(rec["a"])]
                entry["payload"] = payload.hex()
            yield entry["ts"], entry


def run(args):
    trace = raw.require_trace_dir(args.trace)
    entries = decoded_records(trace)
    if not args.no_sort:
        entries = sorted(entries, key=lambda e: e[0])
    out = sys.stdout
    for _, e in entries:
        if args.json:
            out.write(json.dumps(e) + "\n")
        else:
            name = f" {e['name']}" if e["name"] else ""
            out.write(f"{e['ts']} pid={e['pid']} tid={e['tid']} cpu={e['cpu']} {e['kind']}{name} value={e['value']}\n")
    return 0
