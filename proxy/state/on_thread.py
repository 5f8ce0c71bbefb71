"""The state's sync objects (``StateDB``, ``Admins``) awaited from the event loop, written once.

An async twin declares each method it offers as ``on_thread(Sync.method)``: awaited, it runs
``Sync.method`` on the twin's ``target`` through its ``run`` (AsyncState's dedicated thread),
with the same parameters, checked by mypy. ``on_thread(Sync.method, flush_first=True)`` first
writes what the twin holds back (its ``flush``), so a read sees every write made before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

_P = ParamSpec("_P")
_Q = ParamSpec("_Q")
_T = TypeVar("_T")
_U = TypeVar("_U")
_S = TypeVar("_S")
_S_co = TypeVar("_S_co", covariant=True)


class Runner(Protocol):
    """AsyncState's way of running a call on the state thread."""

    def __call__(
        self, fn: Callable[_Q, _U], /, *args: _Q.args, **kwargs: _Q.kwargs
    ) -> Awaitable[_U]: ...


class OnThread(Protocol[_S_co]):
    """What a twin holds: the sync object, the way to run its methods, and ``flush``, which
    writes what the twin holds back (if anything)."""

    @property
    def target(self) -> _S_co: ...

    @property
    def run(self) -> Runner: ...

    async def flush(self) -> None: ...


class on_thread(Generic[_S, _P, _T]):
    """An async method of a twin that runs ``method`` of its ``target`` on the state thread;
    with ``flush_first``, after the twin's ``flush`` (a read that sees the writes held back)."""

    __slots__ = ("_flush_first", "_method")

    def __init__(
        self, method: Callable[Concatenate[_S, _P], _T], *, flush_first: bool = False
    ) -> None:
        self._method = method
        self._flush_first = flush_first

    def __get__(
        self, twin: OnThread[_S], owner: type[Any] | None = None
    ) -> Callable[_P, Coroutine[Any, Any, _T]]:
        method, flush_first = self._method, self._flush_first

        async def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            if flush_first:
                await twin.flush()
            return await twin.run(method, twin.target, *args, **kwargs)

        return call
