"""A TCP relay between a fleet member and Valkey that a test can cut: ``drop`` closes every
connection and refuses new ones at once; ``blackhole`` accepts and reads, but never forwards
a byte either way (the client hears nothing: only its timeouts save it); ``heal`` forwards
again (connections that lost bytes are closed: their streams are broken)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

FORWARD, DROP, BLACKHOLE = "forward", "drop", "blackhole"


@dataclass(eq=False)
class _Link:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    tainted: bool = False  # bytes were swallowed: the stream is broken

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        for task in self.tasks:
            task.cancel()


class Relay:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = FORWARD
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def drop(self) -> None:
        self.mode = DROP
        for link in list(self._links):
            link.close()
        self._links.clear()

    def blackhole(self) -> None:
        self.mode = BLACKHOLE

    def heal(self) -> None:
        self.mode = FORWARD
        for link in [link for link in self._links if link.tainted]:
            link.close()
            self._links.discard(link)

    async def close(self) -> None:
        self.drop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == DROP:
            writer.close()
            return
        link = _Link(writers=[writer])
        self._links.add(link)
        if self.mode == BLACKHOLE:
            link.tainted = True
            link.tasks.append(asyncio.create_task(self._pump(link, reader, None)))
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            link.close()
            self._links.discard(link)
            return
        link.writers.append(up_writer)
        link.tasks.append(asyncio.create_task(self._pump(link, reader, up_writer)))
        link.tasks.append(asyncio.create_task(self._pump(link, up_reader, writer)))

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter | None
    ) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await source.read(65536):
                if self.mode == FORWARD and sink is not None and not link.tainted:
                    sink.write(data)
                    await sink.drain()
                else:
                    link.tainted = True
        for writer in link.writers:
            writer.close()
        self._links.discard(link)
