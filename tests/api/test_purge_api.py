"""POST /api/v1/cdn/purge when it succeeds: the receipt (decision 0025), what the store holds
after it, the audit record, the metrics; then through a real ``cdn-proxy serve`` with a real
origin whose version counter shows that after the 200 no request gets pre-purge content."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from proxy.api.gate import PURGE_CONTEXT, as_admin
from proxy.api.purge import audited_purge
from proxy.core.purge.purges import purge_request
from proxy.core.purge.receipts import FIELDS
from tests.api.purge_support import (
    assert_purged,
    post_purge,
    purge_node,
    receipt_of,
    warm,
)
from tests.api.support import DOMAIN, OTHER, START, ApiUnderTest, stored_response
from tests.edge.test_purges_end_to_end import URLS

TARGETS = ["/a", "/b?x=1", "/assets/c.css"]


@pytest.fixture
async def filled(api: ApiUnderTest) -> ApiUnderTest:
    """Besides /x of every domain, example.com holds TARGETS."""
    for target in TARGETS:
        key = (await api.store.lookup(DOMAIN, target)).key
        assert await api.store.put(key, stored_response(target.encode() * 10))
    return api


async def stored(api: ApiUnderTest, target: str, domain: str = DOMAIN) -> bool:
    return bool((await api.store.lookup(domain, target)).variants)


async def test_a_url_purge_answers_an_exact_receipt(filled: ApiUnderTest) -> None:
    api = filled
    before = await api.store.domain_stats(DOMAIN)
    answer = await post_purge(api, {"domain": "EXAMPLE.com.", "urls": ["/a", "/b?x=1", "/no"]})
    receipt = receipt_of(answer)
    after = await api.store.domain_stats(DOMAIN)
    assert list(receipt) == list(FIELDS)
    assert receipt == {
        **receipt,
        "domain": DOMAIN,
        "kind": "url",
        "items": ["/a", "/b?x=1", "/no"],
        "soft": False,
        "dry_run": False,
        "entries": 2,
        "bytes": before.bytes - after.bytes,
        "exact": True,
        "sample": [],
        "acked": None,
        "live": None,
    }
    assert isinstance(receipt["number"], int) and isinstance(receipt["generation"], int)
    assert 0 <= receipt["seconds"] < 5
    assert not await stored(api, "/a") and not await stored(api, "/b?x=1")
    assert await stored(api, "/assets/c.css") and await stored(api, "/x")
    assert await stored(api, "/x", OTHER)

    [record] = await api.audit()
    assert (record.actor, record.domain, record.outcome, record.status, record.kind) == (
        "deploy",
        DOMAIN,
        "purged",
        200,
        "url",
    )
    assert record.entries_dropped == 2
    assert record.at == START
    assert json.loads(record.receipt or "") == receipt


async def test_numbers_move_on_with_every_purge(filled: ApiUnderTest) -> None:
    first = receipt_of(await post_purge(filled, {"domain": DOMAIN, "tags": ["t"]}))
    second = receipt_of(await post_purge(filled, {"domain": DOMAIN, "prefixes": ["/z"]}))
    assert second["number"] > first["number"]
    assert second["generation"] == first["generation"]  # only a hard all moves it
    third = receipt_of(await post_purge(filled, {"domain": DOMAIN, "all": True}))
    assert third["generation"] > second["generation"]


@pytest.mark.parametrize("soft", [False, True])
async def test_a_prefix_purge_says_at_most(filled: ApiUnderTest, soft: bool) -> None:
    """Lazy: the receipt gives the domain's entries as an upper bound, exact false."""
    api = filled
    before = await api.store.domain_stats(DOMAIN)
    receipt = receipt_of(
        await post_purge(api, {"domain": DOMAIN, "prefixes": ["/assets/"], "soft": soft})
    )
    assert (receipt["kind"], receipt["soft"], receipt["exact"]) == ("prefix", soft, False)
    assert (receipt["entries"], receipt["bytes"]) == (before.entries, before.bytes)
    assert await stored(api, "/assets/c.css") is soft  # soft: stale, still stored
    assert await stored(api, "/a")


@pytest.mark.parametrize(
    ("body", "covered"),
    [
        ({"urls": ["/a", "/nope"]}, ["/a"]),
        ({"prefixes": ["/assets/", "/b"]}, ["/assets/c.css", "/b?x=1"]),
        ({"all": True}, ["/a", "/assets/c.css", "/b?x=1", "/x"]),
    ],
)
async def test_a_dry_run_counts_exactly_names_a_sample_and_changes_nothing(
    filled: ApiUnderTest, body: dict[str, Any], covered: list[str]
) -> None:
    api = filled
    keys = {target: (await api.store.lookup(DOMAIN, target)).key for target in [*TARGETS, "/x"]}
    answer = await post_purge(api, {"domain": DOMAIN, **body, "dry_run": True})
    receipt = receipt_of(answer)
    assert (receipt["dry_run"], receipt["exact"]) == (True, True)
    assert sorted(receipt["sample"]) == covered
    assert receipt["entries"] == len(covered)
    for target, key in keys.items():  # same keys, still stored: nothing changed
        found = await api.store.lookup(DOMAIN, target)
        assert (found.key, bool(found.variants)) == (key, True)
    [record] = await api.audit()
    assert (record.outcome, record.entries_dropped) == ("dry_run", 0)
    assert json.loads(record.receipt or "")["sample"] == receipt["sample"]


async def test_a_scoped_token_purges_its_own_domain(api: ApiUnderTest) -> None:
    receipt = receipt_of(await post_purge(api, {"domain": OTHER, "urls": ["/x"]}, token="scoped"))
    assert (receipt["domain"], receipt["entries"]) == (OTHER, 1)
    assert not await stored(api, "/x", OTHER)
    assert await stored(api, "/x")


async def test_the_dashboard_purges_through_the_same_path(api: ApiUnderTest) -> None:
    """The dashboard calls audited_purge with an admin and a Purge built from its form."""
    ctx = api.client.app[PURGE_CONTEXT]
    answer = await audited_purge(
        ctx,
        client="127.0.0.1",
        authorise=as_admin("alice", DOMAIN),
        purge=purge_request("url", ["/x"], soft=True),
    )
    assert (answer.outcome, answer.status, answer.kind, answer.purged) == (
        "purged",
        200,
        "url",
        True,
    )
    assert answer.receipt is not None and answer.receipt["soft"] is True
    [record] = await api.audit()
    assert (record.actor, record.kind, record.outcome) == ("admin:alice", "url", "purged")
    refused = await audited_purge(
        ctx, client=None, authorise=as_admin("alice", "nowhere.example"), purge=None
    )
    assert (refused.status, refused.receipt, refused.purged) == (400, None, False)


async def test_clear_cache_records_keep_no_kind(api: ApiUnderTest) -> None:
    assert (await api.post()).body == b"Cache cleared"
    [record] = await api.audit()
    assert (record.outcome, record.kind, record.receipt) == ("cleared", None, None)


async def test_purges_are_counted_by_kind_and_outcome(api: ApiUnderTest) -> None:
    await post_purge(api, {"domain": DOMAIN, "urls": ["/x"]})
    await post_purge(api, {"domain": DOMAIN, "urls": ["/x"], "dry_run": True})
    await post_purge(api, {"domain": DOMAIN, "tags": ["a,b"]})
    await post_purge(api, {"domain": DOMAIN})
    await post_purge(api, {"domain": "unknown.example", "all": True})
    answer = await api.send("GET", "/metrics")
    text = answer.body.decode()
    counts = {
        (kind, outcome): float(value)
        for kind, outcome, value in re.findall(
            r'^cdn_proxy_purges_total\{kind="(\w+)",outcome="(\w+)"\} (\S+)$', text, re.M
        )
        if float(value)  # the other kinds' purged and dry_run, at zero
    }
    assert counts == {
        ("url", "purged"): 1.0,
        ("url", "dry_run"): 1.0,
        ("tag", "bad_request"): 1.0,
        ("unknown", "bad_request"): 1.0,
        ("all", "not_found"): 1.0,
    }
    assert "cdn_proxy_purge_duration_seconds_count 5.0" in text


# -- a real node, a real origin ------------------------------------------------------------------

Served = Callable[..., Awaitable[TestServer]]
KINDS: list[tuple[dict[str, Any], set[str]]] = [
    ({"urls": ["/page"]}, {"/page"}),
    ({"prefixes": ["/assets/"]}, {"/assets/a.css", "/assets/b.js"}),
    ({"tags": ["p-1"]}, {"/page"}),  # a Surrogate-Key
    ({"tags": ["all-tagged"]}, {"/assets/a.css", "/assets/b.js", "/page"}),  # a Cache-Tag
    ({"all": True}, set(URLS)),
]


@pytest.mark.slow
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
async def test_after_the_200_no_request_gets_pre_purge_content(
    tmp_path: Path, aiohttp_server: Served, soft: bool
) -> None:
    """For each kind in turn, on one node: the origin moves on a version, the purge answers
    200, then every covered URL answers the new version from its first request on (one
    origin fetch each), and every other URL stays a hit on what it was."""
    async with purge_node(tmp_path, aiohttp_server) as node:
        for body, covered in KINDS:
            served = await warm(node)
            fetched = dict(node.origin.full)
            node.origin.version += 1
            status, receipt = await node.purge({"domain": DOMAIN, **body, "soft": soft})
            assert status == 200, receipt
            assert (receipt["soft"], receipt["dry_run"], receipt["acked"]) == (soft, False, None)
            await assert_purged(node, covered, served, fetched, body)


@pytest.mark.slow
async def test_a_dry_run_on_a_node_changes_nothing(tmp_path: Path, aiohttp_server: Served) -> None:
    async with purge_node(tmp_path, aiohttp_server) as node:
        served = await warm(node)
        node.origin.version += 1
        for body, covered in KINDS:
            status, receipt = await node.purge({"domain": DOMAIN, **body, "dry_run": True})
            assert status == 200, receipt
            assert (receipt["entries"], receipt["exact"]) == (len(covered), True)
            assert set(receipt["sample"]) == covered
        assert await warm(node) == served  # every request still a hit on version 1
        assert node.origin.full == dict.fromkeys(URLS, 1)
