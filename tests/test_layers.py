"""The import direction of proxy/: every arrow points down the layers, and no module imports
itself through others (docs/architecture.md, decision 0028).

The layers, low to high; a module may import from its own layer and the ones below it:

- ``proxy`` (the package: its version) and ``proxy.errors``;
- ``proxy.core``, sans-I/O, in its own order: ``domains`` and ``routes``, then ``http``,
  ``cache``, ``purge``, ``lease``, ``auth``, ``observe``;
- ``proxy.config``; ``proxy.wire``; ``proxy.state`` and ``proxy.store``; ``proxy.observe``;
  ``proxy.fleet``; ``proxy.edge``; ``proxy.api``; ``proxy.process``; ``proxy.cli``;
- ``proxy.__main__`` and ``proxy.demo_origin`` on top.

Every import counts, wherever it stands: at module level, inside a function (a lazy import
still says which module needs which), and under ``if TYPE_CHECKING:`` (an import kept there
to dodge a cycle is the cycle still, only hidden from the interpreter).

proxy/core is also checked for I/O: it imports neither aiohttp, asyncio, nor the modules that
reach the clock, the environment or sockets, and never asks ``datetime`` for the time. Callers
pass ``now`` in. This is the check pyproject.toml's ruff section points to.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

LAYERS: tuple[tuple[str, ...], ...] = (
    ("proxy", "proxy.errors"),
    ("proxy.core", "proxy.core.domains", "proxy.core.routes"),
    ("proxy.core.http",),
    ("proxy.core.cache",),
    ("proxy.core.purge",),
    ("proxy.core.lease", "proxy.core.peer"),
    ("proxy.core.auth",),
    ("proxy.core.observe",),
    ("proxy.config",),
    ("proxy.wire",),
    ("proxy.state", "proxy.store"),
    ("proxy.observe",),
    ("proxy.fleet",),
    ("proxy.edge",),
    ("proxy.api",),
    ("proxy.process",),
    ("proxy.cli",),
    ("proxy.__main__", "proxy.demo_origin"),
)
# What proxy/core may not import: servers and event loops, clocks, the environment, sockets.
BANNED_IN_CORE = frozenset(
    {"aiohttp", "asyncio", "time", "os", "socket", "ssl", "selectors", "subprocess", "threading"}
)
CLOCK_CALLS = frozenset({"now", "utcnow", "today"})  # datetime.now(), date.today(), ...

SOURCE = Path(__file__).resolve().parent.parent / "proxy"


def modules(source: Path) -> dict[str, Path]:
    """Every module under ``source`` (a package directory), by dotted name."""
    found = {}
    for path in sorted(source.rglob("*.py")):
        parts = path.relative_to(source.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in the module, resolved to a module of ``known`` when
    it names one (``from proxy.a import b`` is proxy.a.b when that is a module), else the
    module as written (a standard or third-party module, or a name in a package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in known else base


def clock_calls(path: Path) -> Iterator[int]:
    """Lines that ask datetime or date for the time."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in CLOCK_CALLS
            and isinstance(node.value, ast.Name)
            and node.value.id in {"datetime", "date"}
        ):
            yield node.lineno


def layer(module: str, layers: Sequence[Sequence[str]], root: str) -> int | None:
    """The index of the module's layer: the one naming it or its longest enclosing package
    (the ``root`` package names only itself); None when no layer does."""
    best: tuple[int, int] | None = None  # (length of the name that matched, layer)
    for index, names in enumerate(layers):
        for entry in names:
            inside = entry != root and module.startswith(entry + ".")
            if (module == entry or inside) and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def problems(source: Path, layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """Everything wrong with the imports of the package at ``source``, one line each. Its
    ``core`` subpackage is the sans-I/O one."""
    root, sans_io = source.name, source.name + ".core"
    known = modules(source)
    graph: dict[str, set[str]] = {name: set() for name in known}
    found = []
    for name, path in known.items():
        where = path.relative_to(source.parent)
        own = layer(name, layers, root)
        if own is None:
            found.append(f"{where}: {name} is in no layer")
            continue
        in_core = name == sans_io or name.startswith(sans_io + ".")
        for line, target in imported(name, path, known):
            if in_core and target.partition(".")[0] in BANNED_IN_CORE:
                found.append(f"{where}:{line}: core imports {target} (no I/O in core)")
            if target not in known or target == name:
                continue
            graph[name].add(target)
            theirs = layer(target, layers, root)
            if theirs is not None and theirs > own:
                found.append(f"{where}:{line}: {name} imports {target}, a layer above it")
        if in_core:
            found.extend(f"{where}:{line}: core reads the clock" for line in clock_calls(path))
    found.extend(f"import cycle among: {', '.join(cycle)}" for cycle in cycles(graph))
    return list(dict.fromkeys(found))  # one line per import statement, however many names


@pytest.mark.slow
def test_proxy_imports_point_down_without_cycles() -> None:
    assert problems(SOURCE) == []


def test_every_layer_names_a_module_or_package() -> None:
    """A layer left behind by a move would guard nothing. (proxy.wire is being created on
    another branch: it may not exist yet.)"""
    known = modules(SOURCE)
    for names in LAYERS:
        for entry in names:
            assert entry == "proxy.wire" or entry in known, entry


# The checker itself, on small fake trees: each rule can fail.

FAKE_LAYERS = (("pkg", "pkg.low"), ("pkg.core",), ("pkg.high",))


def fake_tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    source = tmp_path / "pkg"
    for relative, text in {"__init__.py": "", **files}.items():
        path = source / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return source


def fake_problems(tmp_path: Path, files: Mapping[str, str]) -> list[str]:
    return problems(fake_tree(tmp_path, files), FAKE_LAYERS)


def test_a_tree_that_keeps_its_layers_has_no_problems(tmp_path: Path) -> None:
    files = {
        "low.py": "import json\n",
        "core/__init__.py": "",
        "core/rules.py": "from pkg import low\nfrom . import more\n",
        "core/more.py": "from pkg.low import thing\n",
        "high.py": "import asyncio\nfrom pkg.core.rules import x\n",
    }
    assert fake_problems(tmp_path, files) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"low.py": "from pkg.high import x\n", "high.py": ""},
            ["pkg/low.py:1: pkg.low imports pkg.high, a layer above it"],
        ),
        (  # inside a function: a lazy import is an arrow all the same
            {"low.py": "def f():\n    from pkg import high\n", "high.py": ""},
            ["pkg/low.py:2: pkg.low imports pkg.high, a layer above it"],
        ),
        (  # under TYPE_CHECKING, and relative
            {
                "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from .high import x\n",
                "high.py": "",
            },
            ["pkg/low.py:3: pkg.low imports pkg.high, a layer above it"],
        ),
        (
            {
                "core/__init__.py": "",
                "core/a.py": "from pkg.core import b\n",
                "core/b.py": "import pkg.core.a\n",
            },
            ["import cycle among: pkg.core.a, pkg.core.b"],
        ),
        (
            {"core/__init__.py": "", "core/a.py": "import asyncio\nfrom time import monotonic\n"},
            [
                "pkg/core/a.py:1: core imports asyncio (no I/O in core)",
                "pkg/core/a.py:2: core imports time (no I/O in core)",
            ],
        ),
        (
            {
                "core/__init__.py": "",
                "core/a.py": "from datetime import datetime\nx = datetime.now()\n",
            },
            ["pkg/core/a.py:2: core reads the clock"],
        ),
        ({"stray.py": ""}, ["pkg/stray.py: pkg.stray is in no layer"]),
    ],
)
def test_the_checker_finds_each_problem(
    tmp_path: Path, files: Mapping[str, str], expected: list[str]
) -> None:
    assert fake_problems(tmp_path, files) == expected
