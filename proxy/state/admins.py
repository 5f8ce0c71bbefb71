"""Dashboard admins (argon2id password hashes) and their sessions (hashes of the ids).

Both live in the state database beside the tokens; ``StateDB.admins`` is the synchronous view
the CLI uses and ``AsyncState.admins`` the one the dashboard awaits, on the state thread.

Passwords are hashed with argon2id (argon2-cffi, RFC 9106's second recommended parameters:
64 MiB, 3 passes, 4 lanes), which costs a guesser holding a stolen database about as much
memory and time per guess as it costs us per sign-in. Hashing and verifying are CPU work, not
database work: callers do them off the state thread (``hash_password`` and
``verify_password`` are plain functions) and the database only stores and returns strings.

A session row holds the SHA-256 of the session id, never the id, so the database cannot be
replayed as a cookie. Changing an admin's password or removing the admin ends every one of
their sessions in the same transaction.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from argon2 import PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError

from proxy.core.auth.tokens import is_valid_token_name
from proxy.errors import NotFoundError, StateError
from proxy.state.on_thread import Runner, on_thread

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024  # bounds the work an unauthenticated sign-in can ask for

ADMIN_SCHEMA = """
CREATE TABLE IF NOT EXISTS admins (
    name TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    password_changed_at REAL NOT NULL,
    last_sign_in_at REAL
);
CREATE TABLE IF NOT EXISTS sessions (
    id_sha256 TEXT PRIMARY KEY,
    admin TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_seen_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_by_admin ON sessions (admin);
"""

_P = ParamSpec("_P")
_T = TypeVar("_T")


def password_hasher() -> PasswordHasher:
    """The argon2id hasher new hashes are made with (RFC 9106 §4, second recommendation)."""
    return PasswordHasher.from_parameters(profiles.RFC_9106_LOW_MEMORY)


def check_password(password: str) -> None:
    """ValueError unless ``password`` is acceptable for a new admin password."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ValueError(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValueError(f"a password has at most {MAX_PASSWORD_LENGTH} characters")


def hash_password(hasher: PasswordHasher, password: str) -> str:
    return hasher.hash(password)


def verify_password(hasher: PasswordHasher, password_hash: str, password: str) -> bool:
    """Whether ``password`` matches; never raises for a wrong password or a damaged hash."""
    try:
        return hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def is_valid_admin_name(name: str) -> bool:
    """Admin names follow token names: 1-64 of ``[A-Za-z0-9._-]``, safe in logs and tables."""
    return is_valid_token_name(name)


def check_admin_name(name: str) -> None:
    """ValueError, with a message for people, unless ``name`` can name an admin."""
    if not is_valid_admin_name(name):
        raise ValueError(f"bad admin name {name!r}: use 1-64 of A-Z a-z 0-9 . _ -")


@dataclass(frozen=True, slots=True)
class AdminRecord:
    """An admin as listed. Never holds the password hash."""

    name: str
    created_at: float
    password_changed_at: float
    last_sign_in_at: float | None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    admin: str
    created_at: float
    last_seen_at: float


class _Connection(Protocol):
    """What Admins needs of StateDB: its connection and its error translation."""

    def _errors(self, action: str) -> AbstractContextManager[None]: ...

    def _transaction(self, action: str) -> AbstractContextManager[sqlite3.Connection]: ...

    @property
    def connection(self) -> sqlite3.Connection: ...


class Admins:
    """Admins and sessions in a StateDB. Every method runs on the StateDB's thread."""

    def __init__(self, db: _Connection) -> None:
        self._db = db

    # -- admins ------------------------------------------------------------------------------

    def create(self, name: str, password_hash: str, now: float) -> None:
        """Add an admin. StateError if the name is taken."""
        check_admin_name(name)
        try:
            with self._db._errors("create an admin"):
                self._db.connection.execute(
                    "INSERT INTO admins (name, password_hash, created_at, password_changed_at)"
                    " VALUES (?, ?, ?, ?)",
                    (name, password_hash, now, now),
                )
        except StateError:
            if self.password_hash(name) is not None:
                raise StateError(f"an admin named {name!r} already exists") from None
            raise

    def set_password(self, name: str, password_hash: str, now: float) -> None:
        """Replace the password and end every session of the admin."""
        with self._db._transaction("set a password") as conn:
            cursor = conn.execute(
                "UPDATE admins SET password_hash = ?, password_changed_at = ? WHERE name = ?",
                (password_hash, now, name),
            )
            if cursor.rowcount == 0:
                raise NotFoundError(f"no admin named {name!r}")
            conn.execute("DELETE FROM sessions WHERE admin = ?", (name,))

    def remove(self, name: str) -> None:
        """Delete the admin and end every session of theirs."""
        with self._db._transaction("remove an admin") as conn:
            cursor = conn.execute("DELETE FROM admins WHERE name = ?", (name,))
            if cursor.rowcount == 0:
                raise NotFoundError(f"no admin named {name!r}")
            conn.execute("DELETE FROM sessions WHERE admin = ?", (name,))

    def list_admins(self) -> list[AdminRecord]:
        with self._db._errors("list admins"):
            rows = self._db.connection.execute(
                "SELECT name, created_at, password_changed_at, last_sign_in_at FROM admins"
                " ORDER BY name"
            ).fetchall()
        return [AdminRecord(*row) for row in rows]

    def password_hash(self, name: str) -> str | None:
        """The stored hash of the admin's password, or None if there is no such admin."""
        with self._db._errors("look up an admin"):
            row = self._db.connection.execute(
                "SELECT password_hash FROM admins WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else str(row[0])

    # -- sessions ----------------------------------------------------------------------------

    def start_session(
        self,
        digest: str,
        name: str,
        verified_hash: str,
        now: float,
        *,
        rehashed: str | None = None,
    ) -> bool:
        """Open a session for an admin whose password was checked against ``verified_hash``.

        False (and no session) if the password changed, or the admin went, since the check.
        ``rehashed`` replaces the stored hash when the hasher's parameters have moved on.
        """
        with self._db._transaction("start a session") as conn:
            cursor = conn.execute(
                "UPDATE admins SET last_sign_in_at = ?, password_hash = ?"
                " WHERE name = ? AND password_hash = ?",
                (now, rehashed or verified_hash, name, verified_hash),
            )
            if cursor.rowcount == 0:
                return False
            conn.execute(
                "INSERT INTO sessions (id_sha256, admin, created_at, last_seen_at)"
                " VALUES (?, ?, ?, ?)",
                (digest, name, now, now),
            )
        return True

    def session(self, digest: str) -> SessionRecord | None:
        """The session with this id digest, if its admin still exists."""
        with self._db._errors("look up a session"):
            row = self._db.connection.execute(
                "SELECT s.admin, s.created_at, s.last_seen_at FROM sessions AS s"
                " JOIN admins AS a ON a.name = s.admin WHERE s.id_sha256 = ?",
                (digest,),
            ).fetchone()
        return None if row is None else SessionRecord(*row)

    def touch_session(self, digest: str, now: float) -> None:
        with self._db._errors("update a session"):
            self._db.connection.execute(
                "UPDATE sessions SET last_seen_at = ? WHERE id_sha256 = ?", (now, digest)
            )

    def end_session(self, digest: str) -> None:
        with self._db._errors("end a session"):
            self._db.connection.execute("DELETE FROM sessions WHERE id_sha256 = ?", (digest,))

    def end_expired_sessions(self, last_seen_before: float, created_before: float) -> int:
        """Delete sessions last seen, or started, at or before the cutoffs; return how many."""
        with self._db._errors("end expired sessions"):
            cursor = self._db.connection.execute(
                "DELETE FROM sessions WHERE last_seen_at <= ? OR created_at <= ?",
                (last_seen_before, created_before),
            )
        return cursor.rowcount

    def session_count(self, name: str) -> int:
        with self._db._errors("count sessions"):
            row = self._db.connection.execute(
                "SELECT count(*) FROM sessions WHERE admin = ?", (name,)
            ).fetchone()
        return int(row[0])


class AsyncAdmins:
    """``Admins`` awaited from the event loop; each call runs on the state thread."""

    def __init__(self, run: Runner, admins: Admins) -> None:
        self.run = run
        self.target = admins

    async def flush(self) -> None:
        """Nothing of the admins' is written behind: every call is written when it returns."""

    create = on_thread(Admins.create)
    set_password = on_thread(Admins.set_password)
    remove = on_thread(Admins.remove)
    list_admins = on_thread(Admins.list_admins)
    password_hash = on_thread(Admins.password_hash)
    start_session = on_thread(Admins.start_session)
    session = on_thread(Admins.session)
    touch_session = on_thread(Admins.touch_session)
    end_session = on_thread(Admins.end_session)
    end_expired_sessions = on_thread(Admins.end_expired_sessions)
    session_count = on_thread(Admins.session_count)
