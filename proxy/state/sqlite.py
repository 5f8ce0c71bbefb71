"""What survives a restart: API tokens (SHA-256 hashes only), the purge audit log, and the
dashboard's admins and sessions (``admins.py``).

``StateDB`` is synchronous and owns one sqlite3 connection; the CLI uses it directly. The
server drives it through ``AsyncState`` (``async_state.py``), on a thread of its own.

There is no token cache: the server reads the database on every API request, so a token
regenerated or revoked by the CLI (another process, another connection) stops working at
once. WAL mode lets that CLI write while the server reads.

sqlite3 errors are translated into StateError / NotFoundError here and nowhere else.
"""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from proxy.core.auth.tokens import (
    TOKEN_PREFIX,
    Scope,
    digests_equal,
    hash_token,
    is_valid_token_name,
)
from proxy.errors import NotFoundError, StateError
from proxy.state.admins import ADMIN_SCHEMA, Admins

# 2 added admins and sessions, 3 the fleet's columns of the audit log (acked, live,
# answered_by), 4 the audit journal's ids, 5 a purge's kind and receipt (kind, receipt); an
# older file gains what it lacks on open.
SCHEMA_VERSION = 5
MAX_AUDIT_TEXT = 255  # a host name is at most 253; anything longer was junk from a client
BUSY_TIMEOUT = 5.0  # seconds to wait for the CLI's write lock before giving up


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    token_sha256 TEXT NOT NULL UNIQUE,
    scope TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_used_at REAL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT,
    client TEXT,
    domain TEXT,
    outcome TEXT NOT NULL,
    status INTEGER NOT NULL,
    entries_dropped INTEGER NOT NULL DEFAULT 0,
    duration_ms REAL NOT NULL,
    acked INTEGER,
    live INTEGER,
    answered_by TEXT,
    journal_id TEXT,
    kind TEXT,
    receipt TEXT
);
CREATE INDEX IF NOT EXISTS audit_by_domain ON audit (domain, id);
CREATE INDEX IF NOT EXISTS audit_by_outcome ON audit (outcome, id);
"""

# One fixed statement per filter combination: no SQL is ever assembled from request data,
# and each variant can use its own index (domain, id), (outcome, id) or (kind, id). The kind
# filter is a kind (url, prefix, tag, all) or CLEAR_KIND: the records with none, clear-cache's.
CLEAR_KIND = "clear"
_AUDIT_SELECT = (
    "SELECT at, actor, client, domain, outcome, status, entries_dropped, duration_ms, id,"
    " acked, live, answered_by, kind, receipt FROM audit"
)
_KIND_TESTS = {"value": "kind = ?", "null": "kind IS NULL"}


def _audit_query(domain: bool, outcome: bool, kind: str | None) -> str:
    tests = [test for on, test in ((domain, "domain = ?"), (outcome, "outcome = ?")) if on]
    if kind is not None:
        tests.append(_KIND_TESTS[kind])
    where = " WHERE " + " AND ".join(tests) if tests else ""
    return _AUDIT_SELECT + where + " ORDER BY id DESC LIMIT ? OFFSET ?"


_AUDIT_QUERIES = {
    (domain, outcome, kind): _audit_query(domain, outcome, kind)
    for domain in (False, True)
    for outcome in (False, True)
    for kind in (None, *_KIND_TESTS)
}

# Columns added to the audit table after version 2: a file made before gains them on open.
_AUDIT_ADDED = (
    ("acked", "INTEGER"),
    ("live", "INTEGER"),
    ("answered_by", "TEXT"),
    ("journal_id", "TEXT"),
    ("kind", "TEXT"),
    ("receipt", "TEXT"),
)
# After the columns: a replayed journal record is stored once (NULLs, from before, are many).
_AUDIT_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS audit_by_journal_id ON audit (journal_id);"
    "CREATE INDEX IF NOT EXISTS audit_by_kind ON audit (kind, id);"  # History's kind filter
)


def _add_missing_columns(
    conn: sqlite3.Connection, table: str, columns: tuple[tuple[str, str], ...]
) -> None:
    # The names are this module's constants, never input.
    present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    for name, kind in columns:
        if name not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A token as the database knows it. Never holds the token or its hash."""

    name: str
    scope: Scope
    created_at: float  # when the current value was issued (created or regenerated)
    last_used_at: float | None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One clear-cache or purge attempt. ``id`` is set on records read back from the database."""

    at: float
    actor: str | None  # token name, never the token
    client: str | None
    domain: str | None
    outcome: str
    status: int
    entries_dropped: int
    duration_ms: float
    id: int | None = None
    # With a fleet: the edge processes that had applied the clear when it was answered, of
    # those alive then, and the control plane that answered. None without a fleet.
    acked: int | None = None
    live: int | None = None
    answered_by: str | None = None
    # A purge's kind (url, prefix, tag, all; None for a clear-cache attempt, and for a purge
    # whose body named none) and, when it was answered 200, its receipt as JSON
    # (proxy/core/purge/receipts.py). None in rows written before schema version 5.
    kind: str | None = None
    receipt: str | None = None
    # Its id in the audit journal (journal.py), so that a record replayed twice is stored
    # once. Not read back.
    journal_id: str | None = None


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe, with a recognisable prefix."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _audit_text(value: str | None) -> str | None:
    """Bounded, encodable text for the audit log (a JSON body can carry lone surrogates), its
    control characters escaped (\\n, \\x1b...): a domain as a client gave it must not
    forge lines or terminal colours where the log is read."""
    if value is None:
        return None
    text = value[:MAX_AUDIT_TEXT].encode("utf-8", "backslashreplace").decode("utf-8")
    return text.translate(_CONTROLS) if not text.isprintable() else text


# C0 and C1 controls and DEL, each to its Python escape.
_CONTROLS = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))}


class StateDB:
    """The state database. Opening creates the directory, the file and the schema."""

    def __init__(self, path: Path, *, audit_max_rows: int = 100_000) -> None:
        if audit_max_rows < 1:
            raise ValueError("audit_max_rows must be at least 1")
        self.path = path
        self.audit_max_rows = audit_max_rows
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600, exist_ok=True)  # hashes only, but still nobody else's
        except (FileExistsError, NotADirectoryError):  # a file where a directory goes
            blocking = next(p for p in path.parents if p.exists())
            raise StateError(
                f"cannot create the state database {path}: {blocking} is not a directory"
            ) from None
        except OSError as exc:
            raise StateError(f"cannot create the state database {path}: {exc}") from None
        try:
            # Autocommit; multi-statement changes open their own transaction below.
            self._conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as exc:
            raise StateError(f"cannot open the state database {path}: {exc}") from None
        try:
            with self._errors("set up"):
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")  # durable enough under WAL
                version = self._conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StateError(
                        f"the state database {path} has schema {version}, newer than this "
                        f"program's {SCHEMA_VERSION}"
                    )
                self._conn.executescript(_SCHEMA + ADMIN_SCHEMA)
                _add_missing_columns(self._conn, "audit", _AUDIT_ADDED)
                self._conn.executescript(_AUDIT_INDEXES)
                self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            self._conn.close()
            raise
        self.admins = Admins(self)

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StateError(f"state database {self.path}: cannot {action}: {exc}") from None

    @contextlib.contextmanager
    def _transaction(self, action: str) -> Iterator[sqlite3.Connection]:
        with self._errors(action):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- tokens ------------------------------------------------------------------------------

    def create_token(self, name: str, scope: Scope, now: float) -> str:
        """Create a token and return it; only its hash is kept. StateError if the name exists."""
        check_token_name(name)
        token = new_token()
        try:
            with self._errors("create a token"):
                self._conn.execute(
                    "INSERT INTO tokens (name, token_sha256, scope, created_at)"
                    " VALUES (?, ?, ?, ?)",
                    (name, hash_token(token), scope.to_stored(), now),
                )
        except StateError:
            if self._token_exists(name):
                raise StateError(f"a token named {name!r} already exists") from None
            raise
        return token

    def regenerate_token(self, name: str, now: float) -> str:
        """Give the token a new value; the old one stops working at once.

        ``created_at`` and ``last_used_at`` describe the current value, so they restart: the
        token list then shows how old each secret is, which is what rotation needs.
        """
        token = new_token()
        with self._errors("regenerate a token"):
            cursor = self._conn.execute(
                "UPDATE tokens SET token_sha256 = ?, created_at = ?, last_used_at = NULL"
                " WHERE name = ?",
                (hash_token(token), now, name),
            )
        if cursor.rowcount == 0:
            raise NotFoundError(f"no token named {name!r}")
        return token

    def revoke_token(self, name: str) -> None:
        with self._errors("revoke a token"):
            cursor = self._conn.execute("DELETE FROM tokens WHERE name = ?", (name,))
        if cursor.rowcount == 0:
            raise NotFoundError(f"no token named {name!r}")

    def list_tokens(self) -> list[TokenRecord]:
        with self._errors("list tokens"):
            rows = self._conn.execute(
                "SELECT name, scope, created_at, last_used_at FROM tokens ORDER BY name"
            ).fetchall()
        return [_token_record(*row) for row in rows]

    def authenticate(self, token: str, now: float) -> TokenRecord | None:
        """The record of a known token (and its last use set to ``now``), or None."""
        record = self.find_token(token)
        if record is None:
            return None
        self.write_batch({hash_token(token): now}, ())
        return TokenRecord(record.name, record.scope, record.created_at, now)

    def find_token(self, token: str) -> TokenRecord | None:
        """The record of a known token, as stored, or None. Reads only."""
        digest = hash_token(token)
        with self._errors("look up a token"):
            row = self._conn.execute(
                "SELECT name, token_sha256, scope, created_at, last_used_at FROM tokens"
                " WHERE token_sha256 = ?",
                (digest,),
            ).fetchone()
        # The index lookup already matched; compare again in constant time so no code path
        # ever decides on a token with a short-circuiting comparison.
        if row is None or not digests_equal(row[1], digest):
            return None
        return _token_record(row[0], row[2], row[3], row[4])

    def _token_exists(self, name: str) -> bool:
        with self._errors("look up a token"):
            row = self._conn.execute("SELECT 1 FROM tokens WHERE name = ?", (name,)).fetchone()
        return row is not None

    # -- audit log ---------------------------------------------------------------------------

    def record_audit(self, record: AuditRecord) -> None:
        """Append a record, dropping the oldest beyond ``audit_max_rows``."""
        self.write_batch({}, (record,))

    def write_batch(self, uses: Mapping[str, float], records: Sequence[AuditRecord]) -> None:
        """In one transaction: set the last use of tokens (by the SHA-256 of the value that was
        used, so a use of a value since regenerated is not put on the new one), and append
        audit records in order, dropping the oldest beyond ``audit_max_rows``.

        Ids are AUTOINCREMENT (never reused) and the log is only ever pruned from the old end,
        so "rows older than newest_id - max" is one range delete on the primary key: no count.
        """
        with self._transaction("write the audit log") as conn:
            conn.executemany(
                "UPDATE tokens SET last_used_at = ? WHERE token_sha256 = ?",
                [(when, digest) for digest, when in uses.items()],
            )
            newest = None
            for record in records:
                # A journal record already stored (replayed twice) is skipped.
                cursor = conn.execute(
                    "INSERT INTO audit (at, actor, client, domain, outcome, status,"
                    " entries_dropped, duration_ms, acked, live, answered_by, journal_id, kind,"
                    " receipt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (journal_id) DO NOTHING",
                    (
                        record.at,
                        _audit_text(record.actor),
                        _audit_text(record.client),
                        _audit_text(record.domain),
                        record.outcome,
                        record.status,
                        record.entries_dropped,
                        record.duration_ms,
                        record.acked,
                        record.live,
                        _audit_text(record.answered_by),
                        record.journal_id,
                        _audit_text(record.kind),
                        record.receipt,
                    ),
                )
                if cursor.rowcount == 1:
                    newest = cursor.lastrowid
            if newest is not None and newest > self.audit_max_rows:
                conn.execute("DELETE FROM audit WHERE id <= ?", (newest - self.audit_max_rows,))

    def list_audit(
        self,
        limit: int = 100,
        offset: int = 0,
        *,
        domain: str | None = None,
        outcome: str | None = None,
        kind: str | None = None,
    ) -> list[AuditRecord]:
        """Audit records, newest first, optionally only those of one domain, outcome and/or
        kind (CLEAR_KIND: those with no kind)."""
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must not be negative")
        kind_test = None if kind is None else "null" if kind == CLEAR_KIND else "value"
        params = [value for value in (domain, outcome) if value is not None]
        if kind_test == "value":
            params.append(str(kind))
        sql = _AUDIT_QUERIES[(domain is not None, outcome is not None, kind_test)]
        with self._errors("read the audit log"):
            rows = self._conn.execute(sql, (*params, limit, offset)).fetchall()
        return [AuditRecord(*row) for row in rows]


def check_token_name(name: str) -> None:
    """ValueError, with a message for people, unless ``name`` can name a token."""
    if not is_valid_token_name(name):
        raise ValueError(f"bad token name {name!r}: use 1-64 of A-Z a-z 0-9 . _ -")


def _token_record(
    name: str, scope: str, created_at: float, last_used_at: float | None
) -> TokenRecord:
    try:
        parsed = Scope.from_stored(scope)
    except ValueError as exc:
        raise StateError(f"token {name!r} has a damaged scope {scope!r}: {exc}") from None
    return TokenRecord(name=name, scope=parsed, created_at=created_at, last_used_at=last_used_at)
