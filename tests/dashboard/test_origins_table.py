"""The Domains page's table of each domain's origin servers (decision 0034): unknown until
probed, then up or down with the last failure, from /readyz's last round (no probe of its own)."""

from __future__ import annotations

import pytest

from tests.dashboard.support import Dashboard


@pytest.mark.slow
async def test_each_domain_lists_its_origin_servers_and_their_state(signed_in: Dashboard) -> None:
    page = await signed_in.get("/dashboard/domains")
    table = page.html.find("tr", data_origins_for="example.com")
    [server] = table.find_all("tr", data_origin=None)
    assert server.attrs["data-origin"] == "http://127.0.0.1:9"
    assert server.find("td", data_testid="state").text == "unknown"  # the page never probes
    async with signed_in.client.get("/readyz") as readyz:
        assert readyz.status == 503  # nothing listens on port 9
    page = await signed_in.get("/dashboard/domains")
    server = page.html.find("tr", data_origins_for="example.com").find("tr", data_origin=None)
    cells = [td.text for td in server.find_all("td")]
    assert cells[:3] == ["http://127.0.0.1:9", "primary", "down"]
    assert "origin unreachable" in server.find("td", data_testid="last-failure").text
    assert server.find("td", data_testid="requests").text == "—"  # no edge in this process
