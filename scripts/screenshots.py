"""Take the README's dashboard screenshots: docs/screenshots/*.png.

    .venv/bin/python scripts/screenshots.py [OUTPUT_DIR]

Starts the whole service (``proxy.process.service.running``) on 127.0.0.1 with a throwaway state
database and a small origin, plays an hour of traffic through the real edge and clears
through the real API (moving the control plane's clock back and forth, so the chart and the
history have an hour to show), then drives Debian's Chromium with Playwright through each
page, with a purge previewed and confirmed on the way. The Nodes page comes from a second
run: ``cdn-proxy serve`` in a child process with two edge workers on the embedded Valkey.
Nothing leaves 127.0.0.1. The same browser setup as tests/dashboard/test_browser.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from playwright.async_api import Browser, Page, Playwright, ViewportSize, async_playwright, expect

from proxy.config.model import parse_config
from proxy.core.auth.tokens import Scope
from proxy.process.service import Service, running
from proxy.state.admins import hash_password, password_hasher

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
]
ADMIN, PASSWORD = "alice", "correct horse battery staple"
DOMAINS = ["example.com", "static.example.net", "shop.example.org"]
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


class Clock:
    """The control plane's wall clock, set back to play the last hour."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


async def origin_page(request: web.Request) -> web.Response:
    body = f"<h1>{request.host}{request.path}</h1>" + "lorem ipsum " * random.randint(20, 400)
    headers = {"Cache-Control": "max-age=3600", "Surrogate-Key": "pages"}
    return web.Response(text=body, content_type="text/html", headers=headers)


async def play_an_hour(service: Service, clock: Clock, tokens: dict[str, str]) -> None:
    rng = random.Random(5)
    async with aiohttp.ClientSession() as client:
        for minutes_ago in range(59, -1, -1):
            clock.offset = -60.0 * minutes_ago
            busy = 6 + int(10 * (1 + rng.random()) * (1 - minutes_ago / 90))
            for _ in range(busy):
                domain = rng.choice(DOMAINS)
                path = f"/page/{rng.randint(1, 30 if domain == 'example.com' else 12)}"
                async with client.get(service.edge_url + path, headers={"Host": domain}) as r:
                    await r.read()
            if minutes_ago in (41, 17, 3):
                domain = "example.com" if minutes_ago != 17 else "shop.example.org"
                token = tokens["deploy"] if minutes_ago != 3 else "cdnp_" + "x" * 43
                async with client.post(
                    service.api_url + "/api/v1/cdn/clear-cache",
                    json={"domain": domain},
                    headers={"Authorization": f"Bearer {token}"},
                ) as r:
                    await r.read()
        clock.offset = 0.0


async def shoot(page: Page, out: Path, name: str) -> None:
    await page.screenshot(path=str(out / f"{name}.png"), full_page=True)
    print(f"wrote {out / name}.png")


async def main(out: Path) -> None:
    origin_app = web.Application()
    origin_app.router.add_get("/{tail:.*}", origin_page)
    origin = web.AppRunner(origin_app, access_log=None)
    await origin.setup()
    await web.TCPSite(origin, "127.0.0.1", 0).start()
    host, port = origin.addresses[0][:2]
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        config = parse_config(
            {
                "edge": {"listen": "127.0.0.1:0"},
                "api": {"listen": "127.0.0.1:0"},
                "cache": {"max_bytes": "64MiB", "disk_path": "cache"},
                "state": {"path": "state.db"},
                "domains": [{"name": d, "origin": f"http://{host}:{port}"} for d in DOMAINS],
            },
            base_dir=Path(tmp),
        )
        async with running(config, clock=clock) as service:
            state = service.state
            password_hash = await asyncio.get_running_loop().run_in_executor(
                None, hash_password, password_hasher(), PASSWORD
            )
            await state.admins.create(ADMIN, password_hash, clock())
            tokens = {"deploy": await state.create_token("deploy", Scope.everything(), clock())}
            await state.create_token("blog-ci", Scope.only(["example.com"]), clock())
            await play_an_hour(service, clock, tokens)
            await state.create_token("assets-ci", Scope.only(["static.example.net"]), clock())
            await take(service.api_url, out)
        await take_nodes(f"http://{host}:{port}", Path(tmp), out)
    await origin.cleanup()


async def launch(playwright: Playwright) -> Browser:
    return await playwright.chromium.launch(
        executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )


async def sign_in(page: Page) -> None:
    await page.goto("/dashboard")
    await page.get_by_label("Username").fill(ADMIN)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_test_id("chart")).to_be_visible()


async def take(api_url: str, out: Path) -> None:
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        context = await browser.new_context(base_url=api_url, viewport=VIEWPORT)
        page = await context.new_page()
        await page.goto("/dashboard")
        await page.get_by_label("Username").fill(ADMIN)
        await shoot(page, out, "sign-in")
        await sign_in(page)
        await shoot(page, out, "overview")

        await page.get_by_role("link", name="Tokens").click()
        await page.get_by_label("Name").fill("release-bot")
        await page.get_by_label("All domains").check()
        await page.get_by_role("button", name="Create token").click()
        await expect(page.get_by_test_id("new-token")).to_be_visible()
        await shoot(page, out, "tokens")

        await page.get_by_role("link", name="Domains", exact=True).click()
        await expect(page.get_by_role("heading", name="Domains")).to_be_visible()
        await shoot(page, out, "domains")

        purge = page.locator('tr[data-purge-for="example.com"]')
        await purge.get_by_text("Purge…").click()
        await purge.get_by_label("Kind").select_option(label="Prefixes")
        await purge.get_by_label("Items, one per line").fill("/page/1")
        await purge.get_by_role("button", name="Preview purge").click()
        await expect(page.get_by_role("heading", name="Purge preview")).to_be_visible()
        await shoot(page, out, "purge-preview")
        await page.get_by_role("button", name="Confirm purge").click()
        await expect(page.get_by_role("heading", name="Purge receipt")).to_be_visible()
        await shoot(page, out, "purge-receipt")

        await page.get_by_role("link", name="Domains", exact=True).click()
        row = page.locator("tr", has_text="static.example.net").first
        await row.get_by_role("button", name="Clear cache").click()
        await page.get_by_role("dialog").get_by_role("button", name="Confirm").click()
        await expect(page.get_by_role("status")).to_be_visible()

        await page.get_by_role("link", name="History", exact=True).click()
        await expect(page.get_by_role("heading", name="History")).to_be_visible()
        await shoot(page, out, "history")
        await browser.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def take_nodes(origin_url: str, tmp: Path, out: Path) -> None:
    """The Nodes page of a node with two edge workers, started as an operator would."""
    edge_port, api_port = free_port(), free_port()
    config = tmp / "workers.toml"
    config.write_text(
        f"""
[edge]
listen = "127.0.0.1:{edge_port}"
workers = 2
[api]
listen = "127.0.0.1:{api_port}"
[cache]
max_bytes = "64MiB"
disk_path = "cache"
[state]
path = "workers.db"
[fleet]
node = "edge-1"
[[domains]]
name = "example.com"
origin = "{origin_url}"
""",
        encoding="utf-8",
    )
    admin = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "admin", "create", ADMIN, "--password-stdin",
        "--config", str(config), stdin=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await admin.communicate(PASSWORD.encode() + b"\n")
    assert admin.returncode == 0, "cdn-proxy admin create failed"
    node = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert node.stdout is not None
        for _ in range(2):  # "edge URL" and "api URL", once both listen
            assert await node.stdout.readline(), "cdn-proxy serve exited"
        api_url = f"http://127.0.0.1:{api_port}"
        async with aiohttp.ClientSession() as client:  # some hits, from both tiers
            for n in range(40):
                url = f"http://127.0.0.1:{edge_port}/page/{n % 8}"
                async with client.get(url, headers={"Host": "example.com"}) as response:
                    await response.read()
        async with async_playwright() as playwright:
            browser = await launch(playwright)
            context = await browser.new_context(base_url=api_url, viewport=VIEWPORT)
            page = await context.new_page()
            await sign_in(page)
            await page.get_by_role("link", name="Nodes").click()
            states = page.locator("table.nodes tbody td span.outcome")
            for _ in range(100):  # until both workers have joined and synced (a few seconds)
                if await states.all_inner_texts() == ["serving", "serving"]:
                    break
                await asyncio.sleep(0.1)
                await page.reload()
            await shoot(page, out, "nodes")
            await browser.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGTERM)
        await node.wait()


if __name__ == "__main__":
    target = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "docs/screenshots"
    )
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target))
