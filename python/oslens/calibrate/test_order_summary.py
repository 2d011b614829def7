from oslens.calibrate import order


def test_order_compare_and_thread_keys():
    keys = order.thread_keys([(10, 11, "w", 5), (10, 10, "main", 1), (20, 21, "w", 9), (10, 12, "w", 7)])
    assert keys[(10, 10)] == "process 0 thread 'main'"
    assert keys[(10, 11)] == "process 0 thread 'w'" and keys[(10, 12)] == "process 0 thread 'w' #1"
    assert keys[(20, 21)] == "process 1 thread 'w'"
    S = order.Step
    a = {"t": [S("lock_acquire", "#0", 1), S("lock_release", "#0", 2)], "u": [S("barrier_enter", "#0", 1)]}
    b = {"t": [S("lock_acquire", "#0", 5), S("lock_release", "#0", 6)], "u": [S("barrier_enter", "#0", 1)]}
    assert order.compare(a, b) == []
    b["t"][1] = S("lock_acquire", "#1", 6)
    b["v"] = []
    d = order.compare(a, b)
    assert [(x.thread, x.index) for x in d] == [("t", 1), ("v", -1)]
    assert "A has lock_release #0, B has lock_acquire #1" in d[0].describe()
    assert d[1].describe() == "v: only in B"


def test_summary_tables():
    import duckdb

    from oslens.calibrate import summary

    con = duckdb.connect()
    assert summary.instrumentation(con).num_rows == 0 and summary.regions(con).num_rows == 0
    con.execute("CREATE TABLE compensation AS SELECT * FROM (VALUES (1, 1, 'event', 10, 200.0), "
                "(1, 1, 'pause', 1, 500.0)) t(pid, tid, kind, records, cost_ns)")
    con.execute("CREATE TABLE app_events AS SELECT * FROM (VALUES (1, 1, 0, 0), (1, 1, 7000, 6300)) "
                "t(pid, tid, ts, ts_comp_ns)")
    con.execute("CREATE TABLE threads AS SELECT 1 AS pid, 1 AS tid, 'main' AS name")
    con.execute("CREATE TABLE regions AS SELECT 'r' AS name, 7000 AS duration_ns, 6300 AS duration_comp_ns")
    row = summary.instrumentation(con).to_pylist()[0]
    assert (row["records"], row["instrumentation_ns"], row["pause_ns"], row["span_comp_ns"]) == (10, 200.0, 500.0, 6300)
    assert abs(row["instrumentation_pct"] - 10.0) < 1e-9
    r = summary.regions(con).to_pylist()[0]
    assert (r["count"], r["total_ns"], r["total_comp_ns"]) == (1, 7000, 6300) and abs(r["instrumentation_pct"] - 10) < 1e-9


def test_quantile_interval_and_summary():
    import numpy as np

    from oslens.calibrate.invitro import _summary, quantile_ci

    x = np.array([27.3, 27.9, 28.0, 28.1, 28.4, 28.5, 28.6, 28.8, 29.1, 29.1, 29.2, 29.2, 29.3, 29.3, 29.4,
                  29.9, 30.4, 36.1, 36.5, 38.2, 45.5])
    lo, hi, cov = quantile_ci(x, 0.25)
    assert lo <= np.quantile(x, 0.25) <= hi and cov >= 0.95
    s = _summary(x)
    assert s["ns"] == 28.5 and s["ci_low"] <= s["ns"] <= s["ci_high"] and s["median"] == 29.2
    assert quantile_ci(x[:1], 0.25) == (27.3, 27.3, 0.0)
