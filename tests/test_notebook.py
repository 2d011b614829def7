"""The example notebook (examples/notebook.ipynb) runs top to bottom in a real Jupyter kernel
(nbclient + ipykernel) and its outputs say what the recorded cell did (issue 33)."""

import json
import os
import re
import shutil
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]


def text_of(cell) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs)


def test_example_notebook_records_a_cell_and_reads_its_tables(tmp_path, monkeypatch):
    # pandas lives beside .venv (requirements-notebook.lock): the kernel and the recorded cell find it there
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / ".venv" / "notebook-extra"),
                                                                   os.environ.get("PYTHONPATH")])))
    shutil.copy(ROOT / "examples" / "notebook.ipynb", tmp_path)
    nb = nbformat.read(tmp_path / "notebook.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    record, regions, syscalls, report = nb.cells[2:6]
    assert "oslens: imported" in text_of(record)
    assert (tmp_path / "traces" / "notebook-demo" / "meta.json").exists()
    assert text_of(regions).strip() == "(20, ['step'])"
    # the polars frame: one row, getpid, at least the loop's 20 calls
    frame = text_of(syscalls)
    assert "getpid" in frame and "shape: (1, 2)" in frame
    calls = int(re.search(r"getpid\D+(\d+)", frame).group(1))
    assert calls >= 20
    shown = report.outputs[0]["data"]
    assert "<iframe srcdoc=" in shown["text/html"] and "Where each thread" in shown["text/html"]
    json.dumps(nb)  # the executed notebook is still valid JSON
