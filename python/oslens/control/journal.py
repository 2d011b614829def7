"""The restore journal: every global change (sysctl, sysfs device setting, THP mode, a cgroup
oslens made) is written to a journal file BEFORE it is made, and undone in reverse order when
the run ends, on SIGINT/SIGTERM, or — after a SIGKILL — by the next oslens run, which finds
journals whose owner process is gone (`recover()`).

The default directory is /run/oslens for root (a tmpfs: a reboot resets the settings and
the journals together), else $XDG_RUNTIME_DIR/oslens or /tmp/oslens-UID; OSLENS_STATE_DIR
overrides it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from oslens.control import sysfs
from oslens.errors import OslensError

STATE_ENV = "OSLENS_STATE_DIR"
PREFIX = "tune-"


def state_dir() -> Path:
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/oslens")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.access(runtime, os.W_OK):
        return Path(runtime) / "oslens"
    return Path(f"/tmp/oslens-{os.geteuid()}")


def _starttime(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a live owner from a recycled pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(text.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def owner_alive(doc: dict) -> bool:
    start = _starttime(int(doc.get("pid", -1)))
    return start is not None and start == doc.get("starttime")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_value(path: Path, bracketed: bool) -> str | None:
    text = sysfs.read(path)
    if text is None:
        return None
    if bracketed:
        return sysfs.bracketed(text)[1]
    return text


class Journal:
    """One run's journal. Use `set_file` and `make_cgroup` for every global change, then
    `restore()` (idempotent) at the end."""

    def __init__(self, directory: Path | None = None, pid: int | None = None, command=None,
                 tool: str = "oslens tune"):
        self.dir = Path(directory) if directory is not None else state_dir()
        self.pid = pid if pid is not None else os.getpid()
        self.path = self.dir / f"{PREFIX}{self.pid}.json"
        self.doc = {"version": 1, "pid": self.pid, "starttime": _starttime(self.pid),
                    "created": time.time(), "command": list(command or []), "tool": tool, "entries": []}
        self.restored = False

    # -- persistence -------------------------------------------------------------------
    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.dir)

    @property
    def entries(self) -> list[dict]:
        return self.doc["entries"]

    def _conflict(self, path: str) -> None:
        for other in live_journals(self.dir):
            if other.get("pid") == self.pid:
                continue
            for e in other.get("entries", []):
                if e.get("path") == path:
                    raise OslensError(f"{path} is already changed by another oslens tune (pid {other['pid']}); "
                                      "wait for it to finish or remove that setting from the plan", 1)

    # -- changes -----------------------------------------------------------------------
    def set_file(self, path: Path, value: str, what: str, bracketed: bool = False) -> str | None:
        """Journal the current value of `path`, then write `value`. Returns the old value."""
        path = Path(path)
        old = read_value(path, bracketed)
        if old is None:
            raise OslensError(f"cannot read {path}; the setting '{what}' is not available here", 1)
        self._conflict(str(path))
        entry = {"kind": "file", "path": str(path), "old": old, "new": str(value), "what": what,
                 "bracketed": bracketed, "t": time.time()}
        self.entries.append(entry)
        self._save()
        try:
            sysfs.write(path, str(value))
        except OSError as e:
            self.entries.pop()
            self._save()
            raise OslensError(f"cannot set {what} to {value} ({path}: {e.strerror}); "
                              "check the value and that you are root", 1) from e
        entry["set"] = read_value(path, bracketed)  # what the kernel made of it (e.g. rounded)
        self._save()
        return old

    def make_cgroup(self, path: Path, what: str, plain_dir: bool = False) -> None:
        """Journal, then create, a cgroup directory. plain_dir: it is an ordinary directory
        (a fake tree in tests), whose files must be deleted before it can be removed."""
        self._make_dir(Path(path), {"kind": "cgroup", "what": what, "plain_dir": plain_dir}, "cgroup")

    def make_tracing_instance(self, path: Path, what: str) -> None:
        """Journal, then create, an ftrace instance (a tracefs directory: removing it removes
        its events' filters, triggers and buffer)."""
        self._make_dir(Path(path), {"kind": "tracing_instance", "what": what}, "ftrace instance")

    def mount(self, fstype: str, target: Path, what: str) -> None:
        """Journal, then make, a mount of a kernel file system (tracefs for the labs' kernel
        stacks) on an existing directory; restored by unmounting it."""
        target = Path(target)
        self.entries.append({"kind": "mount", "path": str(target), "fstype": fstype, "what": what, "t": time.time()})
        self._save()
        proc = subprocess.run(["mount", "-t", fstype, fstype, str(target)], capture_output=True, text=True)
        if proc.returncode != 0:
            self.entries.pop()
            self._save()
            reason = (proc.stderr.strip().splitlines() or ["mount failed"])[-1]
            raise OslensError(f"cannot mount {fstype} on {target} ({reason}); run as root", 1)

    def zram_device(self, sysdir: Path, node: Path, what: str) -> None:
        """Journal a zram device about to be sized (zram.py); restored by turning off any swap on
        it and writing its `reset`, which puts disksize back to 0."""
        self.entries.append({"kind": "zram", "path": str(sysdir), "device": str(node), "what": what, "t": time.time()})
        self._save()

    def swap_on(self, node: Path, what: str) -> None:
        """Journal swap about to be turned on on `node` (then swapon it); restored by swapoff."""
        self.entries.append({"kind": "swap", "path": str(node), "what": what, "t": time.time()})
        self._save()

    def _make_dir(self, path: Path, entry: dict, thing: str) -> None:
        self.entries.append({**entry, "path": str(path), "t": time.time()})
        self._save()
        try:
            path.mkdir()
        except FileExistsError:
            pass
        except OSError as e:
            self.entries.pop()
            self._save()
            raise OslensError(f"cannot create the {thing} {path} ({e.strerror}); run as root", 1) from e

    def restore(self) -> list[str]:
        """Undo every change in reverse order. Returns one line per problem (empty = all
        restored); the journal file is removed only when everything was restored."""
        problems = restore_entries(self.entries)
        self.restored = True
        if not all(e.get("done") for e in self.entries):
            self._save()  # the next oslens run retries what is left
        else:
            self.discard()
        return problems

    def discard(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def remove_cgroup(path: Path, wait_s: float = 3.0, plain_dir: bool = False) -> str | None:
    """Move any task left in the cgroup to its parent, then remove it. None when gone."""
    if not path.exists():
        return None
    if plain_dir:
        for child in path.iterdir():
            if child.is_file():
                child.unlink()
    deadline = time.monotonic() + wait_s
    while True:
        procs = sysfs.read(path / "cgroup.procs") or ""
        for pid in procs.split():
            try:
                sysfs.write(path.parent / "cgroup.procs", pid)
            except OSError:
                pass  # exited meanwhile
        try:
            path.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as e:
            if time.monotonic() > deadline:
                return f"cannot remove the cgroup {path} ({e.strerror}); remove it with rmdir after its tasks exit"
            time.sleep(0.05)


def mount_points() -> set[str]:
    try:
        return {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if len(line.split()) > 1}
    except OSError:
        return set()


def _swapped_on(device: str) -> bool:
    lines = (sysfs.read(Path("/proc/swaps")) or "").splitlines()[1:]
    return any(line.split()[:1] == [device] for line in lines)


def _restore_swap_device(e: dict) -> str | None:
    """swapoff (a "swap" entry, or a "zram" device still swapped on), then a zram device's reset.
    None when done."""
    device = e.get("device", e["path"])
    if _swapped_on(device):
        proc = subprocess.run(["swapoff", device], capture_output=True, text=True)
        if proc.returncode != 0 and _swapped_on(device):
            return f"cannot turn off swap on {device} ({proc.stderr.strip()}); turn it off by hand: swapoff {device}"
    if e["kind"] == "zram" and (sysfs.read_int(Path(e["path"]) / "disksize") or 0) != 0:
        try:
            sysfs.write(Path(e["path"]) / "reset", "1")
        except OSError as err:
            return (f"cannot reset the zram device {device} ({err.strerror}); reset it by hand: "
                    f"echo 1 > {e['path']}/reset")
    return None


def restore_entries(entries: list[dict]) -> list[str]:
    problems = []
    for e in reversed(entries):
        if e.get("done"):
            continue
        if e["kind"] == "file":
            path = Path(e["path"])
            try:
                current = read_value(path, e.get("bracketed", False))
                ours = e.get("set") or e["new"]
                if current != e["old"] and current not in (ours, None):
                    # someone else changed it after oslens did: putting ours back would undo theirs
                    e["done"] = True
                    problems.append(f"{e['what']} was changed by another program while oslens had it "
                                    f"(now {current}, oslens set {ours}, it was {e['old']}); left as it is")
                    continue
                if current != e["old"]:
                    sysfs.write(path, e["old"])
                e["done"] = True
            except OSError as err:
                problems.append(f"cannot restore {e['what']} to {e['old']} ({path}: {err.strerror}); "
                                f"write it back by hand: echo {e['old']} > {path}")
        elif e["kind"] == "mount":
            if e["path"] not in mount_points():
                e["done"] = True
                continue
            proc = subprocess.run(["umount", e["path"]], capture_output=True, text=True)
            if proc.returncode == 0:
                e["done"] = True
            else:
                problems.append(f"cannot unmount {e['fstype']} from {e['path']} ({proc.stderr.strip()}); "
                                f"unmount it by hand: umount {e['path']}")
        elif e["kind"] in ("swap", "zram"):
            msg = _restore_swap_device(e)
            if msg:
                problems.append(msg)
            else:
                e["done"] = True
        elif e["kind"] == "tracing_instance":
            try:
                Path(e["path"]).rmdir()
                e["done"] = True
            except FileNotFoundError:
                e["done"] = True
            except OSError as err:
                problems.append(f"cannot remove the ftrace instance {e['path']} ({err.strerror}); rmdir it by hand")
        elif e["kind"] == "cgroup":
            msg = remove_cgroup(Path(e["path"]), plain_dir=e.get("plain_dir", False))
            if msg:
                problems.append(msg)
            else:
                e["done"] = True
    return problems


def _journals(directory: Path):
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        if not (name.startswith(PREFIX) and name.endswith(".json")):
            continue
        path = directory / name
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        yield path, doc


def live_journals(directory: Path | None = None) -> list[dict]:
    directory = Path(directory) if directory is not None else state_dir()
    return [doc for _path, doc in _journals(directory) if owner_alive(doc)]


def recover(directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Restore what runs that died without restoring (SIGKILL, power loss of the process)
    left changed. Returns (what was restored, problems)."""
    directory = Path(directory) if directory is not None else state_dir()
    done, problems = [], []
    for path, doc in _journals(directory):
        if owner_alive(doc):
            continue
        entries = doc.get("entries", [])
        tool = doc.get("tool", "oslens tune")  # which oslens command was killed
        errs = restore_entries(entries)
        for e in reversed(entries):
            if e.get("done"):
                if e["kind"] == "file":
                    done.append(f"restored {e['what']} to {e['old']} (left changed by {tool} pid {doc.get('pid')})")
                elif e["kind"] == "mount":
                    done.append(f"unmounted {e['fstype']} from {e['path']} (left by {tool} pid {doc.get('pid')})")
                elif e["kind"] == "swap":
                    done.append(f"turned off swap on {e['path']} (left by {tool} pid {doc.get('pid')})")
                elif e["kind"] == "zram":
                    done.append(f"reset {e['device']} to disksize 0 (left by {tool} pid {doc.get('pid')})")
                else:
                    thing = "ftrace instance" if e["kind"] == "tracing_instance" else "cgroup"
                    done.append(f"removed {thing} {e['path']} (left by {tool} pid {doc.get('pid')})")
        problems.extend(errs)
        if not all(e.get("done") for e in entries):
            doc["entries"] = entries
            try:
                path.write_text(json.dumps(doc, indent=1))
            except OSError:
                pass
        else:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
    _remove_stale_plans(directory)
    return done, problems


def _remove_stale_plans(directory: Path) -> None:
    """Resolved plans (plan-PID.json) of runs that are gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith("plan-") and name.endswith(".json")):
            continue
        pid = name[5:-5]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                (directory / name).unlink()
            except OSError:
                pass
