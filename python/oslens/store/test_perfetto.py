"""The hand-written protobuf encoder reads back with the decoder (and matches protobuf's wire format)."""

import io

import pytest

from oslens.store import perfetto


@pytest.mark.parametrize("v", [0, 1, 127, 128, 300, 2**32, 2**63 - 1])
def test_varint_round_trip(v):
    assert perfetto.read_varint(perfetto.varint(v), 0) == (v, len(perfetto.varint(v)))


def test_known_encodings():
    # protobuf documentation: 150 in field 1 is 08 96 01; negative int64 takes ten bytes
    assert perfetto.f_varint(1, 150) == bytes([0x08, 0x96, 0x01])
    assert len(perfetto.varint(-1)) == 10
    assert perfetto.f_str(2, "testing") == bytes([0x12, 0x07]) + b"testing"


def test_packets_read_back():
    out = io.BytesIO()
    out.write(perfetto.track_descriptor(5, process=(42, "app")))
    out.write(perfetto.track_descriptor(6, thread=(42, 43, "worker")))
    out.write(perfetto.track_descriptor(7, name="n", parent=6, counter=True))
    w = perfetto.EventWriter(out, seq_id=9)
    w.begin(1000, 6, "region", "cat")
    w.end(2000, 6)
    w.counter(1500, 7, -3)
    w.instant(1600, 6, "mark")
    p = perfetto.decode_trace(out.getvalue())
    assert p[0]["track"] == {"uuid": 5, "process": {"pid": 42, "name": "app"}}
    assert p[1]["track"] == {"uuid": 6, "thread": {"pid": 42, "tid": 43, "name": "worker"}}
    assert p[2]["track"] == {"uuid": 7, "name": "n", "parent": 6, "counter": True}
    assert p[3] == {"timestamp": 1000, "seq": 9, "flags": 1,
                    "event": {"type": 1, "track": 6, "name": "region", "categories": ["cat"]}}
    assert p[4] == {"timestamp": 2000, "seq": 9, "event": {"type": 2, "track": 6}}
    assert p[5]["event"] == {"type": 4, "track": 7, "counter": -3}
    assert p[6]["event"]["name"] == "mark"


def test_truncated_trace_is_an_error():
    data = perfetto.track_descriptor(5, name="x")
    with pytest.raises(ValueError):
        perfetto.decode_trace(data[:-1])
