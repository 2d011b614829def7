"""The import is a pipeline of modules with small public surfaces: no store module reaches into
another module's private names (`mod._name`, `from mod import _name`), so each step can change
inside without breaking the others."""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parent


def private_reaches(path: Path) -> list[str]:
    """`module._name` and `from module import _name` in a file, for the oslens modules it imports."""
    tree = ast.parse(path.read_text())
    ours: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("oslens"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") and a.name != "_native":
                    found.append(f"{path.name}:{node.lineno}: from {node.module} import {a.name}")
                ours.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            ours.update(a.asname or a.name for a in node.names if a.name.startswith("oslens"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ours
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_store_module_reaches_into_another_modules_private_names():
    files = [p for p in sorted(STORE.glob("*.py")) if not p.name.startswith("test_") and not p.name.endswith("_oracle.py")]
    assert [f for p in files for f in private_reaches(p)] == []
