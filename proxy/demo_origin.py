"""A tiny origin server for trying cdn-proxy by hand: ``python -m proxy.demo_origin``.

Every page says when it was generated, so a cached copy is easy to tell from a fresh one.
Pages are cacheable for 300 seconds, except /private (Cache-Control: private).
"""

from __future__ import annotations

import argparse
import time

from aiohttp import web


async def page(request: web.Request) -> web.Response:
    generated = time.strftime("%H:%M:%S")
    cache_control = "private" if request.path == "/private" else "public, max-age=300"
    return web.Response(
        text=f"Hello from the origin: {request.path} generated at {generated}\n",
        headers={"Cache-Control": cache_control},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    web.run_app(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
