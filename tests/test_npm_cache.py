"""The npm cache of the third-party server tests (``conftest.npm_bin``) under concurrency: one installer at a time,
a bounded wait for the lock, and a prefix counted as installed only once its install finished.

A stand-in ``npm`` on PATH (a shell script) records each run, refuses to run beside another one (as two real npm runs
in one prefix fail with exit 217) and writes the executables; the processes that race are real ``python`` processes
importing the real ``conftest``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import COMPLETE_MARKER, NPM_SERVERS, NPM_TOOLS

TESTS = Path(__file__).resolve().parent

FAKE_NPM = r"""#!/bin/sh
# npm install --no-audit --no-fund --silent --prefix PREFIX PKG...
set -e
prefix=$6
log="$FAKE_NPM_LOG"
if ! mkdir "$log.running" 2>/dev/null; then echo "another npm is running" >&2; exit 217; fi
echo "install $prefix" >> "$log"
mkdir -p "$prefix/node_modules/.bin"
sleep "${FAKE_NPM_SECONDS:-0}"
for exe in mcp-server-everything mcp-server-memory mcp-server-filesystem conformance; do
    printf '#!/bin/sh\n' > "$prefix/node_modules/.bin/$exe"
done
rmdir "$log.running"
"""


def _fake_npm(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "MCP_GYM_NPM_DIR": str(tmp_path / "cache" / "npm"), "FAKE_NPM_LOG": str(tmp_path / "npm.log")}


def _npm_bin_process(env: dict[str, str], name: str, lock_wait_s: float = 120.0) -> subprocess.Popen[str]:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import conftest; "
            f"conftest.NPM_LOCK_WAIT_S = {lock_wait_s}; print(conftest.npm_bin(sys.argv[2]))")
    return subprocess.Popen([sys.executable, "-c", code, str(TESTS), name], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _installs(tmp_path: Path) -> list[str]:
    log = tmp_path / "npm.log"
    return log.read_text().splitlines() if log.exists() else []


def test_two_processes_racing_on_an_empty_cache_install_once(tmp_path: Path) -> None:
    env = {**_fake_npm(tmp_path), "FAKE_NPM_SECONDS": "1"}
    procs = [_npm_bin_process(env, "mcp-server-everything") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.strip().endswith("node_modules/.bin/mcp-server-everything")
    assert _installs(tmp_path) == [f"install {tmp_path / 'cache' / 'npm'}"]
    marker = (tmp_path / "cache" / "npm" / COMPLETE_MARKER).read_text()
    assert marker.split() == sorted(f"{p}@{v}" for p, v in NPM_SERVERS.items())


def test_an_installer_waits_for_the_lock_and_gives_up_past_its_bound(tmp_path: Path) -> None:
    import conftest

    env = _fake_npm(tmp_path)
    old = conftest.NPM_DIR
    conftest.NPM_DIR = tmp_path / "cache" / "npm"
    try:
        with conftest._npm_lock():  # this process is the installer: the other one must not run npm meanwhile
            proc = _npm_bin_process(env, "mcp-server-memory", lock_wait_s=1.0)
            _, err = proc.communicate(timeout=120)
    finally:
        conftest.NPM_DIR = old
    assert proc.returncode != 0
    assert "held the npm install lock" in err and "npm.lock" in err
    assert _installs(tmp_path) == []


def test_a_half_written_cache_is_discarded_and_installed_again(tmp_path: Path) -> None:
    env = _fake_npm(tmp_path)
    prefix = tmp_path / "cache" / "npm"
    bin_dir = prefix / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "mcp-server-everything").write_text("#!/bin/sh\n")  # what a killed install leaves: no marker
    (prefix / "node_modules" / "half-written").mkdir()
    tool_prefix = prefix / "conformance"  # a tool's own complete prefix below the servers' one is kept
    (tool_prefix / "node_modules" / ".bin").mkdir(parents=True)
    (tool_prefix / "node_modules" / ".bin" / "conformance").write_text("#!/bin/sh\n")
    package, version = NPM_TOOLS["conformance"]
    (tool_prefix / COMPLETE_MARKER).write_text(f"{package}@{version}\n")

    for name in ("mcp-server-everything", "conformance", "mcp-server-filesystem"):
        proc = _npm_bin_process(env, name)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert _installs(tmp_path) == [f"install {prefix}"]  # once, for the servers; the complete tool prefix stays
    assert not (prefix / "node_modules" / "half-written").exists()
    assert (tool_prefix / "node_modules" / ".bin" / "conformance").exists()


def test_a_cache_of_another_package_set_is_installed_again(tmp_path: Path) -> None:
    env = _fake_npm(tmp_path)
    tool_prefix = tmp_path / "cache" / "npm" / "conformance"
    (tool_prefix / "node_modules" / ".bin").mkdir(parents=True)
    (tool_prefix / "node_modules" / ".bin" / "conformance").write_text("#!/bin/sh\n")
    package, _ = NPM_TOOLS["conformance"]
    (tool_prefix / COMPLETE_MARKER).write_text(f"{package}@0.0.1\n")  # an older pin
    proc = _npm_bin_process(env, "conformance")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert _installs(tmp_path) == [f"install {tool_prefix}"]
