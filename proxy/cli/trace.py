"""``cdn-proxy trace``: ask the API why a URL would be a hit, a miss or a bypass (decision 0038).

    cdn-proxy trace URL [-H 'Name: value']... [--api URL | --config FILE] [--token T]
                        [--fetch] [--json]

It posts ``{"url": URL, "headers": {...}, "fetch": ...}`` to /api/v1/cdn/trace and prints the
answer for people (``describe``) or as JSON. The API's base URL and the token are found as
``cdn-proxy purge`` finds them (proxy/cli/api_client.py). urllib, no event loop, no redirects.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from proxy.cli.api_client import Failed, add_api_options, api_settings, json_object, post
from proxy.core.purge.receipts import any_number_text
from proxy.core.routes import TRACE_PATH

TIMEOUT = 30.0  # seconds: a fetch waits for the origin
MAX_ANSWER = 1024**2


HELP = "explain how the edge would answer a URL (rules, key, store, origin)"
DESCRIPTION = (
    "Nothing changes: no fill, no traffic counted; the origin is asked only with --fetch "
    "(once, and its answer is not stored)."
)


def add_arguments(trace: argparse.ArgumentParser) -> None:
    trace.add_argument("url", help="the URL as a client asks it: http(s)://domain/path?query")
    trace.add_argument(
        "-H", "--header", action="append", default=[], metavar="'NAME: VALUE'", dest="headers"
    )
    trace.add_argument("--fetch", action="store_true", help="ask the origin once, store nothing")
    trace.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_api_options(trace)


def run(args: argparse.Namespace) -> int:
    """The ``trace`` command: raises Failed with what went wrong."""
    headers: dict[str, str] = {}
    for line in args.headers:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise Failed(f"-H {line!r}: give 'Name: value'", code=2)
        headers[name.strip()] = value.strip()
    url, token = api_settings(args)
    body = {"url": args.url, "headers": headers, "fetch": args.fetch}
    answer = json_object(
        post(url, TRACE_PATH, token, body, command="trace", timeout=TIMEOUT, limit=MAX_ANSWER),
        "a trace",
    )
    print(json.dumps(answer, indent=2) if args.json else describe(answer))
    return 0


def describe(answer: Mapping[str, object]) -> str:
    """The trace for people, one decision a line."""
    method, scheme = answer.get("method", "GET"), answer.get("scheme")
    if scheme in ("http", "https"):
        lines = [f"{method} {scheme}://{answer.get('domain')}{answer.get('target')}"]
    else:  # an API older than the scheme in its answer
        lines = [f"{method} {answer.get('target')} on {answer.get('domain')}"]
    lines.append(f"  outcome: {answer.get('outcome')} ({answer.get('why')})")
    workers = _rows(answer.get("workers"))  # a node with workers: each one's outcome
    if workers:
        each = ", ".join(f"{row.get('worker')}: {row.get('outcome')}" for row in workers)
        lines.append(f"  edge workers: {each}")
    lines.append(f"  cache key: {answer.get('key')}")
    owner = answer.get("owner")  # a fleet with peer fills (decision 0047)
    if isinstance(owner, dict):
        lines.append(f"  owner: {owner.get('node')}, asked: {owner.get('answered')}")
    for row in _rows(answer.get("rules")):
        mark = "applies" if row.get("matched") else "skipped"
        lines.append(f"  rule {row.get('name')}: {mark}: {row.get('why')}")
    entry = answer.get("entry")
    if isinstance(entry, dict):
        lines.append(
            f"  stored: status {entry.get('status')}, age {entry.get('age')}s, lifetime "
            f"{entry.get('freshness_lifetime')}s from {entry.get('lifetime_source')}"
        )
    store = answer.get("store")
    if isinstance(store, dict):
        lines.append(f"  store: {store.get('variants')} variant(s)")
        if store.get("purge_number") is None:  # a fleet whose Valkey did not answer
            lines.append(f"  purge numbers: {store.get('numbers')}")
        else:  # in the series of the receipts (`cdn-proxy purge`): issue 34 B3
            number = any_number_text(store.get("purge_number"))
            cleared = store.get("generation")
            last = "never" if cleared == 0 else any_number_text(cleared)
            lines.append(f"  latest purge: {number}; the domain's last clear: {last}")
        for purge in _rows(store.get("purges")):  # of the URL: a copy stored since answers
            items = purge.get("items")
            named = " ".join(map(str, items)) if isinstance(items, list) else ""
            kind = f"{'soft ' if purge.get('soft') else ''}{purge.get('kind')}"
            lines.append(f"  recent purge of this URL: {kind} {named}".rstrip())
        refused = store.get("refused")
        if isinstance(refused, dict):  # hit-for-miss: why the last fill was not stored
            lines.append(
                f"  last fill not stored, {refused.get('age')}s ago: {refused.get('why_not')}"
                f" (status {refused.get('status')})"
            )
    origin = answer.get("origin")
    if isinstance(origin, dict):
        names = ", ".join(map(str, origin.get("candidates") or [])) or "none up"
        lines.append(f"  a miss goes to: {names} ({origin.get('balance')})")
    fetched = answer.get("fetched")
    if isinstance(fetched, dict):
        if fetched.get("storable"):
            lines.append(f"  fetched: storable for {fetched.get('freshness_lifetime')}s")
        else:
            lines.append(f"  fetched: not stored: {fetched.get('why_not')}")
    return "\n".join(lines)


def _rows(value: object) -> list[dict[str, object]]:
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []
