"""proxy/wire sits above proxy.core and proxy.errors and below everything that does I/O
(CONVENTIONS "The shape"): it imports from nothing else of the project."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy.wire

ALLOWED = ("proxy.core", "proxy.errors", "proxy.wire")


def project_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "proxy" or name.startswith("proxy.")}


def test_wire_imports_only_core_and_errors() -> None:
    folder = Path(proxy.wire.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) >= 5
    for path in modules:
        upward = {
            name
            for name in project_imports(path)
            if not any(name == ok or name.startswith(ok + ".") for ok in ALLOWED)
        }
        assert not upward, f"{path.name} imports {sorted(upward)}"
