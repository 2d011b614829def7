"""The traced program's environment for auto-instrumentation (called by `oslens record`).

- `--preload` (default: on for dynamically linked programs): LD_PRELOAD of liboslens.so, which
  holds the pthread / semaphore / thread / fork / exec / exit wrappers (on only when it is
  preloaded: crates/recorder/src/interpose) and whose `__cyg_profile_func_enter/exit` take
  precedence over glibc's no-op ones: a program built with -finstrument-functions is traced
  without linking -loslens. One library, so a process started under oslens loads one object.
- `--trace-python FILTER`: a `sitecustomize` directory prepended to PYTHONPATH that starts the
  Python function tracer (oslens.instrument) for functions whose qualified name matches FILTER.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from oslens import paths
from oslens.errors import OslensError

PYSITE = Path(__file__).resolve().parent / "pysite"


def _find_library(name: str) -> Path | None:
    for d in (paths.library_dir(), paths.REPO_ROOT / "target" / "release"):
        p = d / name
        if p.is_file():
            return p
    return None


def recorder_library() -> Path | None:
    lib = paths.liboslens()
    return lib if lib.is_file() else _find_library("liboslens.so")


def preload_library() -> Path | None:
    """The library `--preload` loads: liboslens.so itself, which holds the wrappers."""
    return recorder_library()


def resolve_program(exe: str, env: dict | None = None) -> Path | None:
    if "/" in exe:
        return Path(exe)
    found = shutil.which(exe, path=(env or os.environ).get("PATH"))
    return Path(found) if found else None


def _interpreter_of_script(path: Path) -> Path | None:
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    if not words:
        return None
    interp = Path(os.fsdecode(words[0]))
    if interp.name == "env" and len(words) > 1:  # #!/usr/bin/env python3
        return resolve_program(os.fsdecode(words[1]))
    return interp


def _same_machine(is64: bool, machine: int) -> bool:
    import platform

    ours = {"x86_64": 62, "aarch64": 183, "riscv64": 243, "ppc64le": 21, "s390x": 22}.get(platform.machine())
    return is64 and (ours is None or machine == ours)


def is_dynamic(path: Path, _depth: int = 0) -> bool | None:
    """True when the ELF has a PT_INTERP or PT_DYNAMIC segment (LD_PRELOAD applies), False for
    a static executable or one of another word size / architecture, None when it is not an ELF
    file we can read. Scripts are judged by their interpreter."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if ident[:2] == b"#!" and _depth < 4:
                interp = _interpreter_of_script(path)
                return is_dynamic(interp, _depth + 1) if interp else None
            if len(ident) < 64 or ident[:4] != b"\x7fELF":
                return None
            is64 = ident[4] == 2
            endian = "<" if ident[5] == 1 else ">"
            machine, = struct.unpack_from(endian + "H", ident, 18)
            if not _same_machine(is64, machine):
                return False  # a 32-bit or foreign program: our 64-bit libraries cannot load
            if is64:
                phoff, = struct.unpack_from(endian + "Q", ident, 32)
                phentsize, phnum = struct.unpack_from(endian + "HH", ident, 54)
            else:
                phoff, = struct.unpack_from(endian + "I", ident, 28)
                phentsize, phnum = struct.unpack_from(endian + "HH", ident, 42)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return None
    for i in range(phnum):
        p_type, = struct.unpack_from(endian + "I", table, i * phentsize)
        if p_type in (2, 3):  # PT_DYNAMIC, PT_INTERP
            return True
    return False


def _function_filters(env: dict, options: dict) -> dict:
    """-finstrument-functions filters: OSLENS_FUNC_MIN_NS is applied while recording (calls
    shorter than it are not written), OSLENS_FUNC_FILTER (name globs, `!` excludes) at import.
    Options `func_min_ns` / `func_filter` (if the CLI passes them) override the environment.
    They are kept in raw/autoinstrument.json so a later import applies them too."""
    out = {}
    min_ns = options.get("func_min_ns") or env.get("OSLENS_FUNC_MIN_NS")
    if min_ns:
        env["OSLENS_FUNC_MIN_NS"] = str(int(min_ns))
        out["func_min_ns"] = int(min_ns)
    pattern = options.get("func_filter") or env.get("OSLENS_FUNC_FILTER")
    if pattern:
        env["OSLENS_FUNC_FILTER"] = pattern
        out["func_filter"] = pattern
    if options.get("trace_python"):
        out["python_filter"] = options["trace_python"]
    return out


def _write_settings(env: dict, settings: dict) -> None:
    trace = env.get("OSLENS_TRACE")
    if not trace or not settings:
        return
    raw_dir = Path(trace) / "raw"
    try:
        raw_dir.mkdir(parents=True, exist_ok=True)
        (raw_dir / "autoinstrument.json").write_text(json.dumps(settings, indent=1, sort_keys=True))
    except OSError:
        pass


def environment(env: dict, options: dict) -> dict:
    env = dict(env)
    command = options.get("command") or []
    want = options.get("preload")
    if want is None and command:
        exe = resolve_program(command[0], env)
        want = bool(exe and is_dynamic(exe))
    if want:
        lib = preload_library()
        if lib is None:
            if options.get("preload"):
                raise OslensError("--preload needs liboslens.so, which is not built; run 'make' first", 2)
        else:
            # ours first, and any other liboslens.so of theirs left out: one recorder per process
            theirs = [e for e in env.get("LD_PRELOAD", "").replace(":", " ").split() if Path(e).name != lib.name]
            env["LD_PRELOAD"] = " ".join([str(lib)] + theirs)
            # read by the wrappers: every lock acquisition recorded, not only contended ones
            env.pop("OSLENS_SYNC", None)
            if options.get("sync") == "all":
                env["OSLENS_SYNC"] = "all"
    pattern = options.get("trace_python")
    if pattern:
        env["OSLENS_PYTHON_FILTER"] = pattern
    # The sitecustomize hook also makes `import oslens` work in any Python 3 the program runs.
    env["PYTHONPATH"] = os.pathsep.join([str(PYSITE)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(PYSITE)])
    env["OSLENS_PYTHON_PACKAGE"] = str(paths.PACKAGE_DIR.parent)
    settings = _function_filters(env, options)
    if want:
        settings["preload"] = env.get("LD_PRELOAD", "")
    _write_settings(env, settings)
    return env
