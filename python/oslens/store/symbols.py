"""Function names for the `functions` table: ELF symbols of the executable and its shared
libraries, placed at the addresses the process mapped them (PIE and ASLR load bias).

At run time the -finstrument-functions hooks write the process's memory map to
`raw/maps-<pid>-<ns>.txt` on their first call (and again, `...-exit.txt`, at exit: libraries
opened later). `<ns>` is CLOCK_MONOTONIC when the image started recording: a process that execs
another instrumented program writes a second map, and calls are resolved against the map of
the image that was running at the time (the latest `<ns>` at or before the call).

Python functions recorded by oslens.instrument carry their name id in `address` and 0 in
`call_site`; their names come from the trace's NAME records (class NAME_FUNCTION).

Use:
    extend(tables, context)                      importer extension: fills functions.name
    Symbolizer(trace).resolve(pid, addresses, ts_ns=None) -> [name or None]
    resolve(maps_or_binary, addresses) -> [name or None]
    function_filter(pattern) -> predicate(name)  include/exclude globs ("a*,b*,!c*")

Filters applied at import: OSLENS_FUNC_FILTER (globs) and OSLENS_FUNC_MIN_NS (minimum
duration), from the environment of `oslens record` / the importer or from
`raw/autoinstrument.json` (written by oslens record's preload hook).
"""

from __future__ import annotations

import bisect
import fnmatch
import json
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from oslens.capture import raw

NAME_FUNCTION = raw.CLASS_ID["function"]
SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 1, 2, 10
PT_LOAD = 1
_MAPS_RE = re.compile(r"^maps-(\d+)-(\d+)(-exit)?\.txt$")


# ---------------------------------------------------------------- ELF


@dataclass
class ElfSymbols:
    path: str
    elf_type: int = 0  # 2 = ET_EXEC, 3 = ET_DYN (PIE or shared library)
    loads: list = field(default_factory=list)  # (p_offset, p_vaddr, p_filesz, p_memsz)
    starts: list = field(default_factory=list)  # sorted symbol addresses
    ends: list = field(default_factory=list)
    names: list = field(default_factory=list)
    exact: dict = field(default_factory=dict)
    # data objects (STT_OBJECT): sorted starts, ends (start + size) and names
    objects: tuple = field(default_factory=lambda: ([], [], []))

    def lookup_object(self, vaddr: int) -> str | None:
        """The data symbol holding vaddr: its name, with +0x<offset> inside it (a lock in a struct)."""
        starts, ends, names = self.objects
        i = bisect.bisect_right(starts, vaddr) - 1
        if i < 0 or vaddr >= max(ends[i], starts[i] + 1):
            return None
        off = vaddr - starts[i]
        return names[i] if off == 0 else f"{names[i]}+0x{off:x}"

    def span(self) -> tuple[int, int] | None:
        """The link-time addresses its load segments cover."""
        if not self.loads:
            return None
        return min(v for _, v, _, _ in self.loads), max(v + m for _, v, _, m in self.loads)

    def lookup(self, vaddr: int) -> str | None:
        name = self.exact.get(vaddr)
        if name is not None:
            return name
        i = bisect.bisect_right(self.starts, vaddr) - 1
        if i >= 0 and (vaddr < self.ends[i] or self.ends[i] == self.starts[i]):
            return self.names[i]
        return None

    def file_offset_to_vaddr(self, offset: int) -> int | None:
        for p_offset, p_vaddr, p_filesz, p_memsz in self.loads:
            if p_offset <= offset < p_offset + max(p_filesz, p_memsz):
                return offset - p_offset + p_vaddr
        return None


_ELF_CACHE: dict[tuple, ElfSymbols | None] = {}


def read_elf(path: str) -> ElfSymbols | None:
    """Function symbols (.symtab, else .dynsym; both merged) and load segments of an ELF file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_size, st.st_mtime_ns)
    if key in _ELF_CACHE:
        return _ELF_CACHE[key]
    try:
        with open(path, "rb") as f:
            data = f.read()
        sym = _parse_elf(path, data)
    except (OSError, struct.error, IndexError, ValueError):
        sym = None
    _ELF_CACHE[key] = sym
    return sym


def _parse_elf(path: str, data: bytes) -> ElfSymbols | None:
    if data[:4] != b"\x7fELF":
        return None
    is64 = data[4] == 2
    e = "<" if data[5] == 1 else ">"
    out = ElfSymbols(path)
    if is64:
        out.elf_type, = struct.unpack_from(e + "H", data, 16)
        phoff, shoff = struct.unpack_from(e + "QQ", data, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", data, 54)
    else:
        out.elf_type, = struct.unpack_from(e + "H", data, 16)
        phoff, shoff = struct.unpack_from(e + "II", data, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", data, 42)
    for i in range(phnum):
        o = phoff + i * phentsize
        if is64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz = struct.unpack_from(e + "IIQQQQQ", data, o)
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz, p_memsz = struct.unpack_from(e + "IIIIII", data, o)
        if p_type == PT_LOAD:
            out.loads.append((p_offset, p_vaddr, p_filesz, p_memsz))
    sections = []
    for i in range(shnum):
        o = shoff + i * shentsize
        if is64:
            _name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, _info, _align, sh_entsize = struct.unpack_from(e + "IIQQQQIIQQ", data, o)
        else:
            _name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, _info, _align, sh_entsize = struct.unpack_from(e + "IIIIIIIIII", data, o)
        sections.append((sh_type, sh_offset, sh_size, sh_link, sh_entsize))
    found: dict[int, tuple[int, str]] = {}
    objects: dict[int, tuple[int, str]] = {}
    for sh_type, sh_offset, sh_size, sh_link, sh_entsize in sections:
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or not sh_entsize or sh_link >= len(sections):
            continue
        str_off, str_size = sections[sh_link][1], sections[sh_link][2]
        strtab = data[str_off:str_off + str_size]
        for j in range(sh_size // sh_entsize):
            o = sh_offset + j * sh_entsize
            if is64:
                st_name, st_info, _other, st_shndx, st_value, st_size = struct.unpack_from(e + "IBBHQQ", data, o)
            else:
                st_name, st_value, st_size, st_info, _other, st_shndx = struct.unpack_from(e + "IIIBBH", data, o)
            if (st_info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC, STT_OBJECT) or st_value == 0 or st_shndx == 0:
                continue
            end = strtab.find(b"\0", st_name)
            name = strtab[st_name:end if end >= 0 else None].decode("utf-8", "replace")
            if st_info & 0xF == STT_OBJECT:
                if st_size and (st_value not in objects or objects[st_value][1].startswith("_")):
                    objects[st_value] = (st_size, name)
                continue
            prev = found.get(st_value)
            # Prefer a global name over a local alias, and .symtab (read first) over .dynsym.
            if prev is None or (prev[1].startswith("_") and not name.startswith("_")):
                found[st_value] = (st_size, name)
    for value in sorted(found):
        size, name = found[value]
        out.starts.append(value)
        out.ends.append(value + size)
        out.names.append(name)
        out.exact[value] = name
    for value in sorted(objects):
        size, name = objects[value]
        out.objects[0].append(value)
        out.objects[1].append(value + size)
        out.objects[2].append(name)
    return out


# ---------------------------------------------------------------- process maps


@dataclass
class Mapping:
    start: int
    end: int
    offset: int
    path: str


def parse_maps(text: str) -> list[Mapping]:
    """Executable file mappings of a /proc/PID/maps text."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or "x" not in parts[1]:
            continue
        path = parts[5].strip()
        if not path.startswith("/") or path.endswith(" (deleted)"):
            continue
        lo, hi = parts[0].split("-")
        out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), path))
    out.sort(key=lambda m: m.start)
    return out


class Image:
    """One process image: its mappings (first map and exit map merged) and symbol lookup."""

    def __init__(self, texts: list[str]):
        seen = {}
        for text in texts:
            for m in parse_maps(text):
                seen.setdefault((m.start, m.end), m)
        self.maps = sorted(seen.values(), key=lambda m: m.start)
        self.starts = [m.start for m in self.maps]

    def resolve_one(self, addr: int) -> str | None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr >= self.maps[i].end:
            return None
        m = self.maps[i]
        elf = read_elf(m.path)
        if elf is None:
            return None
        file_off = addr - m.start + m.offset
        vaddr = elf.file_offset_to_vaddr(file_off)
        if vaddr is None:
            return None
        name = elf.lookup(vaddr)
        if name is None and elf.elf_type == 2:
            name = elf.lookup(addr)
        return name


    def resolve_object(self, addr: int) -> str | None:
        """The static object (a variable in .data or .bss) at a data address, named by its ELF
        symbol: the object file whose load segments, placed where the process mapped its code,
        cover the address."""
        for m in self.maps:
            elf = read_elf(m.path)
            if elf is None or not elf.objects[0]:
                continue
            at = elf.file_offset_to_vaddr(m.offset)
            span = elf.span()
            if at is None or span is None:
                continue
            bias = m.start - at
            if span[0] <= addr - bias < span[1]:
                return elf.lookup_object(addr - bias)
        return None


def resolve(maps_or_binary, addresses) -> list[str | None]:
    """Names of `addresses`. `maps_or_binary`: a maps file (path or text, as written into the
    trace), or an ELF file whose addresses are link-time ones (non-PIE, or offsets from a
    load address of 0)."""
    addresses = [int(a) for a in addresses]
    text = None
    if isinstance(maps_or_binary, (str, os.PathLike)):
        p = Path(maps_or_binary)
        if "\n" not in str(maps_or_binary) and p.is_file():
            with open(p, "rb") as f:
                head = f.read(4)
            if head == b"\x7fELF":
                elf = read_elf(str(p))
                return demangle([elf.lookup(a) if elf else None for a in addresses])
            text = p.read_text(errors="replace")
        else:
            text = str(maps_or_binary)
    image = Image([text or ""])
    return demangle([image.resolve_one(a) for a in addresses])


def demangle(names: list[str | None]) -> list[str | None]:
    mangled = sorted({n for n in names if n and n.startswith("_Z")})
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return names
    try:
        out = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True, timeout=30).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return names
    table = dict(zip(mangled, out)) if len(out) == len(mangled) else {}
    return [table.get(n, n) if n else n for n in names]


class Symbolizer:
    """Resolves function addresses of a trace's processes from the maps the recorder wrote."""

    def __init__(self, trace):
        self.trace = Path(trace)
        groups: dict[int, dict[int, list[Path]]] = {}
        raw_dir = self.trace / "raw"
        if raw_dir.is_dir():
            for p in raw_dir.iterdir():
                m = _MAPS_RE.match(p.name)
                if m:
                    groups.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), []).append(p)
        self._files = {pid: sorted(g.items()) for pid, g in groups.items()}
        self._images: dict[tuple[int, int], Image] = {}

    def pids(self) -> list[int]:
        return sorted(self._files)

    def _image(self, pid: int, start_ns: int) -> Image:
        key = (pid, start_ns)
        img = self._images.get(key)
        if img is None:
            files = dict(self._files[pid])[start_ns]
            files = sorted(files, key=lambda p: p.name.endswith("-exit.txt"))
            img = self._images[key] = Image([p.read_text(errors="replace") for p in files])
        return img

    def resolve(self, pid: int, addresses, ts_ns=None) -> list[str | None]:
        images = self._files.get(int(pid))
        addresses = [int(a) for a in addresses]
        if not images:
            return [None] * len(addresses)
        starts = [s for s, _ in images]
        out = []
        for j, addr in enumerate(addresses):
            k = 0
            if ts_ns is not None and len(starts) > 1:
                k = max(bisect.bisect_right(starts, int(ts_ns[j])) - 1, 0)
            out.append(self._image(int(pid), starts[k]).resolve_one(addr))
        return demangle(out)


    def resolve_objects(self, pid: int, addresses) -> list[str | None]:
        """Names of static objects at data addresses of a process (None where none), from any of
        its maps: a static object does not move while its image runs."""
        images = self._files.get(int(pid)) or []
        out = []
        for addr in (int(a) for a in addresses):
            name = None
            for start, _ in images:
                name = self._image(int(pid), start).resolve_object(addr)
                if name:
                    break
            out.append(name)
        return demangle(out)


def name_objects(trace, addresses_by_pid: dict) -> dict[int, str]:
    """{address: symbol} of the sync objects (locks, barriers, condition variables) that are
    static variables, from the processes' maps (the recorder writes one at a process's first
    synchronisation record: crates/recorder/src/funcs.rs). An address that names different
    objects in different processes keeps its hex name."""
    sym = Symbolizer(trace)
    out: dict[int, str] = {}
    clash: set[int] = set()
    for pid, addrs in addresses_by_pid.items():
        addrs = sorted(set(int(a) for a in addrs))
        if not addrs or int(pid) not in sym._files:
            continue
        for a, name in zip(addrs, sym.resolve_objects(int(pid), addrs)):
            if name is None:
                continue
            if out.setdefault(a, name) != name:
                clash.add(a)
    return {a: n for a, n in out.items() if a not in clash}


# ---------------------------------------------------------------- filters


def function_filter(pattern: str | None):
    """A predicate on names from comma-separated globs; `!glob` excludes; None matches all."""
    if not pattern:
        return lambda name: True
    parts = [p.strip() for p in pattern.split(",") if p.strip()]
    excludes = [p[1:] for p in parts if p.startswith("!")]
    includes = [p for p in parts if not p.startswith("!")] or ["*"]

    def keep(name):
        name = name or ""
        if any(fnmatch.fnmatchcase(name, p) for p in excludes):
            return False
        return any(fnmatch.fnmatchcase(name, p) for p in includes)

    return keep


def import_settings(trace) -> dict:
    """The import-time function filters: raw/autoinstrument.json, then the environment."""
    settings = {}
    try:
        settings.update(json.loads((Path(trace) / "raw" / "autoinstrument.json").read_text()))
    except (OSError, ValueError):
        pass
    if os.environ.get("OSLENS_FUNC_FILTER"):
        settings["func_filter"] = os.environ["OSLENS_FUNC_FILTER"]
    if os.environ.get("OSLENS_FUNC_MIN_NS"):
        settings["func_min_ns"] = os.environ["OSLENS_FUNC_MIN_NS"]
    return settings


# ---------------------------------------------------------------- importer extension


def name_functions(trace, names_by_pid: dict, pid, address, call_site, begin_ns, sym: Symbolizer | None = None,
                   cache: dict | None = None) -> list[str | None]:
    """Names for the rows of a functions table given as columns (numpy arrays or lists).
    `sym`, `cache` ({(pid, address): name} of processes with one image): kept from one call to
    the next where a table is named a batch at a time, so each address is resolved once."""
    import numpy as np

    pid = np.asarray(pid, dtype=np.int64)
    address = np.asarray(address, dtype=np.uint64)
    call_site = np.asarray(call_site, dtype=np.uint64)
    begin_ns = np.asarray(begin_ns, dtype=np.int64)
    # names laid out through object arrays: one Python call per distinct name, not per row
    out = np.full(len(pid), None, dtype=object)
    for p in np.unique(pid):
        rows = np.flatnonzero(pid == p)
        names = names_by_pid.get(int(p), {})
        py = rows[call_site[rows] == 0]
        if len(py):
            ids, inverse = np.unique(address[py], return_inverse=True)
            out[py] = _objects([names.get((NAME_FUNCTION, int(a))) for a in ids.tolist()])[inverse.reshape(-1)]
        native = rows[call_site[rows] != 0]
        if len(native) == 0:
            continue
        if sym is None:
            sym = Symbolizer(trace)
        # One lookup per distinct (address, image).
        addrs = address[native]
        uniq, inverse = np.unique(addrs, return_inverse=True)
        if len(sym._files.get(int(p), [])) > 1:
            out[native] = _objects(sym.resolve(int(p), addrs.tolist(), begin_ns[native].tolist()))
        else:
            resolved = _resolve_cached(sym, int(p), uniq.tolist(), {} if cache is None else cache)
            out[native] = _objects(resolved)[inverse.reshape(-1)]
    return out.tolist()


def _objects(values: list):
    """A list as a 1-D object array (never a 2-D one, whatever its items)."""
    import numpy as np

    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _resolve_cached(sym: Symbolizer, pid: int, addresses: list[int], cache: dict) -> list[str | None]:
    """sym.resolve(pid, addresses) of a process with one image, each address resolved once
    (a name depends only on its address: resolve_one, then demangling name by name)."""
    missing = [a for a in addresses if (pid, a) not in cache]
    if missing:
        cache.update(zip(((pid, a) for a in missing), sym.resolve(pid, missing)))
    return [cache[(pid, a)] for a in addresses]


class FunctionNamer:
    """Fills a functions table's name column and applies the import-time filters, a table (or
    a batch of one) at a time: the same rows, names and filters whatever the batches."""

    def __init__(self, trace, names_by_pid: dict):
        self.trace, self.names_by_pid = trace, names_by_pid
        settings = import_settings(trace) if trace else {}
        self.pred = function_filter(settings["func_filter"]) if settings.get("func_filter") else None
        self.min_ns = int(settings["func_min_ns"]) if settings.get("func_min_ns") else None
        self.sym = Symbolizer(trace) if trace else None
        self.cache: dict = {}

    def __call__(self, f):
        import numpy as np
        import pyarrow as pa

        names = name_functions(self.trace, self.names_by_pid, f["pid"].to_numpy(), f["address"].to_numpy(),
                               f["call_site"].to_numpy(), f["begin_ns"].to_numpy(), self.sym, self.cache)
        col = pa.array(names, pa.string())
        idx = f.column_names.index("name")
        f = f.set_column(idx, pa.field("name", f.schema.field("name").type), col.cast(f.schema.field("name").type))
        keep = None
        if self.pred is not None:
            keep = np.array([self.pred(n) for n in names], dtype=bool)
        if self.min_ns is not None:
            long_enough = f["duration_ns"].to_numpy() >= self.min_ns
            keep = long_enough if keep is None else keep & long_enough
        return f if keep is None else f.filter(pa.array(keep))


def extend(tables: dict, context: dict) -> None:
    """Importer extension: fills functions.name, then applies the import-time filters. A table
    the import's pass wrote (app_tables.WrittenTable) is read, named and written again a row
    group at a time, never whole (docs/trace-schema.md, "Import memory")."""
    import pyarrow as pa

    f = tables.get("functions")
    if f is None or f.num_rows == 0:
        return
    namer = FunctionNamer(context.get("trace"), context.get("names") or {})
    if not isinstance(f, pa.Table):
        tables["functions"] = _rewrite_written(f, namer)
    elif "name" in f.column_names:
        tables["functions"] = namer(f)


def _rewrite_written(f, namer: FunctionNamer):
    """A WrittenTable of functions patched (rows written before their calls ended), named and
    filtered into a new file, a batch at a time (app_tables.rewrite)."""
    from oslens.store import app_tables

    out = f.path.with_name(f.path.stem + "-named.parquet")
    rows = app_tables.rewrite(f, out, lambda t, first: namer(f.patch(t, first)))
    return app_tables.WrittenTable(out, rows, f.peak_rows, f.group_rows)
