"""Shared fixtures: real third-party MCP servers (installed from npm on first use), free ports, HTTP servers."""

from __future__ import annotations

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


def npm_bin(name: str) -> str:
    """Path of an npm server's executable, installing the pinned servers into .mcp-gym-cache/npm on first use."""
    exe = NPM_DIR / "node_modules" / ".bin" / name
    if not exe.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed for the third-party server tests (install Node.js >= 18)")
        NPM_DIR.mkdir(parents=True, exist_ok=True)
        pkgs = [f"{p}@{v}" for p, v in NPM_SERVERS.items()]
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(NPM_DIR), *pkgs],
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
