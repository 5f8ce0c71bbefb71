"""Run the HTTP caching test suite (npm ``http-cache-tests``) against a real cdn-proxy process.

The suite is installed from the npm registry by the README's test command into
``.cache/http-cache-tests`` (never copied into this repository); ``CACHE_TESTS_DIR`` points
elsewhere, e.g. at a checkout of the suite's current source. Three processes take part:

- the suite's own origin server (``server/server.mjs``), which answers each test's requests
  as the test describes;
- ``python -m proxy serve`` with one domain, ``localhost``, whose origin is that server;
- the suite's command-line client (``cli.mjs``), pointed at the edge listener, which prints
  ``{test id: result}`` as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.ports import free_port

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SUITE = REPO / ".cache" / "http-cache-tests" / "node_modules" / "http-cache-tests"

# Lists every test of the suite with the fields the classification needs.
_METADATA_SCRIPT = """
import tests from './tests/index.mjs'
import fs from 'fs'
const extra = ['./tests/surrogate-control.mjs']
for (const path of extra) {
  if (fs.existsSync(new URL(path, import.meta.url))) {
    const suite = (await import(path)).default
    if (!tests.includes(suite)) tests.push(suite)
  }
}
const out = []
for (const suite of tests) {
  for (const t of suite.tests) {
    out.push({suite: suite.id, suite_name: suite.name, id: t.id, name: t.name,
              kind: t.kind || 'required', depends_on: t.depends_on || []})
  }
}
console.log(JSON.stringify(out))
"""


def suite_dir() -> Path:
    return Path(os.environ.get("CACHE_TESTS_DIR", DEFAULT_SUITE))


def suite_version(directory: Path) -> str:
    return str(json.loads((directory / "package.json").read_text())["version"])


def metadata(directory: Path) -> list[dict[str, Any]]:
    script = directory / ".cdn-proxy-metadata.mjs"
    script.write_text(_METADATA_SCRIPT)
    try:
        out = subprocess.run(
            ["node", "--no-warnings", str(script)],
            cwd=directory,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    finally:
        script.unlink()
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


@contextmanager
def _process(args: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _wait_for_line(process: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise RuntimeError(f"{process.args!r} did not print {prefix!r}; it printed: {''.join(seen)}")


def run_suite(directory: Path, work: Path, *, heuristic: bool = False) -> dict[str, Any]:
    """Run every test of the suite once; return the client's ``{id: result}``."""
    origin_port = free_port()
    env = {**os.environ, "NODE_NO_WARNINGS": "1"}
    server_env = {
        **env,
        "npm_config_port": str(origin_port),
        "npm_config_protocol": "http",
        "npm_package_config_protocol": "http",
        "npm_config_pidfile": str(work / "server.pid"),
    }
    config = work / "proxy.toml"
    config.write_text(
        textwrap.dedent(
            f"""\
            [edge]
            listen = "127.0.0.1:0"
            [api]
            listen = "127.0.0.1:0"
            [cache]
            max_bytes = "64MiB"
            [state]
            path = "{work / "state.db"}"
            [[domains]]
            name = "localhost"
            origin = "http://127.0.0.1:{origin_port}"
            heuristic_freshness = {"true" if heuristic else "false"}
            """
        )
    )
    with (
        _process(["node", "--no-warnings", "server/server.mjs"], directory, server_env) as server,
        _process(
            [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
            REPO,
            env,
        ) as proxy,
    ):
        _wait_for_line(server, "Listening on", timeout=30)
        edge = _wait_for_line(proxy, "edge ", timeout=30)
        edge_port = edge.rsplit(":", 1)[1]
        client_env = {
            **env,
            "npm_config_base": f"http://localhost:{edge_port}",
            "npm_config_id": "",
            "npm_package_config_id": "",
        }
        completed = subprocess.run(
            ["node", "--no-warnings", "cli.mjs"],
            cwd=directory,
            env=client_env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if completed.returncode != 0:
        raise RuntimeError(f"the suite's client failed: {completed.stderr}")
    results: dict[str, Any] = json.loads(completed.stdout)
    return results
