"""What the CLI's clients of the API (``cdn-proxy purge``, ``trace``) share: where the API
is (``--api``, the ``[api] listen`` address of the node's config with ``--config``, or
CDN_PROXY_URL; the token from ``--token`` or CDN_PROXY_TOKEN), one POST of a JSON body, and
``Failed``, the way any command of the CLI ends with a message and an exit code.

It uses urllib (stdlib, no event loop) and never follows redirects: urllib would resend the
Authorization header to wherever one points.
"""

from __future__ import annotations

import argparse
import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path

from proxy import __version__
from proxy.config.model import client_settings, load_config
from proxy.errors import ConfigError

MAX_BODY_SHOWN = 2000  # bytes of an error answer worth showing
# What is missing, and every way to give it (issue 34 §4), in the order they are read.
NO_URL = (
    "no API URL: pass --api URL, or --config FILE (the node's config: its [api] listen"
    " address), or set CDN_PROXY_URL"
)
NO_BEARER = (
    "no API token: set CDN_PROXY_TOKEN, or pass --token TOKEN (other users see it in `ps`);"
    " make one with `cdn-proxy token create NAME --config FILE`"
)


class Failed(Exception):
    """End the command with this message on stderr and this exit code (proxy/cli/main.py)."""

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
        raise Failed(NO_URL, code=2)
    if not settings.token:
        raise Failed(NO_BEARER, code=2)
    if not settings.url.startswith(("http://", "https://")):
        raise Failed(f"the API URL must start with http:// or https://: {settings.url}", code=2)
    return settings.url, settings.token


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


def post(
    base: str,
    path: str,
    token: str,
    body: dict[str, object],
    *,
    command: str,
    timeout: float,
    limit: int,
) -> bytes:
    """POST ``body`` as JSON to ``path`` of the API at ``base`` with the bearer ``token``,
    never following a redirect: the first ``limit`` bytes of the answer. Raises Failed
    saying what went wrong: "COMMAND failed: STATUS: DETAIL" for an error answer, "cannot
    reach URL: ..." when none came."""
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
    try:
        with opener.open(request, timeout=timeout) as response:
            answer: bytes = response.read(limit)
            return answer
    except urllib.error.HTTPError as exc:
        with exc:
            detail = problem_detail(exc.read(MAX_BODY_SHOWN))
        status = f"{exc.code} {exc.reason}"
        # A plain-text body often starts with the status line itself (the edge's does).
        detail = detail.removeprefix(status).lstrip(": ") or "(no body)"
        if exc.code == 421:
            detail += f" (is {base} the API listener, not the edge?)"
        raise Failed(f"{command} failed: {status}: {detail}") from None
    except urllib.error.URLError as exc:
        raise Failed(f"cannot reach {url}: {exc.reason}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # timeouts, resets, junk
        raise Failed(f"cannot reach {url}: {exc}") from None


def json_object(answer: bytes, what: str) -> dict[str, object]:
    """The API's answer as a JSON object, or Failed saying it is not ``what``."""
    try:
        data = json.loads(answer)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise Failed(f"the API's answer is not {what}: {answer[:200]!r}")
    return data


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
