"""The state database on a real sqlite file: tokens (hashes only) and the bounded audit log."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from proxy.core.auth.tokens import Scope, hash_token
from proxy.errors import NotFoundError, StateError
from proxy.state.async_state import AUDIT_BATCH_MAX, AUDIT_FLUSH_SECONDS, AsyncState
from proxy.state.sqlite import SCHEMA_VERSION, AuditRecord, StateDB, TokenRecord

T0 = 1_700_000_000.0
EXAMPLE = Scope.only(["example.com"])


def audit(n: int, *, domain: str = "example.com", outcome: str = "cleared") -> AuditRecord:
    return AuditRecord(
        at=T0 + n,
        actor="deploy",
        client="127.0.0.1",
        domain=domain,
        outcome=outcome,
        status=200,
        entries_dropped=n,
        duration_ms=1.5,
    )


def test_opening_creates_directory_file_and_wal(state_db: StateDB, state_path: Path) -> None:
    assert state_path.is_file()
    assert stat.S_IMODE(state_path.stat().st_mode) == 0o600
    with sqlite3.connect(state_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    raw.close()


def test_reopening_keeps_the_data(state_path: Path) -> None:
    with StateDB(state_path) as db:
        token = db.create_token("deploy", Scope.everything(), T0)
    with StateDB(state_path) as db:
        assert db.authenticate(token, T0) is not None


def test_token_is_stored_only_as_its_hash(state_db: StateDB, state_path: Path) -> None:
    token = state_db.create_token("deploy", Scope.everything(), T0)

    assert token.startswith("cdnp_")
    assert len(token) >= len("cdnp_") + 43  # 32 random bytes, base64url
    raw = sqlite3.connect(state_path)
    dump = "\n".join(raw.iterdump())
    raw.close()
    assert token not in dump
    assert hash_token(token) in dump


def test_tokens_are_unique(state_db: StateDB) -> None:
    tokens = {state_db.create_token(f"t{i}", Scope.everything(), T0) for i in range(50)}
    assert len(tokens) == 50


def test_authenticate_returns_the_record_and_notes_the_use(state_db: StateDB) -> None:
    token = state_db.create_token("deploy", EXAMPLE, T0)

    record = state_db.authenticate(token, T0 + 5)

    assert record == TokenRecord(name="deploy", scope=EXAMPLE, created_at=T0, last_used_at=T0 + 5)
    assert state_db.list_tokens() == [record]


@pytest.mark.parametrize("guess", ["", "cdnp_", "cdnp_wrong", "x" * 1000])
def test_unknown_tokens_do_not_authenticate(state_db: StateDB, guess: str) -> None:
    token = state_db.create_token("deploy", Scope.everything(), T0)
    assert state_db.authenticate(guess, T0) is None
    assert state_db.authenticate(token[:-1], T0) is None
    assert state_db.authenticate(token.upper(), T0) is None


def test_duplicate_name_is_refused(state_db: StateDB) -> None:
    state_db.create_token("deploy", Scope.everything(), T0)
    with pytest.raises(StateError, match="already exists"):
        state_db.create_token("deploy", EXAMPLE, T0)
    [record] = state_db.list_tokens()
    assert record.scope == Scope.everything()


@pytest.mark.parametrize("name", ["", "x" * 65, "a b", "a/b", "naïve"])
def test_bad_names_are_refused(state_db: StateDB, name: str) -> None:
    with pytest.raises(ValueError):
        state_db.create_token(name, Scope.everything(), T0)
    assert state_db.list_tokens() == []


def test_regenerate_replaces_the_value_at_once(state_db: StateDB) -> None:
    old = state_db.create_token("deploy", EXAMPLE, T0)
    state_db.authenticate(old, T0 + 1)

    new = state_db.regenerate_token("deploy", T0 + 10)

    assert new != old
    assert state_db.authenticate(old, T0 + 11) is None
    assert state_db.list_tokens() == [
        TokenRecord(name="deploy", scope=EXAMPLE, created_at=T0 + 10, last_used_at=None)
    ]
    assert state_db.authenticate(new, T0 + 12) is not None


def test_revoke_deletes(state_db: StateDB) -> None:
    token = state_db.create_token("deploy", Scope.everything(), T0)
    state_db.revoke_token("deploy")
    assert state_db.authenticate(token, T0) is None
    assert state_db.list_tokens() == []


@pytest.mark.parametrize("action", ["regenerate", "revoke"])
def test_unknown_names_are_not_found(state_db: StateDB, action: str) -> None:
    with pytest.raises(NotFoundError, match="no token named 'ghost'"):
        if action == "regenerate":
            state_db.regenerate_token("ghost", T0)
        else:
            state_db.revoke_token("ghost")


def test_list_is_sorted_by_name(state_db: StateDB) -> None:
    for name in ["zeta", "alpha", "mid"]:
        state_db.create_token(name, Scope.everything(), T0)
    assert [record.name for record in state_db.list_tokens()] == ["alpha", "mid", "zeta"]


def test_change_by_another_connection_is_seen_at_once(state_db: StateDB, state_path: Path) -> None:
    token = state_db.create_token("deploy", Scope.everything(), T0)
    with StateDB(state_path) as other:
        other.revoke_token("deploy")
    assert state_db.authenticate(token, T0) is None


def test_audit_round_trips_newest_first(state_db: StateDB) -> None:
    for n in range(3):
        state_db.record_audit(audit(n))
    records = state_db.list_audit(10)
    assert [r.entries_dropped for r in records] == [2, 1, 0]
    assert records[0] == dataclasses.replace(audit(2), id=3)


def test_audit_filters_and_pages(state_db: StateDB) -> None:
    for n in range(10):
        state_db.record_audit(
            audit(n, domain="a.test" if n % 2 else "b.test", outcome="cleared" if n < 5 else "x")
        )
    assert [r.entries_dropped for r in state_db.list_audit(3, 2)] == [7, 6, 5]
    assert [r.entries_dropped for r in state_db.list_audit(10, domain="a.test")] == [9, 7, 5, 3, 1]
    assert [r.entries_dropped for r in state_db.list_audit(10, outcome="x")] == [9, 8, 7, 6, 5]
    both = state_db.list_audit(10, domain="b.test", outcome="cleared")
    assert [r.entries_dropped for r in both] == [4, 2, 0]
    with pytest.raises(ValueError):
        state_db.list_audit(-1)


def test_audit_keeps_only_the_newest_rows(state_path: Path) -> None:
    with StateDB(state_path, audit_max_rows=5) as db:
        for n in range(12):
            db.record_audit(audit(n))
        assert [r.entries_dropped for r in db.list_audit(100)] == [11, 10, 9, 8, 7]


def test_audit_text_is_bounded_and_always_storable(state_db: StateDB) -> None:
    state_db.record_audit(
        AuditRecord(
            at=T0,
            actor=None,
            client=None,
            domain="\ud800" + "a" * 1000,  # a lone surrogate, as a JSON body can carry
            outcome="bad_request",
            status=400,
            entries_dropped=0,
            duration_ms=0.1,
        )
    )
    [record] = state_db.list_audit(1)
    assert record.domain == "\\ud800" + "a" * 254
    assert (record.actor, record.client) == (None, None)


def test_unusable_path_is_a_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StateError, match="cannot create"):
        StateDB(blocker / "state.db")


def test_garbage_file_is_a_state_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError):
        StateDB(path)


def test_newer_schema_is_refused(state_path: Path) -> None:
    StateDB(state_path).close()
    with sqlite3.connect(state_path) as raw:
        raw.execute("PRAGMA user_version=99")
    raw.close()
    with pytest.raises(StateError, match="newer"):
        StateDB(state_path)


def test_a_version_2_audit_log_gains_the_fleet_columns_and_keeps_its_rows(
    state_path: Path,
) -> None:
    """Schema 3 added acked, live and answered_by to the audit log; a file of schema 2 gains
    them on open, and its records read back with them unset."""
    state_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(state_path) as raw:
        raw.execute(
            "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,"
            " actor TEXT, client TEXT, domain TEXT, outcome TEXT NOT NULL,"
            " status INTEGER NOT NULL, entries_dropped INTEGER NOT NULL DEFAULT 0,"
            " duration_ms REAL NOT NULL)"
        )
        raw.execute(
            "INSERT INTO audit (at, actor, client, domain, outcome, status, entries_dropped,"
            " duration_ms) VALUES (1.0, 'deploy', '127.0.0.1', 'example.com', 'cleared', 200,"
            " 3, 1.5)"
        )
        raw.execute("PRAGMA user_version=2")
    raw.close()
    with StateDB(state_path) as db:
        [old] = db.list_audit()
        assert (old.domain, old.entries_dropped, old.acked, old.live, old.answered_by) == (
            "example.com",
            3,
            None,
            None,
            None,
        )
        fleet = dataclasses.replace(audit(1), acked=3, live=4, answered_by="node-a/control")
        db.write_batch({}, [fleet])
        newest = db.list_audit()[0]
        assert (newest.acked, newest.live, newest.answered_by) == (3, 4, "node-a/control")
        assert db.connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_damaged_scope_is_a_state_error(state_db: StateDB, state_path: Path) -> None:
    token = state_db.create_token("deploy", Scope.everything(), T0)
    with sqlite3.connect(state_path) as raw:
        raw.execute("UPDATE tokens SET scope = 'not a domain'")
    raw.close()
    with pytest.raises(StateError, match="damaged scope"):
        state_db.authenticate(token, T0)


async def test_async_state_runs_everything_on_one_worker_thread(state_path: Path) -> None:
    state = await AsyncState.open(state_path, audit_max_rows=10)
    try:
        token = await state.create_token("deploy", EXAMPLE, T0)
        record = await state.authenticate(token, T0 + 1)
        assert record is not None and record.name == "deploy"
        await state.record_audit(audit(1))
        assert [r.entries_dropped for r in await state.list_audit(10)] == [1]
        new = await state.regenerate_token("deploy", T0 + 2)
        assert await state.authenticate(token, T0) is None
        assert [r.name for r in await state.list_tokens()] == ["deploy"]
        await state.revoke_token("deploy")
        assert await state.authenticate(new, T0) is None
        # sqlite3 refuses use from another thread, so each call above ran on the worker.
        workers = [t for t in threading.enumerate() if t.name.startswith("cdn-proxy-state")]
        assert len(workers) == 1
    finally:
        await state.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("cdn-proxy-state")]
    with pytest.raises(StateError, match="closed"):
        await state.authenticate("x", T0)
    await state.close()  # closing twice is harmless


async def test_async_state_open_failure_leaves_no_thread(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StateError):
        await AsyncState.open(blocker / "state.db")
    assert not [t for t in threading.enumerate() if t.name.startswith("cdn-proxy-state")]


# -- written behind: audit records and token uses (AsyncState) ---------------------------------


async def test_audit_records_and_token_uses_are_written_behind(state_path: Path) -> None:
    """A clear's audit record and its token's last use are not written on the clear's path:
    they are queued and written together in one transaction. Reading through AsyncState
    writes what is queued first."""
    state = await AsyncState.open(state_path, audit_max_rows=10)
    other = StateDB(state_path)  # another connection, as the CLI has
    try:
        token = await state.create_token("deploy", EXAMPLE, T0)
        record = await state.authenticate(token, T0 + 1)
        assert record is not None and record.last_used_at == T0 + 1
        for n in range(3):
            await state.record_audit(audit(n))
        assert other.list_audit(10) == []
        assert [t.last_used_at for t in other.list_tokens()] == [None]
        assert [r.entries_dropped for r in await state.list_audit(10)] == [2, 1, 0]
        assert [t.last_used_at for t in other.list_tokens()] == [T0 + 1]
        assert [t.last_used_at for t in await state.list_tokens()] == [T0 + 1]
    finally:
        other.close()
        await state.close()


async def test_queued_records_are_written_within_the_window_unasked(state_path: Path) -> None:
    state = await AsyncState.open(state_path)
    other = StateDB(state_path)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await state.record_audit(audit(1))
        await state.settled()
        assert loop.time() - started >= AUDIT_FLUSH_SECONDS * 0.9
        assert len(other.list_audit(10)) == 1
    finally:
        other.close()
        await state.close()


async def test_a_full_batch_does_not_wait_for_the_window(state_path: Path) -> None:
    state = await AsyncState.open(state_path, flush_seconds=3600)
    other = StateDB(state_path)
    try:
        for n in range(AUDIT_BATCH_MAX - 1):
            await state.record_audit(audit(n))
        assert other.list_audit(1) == []
        await state.record_audit(audit(AUDIT_BATCH_MAX))
        async with asyncio.timeout(30):  # not the hour
            await state.settled()
        assert len(other.list_audit(1000)) == AUDIT_BATCH_MAX
    finally:
        other.close()
        await state.close()


async def test_closing_writes_what_is_queued(state_path: Path) -> None:
    state = await AsyncState.open(state_path)
    token = await state.create_token("deploy", EXAMPLE, T0)
    await state.authenticate(token, T0 + 3)
    await state.record_audit(audit(7))
    await state.close()
    with StateDB(state_path) as other:
        assert [r.entries_dropped for r in other.list_audit(10)] == [7]
        assert [t.last_used_at for t in other.list_tokens()] == [T0 + 3]


async def test_a_use_of_a_regenerated_value_is_not_put_on_the_new_one(state_path: Path) -> None:
    """The last use is written by the hash of the value used: regenerating in the meantime
    leaves the new value unused, as the token list must show."""
    state = await AsyncState.open(state_path)
    try:
        token = await state.create_token("deploy", EXAMPLE, T0)
        assert await state.authenticate(token, T0 + 1) is not None
        await state.regenerate_token("deploy", T0 + 2)
        assert [(t.created_at, t.last_used_at) for t in await state.list_tokens()] == [
            (T0 + 2, None)
        ]
    finally:
        await state.close()


async def test_a_batch_that_cannot_be_written_is_logged(
    state_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = await AsyncState.open(state_path)
    try:
        with sqlite3.connect(state_path) as raw:
            raw.execute("DROP TABLE audit")
        raw.close()
        await state.record_audit(audit(5))
        with caplog.at_level(logging.ERROR, logger="proxy.state"):
            await state.flush()
        [logged] = [r for r in caplog.records if r.name == "proxy.state"]
        assert "audit records not written" in logged.getMessage()
        assert "entries_dropped=5" in logged.getMessage()
    finally:
        await state.close()
    await state.record_audit(audit(6))  # after closing: logged, not lost silently
    assert "closed" in caplog.records[-1].getMessage()


@pytest.mark.slow
@pytest.mark.parametrize("under", ["afile/state.db", "afile/deeper/state.db"])
def test_a_state_path_under_a_file_names_the_file_that_is_not_a_directory(
    tmp_path: Path, under: str
) -> None:
    (tmp_path / "afile").write_text("not a directory")
    with pytest.raises(StateError) as raised:
        StateDB(tmp_path / under)
    assert str(raised.value).endswith(f"{tmp_path / 'afile'} is not a directory")
