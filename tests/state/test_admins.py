"""Dashboard admins and sessions in the state database: hashes only, and sessions that end
with their admin or their admin's password."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from argon2 import PasswordHasher, profiles

from proxy.errors import NotFoundError, StateError
from proxy.state.admins import (
    AdminRecord,
    SessionRecord,
    check_password,
    hash_password,
    password_hasher,
    verify_password,
)
from proxy.state.async_state import AsyncState
from proxy.state.sqlite import SCHEMA_VERSION, StateDB

T0 = 1_700_000_000.0
CHEAP = PasswordHasher.from_parameters(profiles.CHEAPEST)
DIGEST = "a" * 64


def test_create_list_and_look_up(state_db: StateDB) -> None:
    state_db.admins.create("bob", "hash-b", T0)
    state_db.admins.create("alice", "hash-a", T0 + 1)
    assert state_db.admins.list_admins() == [
        AdminRecord("alice", T0 + 1, T0 + 1, None),
        AdminRecord("bob", T0, T0, None),
    ]
    assert state_db.admins.password_hash("alice") == "hash-a"
    assert state_db.admins.password_hash("nobody") is None


def test_names_are_unique_and_well_formed(state_db: StateDB) -> None:
    state_db.admins.create("alice", "h", T0)
    with pytest.raises(StateError, match="already exists"):
        state_db.admins.create("alice", "h", T0)
    with pytest.raises(ValueError):
        state_db.admins.create("al ice", "h", T0)


def test_a_session_starts_only_against_the_hash_that_was_verified(state_db: StateDB) -> None:
    state_db.admins.create("alice", "old", T0)
    assert not state_db.admins.start_session(DIGEST, "alice", "stale", T0)
    assert not state_db.admins.start_session(DIGEST, "nobody", "old", T0)
    assert state_db.admins.session(DIGEST) is None
    assert state_db.admins.start_session(DIGEST, "alice", "old", T0 + 5, rehashed="new")
    assert state_db.admins.session(DIGEST) == SessionRecord("alice", T0 + 5, T0 + 5)
    assert state_db.admins.password_hash("alice") == "new"
    [admin] = state_db.admins.list_admins()
    assert admin.last_sign_in_at == T0 + 5


def test_touch_and_end(state_db: StateDB) -> None:
    state_db.admins.create("alice", "h", T0)
    state_db.admins.start_session(DIGEST, "alice", "h", T0)
    state_db.admins.touch_session(DIGEST, T0 + 60)
    assert state_db.admins.session(DIGEST) == SessionRecord("alice", T0, T0 + 60)
    state_db.admins.end_session(DIGEST)
    assert state_db.admins.session(DIGEST) is None
    state_db.admins.end_session(DIGEST)  # ending twice is harmless


def test_expired_sessions_are_deleted_by_either_cutoff(state_db: StateDB) -> None:
    state_db.admins.create("alice", "h", T0)
    for digest, created, seen in [("1" * 64, 0, 50), ("2" * 64, 10, 100), ("3" * 64, 20, 200)]:
        state_db.admins.start_session(digest, "alice", "h", created)
        state_db.admins.touch_session(digest, seen)
    assert state_db.admins.end_expired_sessions(last_seen_before=50, created_before=10) == 2
    assert state_db.admins.session("3" * 64) is not None
    assert state_db.admins.session_count("alice") == 1


@pytest.mark.parametrize("change", ["set_password", "remove"])
def test_a_new_password_or_removal_ends_every_session_of_the_admin(
    state_db: StateDB, change: str
) -> None:
    state_db.admins.create("alice", "h", T0)
    state_db.admins.create("bob", "h", T0)
    state_db.admins.start_session("1" * 64, "alice", "h", T0)
    state_db.admins.start_session("2" * 64, "alice", "h", T0)
    state_db.admins.start_session("3" * 64, "bob", "h", T0)
    if change == "set_password":
        state_db.admins.set_password("alice", "h2", T0 + 9)
        [alice, _] = state_db.admins.list_admins()
        assert (alice.password_changed_at, state_db.admins.password_hash("alice")) == (T0 + 9, "h2")
    else:
        state_db.admins.remove("alice")
        assert [a.name for a in state_db.admins.list_admins()] == ["bob"]
    assert state_db.admins.session_count("alice") == 0
    assert state_db.admins.session("3" * 64) is not None


@pytest.mark.parametrize("action", ["set_password", "remove"])
def test_unknown_admins_are_not_found(state_db: StateDB, action: str) -> None:
    with pytest.raises(NotFoundError):
        if action == "remove":
            state_db.admins.remove("nobody")
        else:
            state_db.admins.set_password("nobody", "h", T0)


def test_a_session_of_a_vanished_admin_is_not_found(state_db: StateDB, state_path: Path) -> None:
    state_db.admins.create("alice", "h", T0)
    state_db.admins.start_session(DIGEST, "alice", "h", T0)
    with sqlite3.connect(state_path) as raw:  # e.g. deleted by hand, sessions left behind
        raw.execute("DELETE FROM admins")
    raw.close()
    assert state_db.admins.session(DIGEST) is None


def test_a_version_1_database_gains_the_admin_tables(state_path: Path) -> None:
    state_path.parent.mkdir(parents=True)
    with sqlite3.connect(state_path) as raw:
        raw.execute(
            "CREATE TABLE tokens (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
            " token_sha256 TEXT NOT NULL UNIQUE, scope TEXT NOT NULL, created_at REAL NOT NULL,"
            " last_used_at REAL)"
        )
        raw.execute("INSERT INTO tokens VALUES (1, 'deploy', 'x', '*', 0, NULL)")
        raw.execute("PRAGMA user_version=1")
    raw.close()
    with StateDB(state_path) as db:
        assert [t.name for t in db.list_tokens()] == ["deploy"]
        db.admins.create("alice", "h", T0)
    with sqlite3.connect(state_path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    raw.close()


@pytest.mark.slow
def test_passwords_are_argon2id_and_verified_without_raising() -> None:
    stored = hash_password(password_hasher(), "correct horse battery staple")
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert verify_password(CHEAP, stored, "correct horse battery staple")  # any hasher verifies
    assert not verify_password(CHEAP, stored, "wrong")
    assert not verify_password(CHEAP, "not a hash", "wrong")
    assert password_hasher().check_needs_rehash(hash_password(CHEAP, "x"))


@pytest.mark.parametrize(
    ("password", "ok"), [("x" * 11, False), ("x" * 12, True), ("x" * 1025, False)]
)
def test_password_length_rules(password: str, ok: bool) -> None:
    if ok:
        check_password(password)
    else:
        with pytest.raises(ValueError):
            check_password(password)


async def test_async_admins_run_on_the_state_thread(state_path: Path) -> None:
    async with await AsyncState.open(state_path) as state:
        await state.admins.create("alice", "h", T0)
        assert await state.admins.start_session(DIGEST, "alice", "h", T0)
        await state.admins.touch_session(DIGEST, T0 + 1)
        assert await state.admins.session(DIGEST) == SessionRecord("alice", T0, T0 + 1)
        assert await state.admins.session_count("alice") == 1
        assert await state.admins.password_hash("alice") == "h"
        assert [a.name for a in await state.admins.list_admins()] == ["alice"]
        assert await state.admins.end_expired_sessions(T0, T0 - 1) == 0
        await state.admins.end_session(DIGEST)
        await state.admins.set_password("alice", "h2", T0)
        threads = {t.name for t in threading.enumerate()}
        assert any(name.startswith("cdn-proxy-state") for name in threads)
        await state.admins.remove("alice")
        assert await state.admins.list_admins() == []
