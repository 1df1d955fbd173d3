"""The suite's isolation between tests: what one test (or one module's fixture) changes in the worker process is put
back before the next module runs, so a test's outcome does not depend on what ran before it in the same worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

def _suite_conftest(take: str) -> str:
    """A ``conftest.py`` that loads the suite's own (``tests/conftest.py``) and then runs ``take`` (``suite`` is it)."""
    return f"""
import importlib.util
spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
{take}
"""


CONFTEST = _suite_conftest('globals().update((name, getattr(suite, name)) for name in dir(suite) '
                           'if name.startswith("_logging_as_it_was"))')
"""The suite's own autouse logging fixtures (``tests/conftest.py``), in a folder of their own."""

JOB_IN_A_MODULE_FIXTURE = """
import pytest
from mcp_gym.cli import main

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("job") / "run"
    assert main(["collect", "env=counter", "env.transport=inprocess", "launcher.progress=false", "policy=oracle",
                 "episodes=1", f"out={out}"]) == 0
    return out

def test_uses_the_run(run):
    assert run.exists()
"""

CAPLOG_AFTER = """
import logging

def test_caplog_sees_the_client_logger(caplog):
    client = logging.getLogger("mcp_gym.client")
    assert client.propagate and not [h for h in client.handlers if not type(h).__module__.startswith("_pytest")]
    caplog.set_level(logging.INFO, logger="mcp_gym.client")
    logging.getLogger("mcp_gym.client").info("seen")
    assert [r.getMessage() for r in caplog.records] == ["seen"]
"""


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_a_job_run_by_a_module_fixture_leaves_no_logging_set_up_for_the_next_module(tmp_path: Path) -> None:
    """A module-scoped fixture runs a CLI job in-process (Hydra's logging set-up: ``mcp_gym.client`` not propagating);
    the next module's ``caplog`` still sees ``mcp_gym.client``'s records (with pytest 9.0.3 it saw none:
    ``test_npx_resolve`` failed so after ``test_reports`` in one worker)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own settings: no addopts (-n 2) of a config above it
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_a_job.py").write_text(JOB_IN_A_MODULE_FIXTURE)
    (tmp_path / "test_b_caplog.py").write_text(CAPLOG_AFTER)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                           "test_a_job.py", "test_b_caplog.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTEST_ADDOPTS": ""})  # both modules in one process
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


CONFTEST_SIGINT = _suite_conftest("pytest_configure = suite.pytest_configure")

CTRL_C = """
import os, signal, subprocess, sys, time
import pytest

def test_ctrl_c_raises_here_and_in_a_child():
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    child = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"],
                           capture_output=True, text=True, timeout=60)
    assert "default_int_handler" in child.stdout, child.stdout
"""


def test_a_suite_started_with_sigint_ignored_still_gets_ctrl_c(tmp_path: Path) -> None:
    """Started in the background of a shell script (``pytest &``: SIGINT ignored, and inherited so), the Ctrl-C
    tests saw no ``KeyboardInterrupt`` and their jobs ignored Ctrl-C (5 failed so in a CI run started that way); the
    suite's ``pytest_configure`` gives this process Python's handler back, and its children the default action."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST_SIGINT)
    (tmp_path / "test_ctrl_c.py").write_text(CTRL_C)
    ignoring = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]  # SIGINT ignored, as `pytest &` in a script starts
    done = subprocess.run([*ignoring, sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "-q", "test_ctrl_c.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
