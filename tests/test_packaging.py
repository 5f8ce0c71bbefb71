"""What ships beside the code: the systemd unit, the Dockerfile, a wheel install (what the
container runs), and scripts/serve.

No container engine runs on this machine and no image registry is reachable (only PyPI,
Debian and npm), so the Dockerfile is not built here: its steps are checked instead (every
file it copies exists and is not ignored; its install step, a non-editable install of the
package, is done for real below and serves the dashboard's templates and static files)."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import Origin
from tests.edge.tls_support import Certificates, get, https_origin
from tests.nodes import ENV, Node
from tests.polling import until

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "config" / "cdn-proxy.service"
INSTALLED_CONFIG = "/etc/cdn-proxy/proxy.toml"

CONFIG = """
[edge]
listen = "127.0.0.1:0"
shutdown_timeout = 5
[api]
listen = "127.0.0.1:0"
[cache]
max_bytes = "8MiB"
[state]
path = "state.db"
[[domains]]
name = "example.com"
origin = "http://127.0.0.1:9"
"""


def unit_values(key: str) -> list[str]:
    lines = UNIT.read_text(encoding="utf-8").splitlines()
    return [line.partition("=")[2] for line in lines if line.startswith(f"{key}=")]


def test_the_systemd_unit_verifies_and_runs_cdn_proxy_on_the_installed_config(
    tmp_path: Path,
) -> None:
    [start] = unit_values("ExecStart")
    program, *args = shlex.split(start)
    assert args == ["serve", "--config", INSTALLED_CONFIG]
    assert unit_values("ExecReload") == ["/bin/kill -HUP $MAINPID"]
    assert unit_values("KillSignal") == ["SIGTERM"]
    # systemd-analyze checks that the program exists: point it at this venv's cdn-proxy.
    here = Path(sys.executable).parent / "cdn-proxy"
    assert here.exists()
    unit = tmp_path / "cdn-proxy.service"
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(program, str(here)), encoding="utf-8")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    # Unknown or misspelt keys are only warnings: any output at all is a failure.
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def dockerignored(path: str, patterns: list[str]) -> bool:
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(
        fnmatch.fnmatch(prefix, pattern.removeprefix("**/"))
        or fnmatch.fnmatch(Path(prefix).name, pattern.removeprefix("**/"))
        for prefix in prefixes
        for pattern in patterns
    )


def test_the_dockerfile_copies_only_files_that_exist_and_are_not_ignored() -> None:
    lines = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    from_context = [line for line in lines if line.startswith("COPY ") and "--from=" not in line]
    copied = [src for line in from_context for src in line.split()[1:-1]]
    assert {"pyproject.toml", "setup.py", "README.md", "LICENSE", "proxy"} <= set(copied)
    # The wheel is built where gcc is (the full image) and carries the C head reader, which
    # the slim image checks it imports (decision 0055).
    assert "FROM python:3.11 AS build" in lines and "FROM python:3.11-slim" in lines
    assert "COPY --from=build /wheels /wheels" in lines
    assert any("lane.READER == 'c'" in line for line in lines)
    for src in copied:
        assert (ROOT / src).exists(), src
        assert not dockerignored(src, ignore), src
    assert dockerignored(".venv", ignore) and dockerignored("proxy/__pycache__", ignore)
    assert 'CMD ["serve", "--config", "/etc/cdn-proxy/proxy.toml"]' in lines
    assert 'ENTRYPOINT ["cdn-proxy"]' in lines


async def started(
    command: list[str], *, cwd: Path, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, dict[str, str]]:
    """Start a serving command and read the addresses it prints (edge, api)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    addresses: dict[str, str] = {}
    try:
        async with asyncio.timeout(120):
            while len(addresses) < 2:
                line = (await process.stdout.readline()).decode()
                if not line:
                    assert process.stderr is not None
                    raise AssertionError((await process.stderr.read()).decode())
                name, _, url = line.strip().partition(" ")
                addresses[name] = url
    except BaseException:
        process.kill()
        await process.wait()
        raise
    return process, addresses


async def ran(*command: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to its end; its standard output (a failure shows its standard error)."""
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def stopped(process: asyncio.subprocess.Process) -> tuple[int, str]:
    process.terminate()
    _, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, err.decode()


@pytest.mark.slow  # a wheel build and install
async def test_a_wheel_install_serves_the_dashboard_from_its_package_data(tmp_path: Path) -> None:
    """The Dockerfile's install step: a non-editable install, run from elsewhere."""
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    await ran(*pip, "install", "--no-deps", "--target", str(site), str(ROOT), cwd=tmp_path)
    # The package comes from the install, the dependencies from this venv.
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])}
    where = await ran(
        sys.executable, "-c", "import proxy; print(proxy.__file__)", cwd=tmp_path, env=env
    )
    assert where.startswith(str(site))
    # With a C compiler (this machine has one), the install builds the lane's head reader
    # (setup.py, decision 0055); without, it goes on, and the lane reads heads in Python.
    reader = await ran(
        sys.executable,
        "-c",
        "from proxy.core.http import lane; print(lane.READER)",
        cwd=tmp_path,
        env=env,
    )
    assert reader.strip() == "c"
    (tmp_path / "proxy.toml").write_text(CONFIG, encoding="utf-8")
    command = [sys.executable, "-m", "proxy", "serve", "--config", "proxy.toml"]
    process, addresses = await started(command, cwd=tmp_path, env=env)
    try:
        async with aiohttp.ClientSession() as client:
            async with client.get(addresses["api"] + "/dashboard/sign-in") as response:
                assert response.status == 200
                assert "<form" in await response.text()
            async with client.get(addresses["api"] + "/dashboard/static/dashboard.css") as response:
                assert response.status == 200
                assert response.content_type == "text/css"
            async with client.get(addresses["api"] + "/dashboard/static/favicon.svg") as response:
                assert response.status == 200
                assert response.content_type == "image/svg+xml"
    finally:
        code, _ = await stopped(process)
    assert code == 0


@pytest.mark.slow  # a venv, and pip installs in it
async def test_scripts_serve_installs_only_when_pyproject_or_the_c_reader_changed(
    tmp_path: Path,
) -> None:
    """A real venv of its own whose dependencies come from this one (a .pth file), so that
    the install step is the project's alone."""
    venv = tmp_path / "venv"
    await ran(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    (tmp_path / "proxy.toml").write_text(CONFIG, encoding="utf-8")
    env = {**ENV, "VENV": str(venv)}
    command = [str(ROOT / "scripts" / "serve"), str(tmp_path / "proxy.toml")]

    async def run() -> str:
        process, addresses = await started(command, cwd=tmp_path, env=env)
        async with (
            aiohttp.ClientSession() as client,
            client.get(addresses["api"] + "/healthz") as response,
        ):
            assert response.status == 200
        code, err = await stopped(process)
        assert code == 0
        return err

    installing = f"scripts/serve: installing cdn-proxy into {venv}"
    assert installing in await run()
    assert (venv / "bin" / "cdn-proxy").exists()
    assert installing not in await run()  # nothing changed
    stamp = venv / ".cdn-proxy-installed"  # pyproject.toml, setup.py and _lane.c, as installed
    stamp.write_text(stamp.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    assert installing in await run()
    assert shutil.which("cdn-proxy", path=str(venv / "bin"))


@pytest.mark.slow
async def test_the_production_example_serves_https_through_workers(
    tmp_path: Path, origin: Origin
) -> None:
    """config/production.toml as it ships, with only its addresses and absolute paths moved
    into the test: every key in it is valid, and the node it describes (TLS with SNI, a
    verified https:// origin with its own CA, edge workers on an embedded Valkey, the access
    log) serves."""
    certs = Certificates(tmp_path)
    text = (ROOT / "config" / "production.toml").read_text(encoding="utf-8")
    for name in ("default", "www.example.com", "static.example.com"):
        pair = certs.issue(name if "." in name else "default.invalid")
        text = text.replace(f"/etc/cdn-proxy/tls/{name}.crt", str(pair.cert))
        text = text.replace(f"/etc/cdn-proxy/tls/{name}.key", str(pair.key))
    text = text.replace("/etc/cdn-proxy/tls/internal-ca.pem", str(certs.bundle))
    for path in ("/var/lib/cdn-proxy", "/var/log/cdn-proxy"):
        text = text.replace(path, str(tmp_path))
    for listen in ("0.0.0.0:80", "0.0.0.0:443", "127.0.0.1:8081"):
        text = text.replace(f'"{listen}"', '"127.0.0.1:0"')
    keys = "\n".join(line.partition("#")[0] for line in text.splitlines())
    assert '"/etc/' not in keys and '"/var/' not in keys and '"0.0.0.0:' not in keys
    origin.reply("/", b"www page", headers={"Cache-Control": "max-age=60"})
    async with https_origin(certs.issue("localhost")) as private_origin:
        text = text.replace("https://origin.example.com", origin.url)
        text = text.replace("https://10.0.0.20:8443", private_origin)
        config = tmp_path / "proxy.toml"
        config.write_text(text, encoding="utf-8")
        node = await Node.start(config, roles=3, log=tmp_path / "node.log")
        try:
            assert node.workers == len(os.sched_getaffinity(0))
            url = node.addresses["edge-tls"] + "/"
            async with aiohttp.ClientSession() as client:
                for name, body in (("www.example.com", b"www page"), ("static.example.com", None)):
                    status, _, got = await get(client, url, certs.client(), sni=name)
                    assert status == 200
                    assert got == (body or b"secret origin")
            # Both requests are in the JSON access log, written by the workers.
            log = tmp_path / "access.log"
            await until(
                lambda: log.exists() and len(log.read_text().splitlines()) >= 2,
                within=30.0,
                every=0.05,
            )
            lines = [json.loads(line) for line in log.read_text().splitlines()]
            assert {(line["host"], line["status"]) for line in lines} == {
                ("www.example.com", 200),
                ("static.example.com", 200),
            }
        finally:
            await node.kill()
    assert "Traceback" not in (tmp_path / "node.log").read_text()


@pytest.mark.slow
def test_the_https_steps_write_files_git_ignores() -> None:
    """Issue 22 item 8: the HTTPS steps (README then, docs/operations.md now) write a private
    key into config/, which .gitignore did not cover: one ``git add config`` from committing
    it."""
    steps = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    written = re.findall(r" -(?:keyout|out) (config/\S+)", steps)
    assert "config/example.com.key" in written
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *written],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ignored.stdout.split() == written, ignored.stderr
