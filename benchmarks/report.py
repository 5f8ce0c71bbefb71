"""Turn the runner's results into benchmarks/results/latest.md and latest.png.

Every figure is a median over runs; every ratio is the median of ratios taken within one run
(two systems measured back to back), never a ratio of medians from different moments.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Row = dict[str, Any]
OURS = "cdn-proxy"
MACHINE_OURS = "cdn-proxy-2w"  # what scenario 6's ratios divide
ORDER = (
    "cdn-proxy-2w",
    "cdn-proxy",
    "cdn-proxy-before",
    "floor",
    "client-cache",
    "nginx",
    "nginx-2w",
    "varnish",
)
COLORS = {"cdn-proxy": "C0", "floor": "C7", "client-cache": "C2", "nginx": "C3", "varnish": "C4"}

# The budget issue 4 commits to.
HIT_VS_FLOOR = 0.9
HIT_VS_CLIENT_CACHE = 5.0
CLEAR_1M_MS = 2.0
CLEAR_GROWTH = 2.0
P99_DURING_CLEARS = 1.5
OVERHEAD_BYTES = 400


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def _order(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def ratio_text(ratio: float, bound: float) -> str:
    """Two decimals, or three when two would round onto the bound and hide the verdict."""
    text = f"{ratio:.2f}x"
    if abs(ratio - bound) < 0.005:
        text = f"{ratio:.3f}x"
    return text


def verdict(ok: bool) -> str:
    return "**PASS**" if ok else "**MISS**"


# -- summaries shared by the table and the chart ------------------------------------------------


def hit_summary(hits: Row, ours: str = OURS) -> dict[int, dict[str, Row]]:
    """size -> system -> medians, and the same-run ratio of ``ours``'s req/s to the system's."""
    by_size: dict[int, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for row in hits["rows"]:
        by_size[row["size"]][row["system"]].append(row)
    out: dict[int, dict[str, Row]] = {}
    for size, systems in by_size.items():
        ours_by_run = {r["run"]: r["rps"] for r in systems.get(ours, [])}
        out[size] = {}
        for name, rows in sorted(systems.items(), key=lambda item: _order(item[0])):
            ratios = [ours_by_run[r["run"]] / r["rps"] for r in rows if r["run"] in ours_by_run]
            out[size][name] = {
                "rps": median(r["rps"] for r in rows),
                "p50_ms": median(r["p50_ms"] for r in rows),
                "p99_ms": median(r["p99_ms"] for r in rows),
                "runs": [r["rps"] for r in sorted(rows, key=lambda r: r["run"])],
                "ratio": median(ratios) if ratios else None,
                "origin_requests": sum(r["origin_requests"] for r in rows),
                # Rows from runs before the CPU was read have none.
                "cpu_us": median(r["cpu_us_per_hit"] for r in rows)
                if all("cpu_us_per_hit" in r for r in rows)
                else None,
                "errors": sum(r["non_2xx"] + r["socket_errors"] for r in rows),
            }
    return out


def http_clear_summary(clear: Row) -> dict[str, list[Row]]:
    grouped: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for row in clear["rows"]:
        grouped[(row["system"], row["entries"])].append(row)
    out: dict[str, list[Row]] = defaultdict(list)
    for (name, entries), rows in sorted(grouped.items(), key=lambda i: (_order(i[0][0]), i[0][1])):
        out[name].append(
            {
                "entries": entries,
                "method": rows[0]["method"],
                "clear_ms": median(r["clear_ms"] for r in rows),
                "runs": len(rows),
                "verified": all(r["verified"] for r in rows),
            }
        )
    return out


def during_summary(during: Row) -> Row:
    by_mode: dict[str, list[Row]] = defaultdict(list)
    for row in during["rows"]:
        by_mode[row["mode"]].append(row)
    quiet = {r["run"]: r for r in by_mode["quiet"]}
    ratios = [r["p99_ms"] / quiet[r["run"]]["p99_ms"] for r in by_mode["clearing"]]
    p50_ratios = [r["p50_ms"] / quiet[r["run"]]["p50_ms"] for r in by_mode["clearing"]]
    modes = {
        mode: {
            "rps": median(r["rps"] for r in rows),
            "p50_ms": median(r["p50_ms"] for r in rows),
            "p99_ms": median(r["p99_ms"] for r in rows),
            "p99_runs": [r["p99_ms"] for r in sorted(rows, key=lambda r: r["run"])],
        }
        for mode, rows in by_mode.items()
    }
    clearing = by_mode["clearing"]
    return {
        "modes": modes,
        "p99_ratio": median(ratios),
        "p50_ratio": median(p50_ratios),
        "clears_sent": sum(r["clears_sent"] for r in clearing),
        "clears_ok": sum(r["clears_ok"] for r in clearing),
        "clears_per_s": median(r["clears_per_s"] for r in clearing),
        "clear_p50_ms": median(r["clear_p50_ms"] for r in clearing),
    }


def origin_summary(origin: Row) -> dict[str, Row]:
    grouped: dict[str, list[Row]] = defaultdict(list)
    for row in origin["rows"]:
        grouped[row["system"]].append(row)
    return {
        name: {
            "clients": rows[0]["clients"],
            "objects": rows[0]["objects"],
            "median": median(r["origin_requests"] for r in rows),
            "all": [r["origin_requests"] for r in sorted(rows, key=lambda r: r["run"])],
            "ok": min(r["ok"] for r in rows),
            "seconds": median(r["seconds"] for r in rows),
            "connect_seconds": (
                median(r["connect_seconds"] for r in rows)
                if all("connect_seconds" in r for r in rows)
                else None
            ),
        }
        for name, rows in sorted(grouped.items(), key=lambda i: _order(i[0]))
    }


# -- the budget table -------------------------------------------------------------------------


def budgets(results: Row) -> list[tuple[str, str, bool | None]]:
    out: list[tuple[str, str, bool | None]] = []
    if results.get("hits"):
        summary = hit_summary(results["hits"])
        for size, systems in summary.items():
            for peer, bound in (("floor", HIT_VS_FLOOR), ("client-cache", HIT_VS_CLIENT_CACHE)):
                ratio = systems.get(peer, {}).get("ratio")
                name = f"hit req/s, {size_label(size)}: cdn-proxy ≥ {bound}x {peer}"
                if ratio is None:
                    out.append((name, f"{peer} not measured", None))
                else:
                    out.append((name, ratio_text(ratio, bound), ratio >= bound))
    if results.get("clear_inproc"):
        sizes = results["clear_inproc"]["sizes"]
        small, large = sizes[0], sizes[-1]
        label = f"{large['entries']:,}"
        growth = large["clear_us"] / small["clear_us"]
        out.append(
            (
                f"clear with {label} entries ≤ {CLEAR_1M_MS} ms (in-process)",
                f"{large['clear_us'] / 1000:.3f} ms",
                large["clear_us"] / 1000 <= CLEAR_1M_MS,
            )
        )
        out.append(
            (
                f"clear with {label} entries ≤ {CLEAR_GROWTH}x clear with "
                f"{small['entries']:,} (in-process)",
                ratio_text(growth, CLEAR_GROWTH),
                growth <= CLEAR_GROWTH,
            )
        )
    if results.get("during"):
        during = during_summary(results["during"])
        out.append(
            (
                f"p99 hit latency while another domain is cleared ≤ {P99_DURING_CLEARS}x quiet",
                ratio_text(during["p99_ratio"], P99_DURING_CLEARS),
                during["p99_ratio"] <= P99_DURING_CLEARS,
            )
        )
    if results.get("memory"):
        for row in results["memory"]["rows"]:
            if row["system"] == OURS:
                out.append(
                    (
                        f"memory beyond body+headers ≤ {OVERHEAD_BYTES} B/object",
                        f"{row['overhead']:,.0f} B",
                        row["overhead"] <= OVERHEAD_BYTES,
                    )
                )
    if results.get("origin"):
        ours = origin_summary(results["origin"]).get(OURS)
        if ours is not None:
            out.append(
                (
                    f"origin requests after a clear = {ours['objects']} hot objects "
                    f"({ours['clients']} clients)",
                    ", ".join(str(n) for n in ours["all"]),
                    all(n == ours["objects"] for n in ours["all"]),
                )
            )
    return out


# -- markdown ---------------------------------------------------------------------------------


def _table(header: list[str], align: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _commands(commands: Iterable[str]) -> list[str]:
    return ["", "```sh", *commands, "```"]


def _hit_table(summary: dict[int, dict[str, Row]], ours: str) -> list[str]:
    """Sizes and systems with medians; the ratio column divides ``ours``'s req/s."""
    rows = []
    for size, systems in summary.items():
        for name, s in systems.items():
            ratio = "—" if name == ours or s["ratio"] is None else f"{s['ratio']:.2f}x"
            runs = ", ".join(f"{v:,.0f}" for v in s["runs"])
            rows.append(
                [
                    size_label(size),
                    f"**{name}**" if name == ours else name,
                    f"{s['rps']:,.0f}",
                    f"{s['p50_ms']:.2f}",
                    f"{s['p99_ms']:.2f}",
                    ratio,
                    runs,
                    str(s["origin_requests"]),
                    "—" if s["cpu_us"] is None else f"{s['cpu_us']:.1f}",
                ]
            )
    return _table(
        [
            "object",
            "system",
            "req/s",
            "p50 ms",
            "p99 ms",
            f"{ours} ÷ system",
            "req/s per run",
            "origin req",
            "server CPU µs a hit",
        ],
        ["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"],
        rows,
    )


def _machine_section(data: Row, profile: Row) -> list[str]:
    lines = [
        "",
        "## 6. Whole-machine hits (every core)",
        "",
        f"Every server may use cores {data['cpus']}, and so does wrk (`-t2`, "
        f"{profile['connections'] * 2} connections): load generator and servers share the "
        "cores, as they would on a machine with as many busy workers as cores, so each "
        "system's req/s is what it leaves wrk room for. The ratio column divides the "
        "two-worker cdn-proxy's req/s by the system's, run by run, then the median.",
        "",
        "Systems:",
        "",
    ]
    for name, info in sorted(data["systems"].items(), key=lambda i: _order(i[0])):
        notes = f" ({'; '.join(info['notes'])})" if info["notes"] else ""
        lines.append(f"- **{name}**{notes}: `{info['command']}`")
    for name in data["skipped"]:
        lines.append(f"- **{name}**: skipped (not installed)")
    lines.append("")
    lines += _hit_table(hit_summary(data, MACHINE_OURS), MACHINE_OURS)
    lines += _commands(data["commands"])
    return lines


def markdown(results: Row, chart_name: str | None) -> str:
    m = results["machine"]
    code = results.get("code", {})
    profile = results["profile"]
    lines = [
        "# cdn-proxy benchmark results",
        "",
        f"Generated by `{results['command']}` on {results['date']} "
        f"({profile['name']} profile, {results['elapsed_s']:.0f} s).",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']} x {m['cores']} cores",
        f"- Kernel: `{m['uname']}`",
        f"- Memory: {m['memory']}",
        f"- Software: {m['software']}",
        f"- Load average at start / end: {m['loadavg_start']} / {m['loadavg_end']}"
        " (other work shares this machine; see the method)",
        f"- Code: commit {code.get('commit', '?')}"
        + (
            f" with {code['proxy_files_changed']} uncommitted file(s) under proxy/"
            if code.get("proxy_files_changed")
            else ""
        ),
        f"- Servers pinned to core {m['server_cpu']}, load generators and the origin to core "
        f"{m['load_cpu']} (`taskset`).",
        "",
        "Systems:",
        "",
    ]
    for name, info in sorted(results["systems"].items(), key=lambda i: _order(i[0])):
        notes = f" ({'; '.join(info['notes'])})" if info["notes"] else ""
        lines.append(f"- **{name}**{notes}: `{info['command']}`")
    for name, reason in results["skipped_systems"].items():
        lines.append(f"- **{name}**: skipped: {reason}")
    lines.append(f"- **origin**: `{results['origin_command']}`")
    if chart_name:
        lines += ["", f"![results]({chart_name})"]

    table = budgets(results)
    if table:
        lines += ["", "## Budget (issue 4)", ""]
        lines += _table(
            ["budget", "measured", "verdict"],
            ["---", "---:", "---"],
            [[n, v, "not measured" if ok is None else verdict(ok)] for n, v, ok in table],
        )

    if results.get("hits"):
        hits = results["hits"]
        lines += [
            "",
            "## 1. Hit throughput and latency",
            "",
            f"One cached object per size, wrk with {profile['connections']} keep-alive "
            f"connections for {profile['duration']} s, {profile['runs']} runs, systems in "
            "rotating order. Medians over runs; the last column is cdn-proxy's req/s divided "
            "by the system's, run by run, then the median. `origin req` counts requests that "
            "reached the origin during the runs (0: every answer was a hit).",
            "",
        ]
        lines += _hit_table(hit_summary(hits), OURS)
        lines += _commands(hits["commands"])

    if results.get("machine_hits"):
        lines += _machine_section(results["machine_hits"], profile)

    if results.get("clear_inproc") or results.get("clear_http"):
        lines += ["", "## 2. Clearing a domain"]
    if results.get("clear_inproc"):
        data = results["clear_inproc"]
        base = data["sizes"][0]["clear_us"]
        lines += [
            "",
            "### cdn-proxy in-process: `MemoryStore.clear_domain` alone (no HTTP, no auth)",
            "",
            f"The store is filled directly (filling 1M entries over HTTP takes too long), "
            f"{data['runs']} runs a size, medians. The reclaim of the old generation runs "
            f"afterwards in slices of at most {data['slice']} keys and 0.5 ms, between requests.",
            "",
        ]
        lines += _table(
            ["entries", "clear (µs)", "ratio to smallest", "reclaim slice median / worst (µs)"],
            ["---:", "---:", "---:", "---:"],
            [
                [
                    f"{r['entries']:,}",
                    f"{r['clear_us']:.1f}",
                    f"{r['clear_us'] / base:.2f}x",
                    f"{r['slice_median_us']:,.0f} / {r['slice_worst_us']:,.0f}",
                ]
                for r in data["sizes"]
            ],
        )
        lines += _commands([data["command"]])
    if results.get("clear_http"):
        data = results["clear_http"]
        lines += [
            "",
            "### Over HTTP: the time until the clear is confirmed, seen by its client",
            "",
            "The domain is filled over HTTP with N objects of 1 KiB, then cleared; the time "
            "is from sending the clear to its answer on an open connection (for nginx, the "
            "run time of `find -delete` over the domain's cache directory). `miss after` "
            "checks that the next request for a cleared object went to the origin.",
            "",
        ]
        rows = []
        for name, entries in http_clear_summary(data).items():
            base_ms = entries[0]["clear_ms"]
            for e in entries:
                rows.append(
                    [
                        name,
                        e["method"],
                        f"{e['entries']:,}",
                        f"{e['clear_ms']:.3f}",
                        f"{e['clear_ms'] / base_ms:.2f}x",
                        str(e["runs"]),
                        "yes" if e["verified"] else "**no**",
                    ]
                )
        lines += _table(
            ["system", "how", "entries", "clear (ms)", "ratio to smallest", "runs", "miss after"],
            ["---", "---", "---:", "---:", "---:", "---:", "---"],
            rows,
        )
        for note in data["skipped"]:
            lines.append(f"\n- {note}: filling it takes minutes per run at its fill rate.")
        lines += _commands(data["commands"])

    if results.get("during"):
        data = results["during"]
        s = during_summary(data)
        lines += [
            "",
            "## 3. Hits on one domain while another is cleared 100 times a second",
            "",
            f"wrk on b.example (one cached 1 KiB object) while the runner clears a.example "
            f"through the API; a.example holds {data['fill']:,} entries at the start of each "
            "run (only the first clear of a run finds them; the rest find it empty, so the "
            "rest measure the API's own cost: token lookup in SQLite and an audit row). "
            f"Quiet and clearing runs alternate; {len(s['modes']['quiet']['p99_runs'])} of each.",
            "",
        ]
        rows = []
        for mode in ("quiet", "clearing"):
            v = s["modes"][mode]
            rows.append(
                [
                    mode,
                    f"{v['rps']:,.0f}",
                    f"{v['p50_ms']:.2f}",
                    f"{v['p99_ms']:.2f}",
                    ", ".join(f"{x:.2f}" for x in v["p99_runs"]),
                ]
            )
        rows.append(
            [
                "clearing ÷ quiet (same-run)",
                "",
                f"{s['p50_ratio']:.2f}x",
                f"{s['p99_ratio']:.2f}x",
                "",
            ]
        )
        lines += _table(
            ["", "req/s", "p50 ms", "p99 ms", "p99 per run"],
            ["---", "---:", "---:", "---:", "---:"],
            rows,
        )
        lines.append(
            f"\nClears: {s['clears_ok']:,} of {s['clears_sent']:,} answered `200 Cache "
            f"cleared`, {s['clears_per_s']:.0f}/s, median {s['clear_p50_ms']:.2f} ms each."
        )
        lines += _commands(data["commands"])

    if results.get("memory"):
        data = results["memory"]
        lines += [
            "",
            "## 4. Memory per cached object",
            "",
            f"Resident-memory (VmRSS) growth of the process that holds the cache while "
            f"{data['rows'][0]['objects']:,} objects of 1 KiB are filled, after a warm-up "
            f"fill, on fresh processes. A stored object is 1,024 B of body and "
            f"{data['header_bytes']} B of header names and values.",
            "",
        ]
        rows = []
        for r in sorted(data["rows"], key=lambda r: _order(r["system"])):
            note = ""
            if r["system"] == "nginx":
                note = (
                    f"worker RSS only: bodies are files, {r['disk_per_object']:,.0f} B/object "
                    "on disk (page cache)"
                )
            elif r["system"] == "varnish":
                note = "cache-main process (malloc storage)"
            elif r["system"] == "client-cache":
                note = "memory backend"
            beyond = "—" if r["system"] == "nginx" else f"{r['overhead']:,.0f}"
            rows.append(
                [
                    f"**{r['system']}**" if r["system"] == OURS else r["system"],
                    f"{(r['rss_after'] - r['rss_before']) / 1e6:,.1f}",
                    f"{r['per_object']:,.0f}",
                    beyond,
                    "yes" if r["kept"] else "**no**",
                    note,
                ]
            )
        lines += _table(
            ["system", "RSS growth (MB)", "B/object", "beyond body+headers (B)", "kept", "note"],
            ["---", "---:", "---:", "---:", "---", "---"],
            rows,
        )
        lines += _commands(data["commands"])

    if results.get("origin"):
        data = results["origin"]
        lines += [
            "",
            "## 5. Origin protection right after a clear",
            "",
            "The hot objects are cached, the domain is cleared, then every client asks at "
            "once; the origin counts the requests that reach it (it answers after "
            f"{profile['slow_ms']:.0f} ms, like an origin across a network). The connections "
            "are opened before the requests are sent; both times are medians over runs.",
            "",
        ]
        rows = [
            [
                f"**{name}**" if name == OURS else name,
                str(v["clients"]),
                str(v["objects"]),
                f"{v['median']:.0f}",
                ", ".join(str(n) for n in v["all"]),
                f"{v['ok']}/{v['clients']}",
                "—" if v["connect_seconds"] is None else f"{v['connect_seconds'] * 1000:.0f}",
                f"{v['seconds'] * 1000:.0f}",
            ]
            for name, v in origin_summary(data).items()
        ]
        lines += _table(
            [
                "system",
                "clients",
                "objects",
                "origin req (median)",
                "per run",
                "200s",
                "ms to connect all",
                "ms to answer all",
            ],
            ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"],
            rows,
        )
        lines += _commands(data["commands"])
    if results.get("notes"):
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in results["notes"]]
    return "\n".join(lines) + "\n"


# -- the chart --------------------------------------------------------------------------------


def chart(results: Row, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, Callable[[Any], None]]] = []
    if results.get("hits"):
        summary = hit_summary(results["hits"])

        def hit_panel(key: str, ylabel: str) -> Callable[[Any], None]:
            def draw(ax: Any) -> None:
                sizes = list(summary)
                names = sorted({n for s in summary.values() for n in s}, key=_order)
                width = 0.8 / max(1, len(names))
                for i, name in enumerate(names):
                    xs = [j + i * width for j in range(len(sizes))]
                    ys = [summary[s].get(name, {}).get(key, 0) for s in sizes]
                    ax.bar(xs, ys, width, label=name, color=COLORS.get(name))
                ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))])
                ax.set_xticklabels([size_label(s) for s in sizes])
                ax.set_ylabel(ylabel)
                ax.legend(fontsize=7)

            return draw

        panels.append(("1. Hit throughput (median)", hit_panel("rps", "requests/s")))
        panels.append(("1. Hit latency p99 (median)", hit_panel("p99_ms", "ms")))
    if results.get("clear_inproc") or results.get("clear_http"):

        def clear_panel(ax: Any) -> None:
            if results.get("clear_inproc"):
                sizes = results["clear_inproc"]["sizes"]
                ax.plot(
                    [r["entries"] for r in sizes],
                    [r["clear_us"] / 1000 for r in sizes],
                    "o-",
                    color=COLORS[OURS],
                    label="cdn-proxy (in-process)",
                )
            if results.get("clear_http"):
                for name, entries in http_clear_summary(results["clear_http"]).items():
                    ax.plot(
                        [e["entries"] for e in entries],
                        [e["clear_ms"] for e in entries],
                        "s--",
                        color=COLORS.get(name),
                        alpha=0.6 if name == OURS else 1.0,
                        label=f"{name} (HTTP)" if name != "nginx" else "nginx (delete files)",
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("entries cached")
            ax.set_ylabel("clear latency (ms)")
            ax.legend(fontsize=7)

        panels.append(("2. Clearing a domain", clear_panel))
    if results.get("during"):
        s = during_summary(results["during"])

        def during_panel(ax: Any) -> None:
            modes = ["quiet", "clearing"]
            ax.bar([0, 1], [s["modes"][m]["p50_ms"] for m in modes], 0.35, label="p50", color="C0")
            ax.bar(
                [0.35, 1.35],
                [s["modes"][m]["p99_ms"] for m in modes],
                0.35,
                label="p99",
                color="C3",
            )
            ax.set_xticks([0.175, 1.175])
            ax.set_xticklabels(["quiet", "clearing 100/s"])
            ax.set_ylabel("cdn-proxy hit latency (ms)")
            ax.legend(fontsize=7)

        panels.append(("3. Hits while another domain is cleared", during_panel))
    if results.get("memory"):
        rows = sorted(results["memory"]["rows"], key=lambda r: _order(r["system"]))

        def memory_panel(ax: Any) -> None:
            labels = [r["system"] + (" (index)" if r["system"] == "nginx" else "") for r in rows]
            colors = [COLORS.get(r["system"]) for r in rows]
            ax.bar(labels, [r["per_object"] for r in rows], color=colors)
            body = rows[0]["body_plus_headers"]
            ax.axhline(body, color="k", linestyle=":", label="body + headers")
            ax.set_ylabel("RSS growth per 1 KiB object (B)")
            ax.tick_params(axis="x", labelsize=7)
            ax.legend(fontsize=7)

        panels.append(("4. Memory per cached object", memory_panel))
    if results.get("origin"):
        summary5 = origin_summary(results["origin"])

        def origin_panel(ax: Any) -> None:
            names = list(summary5)
            colors = [COLORS.get(n) for n in names]
            ax.bar(names, [summary5[n]["median"] for n in names], color=colors)
            objects = next(iter(summary5.values()))["objects"]
            ax.axhline(objects, color="k", linestyle=":", label=f"{objects} hot objects")
            ax.set_ylabel("origin requests after a clear")
            ax.tick_params(axis="x", labelsize=7)
            ax.legend(fontsize=7)

        panels.append(("5. Origin protection", origin_panel))
    if not panels:
        return
    columns = 3 if len(panels) > 4 else 2
    rows_n = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(rows_n, columns, figsize=(6 * columns, 4.2 * rows_n), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (title, draw) in zip(flat, panels, strict=False):
        ax.set_title(title, fontsize=10)
        draw(ax)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    fig.suptitle(f"cdn-proxy benchmarks ({results['profile']['name']}, {results['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
