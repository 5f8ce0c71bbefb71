"""The fleet's Lua scripts, and the one place that names their keys and arguments (0014, 0026).

Each script is a ``.lua`` file here, package data, that Debian's ``luacheck`` reads
(``.luacheckrc``; a test runs it). A file opens with a comment that says what the script does,
then ``-- KEYS:`` and ``-- ARGV:`` lines that name what the script reads, in order. Each
``Script`` below says the same: the keys it takes (``keys_for`` gives a call's), and ``args``,
a function whose parameters name ARGV's items in order and which builds a call's ARGV from
them by name (mypy checks the names and types). tests/fleet/test_lua.py holds the header, the
``Script`` and the indices the Lua reads to each other, so nothing depends on the order of a
tuple written elsewhere.

Keys are numbered once for all scripts (``KEYS``): a script takes the first ``keys`` of them,
so ``KEYS[4]`` is the leases in every script, and the prelude's functions read the same keys
wherever they are put. All share the ``{cdn}`` hash tag: every script's keys live in one slot
of a cluster. A call packs and the server copies every key it names, and a clear makes one
call per worker, so a script takes no key beyond the last it reads; the clear and the ack take
the purges' four (``{cdn}:figures`` last) only when the call carries figures (``keys_for``;
decision 0026, "The cost of a clear").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Generic, ParamSpec

ACKED = "{cdn}:acked"  # pub/sub hint: the number of a clear every member waited for acked

# Every key a script may read, as (name, Valkey key), in order: the Lua's KEYS[i] is KEYS[i - 1].
KEYS: tuple[tuple[str, str], ...] = (
    ("epoch", "{cdn}:epoch"),  # hash: id, born (Valkey ms)
    ("seq", "{cdn}:seq"),  # the number of the last clear
    ("gen", "{cdn}:gen"),  # hash: domain -> the number of its last clear
    ("leases", "{cdn}:leases"),  # sorted set: member -> lease expiry (Valkey ms)
    ("acks", "{cdn}:acks"),  # hash: member -> last applied number in this epoch
    ("members", "{cdn}:members"),  # hash: member -> JSON for the Nodes page
    ("log", "{cdn}:log"),  # stream: one entry per clear
    ("waiting", "{cdn}:waiting"),  # set: the live members the latest clear waits for
    ("waitfor", "{cdn}:waitfor"),  # the latest clear's number
    # Purges other than clears (decision 0026):
    ("purges", "{cdn}:purges"),  # sorted set: "number domain kind soft items" by number
    ("floors", "{cdn}:floors"),  # hash: domain -> highest number of a record no longer kept
    ("pbytes", "{cdn}:pbytes"),  # the bytes of the records kept
    ("figures", "{cdn}:figures"),  # hash: number -> "reported entries bytes inexact" from acks
)
_VALKEY_KEYS = tuple(key for _, key in KEYS)
KEY = dict(KEYS)  # name -> Valkey key, for plain reads

Arg = str | int | float  # what one ARGV item is sent as
Argv = tuple[Arg, ...]
P = ParamSpec("P")


def _source(name: str) -> str:
    return (resources.files(__name__) / f"{name}.lua").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True, eq=False)
class Script(Generic[P]):
    """One Lua script: its file, the keys it takes (the first ``keys`` of ``KEYS``; all of
    them too when ``figures_keys`` and the call carries figures), and ``args``, which builds
    its ARGV: its parameters name ARGV's items in order (a last one that defaults to ``()``
    is the list that follows them), so calls name them, mypy checks the names and types,
    and a call costs no more than a tuple of its arguments. Each script is one object,
    compared and hashed by identity (a clear makes one call per worker)."""

    name: str
    keys: int
    args: Callable[P, Argv]
    figures_keys: bool = False
    prelude: bool = True
    _keys: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keys", _VALKEY_KEYS[: self.keys])

    @property
    def argv(self) -> tuple[str, ...]:
        """The names of ARGV's items, in order (the list after them left out)."""
        return tuple(p.name for p in self._parameters() if p.default is inspect.Parameter.empty)

    @property
    def rest(self) -> str | None:
        """The name of the list that follows them, if the script takes one."""
        rest = [p.name for p in self._parameters() if p.default is not inspect.Parameter.empty]
        return rest[0] if rest else None

    def _parameters(self) -> list[inspect.Parameter]:
        return list(inspect.signature(self.args).parameters.values())

    def source(self) -> str:
        """The Lua as Valkey runs it: the prelude first when the script uses it."""
        body = _source(self.name)
        return _source("prelude").replace("@ACKED@", ACKED) + body if self.prelude else body

    def key_names(self, *, figures: bool = False) -> tuple[str, ...]:
        count = len(KEYS) if figures and self.figures_keys else self.keys
        return tuple(name for name, _ in KEYS[:count])

    def keys_for(self, *, figures: bool = False) -> tuple[str, ...]:
        """The keys of one call: with figures (a clear or ack that carries them), the
        purges' keys too, up to ``{cdn}:figures``."""
        if not figures:
            return self._keys
        if not self.figures_keys:
            raise ValueError(f"the {self.name} script takes no figures")
        return _VALKEY_KEYS


# Each script's ARGV, built by name (tests/fleet/test_lua.py holds each builder's result to
# its parameters' order, and those to the header of its .lua file).


def _clear(
    domain: str, fresh_epoch: str, by: str, log_cap: int, channel: str, figures: str
) -> Argv:
    return (domain, fresh_epoch, by, log_cap, channel, figures)


def _sync(
    member: str,
    lease_ms: int,
    member_epoch: str,
    applied: int,
    fresh_epoch: str,
    info: str,
    domains: Sequence[str] = (),
) -> Argv:
    return (member, lease_ms, member_epoch, applied, fresh_epoch, info, *domains)


def _ack(member: str, epoch: str, number: int, figures: Sequence[int] = ()) -> Argv:
    return (member, epoch, number, *figures)


def _pending(fresh_epoch: str) -> Argv:
    return (fresh_epoch,)


def _members() -> Argv:
    return ()


def _purge(
    domain: str,
    fresh_epoch: str,
    by: str,
    log_cap: int,
    channel: str,
    kind: str,
    soft: str,
    items: str,
    kept_records: int,
    kept_bytes: int,
) -> Argv:
    return (domain, fresh_epoch, by, log_cap, channel, kind, soft, items, kept_records, kept_bytes)


def _records(lowest: int, highest: int) -> Argv:
    return (lowest, highest)


def _figures(number: int) -> Argv:
    return (number,)


CLEAR = Script("clear", keys=9, args=_clear, figures_keys=True)
SYNC = Script("sync", keys=11, args=_sync)
ACK = Script("ack", keys=9, args=_ack, figures_keys=True)
PENDING = Script("pending", keys=9, args=_pending)
MEMBERS = Script("members", keys=6, args=_members, prelude=False)
PURGE = Script("purge", keys=13, args=_purge)
RECORDS = Script("records", keys=10, args=_records, prelude=False)
FIGURES = Script("figures", keys=13, args=_figures, prelude=False)

SCRIPTS: tuple[Script[...], ...] = (CLEAR, SYNC, ACK, PENDING, MEMBERS, PURGE, RECORDS, FIGURES)
