"""``AsyncState``: a ``StateDB`` (sqlite.py) driven from the event loop.

It runs the StateDB on one dedicated worker thread, so the event loop that also serves
proxied traffic never waits on sqlite, and the connection is only ever touched by the thread
that created it.

What the server writes on every clear (its audit record, the token's last use) is written
behind the answer: ``AsyncState`` collects it and writes it in one transaction at most
AUDIT_FLUSH_SECONDS later, for every clear of that window (benchmarks/README.md: each clear's
own transaction cost the edge's core more than the clear). Reading the audit log or the
tokens through ``AsyncState`` writes what is pending first, and so does closing it; a crash
loses at most that window's records (and none with the audit journal, journal.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import ParamSpec, Self, TypeVar

from proxy.core.auth.tokens import hash_token
from proxy.errors import StateError
from proxy.state.admins import AsyncAdmins
from proxy.state.journal import AuditJournal, Segment, replay
from proxy.state.on_thread import on_thread
from proxy.state.sqlite import AuditRecord, StateDB, TokenRecord

# Audit records and token uses wait at most this long to be written, all of them in one
# transaction; a batch this large is written at once.
AUDIT_FLUSH_SECONDS = 0.05
AUDIT_BATCH_MAX = 256

log = logging.getLogger("proxy.state")

_P = ParamSpec("_P")
_T = TypeVar("_T")


class AsyncState:
    """A StateDB driven from the event loop: every call runs on one worker thread.

    Open with ``await AsyncState.open(path, audit_max_rows=...)``; ``await close()`` (or
    ``async with``) writes what is pending, closes the connection on its thread and stops
    the thread. Audit records and token uses are written behind (see the module docstring).
    """

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        db: StateDB,
        *,
        flush_seconds: float,
        journal: AuditJournal | None = None,
    ) -> None:
        self._executor = executor
        self._flush_seconds = flush_seconds
        self._db = self.target = db  # ``target``: what on_thread methods call
        self._journal = journal
        self._closed = False
        self.admins = AsyncAdmins(self.run, db.admins)
        self._records: list[AuditRecord] = []
        self._segments: list[Segment] = []  # the journal segment of each journaled record
        self._uses: dict[str, float] = {}  # SHA-256 of a token value -> when it was last used
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._settled = asyncio.Event()  # set while nothing is queued or being written
        self._settled.set()

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        audit_max_rows: int = 100_000,
        flush_seconds: float = AUDIT_FLUSH_SECONDS,
        journal: bool = True,
        audit_fsync: bool = False,
    ) -> AsyncState:
        """Open the database, and with ``journal`` (a server's state) the audit journal
        beside it, replaying first what a previous run left there (journal.py)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdn-proxy-state")
        loop = asyncio.get_running_loop()
        try:
            db = await loop.run_in_executor(
                executor, functools.partial(StateDB, path, audit_max_rows=audit_max_rows)
            )
        except BaseException:
            executor.shutdown(wait=True)
            raise
        opened = None
        try:
            if journal:
                opened, left = AuditJournal.open(path, fsync=audit_fsync)
                if left:
                    count = await loop.run_in_executor(executor, replay, db, left)
                    log.info("audit journal: %d records of an earlier run replayed", count)
        except BaseException:
            if opened is not None:
                opened.close()
            await loop.run_in_executor(executor, db.close)
            executor.shutdown(wait=True)
            raise
        return cls(executor, db, flush_seconds=flush_seconds, journal=opened)

    async def close(self) -> None:
        if self._closed:
            return
        # Until nothing is pending: requests still finishing may queue records meanwhile.
        while self._records or self._uses or self._flushes:
            await asyncio.gather(self.flush(), *self._flushes)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._db.close)
        finally:
            self._executor.shutdown(wait=True)
            if self._journal is not None:
                self._journal.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def run(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``fn(*args, **kwargs)`` on the state thread."""
        if self._closed:
            raise StateError("the state database is closed")
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def authenticate(self, token: str, now: float) -> TokenRecord | None:
        """The record of a known token, its last use set to ``now`` (written behind)."""
        record = await self.run(self._db.find_token, token)
        if record is None:
            return None
        self._uses[hash_token(token)] = now
        self._write_soon()
        return TokenRecord(record.name, record.scope, record.created_at, now)

    async def record_audit(self, record: AuditRecord) -> None:
        """Journal a record, and queue it: it is in SQLite within AUDIT_FLUSH_SECONDS. Once
        this returns, a crash of the process cannot lose it (journal.py). A record that
        cannot be written is logged, with the error, as an error."""
        if self._closed:
            log.error("audit record not written (the state database is closed): %r", record)
            return
        if self._journal is not None:
            record = await self._journaled(self._journal, record)
        self._records.append(record)
        self._write_soon()

    async def _journaled(self, journal: AuditJournal, record: AuditRecord) -> AuditRecord:
        try:
            if not journal.fsync:
                record, segment = journal.append(record)  # one write(): no need to wait
            else:  # fdatasync takes milliseconds: not on the event loop
                record, segment, line = journal.prepare(record)
                await asyncio.get_running_loop().run_in_executor(None, journal.write, segment, line)
        except OSError as exc:
            log.error(
                "audit record not journaled (%s): it is lost if the process dies within %s s: %r",
                exc,
                self._flush_seconds,
                record,
            )
            return record
        self._segments.append(segment)
        return record

    async def settled(self) -> None:
        """Wait, without hurrying them, until the records and uses queued so far (and any
        queued meanwhile) are written."""
        await self._settled.wait()

    async def flush(self) -> None:
        """Write every audit record and token use queued so far; return once they are on
        disk (or logged as lost)."""
        while self._records or self._uses:
            records, self._records = self._records, []
            segments, self._segments = self._segments, []
            uses, self._uses = self._uses, {}
            if self._journal is not None:
                self._journal.rotate()  # if full, what follows goes to a new segment
            try:
                await self.run(self._db.write_batch, uses, records)
            except StateError as exc:
                kept = " (kept in the audit journal for the next start)" if segments else ""
                log.error("audit records not written%s (%s): %r", kept, exc, records)
            else:
                if self._journal is not None:
                    self._journal.settle(segments)

    def _write_soon(self) -> None:
        self._settled.clear()
        if len(self._records) >= AUDIT_BATCH_MAX:
            self._write_now()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._flush_seconds, self._write_now)

    def _write_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        if not (self._flushes or self._records or self._uses):
            self._settled.set()

    # Reading the audit log or the tokens writes what is pending first.
    list_audit = on_thread(StateDB.list_audit, flush_first=True)
    list_tokens = on_thread(StateDB.list_tokens, flush_first=True)
    create_token = on_thread(StateDB.create_token)
    regenerate_token = on_thread(StateDB.regenerate_token)
    revoke_token = on_thread(StateDB.revoke_token)
