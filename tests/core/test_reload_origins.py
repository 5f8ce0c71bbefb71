"""A reload's view of a domain's origin servers (proxy/config/diff.py, decision 0034): servers
added or removed keep the domain's entries while one server stays; a list with no server in
common re-points the domain (its entries cleared), as a new ``origin`` does."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.diff import diff
from tests.core.test_reload import config

A, B, C = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"


def servers(**keys: Any) -> dict[str, Any]:
    return {"name": "example.com", **keys}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("before", "after", "repointed"),
    [
        ({"origin": A}, {"origins": [A, B]}, False),  # a second app server
        ({"origins": [A, B]}, {"origins": [B]}, False),  # the first one removed
        ({"origins": [A, B]}, {"origins": [B, A]}, False),
        ({"origins": [A, B]}, {"origins": [A, B], "backup_origins": [C]}, False),
        ({"origins": [A, B]}, {"origins": [A, B], "balance": "hash"}, False),
        ({"origin": A}, {"origin": A, "health_check": {"path": "/healthz"}}, False),
        ({"origins": [A, B]}, {"origins": [C]}, True),  # no server in common: another site
        ({"origin": A}, {"origin": B}, True),
    ],
)
def test_which_origin_changes_clear_the_domain(
    before: dict[str, Any], after: dict[str, Any], repointed: bool
) -> None:
    change = diff(config(servers(**before)), config(servers(**after)))
    assert change.repointed == (("example.com",) if repointed else ())
    assert change.retuned == (() if repointed else ("example.com",))
