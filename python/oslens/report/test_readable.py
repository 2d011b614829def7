"""A report a person can read (issue 16 part 5): tables fit 80 and 120 columns without a split
word, unknown values say why, the header says how the program ended, findings come first in
HTML, no %% in --help, no library warning on the terminal."""

import io
import warnings

import pytest
from rich.console import Console

from oslens import cli
from oslens.analysis import io_timeline
from oslens_testing.analysis.synthetic import MS, make_con, reference_trace
from oslens.report import fit, html, model, plots, terminal
from oslens.report.model import view_rows


def _render(rep, width):
    con = Console(width=width, file=io.StringIO(), force_terminal=False, color_system=None)
    terminal.render(rep, con)
    return con.file.getvalue()


def _wide_trace():
    """The reference trace plus 40 mutexes with long names: a sync table wider than 80 columns."""
    con = reference_trace()
    for k in range(40):
        con.execute(f"INSERT INTO sync (kind, object, pid, tid, request_ns, acquire_ns, release_ns) VALUES ('mutex', '0x55e927ba{k:04x}', 100, 100, {k * 1000}, {k * 1000 + 700 * k}, NULL)")
    return con


@pytest.mark.parametrize("width", [80, 120])
def test_tables_fit_the_terminal_without_splitting_a_word(width):
    rep = model.build(_wide_trace(), "wide")
    out = _render(rep, width)
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= width
    words = set(out.split())
    for s in rep.sections:
        if s.id == "findings":  # drawn as paragraphs, which wrap at spaces
            continue
        for v in s.views:
            cols, rows, _ = view_rows(rep, v, terminal=True)
            lay = fit.fit([c.label for c in cols], rows, [c.fmt == "str" for c in cols], width)
            shown = {c.label for c in cols} - set(lay.left_out)
            for r in rows:
                for c, cell in zip(cols, r):
                    if c.label in shown:
                        for word in cell.split():
                            assert word in words, (v.name, c.label, word)


def test_a_table_too_wide_goes_vertical_then_leaves_columns_out_by_name():
    labels = ["thread", *[f"column {k}" for k in range(12)]]
    rows = [["main", *["1,234.567"] * 12], ["worker", *["7.000"] * 12]]
    lay = fit.fit(labels, rows, [True] + [False] * 12, 80)
    assert lay.kind == "vertical" and lay.labels == ["", "main", "worker"]
    many = [[f"t{k}", *["1,234.567"] * 12] for k in range(20)]
    lay = fit.fit(labels, many, [True] + [False] * 12, 80)
    assert lay.kind == "partial" and lay.left_out == labels[len(lay.labels):] and fit.table_width(lay.widths) <= 80


def _io_without_completions():
    con = reference_trace()
    con.execute("UPDATE block_io SET complete_ns = NULL")
    return con


def test_io_durations_without_completions_read_na_and_draw_no_empty_plot():
    con = _io_without_completions()
    summ = io_timeline.io_summary(con).to_pylist()
    assert summ and all(r["total_ns"] is None and r["completed"] == 0 for r in summ)
    rep = model.build(con, "io")
    out = _render(rep, 120)
    assert "n/a (no completions)" in out and "0.000" not in out.split("I/O durations")[1].split("Who switched")[0]
    assert any("no completion" in n for n in rep.section("io").notes)
    assert plots.io(rep) is None


def test_header_gives_the_exit_status_or_signal():
    con = reference_trace()
    con.execute("INSERT INTO meta VALUES ('exit.code', '7')")
    assert "program ended: exit status 7" in _render(model.build(con, "x"), 120)
    con = reference_trace()
    con.execute("INSERT INTO meta VALUES ('exit.code', '137'), ('exit.signal', '9'), ('exit.signal_name', 'SIGKILL')")
    assert "program ended: killed by SIGKILL (status 137)" in _render(model.build(con, "x"), 120)


def test_header_names_a_few_processes_and_counts_the_rest():
    assert model.pids_text([]) == "pid -"
    assert model.pids_text([100, 101, 102, 103]) == "pid 100, 101, 102, 103"
    assert model.pids_text(list(range(200, 241))) == "41 processes: pid 200, 201, 202, 203 and 37 more"
    con = reference_trace()
    assert "program pid 100, 2 thread(s)" in _render(model.build(con, "x"), 120)
    # a shell script's children: one line at 80 columns, not one pid per word over four
    con.execute("INSERT INTO threads (pid, tid, name, parent_tid, start_ns, end_ns, is_traced) "
                "SELECT 200 + i, 200 + i, 'sh', 100, 1000 * i, 1000 * i + 500, true FROM range(40) t(i)")
    out = _render(model.build(con, "x"), 80)
    line = next(x for x in out.splitlines() if "program " in x)
    assert "41 processes: pid 100, 200, 201, 202 and 37 more, 42 thread(s)" in line, out
    assert "203" not in out.split("kernel events")[0]
    page = html.render(model.build(con, "x"))
    assert "41 processes: pid 100, 200, 201, 202 and 37 more, 42 thread(s)" in page


def test_html_puts_findings_first():
    page = html.render(model.build(reference_trace(), "ref"))
    sections = [p.split("'")[0] for p in page.split("<section id='")[1:]]
    assert sections[:3] == ["overview", "findings", "breakdown"]


def test_sync_table_shows_top_objects_by_total_wait_in_readable_units():
    rep = model.build(_wide_trace(), "wide")
    rows = rep.tables["sync"].to_pylist()
    objs = [r for r in rows if r["object"] != "(all)"]
    assert [r["wait_total_ns"] for r in objs] == sorted((r["wait_total_ns"] for r in objs), reverse=True)
    cols, shown, more = view_rows(rep, rep.section("sync").views[0], terminal=True)
    assert len(shown) == model.SYNC_TOP + 2 and more == len(rows) - len(shown)  # barrier and mutex totals first
    assert (shown[2][1], shown[2][3]) == ("b0", "5.00 ms")  # the longest wait first, in readable units
    names = [r[1] for r in shown]
    assert "0x55e927ba0027" in names and "0x55e927ba0001" not in names  # the mutexes that matter


def test_help_texts_have_no_double_percent():
    parser = cli.build_parser()
    texts = [parser.format_help()]
    for action in parser._subparsers._group_actions:
        texts += [p.format_help() for p in action.choices.values()]
    assert len(texts) > 10
    for t in texts:
        assert "%%" not in t


def test_library_warnings_do_not_reach_the_terminal(monkeypatch, capsys):
    monkeypatch.delenv("OSLENS_DEBUG", raising=False)
    with warnings.catch_warnings():
        cli.quiet_warnings()
        warnings.warn("Mean of empty slice", RuntimeWarning)
    assert "Mean of empty slice" not in capsys.readouterr().err
