"""The whole service for browser tests: ``proxy.process.service.running`` and a real origin, on an
event loop of their own in a background thread, so that Playwright's sync API can drive a
real Chromium from the test's thread. Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from aiohttp import web
from playwright.sync_api import Browser, Playwright

from proxy.process.service import Service, running
from proxy.state.admins import hash_password, password_hasher
from tests.conftest import FakeClock, Origin, make_config

_T = TypeVar("_T")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",  # the pages are on 127.0.0.1; nothing else is ever asked for
]
ADMIN = "alice"
PASSWORD = "correct horse battery staple"
IDLE = 1800.0  # dashboard.session_idle_timeout of the live service
START_TIMEOUT = 30.0


def launch(playwright: Playwright) -> Browser:
    """Debian's Chromium, headless (Playwright's own browser download is not used)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


class Live:
    """The running service and origin, and a way to run coroutines on their loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, service: Service, origin: Origin, clock: FakeClock
    ) -> None:
        self.loop = loop
        self.service = service
        self.origin = origin
        self.clock = clock

    @property
    def api_url(self) -> str:
        return self.service.api_url

    @property
    def edge_url(self) -> str:
        return self.service.edge_url

    def call(self, awaitable: Awaitable[_T]) -> _T:
        """Run ``awaitable`` on the service's loop and return its result."""

        async def run() -> _T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(START_TIMEOUT)


async def _serve(
    tmp_path: Path,
    started: concurrent.futures.Future[Live],
    stop: asyncio.Event,
) -> None:
    origin = Origin()
    origin_app = web.Application()
    origin_app.router.add_route("*", "/{tail:.*}", origin.handle)
    runner = web.AppRunner(origin_app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        origin.url = f"http://{host}:{port}"
        clock = FakeClock()
        config = make_config(
            tmp_path,
            origin.url,
            dashboard={"session_idle_timeout": IDLE, "session_lifetime": 4 * IDLE},
        )
        async with running(config, clock=clock) as service:
            loop = asyncio.get_running_loop()
            password_hash = await loop.run_in_executor(
                None, hash_password, password_hasher(), PASSWORD
            )
            await service.state.admins.create(ADMIN, password_hash, clock())
            started.set_result(Live(loop, service, origin, clock))
            await stop.wait()
    finally:
        await runner.cleanup()


@contextmanager
def live_service(tmp_path: Path) -> Iterator[Live]:
    """Start the service in a thread; stop it, and the thread, on exit."""
    started: concurrent.futures.Future[Live] = concurrent.futures.Future()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(_serve(tmp_path, started, stop))
        except BaseException as exc:  # reported to the test through the future
            if not started.done():
                started.set_exception(exc)
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    thread = threading.Thread(target=main, name="live-service", daemon=True)
    thread.start()
    try:
        yield started.result(START_TIMEOUT)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(START_TIMEOUT)
