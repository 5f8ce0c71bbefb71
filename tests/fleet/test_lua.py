"""The fleet's Lua scripts (proxy/fleet/lua/): each ``.lua`` file's header names the keys and
arguments its ``Script`` names, in the same order; the Lua reads exactly those (no index
beyond them, every argument named); calls are built by name; the purges' keys go with a
call only when it carries figures; and luacheck finds nothing to say about any script as
Valkey runs it."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from proxy.fleet import lua

LUA = resources.files("proxy.fleet.lua")
BY_NAME = pytest.mark.parametrize("script", lua.SCRIPTS, ids=lambda s: s.name)


def header(script: lua.Script[...], field: str) -> str:
    """The words after ``-- FIELD:`` in the script's own file."""
    text = (LUA / f"{script.name}.lua").read_text(encoding="utf-8")
    [line] = re.findall(rf"^-- {field}: (.*)$", text, re.MULTILINE)
    return str(line)


def read_indices(script: lua.Script[...], table: str) -> set[int]:
    """The literal indices the Lua (prelude included, comments left out) reads from KEYS
    or ARGV."""
    code = re.sub(r"--[^\n]*", "", script.source())
    return {int(i) for i in re.findall(rf"\b{table}\[(\d+)\]", code)}


def test_every_lua_file_is_a_script_or_the_prelude() -> None:
    files = {p.name for p in LUA.iterdir() if p.name.endswith(".lua")}
    assert files == {f"{s.name}.lua" for s in lua.SCRIPTS} | {"prelude.lua"}


@BY_NAME
def test_the_header_names_the_keys_in_order(script: lua.Script[...]) -> None:
    taken = " ".join(script.key_names())
    extra = script.key_names(figures=True)[script.keys :]
    expected = f"{taken} [{' '.join(extra)}]" if extra else taken
    assert header(script, "KEYS") == expected


@BY_NAME
def test_the_header_names_the_arguments_in_order(script: lua.Script[...]) -> None:
    names = [*script.argv, *([f"{script.rest}..."] if script.rest else [])]
    assert header(script, "ARGV") == (" ".join(names) or "(none)")


@BY_NAME
def test_the_lua_reads_the_last_key_it_takes_and_none_beyond(script: lua.Script[...]) -> None:
    """A script takes no key it does not read (each is packed and copied on every call)."""
    assert max(read_indices(script, "KEYS")) == len(script.key_names(figures=True))


@BY_NAME
def test_the_lua_reads_every_argument_named_and_none_beyond(script: lua.Script[...]) -> None:
    """ARGV past the named ones is read only as the ``rest`` list (by a computed index)."""
    assert read_indices(script, "ARGV") == set(range(1, len(script.argv) + 1))


def test_the_prelude_reads_only_the_keys_of_every_script_that_uses_it() -> None:
    prelude = lua.Script("prelude", keys=0, args=lambda: (), prelude=False)
    assert header(prelude, "KEYS").split() == [n for n, _ in lua.KEYS[:9]]
    assert max(read_indices(prelude, "KEYS")) == 9
    assert all(s.keys >= 9 for s in lua.SCRIPTS if s.prelude)


@BY_NAME
def test_args_puts_each_argument_where_its_name_is(script: lua.Script[...]) -> None:
    """The builder's tuple is its arguments in the order its parameters name them (the
    order the header names them), and the list after them."""
    named = {name: f"<{name}>" for name in script.argv}
    rest = [f"<{script.rest}>", "<more>"] if script.rest else []
    built = script.args(**named, **({script.rest: rest} if script.rest else {}))
    assert built == (*named.values(), *rest)


def test_calls_are_built_by_name() -> None:
    args = lua.SYNC.args(
        info="{}",
        member="m",
        applied=7,
        lease_ms=500,
        fresh_epoch="e2",
        member_epoch="e1",
        domains=("a.test", "b.test"),
    )
    assert args == ("m", 500, "e1", 7, "e2", "{}", "a.test", "b.test")
    assert lua.RECORDS.args(highest=9, lowest=3) == (3, 9)
    assert lua.MEMBERS.args() == ()


@pytest.mark.parametrize(
    "values",
    [
        {"lowest": 1},  # one missing
        {"lowest": 1, "highest": 2, "more": 3},  # one too many
        {"lowest": 1, "highst": 2},  # misspelt
    ],
)
def test_a_call_with_other_arguments_than_named_is_refused(values: dict[str, int]) -> None:
    with pytest.raises(TypeError, match="argument"):
        lua.RECORDS.args(**values)


def test_the_purges_keys_go_with_a_clear_or_ack_only_when_it_carries_figures() -> None:
    every = tuple(key for _, key in lua.KEYS)
    for script in (lua.CLEAR, lua.ACK):
        assert script.keys_for() == every[:9]
        assert script.keys_for(figures=True) == every
        assert script.keys_for(figures=True)[-1] == "{cdn}:figures"
    with pytest.raises(ValueError, match="the sync script takes no figures"):
        lua.SYNC.keys_for(figures=True)


def luacheck(*files: Path) -> subprocess.CompletedProcess[str]:
    found = shutil.which("luacheck")
    assert found, "luacheck is required (apt-get install lua-check; scripts/test does)"
    rc = str(LUA / ".luacheckrc")
    return subprocess.run(
        [found, "--config", rc, "--no-color", "--codes", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_luacheck_finds_nothing_in_any_script(tmp_path: Path) -> None:
    """Each script as Valkey runs it (the prelude first), so every function it calls is
    defined and every local it makes is used."""
    for script in lua.SCRIPTS:
        (tmp_path / f"{script.name}.lua").write_text(script.source(), encoding="utf-8")
    checked = luacheck(*sorted(tmp_path.iterdir()))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"0 warnings / 0 errors in {len(lua.SCRIPTS)} files" in checked.stdout


@pytest.mark.slow
def test_luacheck_fails_on_a_warning(tmp_path: Path) -> None:
    """The check above can fail: a script that reads a global Valkey does not have."""
    source = lua.CLEAR.source().replace("local hint = id", "local hint = nowhere .. id")
    (tmp_path / "clear.lua").write_text(source, encoding="utf-8")
    checked = luacheck(tmp_path / "clear.lua")
    assert checked.returncode != 0
    assert "(W113) accessing undefined variable 'nowhere'" in checked.stdout
