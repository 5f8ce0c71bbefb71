"""Schema 5: audit records carry a purge's kind and receipt (decision 0025). A database of
schema 4 gains the columns on open and keeps its rows; a journal line written before
(``audit/1``, without the two fields) is still replayed."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

from proxy.state.journal import decode, encode
from proxy.state.sqlite import SCHEMA_VERSION, AuditRecord, StateDB

T0 = 1_700_000_000.0
RECEIPT = json.dumps({"domain": "example.com", "kind": "tag", "items": ["t"], "entries": 2})

# The audit table as schema 4 made it.
SCHEMA_4 = (
    "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT,"
    " client TEXT, domain TEXT, outcome TEXT NOT NULL, status INTEGER NOT NULL,"
    " entries_dropped INTEGER NOT NULL DEFAULT 0, duration_ms REAL NOT NULL, acked INTEGER,"
    " live INTEGER, answered_by TEXT, journal_id TEXT)"
)
OLD_ROW = (
    "INSERT INTO audit (at, actor, client, domain, outcome, status, entries_dropped,"
    " duration_ms, journal_id) VALUES (1.0, 'deploy', '127.0.0.1', 'example.com', 'cleared',"
    " 200, 3, 1.5, 'j.1')"
)


def purge_record(**fields: object) -> AuditRecord:
    record = AuditRecord(
        at=T0,
        actor="deploy",
        client="127.0.0.1",
        domain="example.com",
        outcome="purged",
        status=200,
        entries_dropped=2,
        duration_ms=0.5,
        kind="tag",
        receipt=RECEIPT,
    )
    return dataclasses.replace(record, **fields)  # type: ignore[arg-type]


def test_a_version_4_audit_log_gains_kind_and_receipt_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    raw = sqlite3.connect(path)
    raw.executescript(f"{SCHEMA_4}; {OLD_ROW}; PRAGMA user_version=4;")
    raw.close()
    with StateDB(path) as db:
        [old] = db.list_audit()
        assert (old.outcome, old.entries_dropped, old.kind, old.receipt) == (
            "cleared",
            3,
            None,
            None,
        )
        db.write_batch({}, [purge_record()])
        newest, _ = db.list_audit()
        assert (newest.kind, newest.receipt) == ("tag", RECEIPT)
        assert [record.kind for record in db.list_audit(outcome="purged")] == ["tag"]
        assert db.connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert SCHEMA_VERSION == 5


def test_kind_and_receipt_survive_the_journal() -> None:
    record = purge_record(journal_id="j.2")
    assert decode(encode(record)) == record


def test_a_journal_line_from_before_is_replayed_without_kind_or_receipt() -> None:
    """A journal left by a process of schema 4 (killed before its batch) is read at start."""
    line = encode(purge_record(journal_id="j.3", kind=None, receipt=None))
    values = json.loads(line)
    old = json.dumps(["audit/1", *values[1:-3], values[-1]]).encode()
    assert decode(old) == purge_record(journal_id="j.3", kind=None, receipt=None, outcome="purged")
