"""A job process pays for what its command needs (issue 40): ``mcp_gym.jobs`` and ``mcp_gym.recording`` load their
names on first use, ``export-sft`` runs without the MCP client, matplotlib or Gymnasium, a bundled server's process
without Gymnasium, and Gymnasium still finds the bundled envs whichever of the two is imported first; the ``mcp-gym``
program and a bundled server exit without a last garbage collection.

Each check runs in a fresh interpreter and reads its ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_gym.cli import main

FAST = ["env=counter", "env.transport=inprocess", "launcher.progress=false"]
WATCHED = ["mcp", "mcp_gym.client", "datasets", "matplotlib", "gymnasium", "aiohttp"]


def imported_after(code: str, *args: str) -> list[str]:
    """The ``WATCHED`` modules a fresh interpreter has imported after running ``code`` (which may print nothing)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {WATCHED!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    modules: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return modules


def test_importing_the_jobs_and_recording_packages_imports_no_client_and_no_plots() -> None:
    assert imported_after("import mcp_gym.jobs, mcp_gym.recording") == []
    assert imported_after("from mcp_gym.jobs import JobFailed, JobInterrupted, JobRefused") == []
    assert imported_after("import mcp_gym.cli") == []


@pytest.mark.slow  # 13 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_the_lazy_names_are_the_functions_and_classes_they_were() -> None:
    code = """
import mcp_gym.jobs.collect, mcp_gym.jobs.evaluate, mcp_gym.jobs.demo  # modules named as their job functions
from mcp_gym import jobs, recording
import mcp_gym.jobs.collect as c
assert callable(jobs.collect) and jobs.collect is c is sys.modules["mcp_gym.jobs.collect"].collect
assert jobs.evaluate is sys.modules["mcp_gym.jobs.evaluate"].evaluate
assert jobs.demo is sys.modules["mcp_gym.jobs.demo"].demo
from mcp_gym.jobs import collect, evaluate, export_sft, demo, EvalResult, CollectResult
assert [f.__module__ for f in (collect, evaluate, export_sft, demo)] == [
    "mcp_gym.jobs.collect", "mcp_gym.jobs.evaluate", "mcp_gym.jobs.export", "mcp_gym.jobs.demo"]
from mcp_gym.recording import RecordTrajectories, RunStore, load
assert RecordTrajectories.__module__ == "mcp_gym.recording.wrapper" and load.__module__ == "mcp_gym.recording.reader"
for name in jobs.__all__ + recording.__all__:
    assert getattr(jobs if name in jobs.__all__ else recording, name) is not None, name
try:
    jobs.no_such_name
except AttributeError as e:
    assert "no_such_name" in str(e)
else:
    raise AssertionError("jobs.no_such_name resolved")
"""
    assert "mcp" in imported_after("import sys\n" + code)  # the job modules themselves do import the client


@pytest.mark.slow  # guards speed only (an export that works is tested in test_sft); fast cover of the
# first-use imports: test_importing_the_jobs_and_recording_packages_imports_no_client_and_no_plots
def test_export_sft_imports_neither_the_mcp_client_nor_matplotlib_nor_gymnasium(tmp_path: Path) -> None:
    run, sft = tmp_path / "run", tmp_path / "sft"
    assert main(["collect", *FAST, "policy=oracle", "episodes=3", f"out={run}"]) == 0
    code = "import sys\nfrom mcp_gym.cli import main\nassert main(sys.argv[1:]) == 0"
    modules = imported_after(code, "export-sft", f"runs=[{run}]", f"out={sft}")
    assert modules == ["datasets"]  # the dataset it writes; nothing of the client, the plots or Gymnasium
    assert any(sft.rglob("*.parquet")), list(sft.rglob("*"))


def test_a_bundled_server_process_does_not_import_gymnasium() -> None:
    assert imported_after("import mcp_gym.servers.sql, mcp_gym.servers.counter") == ["mcp"]


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
def test_gymnasium_finds_the_bundled_envs_whichever_is_imported_first() -> None:
    after = """
import gymnasium
assert "mcp_gym/SQL-v0" in gymnasium.registry and "mcp_gym/Counter-v0" in gymnasium.registry
assert gymnasium.__spec__.loader is gymnasium.__loader__ and type(gymnasium.__loader__).__name__ != "_ThenRegister"
assert not any(type(f).__name__ == "_RegisterWithGymnasium" for f in sys.meta_path)  # the hook is gone
"""
    assert "gymnasium" in imported_after("import sys, mcp_gym\nassert 'gymnasium' not in sys.modules\n" + after)
    assert "gymnasium" in imported_after("import sys, gymnasium, mcp_gym\n" + after)  # registered at once
    made = """
import mcp_gym
from gymnasium.envs.registration import registry
assert "mcp_gym/Counter-v0" in registry
import gymnasium
env = gymnasium.make("mcp_gym/Counter-v0")
assert env.spec.max_episode_steps and env.unwrapped.__class__.__name__ == "MCPEnv"
env.close()
"""
    assert "gymnasium" in imported_after(made)
    assert "gymnasium" in imported_after("import sys, mcp_gym\nfrom mcp_gym import MCPEnv\n" + after)
    looked_up = "import importlib.util, sys, mcp_gym\nassert importlib.util.find_spec('gymnasium') is not None\n"
    assert "gymnasium" in imported_after(looked_up + "assert 'gymnasium' not in sys.modules\n" + after)


@pytest.mark.slow  # 13 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_a_job_warms_up_only_the_modules_its_end_will_use() -> None:
    code = """
import sys
from omegaconf import OmegaConf
from mcp_gym.jobs.collect import warm_up

def cfg(command="eval", recorder=True, plots=True, policy="openai"):
    return OmegaConf.create({"command": command, "recorder": {"enabled": recorder}, "plots": plots,
                             "policy": {"kind": policy}})

assert warm_up(cfg("collect", recorder=False)) is None
warm_up(cfg("collect")).join(60)
assert "pandas" in sys.modules and "matplotlib" not in sys.modules  # what pyarrow imports for the recorder
warm_up(cfg(plots=False)).join(60)
warm_up(cfg(policy="oracle")).join(60)  # scripted episodes: the import would slow them, it waits for the report
assert "matplotlib" not in sys.modules
thread = warm_up(cfg())
thread.join(60)
assert not thread.is_alive() and "matplotlib.pyplot" in sys.modules
import matplotlib
assert matplotlib.get_backend().lower() == "agg"
"""
    assert "matplotlib" in imported_after(code)


@pytest.mark.slow  # fast cover: test_a_job_warms_up_only_the_modules_its_end_will_use (collect's warm-up)
def test_collect_does_not_import_matplotlib(tmp_path: Path) -> None:
    code = "import sys\nfrom mcp_gym.cli import main\nassert main(sys.argv[1:4] + ['launcher.progress=false']) == 0"
    assert "matplotlib" not in imported_after(code, "collect", f"out={tmp_path / 'c'}", "env=counter")


@pytest.mark.slow  # guards speed only; fast cover: test_a_job_warms_up_only_the_modules_its_end_will_use
def test_eval_without_plots_does_not_import_matplotlib(tmp_path: Path) -> None:
    code = ("import sys\nfrom mcp_gym.cli import main\n"
            "assert main(sys.argv[1:] + ['env.transport=inprocess', 'launcher.progress=false', 'samples=1']) == 0")
    assert "matplotlib" not in imported_after(code, "eval", "env=counter", "plots=false", f"out={tmp_path / 'e'}")
    assert not list((tmp_path / "e" / "report").glob("*.png"))


@pytest.mark.slow  # 4.5-10 s: the heavy lane, which CI still runs (the fast lane stays under 5 min)
def test_an_eval_whose_plots_cannot_be_made_fails_with_the_error(tmp_path: Path) -> None:
    """The warm-up's failed import is not the end of it: the report's own import raises, and the job fails."""
    code = ("import sys\nsys.modules['matplotlib'] = None  # import matplotlib raises ImportError\n"
            "from mcp_gym.cli import main\n"
            "sys.exit(main(['eval', *sys.argv[1:], 'launcher.progress=false', 'samples=1']))")
    done = subprocess.run([sys.executable, "-c", code, "env=counter", "env.transport=inprocess", f"out={tmp_path}"],
                          capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and "matplotlib" in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "report" / "results.json").is_file() and not list((tmp_path / "report").glob("*.png"))


@pytest.mark.slow  # guards speed only (both transports' behaviour: test_http_lane, test_wire_stdio); fast
# cover of the first-use imports: test_importing_the_jobs_and_recording_packages_imports_no_client_and_no_plots
def test_the_http_lane_and_aiohttp_are_imported_for_http_servers_only(http_counter: str) -> None:
    stdio = """
import sys
from mcp_gym import MCPEnv, Stdio
import mcp_gym.jobs.collect
env = MCPEnv({"c": Stdio(sys.executable, ["-m", "mcp_gym.servers.counter"])}, ["a task"])
env.reset(seed=0)
assert "add" in env.action_space.tool_names
env.close()
assert "mcp_gym.client._http_lane" not in sys.modules
"""
    assert "aiohttp" not in imported_after(stdio)
    http = f"""
import sys
from mcp_gym import MCPEnv
env = MCPEnv({{"c": {http_counter!r}}}, ["a task"])
env.reset(seed=0)
assert "add" in env.action_space.tool_names and "mcp_gym.client._http_lane" in sys.modules
env.close()
"""
    assert "aiohttp" in imported_after(http)


FROZEN_AT_EXIT = "import atexit, gc\natexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"


def test_the_mcp_gym_program_exits_with_mains_status_without_a_last_collection() -> None:
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="mcp-gym")
    assert script.value == "mcp_gym.cli:run"
    for args, status in ((["--version"], 0), (["no-such-command"], 2)):
        code = FROZEN_AT_EXIT + "import sys\nfrom mcp_gym.cli import run\nsys.argv[1:] = " + repr(args) + "\nrun()"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == status, done.stderr[-2000:]
        assert done.stdout.strip().endswith("frozen at exit: True"), done.stdout
    in_process = FROZEN_AT_EXIT + "from mcp_gym.cli import main\nassert main(['--version']) == 0"
    done = subprocess.run([sys.executable, "-c", in_process], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("frozen at exit: False"), done.stdout  # main() called in a process: as it was


def test_a_bundled_server_exits_at_the_end_of_its_input_without_a_last_collection() -> None:
    code = FROZEN_AT_EXIT + "from mcp_gym.envs.serve import main\nmain('sql')"
    done = subprocess.run([sys.executable, "-c", code], input="", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "frozen at exit: True", done.stdout
