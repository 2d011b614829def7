import pytest

from oslens.errors import OslensError
from oslens.osbench import results


def _doc(samples):
    r = {"name": "calls.function", "label": "f", "table": "Table 1", "unit": "call", "status": "ok",
         "samples_ns": samples, "median_ns": sorted(samples)[len(samples) // 2], "min_ns": min(samples),
         "ci_low_ns": min(samples), "ci_high_ns": max(samples), "n": len(samples)}
    return {"schema": results.SCHEMA, "machine": {"kernel": "k", "hostname": "h"}, "created": "now", "results": [r]}


def test_compare_with_itself_is_not_significant():
    d = _doc([10.0, 11.0, 10.5, 10.2, 10.8, 10.1, 10.9])
    cmp = results.compare(d, d)
    (row,) = cmp["rows"]
    assert row["ratio"] == 1.0 and row["verdict"] == "no significant difference"


def test_compare_detects_slower():
    a = _doc([10.0, 10.1, 10.2, 10.1, 10.0, 10.2, 10.1])
    b = _doc([20.0, 20.1, 20.2, 20.1, 20.0, 20.2, 20.1])
    (row,) = results.compare(a, b)["rows"]
    assert row["verdict"] == "B slower" and row["ratio"] == pytest.approx(2.0, rel=0.01)


def test_load_rejects_other_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{}")
    with pytest.raises(OslensError) as e:
        results.load(str(p))
    assert e.value.exit_code == 2
    with pytest.raises(OslensError):
        results.load(str(tmp_path / "missing.json"))


def test_machine_description_has_kernel_and_cpus():
    m = results.machine()
    assert m["kernel"] and m["cpus_online"] >= 1


def test_compare_calls_a_tiny_significant_difference_negligible():
    a = _doc([10.00, 10.01, 10.00, 10.01, 10.00, 10.01, 10.00])
    b = _doc([10.10, 10.11, 10.10, 10.11, 10.10, 10.11, 10.10])
    (row,) = results.compare(a, b)["rows"]
    assert row["significant"] and row["verdict"].startswith("negligible")
