"""The report's "Program phases" section (Krintz & Wolski): `oslens phases`'s analysis run by the
report itself when the trace has IP samples of the program (`record --phases` or `--sample`):
the stretches of the run and the recurring phases, in the terminal, the JSON and the HTML (with
the similarity matrix). Without samples, one line says how to get them (docs/phases.md)."""

from __future__ import annotations

import pyarrow as pa

from oslens.errors import OslensError
from oslens.report.model import Column as C
from oslens.report.model import Report, Section, TableView

TITLE, REFERENCE = "Program phases", "Krintz & Wolski, Figure 1"
DESCRIPTION = ("The run cut into intervals, each described by the functions it ran (IP samples) and what the OS "
               "did for it (kernel events); stretches of similar intervals, and the phases that recur "
               "(`oslens phases` for options, the tables and a starting plan).")


def add(report: Report, con) -> None:
    """Puts the section after the region phases (Kohr et al.'s), when there is one to show."""
    found = section(con, report.trace, report.tables)
    if found is not None:
        ids = [s.id for s in report.sections]
        report.sections.insert(ids.index("phases") + 1 if "phases" in ids else len(ids), found)


def section(con, trace: str, tables: dict[str, pa.Table]) -> Section | None:
    """The section, or None when the trace has no IP samples of the program (the report then
    leaves it out, as `oslens phases` is what says what a trace lacks); fills
    tables['program_phase_segments'] and tables['program_phases']."""
    from oslens.phases import analyse, code, vectors
    from oslens.phases import tables as phase_tables

    s = Section("program_phases", TITLE, REFERENCE, DESCRIPTION, available=False)
    try:
        prog, (lo, hi) = vectors.program_window(con)
        if not code.sample_count(con, prog.tids, lo, hi):
            return None
        a = analyse.analyse(con, trace)
    except OslensError as err:
        s.reason = f"No program phases: {err}"
        return s
    tables["program_phase_segments"] = phase_tables.segments_table(a)
    tables["program_phases"] = phase_tables.phases_table(a)
    s.available = True
    vec, h = a.vectors, a.homogeneity()
    s.notes = [f"{vec.n} intervals of {vec.interval_ns / 1e6:g} ms ({', '.join(vec.used())} vectors); "
               f"{a.segmentation.k} phases."] + vec.notes
    if h:
        s.notes.append(f"CPU utilisation within phases varies {h['within_cv']:.2f} (coefficient of variation) "
                       f"against {h['run_cv']:.2f} over the whole run.")
    s.views = [
        TableView("program_phase_segments", "Stretches in time order", [
            C("start_ns", "start", "ms"), C("end_ns", "end", "ms"), C("phase", "phase", "int"), C("kind", "kind"),
            C("share", "share", "pct"), C("functions", "dominant functions"),
        ], limit=40),
        TableView("program_phases", "Phases", [
            C("phase", "phase", "int"), C("kind", "kind"), C("share", "share", "pct"),
            C("recurrences", "times", "int"), C("representative_start_ns", "typical at", "ms"),
            C("functions", "dominant functions", terminal=False),
        ]),
    ]
    s.svg = _svg(a)
    return s


def _svg(a) -> str:
    from oslens.phases import render
    from oslens.report.plots import _svg as inline  # unique ids per figure in one page

    fig, _plt = render.figure([render.panel(a)])
    return inline(fig, "program_phases")
