"""The audit journal (proxy/state/journal.py): its line format, what a crash can leave in it,
and its replay into SQLite, which stores each record once however often it is replayed."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from pathlib import Path

import pytest

from proxy.errors import StateError, WireError
from proxy.state.async_state import AsyncState
from proxy.state.journal import (
    AuditJournal,
    decode,
    encode,
    journal_directory,
    read_segment,
)
from proxy.state.sqlite import AuditRecord, StateDB

T0 = 1_700_000_000.0


def audit(n: int, **fields: object) -> AuditRecord:
    record = AuditRecord(
        at=T0 + n,
        actor="deploy",
        client="127.0.0.1",
        domain="example.com",
        outcome="cleared",
        status=200,
        entries_dropped=n,
        duration_ms=0.5,
    )
    return dataclasses.replace(record, **fields)  # type: ignore[arg-type]


def stored(state_path: Path) -> list[tuple[int, str | None]]:
    """(entries_dropped, journal_id) of every stored record, oldest first."""
    with sqlite3.connect(state_path) as raw:
        rows = raw.execute("SELECT entries_dropped, journal_id FROM audit ORDER BY id").fetchall()
    raw.close()
    return rows


def segments(state_path: Path) -> list[Path]:
    """The journal's segments that hold anything (a running server has an empty one open)."""
    paths = journal_directory(state_path).glob("*.jsonl")
    return sorted(path for path in paths if path.stat().st_size)


@pytest.mark.parametrize(
    "record",
    [
        audit(1, journal_id="a.1"),
        audit(2, journal_id="a.2", actor=None, client=None, domain=None, outcome="unauthorized"),
        audit(3, journal_id="a.3", domain="\udcff.example"),  # a lone surrogate from JSON input
        audit(4, journal_id="a.4", acked=3, live=4, answered_by="node-a/control"),
    ],
)
def test_a_line_is_one_record_and_reads_back_the_same(record: AuditRecord) -> None:
    line = encode(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.isascii()
    assert decode(line) == record


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"[",
        b"{}",
        b"[]",
        b'["audit/1"]',
        b'["audit/2"]',
        encode(audit(1, journal_id="a.1")).replace(b"audit/2", b"audit/9"),
        encode(audit(1, journal_id="a.1"))[:40],
    ],
)
def test_what_is_not_a_journaled_record_is_refused(line: bytes) -> None:
    with pytest.raises(WireError):
        decode(line)


def test_a_last_line_cut_short_is_ignored_and_a_damaged_one_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "000000000001.jsonl"
    one, two, three = (encode(audit(n, journal_id=f"x.{n}")) for n in (1, 2, 3))
    path.write_bytes(one + b"garbage\n" + two + three[:20])
    with caplog.at_level(logging.WARNING, logger="proxy.state"):
        records = read_segment(path)
    assert [r.journal_id for r in records] == ["x.1", "x.2"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("line 2 is damaged" in m for m in messages)
    assert any("last line was cut short" in m for m in messages)


async def test_a_record_is_in_the_journal_when_record_audit_returns(state_path: Path) -> None:
    state = await AsyncState.open(state_path, flush_seconds=3600)
    try:
        for n in range(3):
            await state.record_audit(audit(n))
        # Not yet in SQLite, but on its way to the disk: the kernel has it.
        assert stored(state_path) == []
        [segment] = segments(state_path)
        assert [r.entries_dropped for r in read_segment(segment)] == [0, 1, 2]
        assert len({r.journal_id for r in read_segment(segment)}) == 3
        await state.flush()
        assert [n for n, _ in stored(state_path)] == [0, 1, 2]
    finally:
        await state.close()
    assert segments(state_path) == []  # all in SQLite: nothing left to replay


async def test_the_next_start_replays_what_a_crash_left_once(state_path: Path) -> None:
    """A crash between the commit and the segment's deletion leaves records SQLite already
    has: replayed, they are stored once. A torn last line is left out."""
    with StateDB(state_path) as db:  # the schema, and one record already stored
        db.write_batch({}, [audit(1, journal_id="run1.1")])
    journal = journal_directory(state_path)
    journal.mkdir()
    (journal / "000000000007.jsonl").write_bytes(
        encode(audit(1, journal_id="run1.1")) + encode(audit(2, journal_id="run1.2"))
    )
    (journal / "000000000008.jsonl").write_bytes(
        encode(audit(3, journal_id="run1.3")) + encode(audit(4, journal_id="run1.4"))[:-9]
    )
    state = await AsyncState.open(state_path)
    try:
        assert stored(state_path) == [(1, "run1.1"), (2, "run1.2"), (3, "run1.3")]
        assert segments(state_path) == []  # replayed, then deleted
        await state.record_audit(audit(5))
        await state.flush()
    finally:
        await state.close()
    assert [n for n, _ in stored(state_path)] == [1, 2, 3, 5]


async def test_a_batch_sqlite_refused_is_kept_for_the_next_start(state_path: Path) -> None:
    state = await AsyncState.open(state_path, flush_seconds=3600)
    try:
        with sqlite3.connect(state_path) as raw:
            raw.execute("DROP TABLE audit")
        raw.close()
        await state.record_audit(audit(9))
        await state.flush()  # fails: logged, and the segment stays
    finally:
        await state.close()
    assert len(segments(state_path)) == 1
    state = await AsyncState.open(state_path)  # the table is made again, then replayed into
    await state.close()
    assert [n for n, _ in stored(state_path)] == [9]
    assert segments(state_path) == []


async def test_two_servers_cannot_share_a_journal(state_path: Path) -> None:
    state = await AsyncState.open(state_path)
    try:
        with pytest.raises(StateError, match="in use by another process"):
            await AsyncState.open(state_path)
    finally:
        await state.close()
    await (await AsyncState.open(state_path)).close()  # free again once closed


async def test_with_fsync_each_record_is_synced_before_record_audit_returns(
    state_path: Path,
) -> None:
    state = await AsyncState.open(state_path, flush_seconds=3600, audit_fsync=True)
    try:
        for n in range(3):
            await state.record_audit(audit(n))
        [segment] = segments(state_path)
        assert [r.entries_dropped for r in read_segment(segment)] == [0, 1, 2]
    finally:
        await state.close()
    assert [n for n, _ in stored(state_path)] == [0, 1, 2]
    assert segments(state_path) == []


def test_full_segments_are_retired_and_deleted_once_settled(tmp_path: Path) -> None:
    journal, left = AuditJournal.open(tmp_path / "state.db", rotate_bytes=200)
    assert left == []
    try:
        _, first = journal.append(audit(1))
        journal.rotate()  # a batch is taken, the segment is not full yet: kept
        _, also_first = journal.append(audit(2))
        assert also_first is first
        journal.rotate()  # full now: what follows goes to a new segment
        _, second = journal.append(audit(3))
        assert second is not first
        journal.settle([first])
        assert first.path.exists()  # one of its records is not in SQLite yet
        journal.settle([first])
        assert not first.path.exists()
        journal.append(audit(4))
        journal.rotate()
        assert second.path.exists()  # retired, but not yet in SQLite
    finally:
        journal.close()
    assert second.path.exists()  # kept for the next start
    assert [r.entries_dropped for r in read_segment(second.path)] == [3, 4]
