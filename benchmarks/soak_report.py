"""The soak's counts (benchmarks/soak.py) and the report made of them: JSON, Markdown, a chart.

``Tally`` is everything counted while the soak runs; ``figures`` turns it into one JSON
document (every figure of the report, and the samples behind the chart); ``markdown`` and
``chart`` render that document, so a report can be rendered again from its JSON.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.soak_server import AuditRow, Sample

EXAMPLES = 20  # unexpected events kept with their detail, per kind of event


@dataclass(frozen=True, slots=True)
class Confirmed:
    """A clear answered 200: by whom, for what, when (the soak's wall clock), and which
    start of the server answered it."""

    actor: str
    domain: str
    start: float
    end: float
    generation: int


@dataclass
class Tally:
    requests: Counter[str] = field(default_factory=Counter)  # reads by kind, clears, probes
    statuses: Counter[str] = field(default_factory=Counter)  # "kind 2xx" ...
    hits: Counter[str] = field(default_factory=Counter)  # reads served from the cache, by kind
    fivexx: Counter[str] = field(default_factory=Counter)  # origin / fault / unexpected
    errors: Counter[str] = field(default_factory=Counter)  # "kind error": no answer
    refused: Counter[str] = field(default_factory=Counter)  # connections refused: edge, api
    during_restart: Counter[str] = field(default_factory=Counter)  # failures while it was down
    checked: int = 0  # reads that started after a clear of their domain had been answered 200
    stale: int = 0  # ... and returned an older version
    clear_ms: list[float] = field(default_factory=list)  # clears answered 200, client's view
    clears: Counter[str] = field(default_factory=Counter)  # outcome of each clear
    confirmed: list[Confirmed] = field(default_factory=list)
    regenerations: list[float] = field(default_factory=list)  # the CLI's seconds, each
    probes: Counter[str] = field(default_factory=Counter)
    probe_ms: list[float] = field(default_factory=list)  # /healthz, when answered
    loris: Counter[str] = field(default_factory=Counter)  # "target kind outcome"
    loris_closed_after: dict[str, list[float]] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def example(self, what: str, detail: str) -> None:
        kept = self.examples.setdefault(what, [])
        if len(kept) < EXAMPLES:
            kept.append(detail)


def audit_lost(confirmed: list[Confirmed], rows: list[AuditRow]) -> list[Confirmed]:
    """The confirmed clears with no audit record: a record of the same actor and domain,
    status 200, taken by the server between the clear's start and end. One client sends
    each actor's clears one at a time, so their windows do not overlap and each record
    can match one clear only (matched in order, each used once)."""
    by_key: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if row.status == 200:
            by_key.setdefault((row.actor, row.domain), []).append(row.at)
    lost = []
    slack = 0.002  # the server's clock is this machine's: only rounding to allow for
    cursor: Counter[tuple[str, str]] = Counter()
    for clear in sorted(confirmed, key=lambda c: c.start):
        key = (clear.actor, clear.domain)
        times = sorted(by_key.get(key, ()))
        i = cursor[key]
        while i < len(times) and times[i] < clear.start - slack:
            i += 1
        if i < len(times) and times[i] <= clear.end + slack:
            cursor[key] = i + 1
        else:
            cursor[key] = i
            lost.append(clear)
    return lost


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(tally: Tally, settings: dict[str, Any]) -> dict[str, Any]:
    """Every figure of the report, as one JSON-ready document."""
    samples = tally.samples
    max_bytes = int(settings["max_bytes"])
    rss = [s.rss for s in samples]
    pss = [s.pss for s in samples]
    fds = [s.fds for s in samples]
    reads = sum(n for kind, n in tally.requests.items() if kind.startswith("read "))
    loris_times = {k: _summary(v) for k, v in sorted(tally.loris_closed_after.items())}
    return {
        "settings": settings,
        "requests": {
            "total": sum(tally.requests.values()),
            "reads": reads,
            "by_kind": dict(sorted(tally.requests.items())),
            "by_status": dict(sorted(tally.statuses.items())),
            "cache_hits": dict(sorted(tally.hits.items())),
        },
        "fivexx": {
            "unexpected": tally.fivexx["unexpected"],
            "origin_5xx_passed_through": tally.fivexx["origin"],
            "edge_5xx_for_origin_faults": tally.fivexx["fault"],
        },
        "no_answer": dict(sorted(tally.errors.items())),
        "connections_refused": dict(sorted(tally.refused.items())),
        "failures_while_restarting": dict(sorted(tally.during_restart.items())),
        "stale_after_200": {"stale": tally.stale, "reads_checked": tally.checked},
        "clears": {
            "outcomes": dict(sorted(tally.clears.items())),
            "answered_200": len(tally.confirmed),
            # a valid token refused because of failures from the same address (issue 13, 5)
            "refused_429": sum(n for k, n in tally.clears.items() if k.endswith(" 429")),
            "ms_p50": _percentile(tally.clear_ms, 0.5),
            "ms_p99": _percentile(tally.clear_ms, 0.99),
            "ms_max": max(tally.clear_ms, default=None),
        },
        "token_regenerations": {
            "count": len(tally.regenerations),
            "cli_seconds": _summary(tally.regenerations),
        },
        "api_probe": {
            "outcomes": dict(sorted(tally.probes.items())),
            "healthz_ms_p99": _percentile(tally.probe_ms, 0.99),
            "healthz_ms_max": max(tally.probe_ms, default=None),
        },
        "slowloris": {
            "outcomes": dict(sorted(tally.loris.items())),
            "closed_by_server_after_s": loris_times,
        },
        "memory": {
            "max_bytes": max_bytes,
            "rss_first": rss[0] if rss else None,
            "rss_max": max(rss, default=None),
            "rss_last": rss[-1] if rss else None,
            "rss_max_over_max_bytes": round(max(rss) / max_bytes, 2) if rss else None,
            "pss_first": pss[0] if pss else None,
            "pss_max": max(pss, default=None),
            "pss_last": pss[-1] if pss else None,
            "fds_first": fds[0] if fds else None,
            "fds_max": max(fds, default=None),
            "fds_last": fds[-1] if fds else None,
        },
        "kills": tally.kills,
        "audit_records_lost": sum(int(k["audit_lost"]) for k in tally.kills),
        "examples": tally.examples,
        "samples": [[s.at, s.rss, s.fds, s.processes, s.pss] for s in samples],
    }


def _summary(values: list[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "median": round(statistics.median(values), 3) if values else None,
        "max": round(max(values), 3) if values else None,
    }


def markdown(doc: dict[str, Any]) -> str:
    """The summary an operator reads first; every figure is also in the JSON beside it."""
    s, req, mem = doc["settings"], doc["requests"], doc["memory"]
    five, stale, clears = doc["fivexx"], doc["stale_after_200"], doc["clears"]
    mib = 1024 * 1024
    lines = [
        f"# Soak: {s['seconds']:.0f} s, commit {s['commit']}",
        "",
        f"`{s['command']}`",
        "",
        f"Server: `{s['server_command']}` (workers = {s['workers']}); load and origin on core "
        f"{s['load_cpu']}. Load average {s['load_before']} before, {s['load_after']} after.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| requests (reads, clears, probes) | {req['total']:,} |",
        f"| reads | {req['reads']:,} |",
        f"| **5xx not caused by the faulty origin** | **{five['unexpected']}** |",
        f"| 5xx of the origin, passed through (marked `X-Soak-Fault`) | "
        f"{five['origin_5xx_passed_through']:,} |",
        f"| 5xx the edge made for the origin's resets and delays | "
        f"{five['edge_5xx_for_origin_faults']:,} |",
        f"| **stale after 200** (reads checked) | **{stale['stale']}** "
        f"({stale['reads_checked']:,}) |",
        f"| clears answered 200 (p50 / p99 ms) | {clears['answered_200']:,} "
        f"({_ms(clears['ms_p50'])} / {_ms(clears['ms_p99'])}) |",
        f"| clears with a valid token refused 429 | {clears['refused_429']:,} |",
        f"| token regenerations | {doc['token_regenerations']['count']} |",
        f"| connections refused while up | {_pairs(doc['connections_refused'])} |",
        f"| API probe (every second) | {_pairs(doc['api_probe']['outcomes'])} |",
        f"| RSS first / max / last (MiB) | {_mib(mem['rss_first'])} / {_mib(mem['rss_max'])}"
        f" / {_mib(mem['rss_last'])} |",
        f"| PSS first / max / last (MiB), shared pages once | {_mib(mem['pss_first'])} / "
        f"{_mib(mem['pss_max'])} / {_mib(mem['pss_last'])} |",
        f"| `cache.max_bytes` (MiB); max RSS ÷ max_bytes | {mem['max_bytes'] / mib:.0f}; "
        f"{mem['rss_max_over_max_bytes']} |",
        f"| open fds first / max / last | {mem['fds_first']} / {mem['fds_max']} / "
        f"{mem['fds_last']} |",
        f"| **audit records lost after kill -9** | **{doc['audit_records_lost']}** |",
        "",
        "Kill -9 rounds (each right after a clear's 200, traffic running):",
        "",
        "| at s | clears answered 200 by that start | audit records lost | restart s |",
        "|---:|---:|---:|---:|",
    ]
    for kill in doc["kills"]:
        lines.append(
            f"| {kill['at']:.0f} | {kill['confirmed']} | {kill['audit_lost']} | "
            f"{kill['restart_seconds']:.2f} |"
        )
    lines += [
        "",
        f"Requests by kind and status: {_pairs(req['by_status'])}.",
        f"Cache hits by kind: {_pairs(req['cache_hits'])}.",
        f"Clear outcomes: {_pairs(clears['outcomes'])}.",
        f"No answer (outside restarts): {_pairs(doc['no_answer'])}.",
        f"Failures while the server was restarting: {_pairs(doc['failures_while_restarting'])}.",
        f"Slowloris connections (target kind outcome): {_pairs(doc['slowloris']['outcomes'])}.",
        f"Seconds until the server closed them: {doc['slowloris']['closed_by_server_after_s']}.",
        "",
        "![RSS and open fds](soak.png)",
    ]
    if "abuse" in doc:
        lines += abuse_markdown(doc["abuse"], mem)
    for what, details in doc["examples"].items():
        lines += ["", f"First {what}:", ""] + [f"- {d}" for d in details]
    return "\n".join(lines) + "\n"


def abuse_markdown(abuse: dict[str, Any], mem: dict[str, Any]) -> list[str]:
    """The second round's attacks (benchmarks/soak_abuse.py): what each cost, and the budgets."""
    gauges, second = abuse["gauges_max"], abuse["second_client"]
    budgets = {
        "cache.max_bytes": mem["max_bytes"],
        "cache.purge_state_max_bytes": gauges.get("purge_state_max_bytes"),
        "edge.request_buffer_total_bytes": gauges.get("request_buffer_max_bytes"),
    }
    total = sum(int(v) for v in budgets.values() if v is not None)
    rate = second["success_rate"]
    lines = [
        "",
        "## The second round's attacks (issue 24)",
        "",
        "| range abuse (`Range: bytes=0-0`) | requests | client bytes sent / received | "
        "origin requests | origin bytes | origin bytes per request | per client byte |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in abuse["range"].items():
        per_request, per_byte = r["origin_bytes_per_request"], r["origin_bytes_per_client_byte"]
        lines.append(
            f"| `/{kind}` | {r['requests']:,} | {r['client_bytes_sent']:,} / "
            f"{r['client_bytes_received']:,} | {r['origin_requests']:,} | "
            f"{r['origin_bytes']:,} | {_num(per_request)} | {_num(per_byte, 4)} |"
        )
    lines += [
        "",
        "| figure | value |",
        "|---|---:|",
        f"| max RSS (MiB), all server processes | {_mib(mem['rss_max'])} |",
        f"| max PSS (MiB), all server processes | {_mib(mem['pss_max'])} |",
        f"| budgets (MiB): {', '.join(f'`{k}` {_mib(v)}' for k, v in budgets.items())} | "
        f"{_mib(total)} in all |",
        f"| purge state, highest (MiB) | {_mib(gauges.get('purge_state_bytes'))} |",
        f"| request bodies buffered, highest (MiB) | {_mib(gauges.get('request_buffer_bytes'))} |",
        f"| second client (127.0.0.2): 200s of requests | {second['ok']:,} of "
        f"{second['requests']:,} ({_num(None if rate is None else 100 * rate, 2)} %) |",
        f"| attacker (127.0.0.1): connections held at once, highest | "
        f"{abuse['attack']['held_max']:,} (per-client limit "
        f"{_num(gauges.get('connections_per_client_max'))}; refused "
        f"{_num(abuse['attack']['refused_per_client'])}) |",
        "",
        f"Attacker's connections (kind status): {_pairs(abuse['attack']['outcomes'])}.",
        f"Second client: {_pairs(second['outcomes'])}.",
        f"Body trickles: {_pairs(abuse['trickles']['outcomes'])}; seconds until they ended "
        f"(median): {_pairs(abuse['trickles']['ended_after_s_median'])}.",
        f"Purge flood (256 paths of 4,000 characters each): "
        f"{_pairs(abuse['purge_flood']['outcomes'])}.",
    ]
    return lines


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024 / 1024:.1f}"


def _pairs(counts: dict[str, Any]) -> str:
    return (
        ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in counts.items())
        or "none"
    )


def chart(doc: dict[str, Any], path: Path) -> None:
    """RSS and open fds of the server over time, kills marked, max_bytes drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = doc["samples"]
    at = [row[0] for row in samples]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    top.plot(at, [row[1] / 1024 / 1024 for row in samples], label="RSS (all server processes)")
    if samples and len(samples[0]) > 4:
        top.plot(at, [row[4] / 1024 / 1024 for row in samples], label="PSS (shared pages once)")
    top.axhline(doc["memory"]["max_bytes"] / 1024 / 1024, color="grey", ls="--", label="max_bytes")
    top.set_ylabel("MiB")
    top.legend(loc="lower right")
    bottom.plot(at, [row[2] for row in samples], color="tab:orange", label="open fds")
    bottom.set_ylabel("file descriptors")
    bottom.set_xlabel("seconds")
    top.set_ylim(bottom=0)
    bottom.set_ylim(bottom=0)
    bottom.legend(loc="lower right")
    for kill in doc["kills"]:
        for axis in (top, bottom):
            axis.axvline(kill["at"], color="red", lw=0.8)
    top.set_title("Soak: server memory and open files (red: kill -9 and restart)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
