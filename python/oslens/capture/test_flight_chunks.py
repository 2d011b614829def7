"""flight_chunks: a chunk still being written, with records in its staging ring, copied as a
plain closed chunk that reads back as the same records; stream names."""

from oslens import _native
from oslens.capture import flight_chunks as fc, raw

CAPACITY, PER_SLOT = 64, 8


def _live_chunk(tmp_path):
    """10 committed records: 0..7 copied out to the record slots, 8..9 still in ring slot 1."""
    plain = tmp_path / "plain.osl"
    _native.write_chunk(str(plain), {"capacity": CAPACITY, "closed": False, "clock": raw.CLOCK_MONOTONIC_NS},
                        [(1000 + i, 7, 0, raw.EVENT, 8, i) for i in range(10)])
    data = bytearray(plain.read_bytes())
    head, recs = data[:fc.HEADER], data[fc.HEADER:]
    put32 = lambda at, v: head.__setitem__(slice(at, at + 4), v.to_bytes(4, "little"))
    put64 = lambda at, v: head.__setitem__(slice(at, at + 8), v.to_bytes(8, "little"))
    put32(fc.OFF["stage_slots"], 2)
    put32(fc.OFF["stage_slot_records"], PER_SLOT)
    d = fc.OFF["stage_descriptors"] + fc.OFF["stage_descriptor_size"]  # slot 1
    put32(d, fc.STAGE["writing"])
    put64(d + 8, 8)
    body = bytearray(CAPACITY * fc.RECORD)
    body[:8 * fc.RECORD] = recs[:8 * fc.RECORD]
    ring = bytearray(2 * PER_SLOT * fc.RECORD)
    ring[PER_SLOT * fc.RECORD:(PER_SLOT + 2) * fc.RECORD] = recs[8 * fc.RECORD:10 * fc.RECORD]
    live = tmp_path / "app-1-1-0.osl"
    live.write_bytes(bytes(head) + bytes(body) + bytes(ring))
    return live


def test_an_open_chunk_is_copied_as_the_reader_sees_it(tmp_path):
    live = _live_chunk(tmp_path)
    want = raw.read_chunk(live).records
    assert len(want) == 10 and want["b"].tolist() == list(range(10))
    out = tmp_path / "copy.osl"
    assert fc.copy_cut(live, out) == 10
    got = raw.read_chunk(out)
    assert got.records.tobytes() == want.tobytes() and not got.damage
    assert got.header["closed"] and got.header["capacity"] == 10
    assert fc.copy_cut(live, out, from_slot=6) == 10
    assert raw.read_chunk(out).records["b"].tolist() == [6, 7, 8, 9]


def test_stream_names():
    assert fc.stream_of("app-12-13-4.osl") == ("app-12-13", 4)
    assert fc.stream_of("kernel-cpu1-0.osl") == ("kernel-cpu1", 0)
    assert fc.stream_of("names-12-0.osl") == ("names-12", 0)
    assert fc.stream_of("autoinstrument.json") is None
