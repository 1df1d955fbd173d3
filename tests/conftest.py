"""Shared fixtures: real third-party MCP servers (installed from npm on first use), free ports, HTTP servers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NPM_DIR = Path(os.environ.get("MCP_GYM_NPM_DIR") or ROOT / ".mcp-gym-cache" / "npm")
NPM_SERVERS = {
    "@modelcontextprotocol/server-everything": "2026.8.31",
    "@modelcontextprotocol/server-memory": "2026.8.31",
    "@modelcontextprotocol/server-filesystem": "2026.8.31",
}


NPM_TOOLS = {"conformance": ("@modelcontextprotocol/conformance", "0.1.16")}
"""npm tools (executable -> package, version), each installed under its own prefix ``NPM_DIR/<executable>`` so that
their dependencies never move the servers' (the conformance suite brings its own ``@modelcontextprotocol/sdk``)."""


def npm_bin(name: str) -> str:
    """Path of an npm server's or tool's executable, installing the pinned servers into .mcp-gym-cache/npm (a tool of
    :data:`NPM_TOOLS` into ``.mcp-gym-cache/npm/<name>``) on first use."""
    if name in NPM_TOOLS:
        package, version = NPM_TOOLS[name]
        prefix, pkgs = NPM_DIR / name, [f"{package}@{version}"]
        manifest = prefix / "node_modules" / package / "package.json"
        installed = manifest.exists() and json.loads(manifest.read_text()).get("version") == version
    else:
        prefix, pkgs = NPM_DIR, [f"{p}@{v}" for p, v in NPM_SERVERS.items()]
        installed = True
    exe = prefix / "node_modules" / ".bin" / name
    if not exe.exists() or not installed:
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed for the third-party server tests (install Node.js >= 18)")
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(prefix), *pkgs],
            check=True,
            timeout=600,
        )
    return str(exe)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")


def child_env(**extra: str) -> dict[str, str]:
    """Environment for server subprocesses: this interpreter's path plus extras."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.update(extra)
    return env


def start_http_server(
    module: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m module --transport http --port N`` and return (process, url)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--transport", "http", "--port", str(port), *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc=proc)
    return proc, f"http://127.0.0.1:{port}/mcp"


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server subprocess, killing it if it does not exit within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def http_counter() -> Iterator[str]:
    """URL of the Counter server (with diagnostic tools) over Streamable HTTP on 127.0.0.1."""
    proc, url = start_http_server("mcp_gym.envs.counter.server", "--diagnostics")
    try:
        yield url
    finally:
        stop_process(proc)


@pytest.fixture(autouse=True, scope="module")
def fresh_default_runtime() -> Iterator[None]:
    """Each test module starts with a new default runtime, in driven mode as users get it (a test that uses the env
    from another event loop switches the runtime to threaded mode; without this every later module would run so)."""
    yield
    from mcp_gym.client import runtime

    rt = runtime._default
    if rt is not None and not rt.closed:
        rt.close(timeout=10)
