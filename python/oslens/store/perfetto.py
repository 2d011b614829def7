"""A minimal protobuf writer and reader for Perfetto's trace format (the subset oslens writes).

A Perfetto trace file is a `Trace` message: `repeated TracePacket packet = 1`, so the file is a
sequence of (tag 1, length, TracePacket bytes). Field numbers used (perfetto/protos/perfetto):

  TracePacket      timestamp 8, trusted_packet_sequence_id 10, track_event 11,
                   sequence_flags 13, track_descriptor 60
  TrackEvent       type 9 (1 slice begin, 2 slice end, 3 instant, 4 counter), track_uuid 11,
                   categories 22, name 23, counter_value 30
  TrackDescriptor  uuid 1, name 2, process 3, thread 4, parent_uuid 5, counter 8
  ProcessDescriptor pid 1, process_name 6;  ThreadDescriptor pid 1, tid 2, thread_name 5
"""

from __future__ import annotations

# wire types
VARINT, I64, LEN, I32 = 0, 1, 2, 5

# field numbers
TRACE_PACKET = 1
P_TIMESTAMP, P_SEQ_ID, P_TRACK_EVENT, P_SEQ_FLAGS, P_TRACK_DESCRIPTOR = 8, 10, 11, 13, 60
E_TYPE, E_TRACK_UUID, E_CATEGORIES, E_NAME, E_COUNTER_VALUE = 9, 11, 22, 23, 30
D_UUID, D_NAME, D_PROCESS, D_THREAD, D_PARENT_UUID, D_COUNTER = 1, 2, 3, 4, 5, 8
PROC_PID, PROC_NAME = 1, 6
THR_PID, THR_TID, THR_NAME = 1, 2, 5
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_INCREMENTAL_STATE_CLEARED = 1


def varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64  # two's complement, as protobuf encodes negative int64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


def f_varint(field: int, v: int) -> bytes:
    return key(field, VARINT) + varint(int(v))


def f_bytes(field: int, b: bytes) -> bytes:
    return key(field, LEN) + varint(len(b)) + b


def f_str(field: int, s: str) -> bytes:
    return f_bytes(field, s.encode("utf-8", "replace"))


def packet(body: bytes) -> bytes:
    """One TracePacket, framed as a field of the top-level Trace message."""
    return f_bytes(TRACE_PACKET, body)


# ---------------------------------------------------------------- messages oslens writes


def track_descriptor(uuid: int, name: str | None = None, parent: int | None = None, process: tuple | None = None,
                     thread: tuple | None = None, counter: bool = False) -> bytes:
    d = f_varint(D_UUID, uuid)
    if name is not None:
        d += f_str(D_NAME, name)
    if process is not None:
        pid, pname = process
        d += f_bytes(D_PROCESS, f_varint(PROC_PID, pid) + (f_str(PROC_NAME, pname) if pname else b""))
    if thread is not None:
        pid, tid, tname = thread
        d += f_bytes(D_THREAD, f_varint(THR_PID, pid) + f_varint(THR_TID, tid) + (f_str(THR_NAME, tname) if tname else b""))
    if parent is not None:
        d += f_varint(D_PARENT_UUID, parent)
    if counter:
        d += f_bytes(D_COUNTER, b"")
    return packet(f_bytes(P_TRACK_DESCRIPTOR, d))


class EventWriter:
    """TrackEvent packets on one trusted sequence."""

    def __init__(self, out, seq_id: int = 1):
        self.out = out
        self.seq = f_varint(P_SEQ_ID, seq_id)
        self.first = True

    def _emit(self, ts: int, event: bytes) -> None:
        body = f_varint(P_TIMESTAMP, ts) + f_bytes(P_TRACK_EVENT, event) + self.seq
        if self.first:
            body += f_varint(P_SEQ_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
            self.first = False
        self.out.write(packet(body))

    def begin(self, ts: int, track: int, name: str, category: str | None = None) -> None:
        ev = f_varint(E_TYPE, SLICE_BEGIN) + f_varint(E_TRACK_UUID, track) + f_str(E_NAME, name)
        if category:
            ev += f_str(E_CATEGORIES, category)
        self._emit(ts, ev)

    def end(self, ts: int, track: int) -> None:
        self._emit(ts, f_varint(E_TYPE, SLICE_END) + f_varint(E_TRACK_UUID, track))

    def instant(self, ts: int, track: int, name: str) -> None:
        self._emit(ts, f_varint(E_TYPE, INSTANT) + f_varint(E_TRACK_UUID, track) + f_str(E_NAME, name))

    def counter(self, ts: int, track: int, value: int) -> None:
        self._emit(ts, f_varint(E_TYPE, COUNTER) + f_varint(E_TRACK_UUID, track) + f_varint(E_COUNTER_VALUE, value))


# ---------------------------------------------------------------- reading back (tests, tools)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def fields(buf: bytes):
    """Yields (field number, wire type, value) of one message; LEN values are bytes."""
    pos = 0
    while pos < len(buf):
        k, pos = read_varint(buf, pos)
        field, wire = k >> 3, k & 7
        if wire == VARINT:
            v, pos = read_varint(buf, pos)
        elif wire == I64:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wire == LEN:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated field")
            v, pos = buf[pos:pos + n], pos + n
        elif wire == I32:
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, wire, v


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_trace(data: bytes) -> list[dict]:
    """The packets of a trace file as dicts: {"timestamp", "seq", "flags", "event": {...}} or
    {"track": {...}}. Raises ValueError on malformed input."""
    out = []
    for field, wire, body in fields(data):
        if field != TRACE_PACKET or wire != LEN:
            raise ValueError(f"unexpected top-level field {field}")
        p: dict = {}
        for f, w, v in fields(body):
            if f == P_TIMESTAMP:
                p["timestamp"] = v
            elif f == P_SEQ_ID:
                p["seq"] = v
            elif f == P_SEQ_FLAGS:
                p["flags"] = v
            elif f == P_TRACK_EVENT:
                ev: dict = {}
                for ef, _, ev_v in fields(v):
                    if ef == E_TYPE:
                        ev["type"] = ev_v
                    elif ef == E_TRACK_UUID:
                        ev["track"] = ev_v
                    elif ef == E_NAME:
                        ev["name"] = ev_v.decode()
                    elif ef == E_CATEGORIES:
                        ev.setdefault("categories", []).append(ev_v.decode())
                    elif ef == E_COUNTER_VALUE:
                        ev["counter"] = _signed(ev_v)
                p["event"] = ev
            elif f == P_TRACK_DESCRIPTOR:
                d: dict = {}
                for df, _, dv in fields(v):
                    if df == D_UUID:
                        d["uuid"] = dv
                    elif df == D_NAME:
                        d["name"] = dv.decode()
                    elif df == D_PARENT_UUID:
                        d["parent"] = dv
                    elif df == D_COUNTER:
                        d["counter"] = True
                    elif df == D_PROCESS:
                        d["process"] = {({PROC_PID: "pid", PROC_NAME: "name"}).get(a, a): (b.decode() if isinstance(b, bytes) else b)
                                        for a, _, b in fields(dv)}
                    elif df == D_THREAD:
                        d["thread"] = {({THR_PID: "pid", THR_TID: "tid", THR_NAME: "name"}).get(a, a):
                                       (b.decode() if isinstance(b, bytes) else b) for a, _, b in fields(dv)}
                p["track"] = d
        out.append(p)
    return out
