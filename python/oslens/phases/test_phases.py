import numpy as np
import pytest

from oslens.errors import OslensError
from oslens.phases import binning, grid, kinds, resources, segment, similarity, vectors


def test_overlap_matches_brute_force():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 1000, 200)
    e = s + rng.integers(0, 300, 200)
    edges = np.arange(0, 1400, 70)
    brute = [sum(max(0, min(b, hi) - max(a, lo)) for a, b in zip(s, e)) for lo, hi in zip(edges[:-1], edges[1:])]
    assert np.allclose(binning.overlap(s, e, edges), brute)
    assert binning.counts([0, 69, 70, 1399, 5000], edges).tolist()[:2] == [2, 1]


def test_interval_choice():
    assert grid.choose_interval(1_000_000_000, 0) == 1_000_000  # 1000 intervals of 1 ms
    assert grid.choose_interval(1_000_000_000, 1000) == 10_000_000  # 10 samples each -> 100 intervals
    assert grid.choose_interval(10_000_000_000, 2000) == 50_000_000  # 10 samples each -> 200 intervals
    assert grid.choose_interval(1_000_000_000, 100) == 10_000_000  # never fewer than 100
    assert grid.parse_interval("10ms") == 10_000_000 and grid.parse_interval("0.5s") == 500_000_000
    with pytest.raises(OslensError):
        grid.parse_interval("soon")
    assert len(grid.edges(0, 1_000, 100)) == 11


def test_weights():
    assert vectors.parse_weights("region=0")["region"] == 0 and vectors.parse_weights(None)["code"] == 1
    for bad in ("cpu=1", "code=x", "code=-1", "code=0,resource=0,region=0"):
        with pytest.raises(OslensError):
            vectors.parse_weights(bad)


def _script(rng, lengths, centres, noise=0.05):
    return np.vstack([c + rng.normal(0, noise, (n, len(c))) for n, c in zip(lengths, centres)])


def test_segmentation_finds_a_recurring_script():
    rng = np.random.default_rng(7)
    a, b, c = np.array([2.0, 0, 0, 0]), np.array([0, 2.0, 0, 0]), np.array([0, 0, 2.0, 1.0])
    x = _script(rng, [40, 30, 40, 20, 30], [a, b, a, c, b])
    seg = segment.segment(x)
    assert seg.bounds.tolist() == [0, 40, 70, 110, 130, 160]
    assert seg.phase_of_segment.tolist() == [0, 1, 0, 2, 1]
    again = segment.segment(x.copy())
    assert again.bounds.tolist() == seg.bounds.tolist() and np.array_equal(again.labels, seg.labels)


def test_short_transitions_join_a_neighbour():
    rng = np.random.default_rng(3)
    x = _script(rng, [2, 40, 40], [np.array([5.0, 5.0]), np.array([0.0, 2.0]), np.array([2.0, 0.0])], 0.02)
    seg = segment.segment(x)
    assert seg.bounds.tolist() == [0, 42, 82] and seg.k == 2


def test_close_segments_are_one_phase():
    rng = np.random.default_rng(5)
    a, a2, b = np.array([2.0, 0, 0]), np.array([2.0, 0.8, 0]), np.array([0, 0, 2.0])
    seg = segment.segment(_script(rng, [30, 30, 30], [a, a2, b], 0.02))
    assert seg.k == 2 and seg.bounds.tolist() == [0, 60, 90]


def test_a_few_noisy_intervals_must_differ_by_more_than_their_noise():
    """A 4-interval cluster 2.8 from a long phase (above the plain cut, 2.5) is the same phase when
    the intervals scatter by ~1 (a centroid of 4 is uncertain by about 1/2); a 40-interval phase
    equally far away is not, and neither is a 4-interval one far away."""
    rng = np.random.default_rng(11)
    a, near, far = np.zeros(8), np.r_[1.4, 1.4, np.zeros(6)], np.r_[0, 0, 4.0, 4.0, np.zeros(4)]
    x = _script(rng, [60, 4, 60], [a, near, a], 0.3)
    assert segment.interval_noise(x, np.array([0, 60, 64, 124])) > 1.0
    lengths = np.array([60, 4, 60])
    merged = segment._merge_within_noise(np.array([0, 1, 0]), lengths, x, np.array([0, 60, 64, 124]), 2.5)
    assert merged.tolist() == [0, 0, 0]
    y = _script(rng, [60, 40, 60], [a, near, a], 0.3)
    kept = segment._merge_within_noise(np.array([0, 1, 0]), np.array([60, 40, 60]), y, np.array([0, 60, 100, 160]), 2.5)
    assert kept.tolist() == [0, 1, 0]
    z = _script(rng, [60, 4, 60], [a, far, a], 0.3)
    apart = segment._merge_within_noise(np.array([0, 1, 0]), lengths, z, np.array([0, 60, 64, 124]), 2.5)
    assert apart.tolist() == [0, 1, 0]


def test_merge_cut_with_one_vector_or_several():
    from oslens.phases import analyse

    assert analyse.merge_cut([1.0, 1.0, 2.0]) == pytest.approx(segment.MERGE_L1 * 4 / 3)
    # regions alone (no kernel events): a full change of the one vector (2 x weight) is a new phase
    assert analyse.merge_cut([2.0]) == segment.SINGLE_BLOCK_L1 * 2 < 2 * 2


def test_kinds():
    def fr(**kw):
        return np.array([kw.get(n, 0.0) for n in resources.FRACTIONS])

    rates = np.zeros(len(resources.RATES))
    assert kinds.classify(fr(user=0.3, runnable=0.6), rates) == "compute"
    assert kinds.classify(fr(io_wait=0.9), rates) == "io"
    assert kinds.classify(fr(sync_wait=0.7, user=0.3), rates) == "sync"
    assert kinds.classify(fr(sync_wait=0.3, user=0.7), rates) == "sync"
    assert kinds.classify(fr(sleeping=0.4, io_wait=0.3, user=0.3), rates) == "mixed"
    faulting = rates.copy()
    faulting[resources.RATES.index("faults")] = 100_000
    assert kinds.classify(fr(system=0.1, user=0.3, runnable=0.6), faulting) == "memory"
    assert kinds.classify(fr(io_wait=0.9), faulting) == "io"


def test_demand_gives_runnable_time_back_to_the_cpu():
    f = np.zeros((2, len(resources.FRACTIONS)))
    f[0, [0, 1, 2]] = [0.2, 0.2, 0.6]  # user, system, runnable
    f[1, 2] = 1.0
    assert np.allclose(resources.demand(f), [[0.5, 0.5], [1.0, 0.0]])


def test_similarity_blocks():
    x = np.arange(20, dtype=float).reshape(10, 2)
    d, per = similarity.similarity(x, max_side=4)
    assert per == 3 and d.shape == (4, 4) and d[0, 0] == 0 and d[0, 1] == 12
