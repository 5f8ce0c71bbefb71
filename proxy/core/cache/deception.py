"""What keeps a cache rule from storing one user's page for everyone (web cache deception).

Theory of operation. A victim is lured to ``/account.php/x.css``, ``/account;x.css`` or
``/%61ccount/x.css``; the origin's framework reads each as ``/account`` and answers with the
victim's page; a cache that judges by the path's look stores it under a ``*.css`` rule for
the attacker to fetch. Three defences, each a pure function here (decision 0042):

1. ``rule_path``: rules match the path as an origin reads it, not as it was spelt. RFC 3986
   §6.2.2 normalisation as Cloudflare does it before its rules (unreserved characters
   percent-decoded, other escapes upper-cased, dot segments removed, ``\\`` read as ``/``,
   repeated slashes merged), plus path parameters cut (``/account;x.css`` is ``/account``,
   as Tomcat, Jetty and Spring route it). Reserved characters stay encoded: ``%2F``, ``%3B``
   or ``%3F`` is data to RFC 3986 and to most origins, and decoding it would let
   ``/a%2F..%2Fb`` climb out of a directory a rule names.
2. ``cookie_names``: a request's Cookie names as any origin may read them, for
   ``bypass_cookies``: split at ``;`` and ``,`` (RFC 2965, Rack, SimpleCookie), percent- and
   ``+``-decoded, ``.`` and space read as ``_`` (PHP), case folded.
3. ``lent_refusal``: a lifetime the origin did not give (a rule's) is not lent to an answer
   for a request that carried a Cookie (unless the rule says ``cache_with_cookies``), nor
   to a success whose Content-Type does not fit the path's extension (Cloudflare's Cache
   Deception Armor). Authorization needs no rule here: §3.5 is judged on the origin's own
   directives whatever a rule says (``storability.refusal``).

No I/O: the callers (``rules.RuleSet.match``, ``policy.assess_response``) memoise or run
these once per miss, never on a hit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from urllib.parse import quote, unquote_plus

# RFC 3986 §2.3: the characters whose escape means the same as the character itself.
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")
# A path that holds none of these is its own normal form (the common case).
_NORMALISED_BY = re.compile(r"[%;\\.]|//")


def percent_normalised(text: str) -> str:
    """RFC 3986 §6.2.2.1-2: escapes of unreserved characters decoded, the other escapes in
    upper case, space, controls and characters outside ASCII escaped (as UTF-8). A '%' not
    followed by two hex digits is kept as it is."""
    if "%" not in text and _plain(text):
        return text
    out: list[str] = []
    i, end = 0, len(text)
    while i < end:
        c = text[i]
        if c == "%" and i + 2 < end and text[i + 1] in _HEX and text[i + 2] in _HEX:
            decoded = chr(int(text[i + 1 : i + 3], 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + text[i + 1 : i + 3].upper())
            i += 3
            continue
        if not c.isascii() or c <= " " or c == "\x7f":
            out.append(quote(c, safe="", errors="surrogateescape"))
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _plain(text: str) -> bool:
    return text.isascii() and text.isprintable() and " " not in text


def rule_path(path: str) -> str:
    """The request path (no query) that rules match: ``percent_normalised``, then read as
    segments: ``\\`` is ``/``, each segment's ``;`` parameters cut, empty and ``.`` segments
    dropped, ``..`` removing the one before (RFC 3986 §5.2.4). A trailing '/' is kept."""
    if not path.startswith(("/", "\\")) or not _NORMALISED_BY.search(path):
        return path if _plain(path) else percent_normalised(path)
    path = percent_normalised(path).replace("\\", "/")
    kept: list[str] = []
    trailing = False
    for segment in path.split("/")[1:]:
        segment = segment.partition(";")[0]
        trailing = segment in ("", ".", "..")
        if segment == "..":
            if kept:
                kept.pop()
        elif not trailing:
            kept.append(segment)
    if not kept:
        return "/"
    return "/" + "/".join(kept) + ("/" if trailing else "")


def glob_normalised(glob: str) -> str:
    """A path glob spelt as ``rule_path`` spells paths: its escapes normalised, so
    ``/%7Euser/*`` and ``/~user/*`` are one glob. Its segments are not touched: a '*' may
    stand for several."""
    return percent_normalised(glob)


def never_matched_spelling(glob: str) -> str | None:
    """Why a (``glob_normalised``) path glob can never match a ``rule_path``, or None."""
    if ";" in glob:
        return "a path parameter (';...') is cut before rules match"
    if "\\" in glob:
        return "'\\' is read as '/' before rules match"
    if "//" in glob:
        return "repeated slashes are merged before rules match"
    for segment in glob.split("/")[1:] if glob.startswith("/") else ():
        if segment in (".", ".."):
            return "dot segments are removed before rules match"
    return None


# -- cookie names (bypass_cookies) --------------------------------------------------------------


def folded_name(name: str) -> str:
    """A cookie name (or a name glob) as an origin that reads it most loosely does: percent-
    and '+'-decoded (PHP's urldecode), '.' and space as '_' (PHP's variable names), case
    folded (frameworks that look names up case-insensitively)."""
    name = unquote_plus(name, errors="surrogateescape") if "%" in name or "+" in name else name
    return name.strip().replace(".", "_").replace(" ", "_").casefold()


def cookie_names(lines: Iterable[str]) -> Iterator[str]:
    """Every cookie name the request's Cookie fields may be read as, ``folded_name``: pairs
    split at ';' and at ',' (RFC 2965, Rack, Python's SimpleCookie), so ``a=1, sessionid=2``
    names ``sessionid`` too; and a pair holding white space is also read as pairs split
    there (SimpleCookie reads ``a=1 sessionid=2`` as two cookies; PHP reads ``session id``
    as one name, ``session_id``). A value holding ',', ';' or a space may yield a name no
    origin reads: that only sends the request to the origin uncached."""
    for line in lines:
        for part in line.split(";"):
            for pair in part.split(","):
                name = pair.partition("=")[0]
                if name and not name.isspace():
                    yield folded_name(name)
                words = pair.split()
                if len(words) > 1:
                    for word in words:
                        if word[0] != "=":
                            yield folded_name(word.partition("=")[0])


# -- what a rule's lifetime is not lent to -------------------------------------------------------

# The media types a path's extension admits (lowercased, no parameters): a type, or a
# prefix ending in '/' or '-' for a family. As Cloudflare's armor, an image extension admits any
# image (a .jpg served as webp), and application/octet-stream fits every extension.
_IMAGE = ("image/",)
_FONT = ("font/", "application/font-", "application/x-font-", "application/vnd.ms-fontobject")
_SCRIPT = (
    "text/javascript",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "text/ecmascript",
)
_JSON = ("application/json", "text/json", "application/manifest+json")
_XML = ("application/xml", "text/xml")
EXTENSION_TYPES: dict[str, tuple[str, ...]] = {
    "css": ("text/css",),
    "js": _SCRIPT,
    "mjs": _SCRIPT,
    "json": _JSON,
    "map": _JSON,
    "webmanifest": _JSON,
    "xml": _XML,
    "txt": ("text/plain",),
    "csv": ("text/csv", "text/plain"),
    "pdf": ("application/pdf",),
    "wasm": ("application/wasm",),
    **{ext: _IMAGE for ext in ("png", "jpg", "jpeg", "webp", "avif", "bmp", "ico", "tif", "tiff")},
    "gif": (*_IMAGE, "video/"),
    "svg": ("image/svg+xml",),
    **{ext: _FONT for ext in ("woff", "woff2", "ttf", "otf", "eot")},
    **{ext: ("video/",) for ext in ("mp4", "webm", "mov", "m4v")},
    **{ext: ("audio/",) for ext in ("mp3", "wav", "m4a", "flac", "aac", "oga")},
    "ogg": ("audio/", "video/", "application/ogg"),
    **{ext: ("application/",) for ext in ("zip", "gz", "tgz", "bz2", "xz", "zst", "7z")},
}
_ANY_EXTENSION = "application/octet-stream"


def extension_of(path: str) -> str | None:
    """The lowercased extension of a ``rule_path``'s last segment that ``EXTENSION_TYPES``
    knows, or None (no extension, or one such as .html or .php that admits any answer)."""
    last = path.rpartition("/")[2]
    ext = last.rpartition(".")[2].lower() if "." in last else ""
    return ext if ext in EXTENSION_TYPES else None


def fits_extension(extension: str, content_type: str | None) -> bool:
    """Whether an answer of ``content_type`` may be what a path ending in ``.extension``
    names. No Content-Type does not fit: a static file server names its files' types."""
    if content_type is None:
        return False
    media = content_type.partition(";")[0].strip().lower()
    if media == _ANY_EXTENSION:
        return True
    types = EXTENSION_TYPES[extension]
    if (types is _JSON and media.endswith("+json")) or (types is _XML and media.endswith("+xml")):
        return True  # a structured syntax suffix (RFC 6839): application/ld+json, atom+xml
    return any(media.startswith(t) if t[-1] in "/-" else media == t for t in types)


def lent_refusal(
    *,
    status: int,
    cookie: bool,
    cache_with_cookies: bool,
    extension: str | None,
    content_type: str | None,
) -> str | None:
    """Why a rule's lifetime, which the origin did not give, is not lent to this answer,
    or None. ``cookie``: the request carried a Cookie (its answer is likely one user's, as
    for the heuristic lifetime: ``policy._kept_lifetime``). ``extension``: the request
    path's (``extension_of``); only a success with a body is checked, for its Content-Type
    (an error page is what an error is)."""
    if cookie and not cache_with_cookies:
        return "request-cookie"
    has_body = 200 <= status < 300 and status != 204
    if has_body and extension is not None and not fits_extension(extension, content_type):
        return "content-type-mismatch"
    return None
