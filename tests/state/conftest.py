"""Fixtures for the state database tests: a real sqlite file in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.state.sqlite import StateDB


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "var" / "state.db"


@pytest.fixture
def state_db(state_path: Path) -> Iterator[StateDB]:
    with StateDB(state_path, audit_max_rows=1000) as db:
        yield db
