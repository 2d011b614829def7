"""Unit tests of symbol resolution: ELF symbol tables, maps and load bias, filters."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oslens.store import symbols

C_SOURCE = """
int helper(int x) { return x + 1; }
static int hidden(int x) { return helper(x) * 2; }
int main(int argc, char **argv) { (void)argv; return hidden(argc); }
"""

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None, reason="needs gcc and nm")


def build(tmp_path, *flags):
    src = tmp_path / "prog.c"
    src.write_text(C_SOURCE)
    out = tmp_path / ("prog" + "".join(f.strip("-") for f in flags))
    subprocess.run(["gcc", "-O0", *flags, "-o", str(out), str(src)], check=True)
    return out


def nm_addresses(binary):
    out = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (line.split() for line in out.splitlines()) if len(parts) == 3}


def test_elf_symbols_match_nm(tmp_path):
    exe = build(tmp_path, "-no-pie")
    addrs = nm_addresses(exe)
    elf = symbols.read_elf(str(exe))
    assert elf.elf_type == 2
    for name in ("main", "helper", "hidden"):
        assert elf.lookup(addrs[name]) == name
        assert elf.lookup(addrs[name] + 1) == name  # inside the function
    assert symbols.resolve(exe, [addrs["helper"]]) == ["helper"]


def test_pie_load_bias_from_maps(tmp_path):
    exe = build(tmp_path, "-pie", "-fPIE")
    addrs = nm_addresses(exe)
    elf = symbols.read_elf(str(exe))
    assert elf.elf_type == 3
    # A maps text as the kernel writes it, the image loaded at a random base.
    base = 0x5555_5555_4000
    text_seg = next(l for l in elf.loads if l[1] <= addrs["main"] < l[1] + l[3])
    p_offset, p_vaddr, _, memsz = text_seg
    start = base + (p_vaddr & ~0xFFF)
    maps = (
        f"{base:x}-{base + 0x1000:x} r--p 00000000 fd:00 1 {exe}\n"
        f"{start:x}-{start + ((memsz + 0xFFF) & ~0xFFF) + 0x1000:x} r-xp {p_offset & ~0xFFF:08x} fd:00 1 {exe}\n"
        "7ffc0000-7ffc1000 rw-p 00000000 00:00 0 [stack]\n"
    )
    runtime = [base + addrs[n] for n in ("main", "helper", "hidden")]
    assert symbols.resolve(maps, runtime + [0x10]) == ["main", "helper", "hidden", None]


def test_symbolizer_picks_the_image_by_time(tmp_path):
    exe = build(tmp_path, "-no-pie")
    addrs = nm_addresses(exe)
    raw = tmp_path / "trace" / "raw"
    raw.mkdir(parents=True)
    line = lambda path: f"400000-500000 r-xp 00000000 fd:00 1 {path}\n"  # noqa: E731
    (raw / "maps-42-1000.txt").write_text(line(exe))
    (raw / "maps-42-5000.txt").write_text(line("/nonexistent"))
    sym = symbols.Symbolizer(tmp_path / "trace")
    assert sym.pids() == [42]
    a = addrs["helper"]
    assert sym.resolve(42, [a, a], ts_ns=[2000, 6000]) == ["helper", None]
    assert sym.resolve(7, [a]) == [None]


def test_name_functions_python_rows_use_names(tmp_path):
    names = {9: {(symbols.NAME_FUNCTION, 1234): "__main__.f"}}
    assert symbols.name_functions(tmp_path, names, [9], [1234], [0], [0]) == ["__main__.f"]


def test_function_filter():
    keep = symbols.function_filter("solve*,!solve_tiny")
    assert keep("solve_big") and not keep("solve_tiny") and not keep("main")
    assert symbols.function_filter(None)("anything")
    assert not symbols.function_filter("!x*")("xyz") and symbols.function_filter("!x*")("abc")


def test_demangles_cxx(tmp_path):
    if shutil.which("c++filt") is None:
        pytest.skip("no c++filt")
    assert symbols.demangle(["_Z3fooi", "plain", None]) == ["foo(int)", "plain", None]


@pytest.mark.parametrize("func_filter", ["!hidden", "h*,m*,__main__.*"])
def test_written_functions_named_a_batch_at_a_time(tmp_path, monkeypatch, func_filter):
    """A functions table the import's pass wrote is named and filtered batch by batch into the
    same file, byte for byte, as the whole table in memory: with a name first missing in a later
    batch (the name column then written OPTIONAL: the file written again) and with none missing."""
    import pyarrow as pa

    from oslens.store import app_tables, importer, schema, table_build, table_writer

    exe = build(tmp_path, "-no-pie")
    addrs = nm_addresses(exe)
    trace = tmp_path / "trace"
    (trace / "raw").mkdir(parents=True)
    (trace / "raw" / "maps-42-1000.txt").write_text(f"400000-500000 r-xp 00000000 fd:00 1 {exe}\n")
    names = {9: {(symbols.NAME_FUNCTION, 7): "__main__.f"}}
    # (pid, address, call_site, duration): named rows first, an unknown address (0x10) later
    calls = [(42, addrs["main"], 1, 90), (9, 7, 0, 30), (42, addrs["helper"], 1, 2), (42, addrs["hidden"], 1, 40),
             (42, addrs["helper"], 1, 60), (9, 7, 0, 8), (42, 0x10, 1, 50), (42, addrs["main"], 1, 70),
             (9, 8, 0, 20), (42, addrs["helper"], 1, 11)] * 3
    n = len(calls)
    table = schema.conform("functions", pa.table({
        "pid": [c[0] for c in calls], "tid": [c[0] + 1 for c in calls], "address": pa.array([c[1] for c in calls], pa.uint64()),
        "call_site": pa.array([c[2] for c in calls], pa.uint64()), "begin_ns": [100 * i for i in range(n)],
        "end_ns": [100 * i + c[3] for i, c in enumerate(calls)], "duration_ns": [c[3] for c in calls],
        "depth": [0] * n, "complete": [True] * n}))
    monkeypatch.setenv("OSLENS_FUNC_FILTER", func_filter)
    monkeypatch.setenv("OSLENS_FUNC_MIN_NS", "5")
    for step in (table_build, table_writer):  # several row groups (of a page each): the pass's and the writer's
        monkeypatch.setattr(step, "ROW_GROUP", 8)
    monkeypatch.setattr(app_tables, "BATCH_ROWS", 3)
    context = {"trace": trace, "names": names}
    whole = {"functions": table}
    symbols.extend(whole, context)
    importer.write_table(tmp_path / "whole.parquet", whole["functions"])
    importer.write_table(tmp_path / "pass.parquet", table)  # as the pass writes it: names all null
    written = {"functions": app_tables.WrittenTable(tmp_path / "pass.parquet", n, group_rows=8)}
    symbols.extend(written, context)
    importer.write_table(tmp_path / "batches.parquet", written["functions"])
    got = whole["functions"].column("name").to_pylist()
    dropped = (addrs["hidden"],) if func_filter == "!hidden" else (0x10, 8)  # the unnamed rows match no include
    kept = [c for c in calls if c[3] >= 5 and c[1] not in dropped]
    assert len(got) == len(kept) and got[0] == "main" and got[1] == "__main__.f"
    assert (None in got) == (func_filter == "!hidden")
    assert (tmp_path / "batches.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
    assert not (tmp_path / "pass.parquet").exists() and not (tmp_path / "pass-named.parquet").exists()
