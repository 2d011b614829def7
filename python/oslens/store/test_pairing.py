"""Unit tests of begin/end pairing: nesting, recursion, ill-nesting, lost begins and ends."""

import numpy as np

from oslens_testing.store import pairing, pairing_oracle


def pair(events, threads=None):
    """events: list of ('B'|'E', key) per thread (one list, or several for several threads)."""
    lists = events if threads else [events]
    g, key, is_begin = [], [], []
    for t, evs in enumerate(lists):
        for kind, k in evs:
            g.append(t)
            key.append(k)
            is_begin.append(kind == "B")
    match, depth, unmatched = pairing.pair_nested(np.array(g, np.int32), np.array(key, np.uint64),
                                                  np.array(is_begin, bool))
    out = {i: (int(match[i]), int(depth[i])) for i in range(len(g)) if is_begin[i]}
    return out, unmatched


def test_nested_and_sequential():
    # A(B()C()) D()
    out, lost = pair([("B", 1), ("B", 2), ("E", 2), ("B", 3), ("E", 3), ("E", 1), ("B", 4), ("E", 4)])
    assert out == {0: (5, 0), 1: (2, 1), 3: (4, 1), 6: (7, 0)}
    assert lost == 0


def test_recursion_of_one_name():
    out, _ = pair([("B", 7), ("B", 7), ("B", 7), ("E", 7), ("E", 7), ("E", 7)])
    assert out == {0: (5, 0), 1: (4, 1), 2: (3, 2)}


def test_missing_end_leaves_the_begin_open():
    out, lost = pair([("B", 1), ("B", 2), ("E", 2)])
    assert out == {0: (-1, 0), 1: (2, 1)}
    assert lost == 0


def test_end_without_begin_is_counted_and_ignored():
    out, lost = pair([("E", 9), ("B", 1), ("E", 1)])
    assert out == {1: (2, 0)}
    assert lost == 1


def test_ill_nested_pairs_by_name():
    # A begins, B begins, A ends, B ends: each name is its own stack
    out, lost = pair([("B", 1), ("B", 2), ("E", 1), ("E", 2)])
    assert out[0][0] == 2 and out[1][0] == 3
    assert lost == 0


def test_lost_inner_end_does_not_steal_the_outer_end():
    # A(B( ... B's end lost ... ) A's end: A pairs with its own end, B stays open
    out, _ = pair([("B", 1), ("B", 2), ("E", 1)])
    assert out == {0: (2, 0), 1: (-1, 1)}


def test_threads_are_paired_separately():
    out, _ = pair([[("B", 1), ("E", 1)], [("B", 1), ("B", 1), ("E", 1), ("E", 1)]], threads=True)
    assert out == {0: (1, 0), 2: (5, 0), 3: (4, 1)}


def test_large_random_well_nested_sequence():
    rng = np.random.default_rng(1)
    evs, stack = [], []
    for _ in range(5000):
        if stack and rng.random() < 0.5:
            evs.append(("E", stack.pop()))
        else:
            k = int(rng.integers(1, 5))
            stack.append(k)
            evs.append(("B", k))
    while stack:
        evs.append(("E", stack.pop()))
    out, lost = pair(evs)
    # reference: a plain stack
    ref, st = {}, []
    for i, (kind, _k) in enumerate(evs):
        if kind == "B":
            ref[i] = (None, len(st))
            st.append(i)
        else:
            b = st.pop()
            ref[b] = (i, ref[b][1])
    assert out == ref and lost == 0


def test_grouped_cumsum_restarts_per_group():
    v = np.array([1, 1, 1, 1, 1], np.int64)
    g = np.array([0, 0, 1, 1, 1])
    assert pairing_oracle.grouped_cumsum(v, g).tolist() == [1, 2, 1, 2, 3]


def test_native_pairing_matches_the_numpy_pairing():
    """pair_nested and pair_kinds run in Rust; both must give what the numpy pairing gives,
    ill-nested threads, lost begins and ends included."""
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 200))
        g = np.sort(rng.integers(0, 4, n)).astype(np.int32)
        key = rng.integers(0, int(rng.integers(1, 4)), n).astype(rng.choice([np.uint32, np.uint64]))
        kind = rng.choice(np.array([4, 5, 6], np.uint8), n)
        sel = np.flatnonzero(kind != 6)
        is_begin = kind[sel] == 4
        want = pairing_oracle.pair_nested_numpy(g[sel], key[sel], is_begin)
        got = pairing.pair_nested(g[sel], key[sel], is_begin)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[2] == want[2]
        begins, ends, depth, lost = pairing.pair_kinds(kind, g, key, 4, 5, int(is_begin.sum()))
        b = np.flatnonzero(is_begin)
        m = want[0][b]
        assert np.array_equal(begins, sel[b])
        assert np.array_equal(ends, np.where(m >= 0, sel[np.maximum(m, 0)], -1))
        assert np.array_equal(depth, want[1][b]) and lost == want[2]


def test_lock_requests_pairs_a_request_with_the_acquisition_right_after_it():
    REQ, ACQ, REL, OTHER = 32, 33, 34, 1
    kind = np.array([REQ, ACQ, REL, REQ, OTHER, ACQ, REQ, REQ, ACQ, ACQ, REQ], np.uint8)
    g = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], np.int32)
    addr = np.array([5, 5, 5, 5, 0, 5, 6, 7, 7, 7, 7], np.uint64)
    ts = np.arange(11, dtype=np.int64) * 10
    request, stuck = pairing.lock_requests(kind, g, addr, ts, 4, 5)
    # acquisitions at rows 1, 5 (asked at row 3: records of other kinds between do not count), 8
    # (asked at row 7) and 9 (no request right before it: asked when it acquired)
    assert request.tolist() == [0, 30, 70, 90]
    assert stuck.tolist() == [6, 10]  # 6: followed by another thread's request; 10: the last record
    np_request, np_stuck = pairing_oracle.lock_requests_numpy(kind, g, addr, ts)
    assert np_request.tolist() == request.tolist() and np_stuck.tolist() == stuck.tolist()


def test_lock_requests_native_and_numpy_agree_on_random_records():
    rng = np.random.default_rng(3)
    n = 5000
    kind = rng.choice(np.array([32, 33, 34, 35, 36, 1, 5], np.uint8), n)
    g = np.sort(rng.integers(0, 4, n)).astype(np.int32)
    addr = rng.integers(0, 3, n).astype(np.uint64)
    ts = np.arange(n, dtype=np.int64)
    request, stuck = pairing.lock_requests(kind, g, addr, ts, int((kind == 33).sum()), int((kind == 32).sum()))
    np_request, np_stuck = pairing_oracle.lock_requests_numpy(kind, g, addr, ts)
    assert request.tolist() == np_request.tolist() and stuck.tolist() == np_stuck.tolist()
