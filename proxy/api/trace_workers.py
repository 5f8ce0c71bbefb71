"""A trace on a node whose memory tiers are its edge workers' (decision 0038, "trace").

The control process holds no memory tier: it asks each worker what its store holds under the
key (proxy/process/supervisor.py ``Workers.inspect``, over the pipe each worker already has
from its node) and traces the request once per worker. The kernel hands each new connection
to one worker (SO_REUSEPORT), so the next request's outcome is that worker's:

- every worker traced alike: that outcome, and the first worker's entry;
- they differ (one worker filled the object, the other has not yet): the outcome ``mixed``,
  each worker's own in ``why``;
- a worker that did not answer in time (starting, or stuck) is ``unknown`` for its part.

The store row's ``refused`` is the latest refusal any worker remembers (hit-for-miss).

Every answer lists ``workers``: each worker's outcome and why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from proxy.core.cache.trace import Held

# domain, cache target -> worker index -> what its store holds (None: no answer in time)
AskWorkers = Callable[[str, str], Awaitable[Mapping[int, Held | None]]]
ASK_WORKERS: web.AppKey[AskWorkers] = web.AppKey("trace_ask_workers")
MIXED = "mixed"


async def traced_by_workers(
    ask: AskWorkers,
    domain: str,
    key_target: str,
    explain: Callable[[Held | None], dict[str, object]],
) -> dict[str, object] | None:
    """The trace with each worker's store (``explain`` traces with one ``Held``); None when
    no worker is running."""
    answers = await ask(domain, key_target)
    if not answers:
        return None
    rows: list[dict[str, object]] = []
    traced: list[dict[str, object]] = []
    for index, held in sorted(answers.items()):
        if held is None:
            why = f"edge worker {index} did not answer"
            rows.append({"worker": index, "outcome": "unknown", "why": why})
            continue
        one = explain(held)
        traced.append(one)
        rows.append({"worker": index, "outcome": one["outcome"], "why": one["why"]})
    answer = dict(traced[0]) if traced else explain(None)
    outcomes = {row["outcome"] for row in rows}
    if len(outcomes) > 1:
        entry = next((one["entry"] for one in traced if one.get("entry")), None)
        each = "; ".join(f"worker {r['worker']}: {r['outcome']} ({r['why']})" for r in rows)
        why = f"{each}: the worker the kernel hands the connection to decides"
        answer.update(outcome=MIXED, why=why, entry=entry)
    elif not traced:
        answer.update(outcome="unknown", why=str(rows[0]["why"]), entry=None)
    refusals = [refused for one in traced if (refused := _refused(one)) is not None]
    store = answer.get("store")
    if refusals and isinstance(store, dict):
        # Each worker remembers what it did not store: the latest refusal, the next
        # request's likeliest (hit-for-miss, edge/refusals.py).
        answer["store"] = {**store, "refused": min(refusals, key=lambda r: r["age"])}
    answer["workers"] = rows
    return answer


def _refused(traced: dict[str, object]) -> dict[str, Any] | None:
    store = traced.get("store")
    refused = store.get("refused") if isinstance(store, dict) else None
    return refused if isinstance(refused, dict) else None
