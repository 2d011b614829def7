"""Tests of the report (model, terminal, HTML, JSON, the `oslens report` command) on synthetic
traces; the HTML is opened in headless Chromium to check that every section rendered its plot."""

import json
from html import escape as html_escape
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from oslens_testing.analysis.synthetic import MS, interference_trace, make_con, reference_trace
from oslens.report import html, jsonout, model, terminal

SECTIONS = ["breakdown", "tasks", "phases", "sync", "regions", "switches", "io", "transitions", "findings"]


def render_text(rep, width=120):
    con = Console(width=width, record=True, force_terminal=False, color_system=None)
    terminal.render(rep, con)
    return con.export_text()


def test_model_has_every_section_available():
    rep = model.build(reference_trace(), "ref")
    assert [s.id for s in rep.sections] == SECTIONS
    for s in rep.sections:
        assert s.available, s.id
        assert s.reason is None


def test_terminal_output_names_numbers_and_findings():
    text = render_text(model.build(reference_trace(), "ref"))
    assert "Where each thread's time went" in text
    assert "20.000" in text  # main's wall time in ms
    assert "arbd" in text and "kworker/0:1" in text
    assert "WARNING" in text and "waited 2.00 ms for I/O" in text


def test_json_has_same_content():
    rep = model.build(reference_trace(), "ref")
    d = json.loads(jsonout.dumps(rep))
    assert [s["id"] for s in d["sections"]] == SECTIONS
    bd = d["tables"]["breakdown"]
    rows = [dict(zip(bd["columns"], r)) for r in bd["rows"]]
    main = next(r for r in rows if r["tid"] == 100)
    assert main["preempted_ns"] == 2 * MS and main["sync_wait_ns"] == 5 * MS
    tr = d["tables"]["transitions"]
    assert sum(r[tr["columns"].index("count")] for r in tr["rows"]) == 10
    assert {f["code"] for f in d["findings"]} >= {"io_critical", "preemption"}


def test_app_only_trace_says_why_sections_are_empty():
    con = reference_trace(with_kernel=False)
    con.execute("INSERT INTO meta VALUES ('kernel.reason', 'perf_event_open: permission denied')")
    rep = model.build(con, "app-only")
    for sid in ["tasks", "switches", "io", "transitions"]:
        s = rep.section(sid)
        assert not s.available
        assert "permission denied" in s.reason, (sid, s.reason)
    assert rep.section("breakdown").available and rep.section("phases").available
    assert rep.section("sync").available
    text = render_text(rep)
    assert "permission denied" in text
    page = html.render(rep)
    assert page.count("class='missing'") == 4
    d = json.loads(jsonout.dumps(rep))
    assert any(f["code"] == "no_kernel" for f in d["findings"])


def test_no_kernel_without_meta_reason_mentions_privilege():
    rep = model.build(reference_trace(with_kernel=False), "app-only")
    assert "privilege" in rep.section("switches").reason


def test_empty_trace_does_not_fail():
    rep = model.build(make_con({}), "empty")
    assert not rep.section("breakdown").available
    render_text(rep)
    html.render(rep)
    jsonout.dumps(rep)


def test_html_is_self_contained():
    page = html.render(model.build(reference_trace(), "ref"))
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "<link" not in page
    assert page.count("<svg") == len(SECTIONS)
    for sid in SECTIONS:
        assert f"<section id='{sid}'" in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "SVG ids collide between figures"


def test_interference_report_names_the_task():
    rep = model.build(interference_trace(), "int")
    text = render_text(rep)
    assert "noisy [700]" in text
    assert "noisy" in rep.tables["findings"].column("subject").to_pylist()[0]


def test_find_trace(tmp_path):
    from oslens.errors import OslensError

    with pytest.raises(OslensError) as e:
        model.find_trace(None, tmp_path)
    assert e.value.exit_code == 2
    (tmp_path / "traces" / "old").mkdir(parents=True)
    (tmp_path / "oslens-trace-new").mkdir()
    os.utime(tmp_path / "traces" / "old", (1, 1))
    assert model.find_trace(None, tmp_path).name == "oslens-trace-new"
    with pytest.raises(OslensError):
        model.find_trace(str(tmp_path / "nope"))


def test_report_command(tmp_path, monkeypatch, capsys):
    from oslens import cli
    from oslens.commands import report as report_cmd

    trace = tmp_path / "t"
    trace.mkdir()
    monkeypatch.setattr(report_cmd, "open_trace", lambda p: reference_trace())
    assert cli.main(["report", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "oslens-report"
    assert (trace / "report.html").exists()
    assert (trace / "analysis" / "report_breakdown.parquet").exists()
    html_file = tmp_path / "elsewhere" / "r.html"
    assert cli.main(["report", str(trace), "--html", str(html_file)]) == 0
    assert html_file.exists()
    assert "HTML report" in capsys.readouterr().out


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def dump_dom(page: Path) -> str:
    exe = chromium()
    with tempfile.TemporaryDirectory() as prof:
        r = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={prof}", "--window-size=1280,2000", "--virtual-time-budget=2000",
             "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120,
        )
    return r.stdout


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_html_renders_every_section_with_its_plot_in_chromium(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html.render(model.build(reference_trace(), "ref")), encoding="utf-8")
    dom = dump_dom(page)
    assert 'data-report-ready="1"' in dom, "the page's script did not run"
    for sid in SECTIONS:
        m = re.search(rf'<section id="{sid}"[^>]*data-rendered="(\d+)x(\d+):(\d+)"', dom)
        assert m, f"section {sid} has no rendered plot"
        w, h, n = map(int, m.groups())
        assert w > 100 and h > 50 and n > 5, (sid, w, h, n)


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_html_app_only_renders_reasons_in_chromium(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html.render(model.build(reference_trace(with_kernel=False), "app")), encoding="utf-8")
    dom = dump_dom(page)
    for sid in ["tasks", "switches", "io", "transitions"]:
        assert re.search(rf'<section id="{sid}"[^>]*data-available="0"[^>]*data-rendered="none"', dom), sid
    assert dom.count('class="missing"') == 4


def test_report_tables_are_queryable_as_views(tmp_path):
    import duckdb

    from oslens.analysis import suite

    tables = suite.run_all(reference_trace())
    suite.write_parquet(tables, tmp_path / "analysis")
    con = duckdb.connect()
    names = suite.register_views(con, tmp_path)
    assert "report_breakdown" in names and "report_transitions" in names
    assert con.execute("SELECT sum(count) FROM report_transitions").fetchone()[0] == 10


def test_header_shows_the_measured_recording_cost():
    con = reference_trace()
    con.execute("DELETE FROM meta WHERE key IN ('recorder_helpers', 'threads')")
    con.execute("INSERT INTO meta VALUES ('recorder_helpers', ?)",
                [json.dumps([{"pid": 1, "cpu_ns": 2_000_000, "ring_slots_copied": 30},
                             {"pid": 2, "cpu_ns": 500_000, "ring_slots_copied": 10}])])
    con.execute("INSERT INTO meta VALUES ('threads', ?)",
                [json.dumps([{"tid": 1, "ring_slots_self_copied": 3}, {"tid": 2, "ring_slots_self_copied": 1}])])
    rep = model.build(con, "ref")
    line = ("2.50 ms CPU in the recorder's helper thread (40 buffer slots copied; 4 copied by the program's "
            "threads while it was behind)")
    assert f"recording cost outside the program: {line}" in render_text(rep, width=250)
    assert html.render(rep).count(html_escape(line)) == 1
    # a trace recorded before the cost was kept says nothing about it
    assert "recording cost" not in render_text(model.build(reference_trace(), "ref"), width=250)
