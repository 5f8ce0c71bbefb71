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

The API is asked through proxy/cli/api_client.py (urllib, no redirects).
"""

from __future__ import annotations

import argparse
import json
import urllib.parse

from proxy.cli.api_client import (
    MAX_BODY_SHOWN,
    Failed,
    add_api_options,
    api_settings,
    json_object,
    post,
)
from proxy.core.purge.receipts import describe
from proxy.core.routes import CLEAR_CACHE_PATH, PURGE_PATH

CLEAR_TIMEOUT = 10.0  # seconds; a clear is O(1) on the server, so this is only the network
PURGE_TIMEOUT = 60.0  # a dry run reads the domain's keys: longer for a large domain
MAX_RECEIPT = 16 * 1024**2  # a receipt echoes up to 256 items of 8 KiB


HELP = "purge URLs, prefixes, tags or a whole domain through the API"
DESCRIPTION = (
    "With no --url, --prefix or --tag: the whole domain. Repeat an option to purge several "
    "items of its kind (one kind per purge)."
)
# The kinds of purge, one option each: the option, the purge request's field its values go
# in, and its metavar and help.
KIND_OPTIONS = (
    ("url", "urls", "PATH", "a path (and query)"),
    ("prefix", "prefixes", "P", "a path prefix"),
    ("tag", "tags", "T", "a tag the origin set"),
)


def add_arguments(purge: argparse.ArgumentParser) -> None:
    purge.add_argument("domain", help="the CDN domain to purge")
    kinds = purge.add_mutually_exclusive_group()
    for option, _, metavar, text in KIND_OPTIONS:
        kinds.add_argument(f"--{option}", action="append", metavar=metavar, help=text)
    purge.add_argument("--soft", action="store_true", help="mark stale instead of dropping")
    purge.add_argument("--dry-run", action="store_true", help="only say what would be purged")
    purge.add_argument("--json", action="store_true", help="print the receipt as JSON")
    add_api_options(purge)


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
    for option, field, _, _ in KIND_OPTIONS:
        if getattr(args, option):
            body[field] = getattr(args, option)
    if len(body) == 1 and not (args.soft or args.dry_run or args.json):
        # The whole domain, as before: clear-cache, and its answer as it is.
        answer = post(
            url,
            CLEAR_CACHE_PATH,
            token,
            body,
            command="purge",
            timeout=CLEAR_TIMEOUT,
            limit=MAX_BODY_SHOWN,
        )
        print(answer.decode("utf-8", "replace"))
        return 0
    if len(body) == 1:
        body["all"] = True
    body.update(soft=args.soft, dry_run=args.dry_run)
    answer = post(
        url, PURGE_PATH, token, body, command="purge", timeout=PURGE_TIMEOUT, limit=MAX_RECEIPT
    )
    receipt = json_object(answer, "a receipt")
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
