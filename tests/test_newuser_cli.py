"""`cdn-proxy trace` pointed at the edge instead of the API, as `cdn-proxy purge` already
handled: the status once, and a hint at what to check (found by the README try-out)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from proxy.cli.main import main
from proxy.process.service import running
from tests.conftest import Origin, make_config


@pytest.fixture(autouse=True)
def _no_proxies_or_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CDN_PROXY_URL", raising=False)
    monkeypatch.delenv("CDN_PROXY_TOKEN", raising=False)


@pytest.mark.slow
async def test_trace_at_the_edge_says_the_status_once_and_what_to_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, origin: Origin
) -> None:
    """It printed "trace failed: 421 Misdirected Request: 421 Misdirected Request: this edge
    does not serve that host", the status twice and no hint that --api named the edge."""
    async with running(make_config(tmp_path, origin.url)) as service:
        argv = ["trace", "http://example.com/page", "--api", service.edge_url, "--token", "t"]
        code = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err == (
        "cdn-proxy: trace failed: 421 Misdirected Request: this edge does not serve that host"
        f" (is {service.edge_url} the API listener, not the edge?)\n"
    )
    assert origin.seen == []
