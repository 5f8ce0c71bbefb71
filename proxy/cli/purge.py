"""``cdn-proxy purge``: the deploy-hook client of the clear-cache and purge endpoints.

    cdn-proxy purge DOMAIN [--url PATH... | --prefix P... | --tag T...] [--soft] [--dry-run]
                           [--json] [--api URL | --config FILE] [--token TOKEN]

With no kind and no option it clears the whole domain through clear-cache and prints what
that answers ("Cache cleared"), as it always has. Anything else goes to the purge endpoint
(decision 0025), and the receipt is printed for people (proxy/core/receipts.describe) or as
JSON with ``--json``.

The API's base URL is ``--api``, or the ``[api] listen`` address of the node's own config
file (``--config``, as ``token`` and ``admin`` take it: a deploy hook on the node need not
repeat the address), or CDN_PROXY_URL.

``--url`` once was the API's base URL; it is now a path to purge. A ``--url`` value that
starts with http:// or https:// is refused with a message that says what was given: read the
old way it would purge the wrong thing.

It uses urllib (stdlib, no event loop) and never follows redirects: urllib would resend the
Authorization header to wherever one points.
"""

from __future__ import annotations

import argparse
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from proxy import __version__
from proxy.config.model import client_settings, load_config
from proxy.core.purge.receipts import describe
from proxy.core.routes import CLEAR_CACHE_PATH, PURGE_PATH
from proxy.errors import ConfigError

CLEAR_TIMEOUT = 10.0  # seconds; a clear is O(1) on the server, so this is only the network
PURGE_TIMEOUT = 60.0  # a dry run reads the domain's keys: longer for a large domain
MAX_BODY_SHOWN = 2000  # bytes of an error answer worth showing
MAX_RECEIPT = 16 * 1024**2  # a receipt echoes up to 256 items of 8 KiB
KIND_OPTIONS = (("url", "urls"), ("prefix", "prefixes"), ("tag", "tags"))


class Failed(Exception):
    """End the command with this message on stderr and this exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Once(argparse.Action):
    """An option that may be given once: a second value would silently replace the first
    (``purge --api A --api B`` would use only B, and say it had purged)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            hint = " (it is the API's base URL)"
            parser.error(
                f"{option_string} given more than once{hint if self.dest == 'api' else ''}"
            )
        setattr(namespace, self.dest, values)


HELP = "purge URLs, prefixes, tags or a whole domain through the API"
DESCRIPTION = (
    "With no --url, --prefix or --tag: the whole domain. Repeat an option to purge several "
    "items of its kind (one kind per purge)."
)


def add_arguments(purge: argparse.ArgumentParser) -> None:
    purge.add_argument("domain", help="the CDN domain to purge")
    kinds = purge.add_mutually_exclusive_group()
    kinds.add_argument("--url", action="append", metavar="PATH", help="a path (and query)")
    kinds.add_argument("--prefix", action="append", metavar="P", help="a path prefix")
    kinds.add_argument("--tag", action="append", metavar="T", help="a tag the origin set")
    purge.add_argument("--soft", action="store_true", help="mark stale instead of dropping")
    purge.add_argument("--dry-run", action="store_true", help="only say what would be purged")
    purge.add_argument("--json", action="store_true", help="print the receipt as JSON")
    add_api_options(purge)


def add_api_options(command: argparse.ArgumentParser) -> None:
    """Where a client command finds the API: --api or --config (one of them), and --token."""
    base = command.add_mutually_exclusive_group()
    base.add_argument("--api", action=Once, help="the API base URL (default: $CDN_PROXY_URL)")
    base.add_argument(
        "--config", type=Path, help="the node's TOML config: the API is its [api] listen address"
    )
    command.add_argument(
        "--token",
        action=Once,
        help="the API token (default: $CDN_PROXY_TOKEN, preferred: flags show in `ps`)",
    )


def api_settings(args: argparse.Namespace) -> tuple[str, str]:
    """The API's base URL and token from the options ``add_api_options`` added and the
    environment; raises Failed (2) for one missing or a URL that is not http(s)."""
    api = args.api if args.config is None else api_url_of(args.config)
    settings = client_settings(api, args.token)
    if not settings.url:
        raise Failed("no API URL: pass --api or set CDN_PROXY_URL", code=2)
    if not settings.token:
        raise Failed("no API token: set CDN_PROXY_TOKEN (or pass --token)", code=2)
    if not settings.url.startswith(("http://", "https://")):
        raise Failed(f"the API URL must start with http:// or https://: {settings.url}", code=2)
    return settings.url, settings.token


def run(args: argparse.Namespace) -> int:
    """The ``purge`` command: raises Failed with what went wrong."""
    for path in args.url or ():
        if path.lower().startswith(("http://", "https://")):
            raise Failed(_full_url_refused(path), code=2)
    if "/" in args.domain:
        raise Failed(
            f"{args.domain!r} is not a domain: give the domain, and the path with --url "
            "(cdn-proxy purge example.com --url /page)",
            code=2,
        )
    url, token = api_settings(args)
    body: dict[str, object] = {"domain": args.domain}
    for option, field in KIND_OPTIONS:
        if getattr(args, option):
            body[field] = getattr(args, option)
    if len(body) == 1 and not (args.soft or args.dry_run or args.json):
        # The whole domain, as before: clear-cache, and its answer as it is.
        answer = _post(url, CLEAR_CACHE_PATH, token, body, CLEAR_TIMEOUT)
        print(answer.decode("utf-8", "replace"))
        return 0
    if len(body) == 1:
        body["all"] = True
    body.update(soft=args.soft, dry_run=args.dry_run)
    answer = _post(url, PURGE_PATH, token, body, PURGE_TIMEOUT)
    try:
        receipt = json.loads(answer)
        assert isinstance(receipt, dict)
    except (ValueError, AssertionError):
        raise Failed(f"the API's answer is not a receipt: {answer[:200]!r}") from None
    print(json.dumps(receipt, indent=2) if args.json else describe(receipt))
    return 0


def _full_url_refused(given: str) -> str:
    """Why a full URL given to --url is refused, from what it looks like: a page's URL (it
    has a path: say which path to give) or a base URL (it goes in --api)."""
    parts = urllib.parse.urlsplit(given)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    if path not in ("", "/"):
        return (
            f"--url {given!r} is a full URL, and --url takes the path to purge on the domain "
            f"given first: --url {path}"
        )
    return (
        f"--url {given!r}: --url now takes a path to purge (such as /page?x=1); the "
        "API's base URL goes in --api (or CDN_PROXY_URL)"
    )


def api_url_of(config_path: Path) -> str:
    """The control plane's base URL from a node's config: its [api] listen address, with a
    wildcard host read as this host's loopback (the hook runs on the node)."""
    try:
        api = load_config(config_path).api
    except ConfigError as exc:
        raise Failed(str(exc), code=2) from None
    if api is None:
        raise Failed(f"{config_path} has no [api] table: give the API's URL with --api", code=2)
    listen = api.listen
    if listen.port == 0:
        raise Failed(
            f"{config_path}: api.listen has port 0 (a port the OS picks at each start): "
            "give the API's URL with --api",
            code=2,
        )
    # A wildcard is read, never bound here: the client connects to this host's loopback.
    wildcards = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104
    host = wildcards.get(listen.host, listen.host)
    return f"http://[{host}]:{listen.port}" if ":" in host else f"http://{host}:{listen.port}"


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> None:
        return None  # the 3xx then surfaces as an HTTPError, reported like any failure


def _post(base: str, path: str, token: str, body: dict[str, object], timeout: float) -> bytes:
    url = base.rstrip("/") + path
    # The scheme was checked by the caller: only http(s), never file:// or others (S310).
    request = urllib.request.Request(  # noqa: S310
        url,
        data=json.dumps(body).encode("utf-8"),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "text/plain, application/json, application/problem+json",
            "User-Agent": f"cdn-proxy/{__version__}",
        },
    )
    opener = urllib.request.build_opener(NoRedirects)
    limit = MAX_BODY_SHOWN if path == CLEAR_CACHE_PATH else MAX_RECEIPT
    try:
        with opener.open(request, timeout=timeout) as response:
            answer: bytes = response.read(limit)
            return answer
    except urllib.error.HTTPError as exc:
        raise refused("purge", base, exc) from None
    except urllib.error.URLError as exc:
        raise Failed(f"cannot reach {url}: {exc.reason}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # timeouts, resets, junk
        raise Failed(f"cannot reach {url}: {exc}") from None


def refused(command: str, base: str, exc: urllib.error.HTTPError) -> Failed:
    """What ``command`` prints when the server at ``base`` answered an error status: the
    status and the problem's detail, and where the edge answered (421), that it was one."""
    with exc:
        detail = problem_detail(exc.read(MAX_BODY_SHOWN))
    status = f"{exc.code} {exc.reason}"
    # A plain-text body often starts with the status line itself (the edge's does).
    detail = detail.removeprefix(status).lstrip(": ") or "(no body)"
    if exc.code == 421:
        detail += f" (is {base} the API listener, not the edge?)"
    return Failed(f"{command} failed: {status}: {detail}")


def problem_detail(body: bytes) -> str:
    """The ``detail`` of a problem+json body, or the body itself if it is not one."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text or "(no body)"
    if isinstance(data, dict) and isinstance(data.get("detail"), str):
        return str(data["detail"])
    return text
