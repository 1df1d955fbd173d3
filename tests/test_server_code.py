"""The Code server over real MCP: every reference solution, the tested-final-code rule, random play, 64 isolated
episodes on one stdio process, HTTP, annotations, and the sandbox limits (loops, memory, network, processes, files,
output)."""

from __future__ import annotations

import random
import signal
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from test_server_notes import call, episode, serve_http, state_of, stdio_params, tool_hints

from mcp_gym.envs._common import split_of, submitted_answer
from mcp_gym.envs.code import tasks as env
from mcp_gym.servers._sandbox import Limits, run_function_tests
from mcp_gym.servers.code import LIMITS, server
from mcp_gym.tasks import Task

pytestmark = [pytest.mark.anyio, pytest.mark.bwrap]  # the Code server refuses to start without bubblewrap

TASKS = env.generate_tasks(0)
SUM_ABOVE = TASKS[0]  # sum_above with K = -3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def reference(task: Task) -> str:
    return task.data["reference"]


async def run_code(client: Client, ep: str, task: Task, code: str, reset: bool = True) -> dict[str, Any]:
    """(Reset ``ep`` to ``task``,) write ``code`` to solution.py, run the tests; return the report."""
    if reset:
        await call(client, ep, "mcp_gym_reset", {"task_id": task.id})
    res = await call(client, ep, "write_file", {"path": env.SOLUTION_FILE, "content": code})
    assert not res.is_error, res.content
    res = await call(client, ep, "run_tests")
    assert not res.is_error, res.content
    return res.structured_content


async def score(client: Client, ep: str, task: Task) -> float:
    return env.verify(task, submitted_answer(task), await state_of(client, ep))


# -- task set ----------------------------------------------------------------------------------------------------
def test_task_set_shape() -> None:
    assert len(TASKS) >= 100 and len({t.id for t in TASKS}) == len(TASKS)
    assert [t.split for t in TASKS] == [split_of(i) for i in range(len(TASKS))]
    assert sum(t.split == "test" for t in TASKS) == 26
    assert [t.to_record() for t in TASKS] == [t.to_record() for t in env.generate_tasks(0)]
    assert len({t.data["family"] for t in TASKS}) == len(env.FAMILIES) == 14
    assert all(len(t.data["tests"]) == env.TESTS_PER_TASK for t in TASKS)
    assert all([s["tool"] for s in t.solution] == ["write_file", "run_tests", "submit"] for t in TASKS)
    other = env.generate_tasks(5)
    assert other[0].id == "code-s5-0000" and other[0].data["tests"] != TASKS[0].data["tests"]
    assert env.task_by_id("code-s5-0009") == other[9] and env.task_by_id(TASKS[9].id) is TASKS[9]


# -- reference, grading rule, random play -----------------------------------------------------------------------
@pytest.mark.slow  # 5-8 s under load: the heavy lane, which CI still runs (the fast lane stays under 5 min)
async def test_reference_solutions_solve_every_task() -> None:
    """All 132 references, run concurrently (the server runs 2 x CPU sandboxes at a time)."""
    scores: dict[str, float] = {}
    async with Client(server.mcp, cache=None) as client:

        async def solve(task: Task) -> None:
            await call(client, task.id, "mcp_gym_reset", {"task_id": task.id})
            for step in task.solution[:-1]:
                res = await call(client, task.id, step["tool"], step["arguments"])
                assert not res.is_error, (task.id, res.content)
            scores[task.id] = await score(client, task.id, task)

        async with anyio.create_task_group() as tg:
            for task in TASKS:
                tg.start_soon(solve, task)
    assert [t.id for t in TASKS if scores[t.id] < env.SUCCESS_THRESHOLD] == []


async def test_only_the_tested_final_code_counts() -> None:
    task = SUM_ABOVE
    async with Client(server.mcp, cache=None) as client:
        await call(client, "g", "mcp_gym_reset", {"task_id": task.id})
        assert await score(client, "g", task) == 0.0  # nothing written or tested
        await call(client, "g", "write_file", {"path": env.SOLUTION_FILE, "content": reference(task)})
        assert await score(client, "g", task) == 0.0  # written, not tested
        report = await run_code(client, "g", task, reference(task), reset=False)
        assert report["passed"] == report["total"] == 10 and report["reward"] == 1.0
        assert await score(client, "g", task) == 1.0
        await call(client, "g", "write_file", {"path": "notes.txt", "content": "edited after testing"})
        assert await score(client, "g", task) == 0.0  # the workspace changed since the last run
        await call(client, "g", "run_tests")
        assert await score(client, "g", task) == 1.0
        partial = await run_code(client, "g", task, "def sum_above(xs):\n    return sum(xs)\n", reset=False)
        assert 0 < partial["passed"] < 10 and "wrong result (returned" in partial["output"]
        assert await score(client, "g", task) == partial["passed"] / 10
        assert env.verify(TASKS[1], "done", await state_of(client, "g")) == 0.0  # a state of another task


def wrong_programs(task: Task, rng: random.Random) -> str:
    """A random plausible-but-naive program for ``task``."""
    entry = task.data["entry"]
    other = rng.choice(TASKS)
    return rng.choice([
        f"def {entry}(*args):\n    return 0\n",
        f"def {entry}(*args):\n    return args[0]\n",
        f"def {entry}(*args):\n    return []\n",
        f"def {entry}(*args):\n    return ''\n",
        f"def {entry}(:\n    pass\n",
        "print('hello')\n",
        reference(other).replace(other.data["entry"], entry),
    ])


async def test_random_play_scores_far_below_reference() -> None:
    rng = random.Random(0)
    tasks = rng.sample(TASKS, 30)
    programs = [wrong_programs(t, rng) for t in tasks]
    scores: list[float] = []
    async with Client(server.mcp, cache=None) as client:

        async def play(i: int) -> None:
            await run_code(client, f"rand-{i}", tasks[i], programs[i])
            scores.append(await score(client, f"rand-{i}", tasks[i]))

        async with anyio.create_task_group() as tg:
            for i in range(len(tasks)):
                tg.start_soon(play, i)
    mean = sum(scores) / len(scores)
    print(f"code random-play mean score: {mean:.3f} (reference: 1.0)")
    assert mean < 0.3


# -- concurrency and transports ---------------------------------------------------------------------------------
@pytest.mark.slow
async def test_stdio_64_concurrent_episodes_one_process() -> None:
    tasks = TASKS[:64]
    reports: dict[int, dict[str, Any]] = {}
    states: dict[int, dict[str, Any]] = {}
    async with Client(stdio_params("code"), cache=None) as client:

        async def play(i: int) -> None:
            ep, task = f"stdio-{i}", tasks[i]
            code = reference(task) if i % 2 == 0 else f"def {task.data['entry']}(*args):\n    return None\n"
            await call(client, ep, "mcp_gym_reset", {"task_id": task.id})
            await call(client, ep, "write_file", {"path": f"notes/{i}.txt", "content": f"episode {i}"})
            reports[i] = await run_code(client, ep, task, code, reset=False)
            states[i] = await state_of(client, ep)

        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(play, i)
    for i, task in enumerate(tasks):
        assert reports[i]["passed"] == (10 if i % 2 == 0 else 0), (i, reports[i])
        assert set(states[i]["files"]) == {env.SOLUTION_FILE, f"notes/{i}.txt"}
        assert states[i]["files"][f"notes/{i}.txt"] == f"episode {i}" and states[i]["task_id"] == task.id
        assert env.verify(task, "done", states[i]) == (1.0 if i % 2 == 0 else 0.0)


async def test_http_smoke() -> None:
    task = TASKS[7]
    async with serve_http("code") as url, Client(url, cache=None) as client:
        await call(client, "h", "mcp_gym_reset", {"task_id": task.id})
        problem = (await client.read_resource("code://problem", meta=episode("h"))).contents[0].text
        assert task.data["entry"] in problem and "Example:" in problem
        assert (await run_code(client, "h", task, reference(task), reset=False))["reward"] == 1.0
        assert await score(client, "h", task) == 1.0
        workspace = (await client.read_resource("code://workspace", meta=episode("h"))).contents[0].text
        assert '"last_run_is_current": true' in workspace and env.SOLUTION_FILE in workspace


# -- tools and annotations --------------------------------------------------------------------------------------
async def test_file_tools() -> None:
    async with Client(server.mcp, cache=None) as client:
        await call(client, "f", "mcp_gym_reset", {"task_id": SUM_ABOVE.id})
        created = await call(client, "f", "write_file", {"path": "./pkg/util.py", "content": "X = 1\n"})
        assert created.structured_content == {"path": "pkg/util.py", "size": 6, "created": True}
        again = await call(client, "f", "write_file", {"path": "pkg/util.py", "content": "X = 2\n"})
        assert again.structured_content["created"] is False
        read = await call(client, "f", "read_file", {"path": "pkg/util.py"})
        assert read.content[0].text == "X = 2\n"
        listed = await call(client, "f", "list_files")
        assert listed.structured_content == {"files": [{"path": "pkg/util.py", "size": 6}]}
        missing = await call(client, "f", "read_file", {"path": "nope.py"})
        assert missing.is_error and "No file 'nope.py'" in missing.content[0].text
        uses_helper = "from pkg.util import X\n\ndef sum_above(xs):\n    return sum(x for x in xs if x > -3) + X - 2\n"
        assert (await run_code(client, "f", SUM_ABOVE, uses_helper, reset=False))["passed"] == 10
        await call(client, "n", "mcp_gym_reset", {"task_id": SUM_ABOVE.id})
        none = await call(client, "n", "run_tests")  # nothing written
        assert none.structured_content["passed"] == 0 and "not found" in none.structured_content["output"]


async def test_annotations() -> None:
    async with Client(server.mcp, cache=None) as client:
        tools = await client.list_tools()
    hints = tool_hints(tools)
    assert hints["read_file"] == hints["list_files"] == hints["run_tests"] == (True, False, True)
    assert hints["write_file"] == (False, True, True)
    assert {t.name for t in tools.tools if t.output_schema} == {"write_file", "list_files", "run_tests"}


# -- sandbox -----------------------------------------------------------------------------------------------------
def sum_above(body: str, prelude: str = "") -> str:
    """A sum_above solution running ``body`` (indented) before returning the right answer."""
    lines = "\n".join("    " + line for line in body.splitlines())
    return f"{prelude}\ndef sum_above(xs):\n{lines}\n    return sum(x for x in xs if x > -3)\n"


@pytest.mark.slow
async def test_infinite_loops_are_stopped_and_server_stays_responsive() -> None:
    stubborn = sum_above("while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n"
                         "        pass")  # swallows the per-test timeout: the CPU limit kills the run
    hangs_on_empty = sum_above("while not xs:\n    pass")  # only test 1 (xs == []) hangs: its timer fires
    results: dict[str, dict[str, Any]] = {}
    async with Client(server.mcp, cache=None) as client:

        async def run(name: str, code: str) -> None:
            results[name] = await run_code(client, name, SUM_ABOVE, code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "stubborn", stubborn)
            tg.start_soon(run, "hangs", hangs_on_empty)
            await anyio.sleep(0.5)
            await call(client, "other", "list_files")
            assert not results, "another episode was served only after the runaway runs ended"
    stopped = results["stubborn"]["output"]  # by its CPU limit, or on a loaded machine by the wall-clock one first
    assert results["stubborn"]["passed"] == 0
    assert "CPU time limit of 5 s exceeded" in stopped or "wall-clock limit of 10 s exceeded" in stopped, stopped
    assert results["hangs"]["passed"] == 9
    assert "test 1: TimeoutError: test took longer than 2 s" in results["hangs"]["output"]


async def test_cpu_limit_stops_a_loop_that_swallows_every_exception() -> None:
    """The CPU limit itself, with a wall-clock limit no loaded machine reaches first."""
    stubborn = sum_above("while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n"
                         "        pass")
    limits = Limits(cpu_seconds=1, wall_seconds=600.0, test_seconds=600.0)
    run = await run_function_tests({"solution.py": stubborn}, "solution", "sum_above", [[[1]]], limits)
    assert run.killed == f"signal {int(signal.SIGXCPU)}" and "CPU time limit of 1 s exceeded" in run.output


async def test_memory_bomb_fails_with_memory_error() -> None:
    """Stopped by the memory limit, not by a clock: the bomb turns its per-test timer off first."""
    bomb = "import signal\nsignal.setitimer(signal.ITIMER_REAL, 0)\nhog = []\nwhile True:\n"
    code = sum_above("", prelude=bomb + "    hog.append(bytearray(10**8))  # 100 MB at a time")
    async with Client(server.mcp, cache=None) as client:
        report = await run_code(client, "mem", SUM_ABOVE, code)
        out = report["output"]
        assert report["passed"] == 0 and "No test could run" in out, out
        assert "MemoryError" in out or "run killed (CPU or memory limit)" in out, out
        assert (await run_code(client, "mem", SUM_ABOVE, reference(SUM_ABOVE)))["passed"] == 10


async def test_network_is_blocked() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # a connection would wait in its backlog
    port = listener.getsockname()[1]
    attempts = {
        "connect": sum_above(f"socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'x')",
                             "import socket"),
        "raw_socket": sum_above("import _socket\n_socket.socket()"),
        "urllib": sum_above(f"urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=1)", "import urllib.request"),
    }
    async with Client(server.mcp, cache=None) as client:
        for name, code in attempts.items():
            report = await run_code(client, f"net-{name}", SUM_ABOVE, code)
            assert report["passed"] == 0 and "PermissionError: sandbox: " in report["output"], report
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected
    listener.close()


async def test_path_traversal_is_refused_and_outside_files_unchanged(tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("original")
    async with Client(server.mcp, cache=None) as client:
        await call(client, "trav", "mcp_gym_reset", {"task_id": SUM_ABOVE.id})
        for path in ["../solution.py", "/tmp/x.py", "a/../../x.py", str(sentinel), "..\\x.py", "", ".hidden",
                     "a/b/c/d/e.py", f"{'../' * 12}{str(sentinel).lstrip('/')}"]:
            res = await call(client, "trav", "write_file", {"path": path, "content": "pwned"})
            assert res.is_error and "Refused" in res.content[0].text, path
        assert (await state_of(client, "trav"))["files"] == {}
        escapes = sum_above(f"open({str(sentinel)!r}, 'w').write('pwned')")
        report = await run_code(client, "trav", SUM_ABOVE, escapes, reset=False)
        assert report["passed"] == 0 and "writing outside the working directory" in report["output"]
        remove = sum_above(f"import os\nos.remove({str(sentinel)!r})")
        report = await run_code(client, "trav", SUM_ABOVE, remove, reset=False)
        assert report["passed"] == 0 and "os.remove outside the working directory" in report["output"]
        source = sum_above(f"open({env.__file__!r}).read()")  # the task generator, with the hidden tests
        report = await run_code(client, "trav", SUM_ABOVE, source, reset=False)
        assert report["passed"] == 0 and "reading outside the working directory" in report["output"]
        inside = sum_above("open('scratch.txt', 'w').write('ok')\nassert open('scratch.txt').read() == 'ok'")
        assert (await run_code(client, "trav", SUM_ABOVE, inside, reset=False))["passed"] == 10
    assert sentinel.read_text() == "original"


async def test_processes_are_blocked() -> None:
    attempts = {
        "fork_bomb": (sum_above("import os\nwhile True:\n    os.fork()"), "os.fork is not allowed"),
        "subprocess": (sum_above("import subprocess\nsubprocess.run(['true'])"), "_posixsubprocess"),
        "system": (sum_above("import os\nos.system('true')"), "os.system is not allowed"),
        "signal_parent": (sum_above("import os\nos.kill(os.getppid(), 0)"), "os.kill is not allowed"),
        "raise_limits": (sum_above("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (-1, -1))"),
                         "resource.setrlimit is not allowed"),
    }
    async with Client(server.mcp, cache=None) as client:
        for name, (code, message) in attempts.items():
            report = await run_code(client, f"proc-{name}", SUM_ABOVE, code)
            assert report["passed"] == 0 and message in report["output"], (name, report)


async def test_huge_output_is_capped() -> None:
    code = sum_above("while True:\n    print('spam' * 1000)")
    async with Client(server.mcp, cache=None) as client:
        report = await run_code(client, "spam", SUM_ABOVE, code)
    assert report["passed"] == 0 and f"more than {Limits().output_bytes} bytes of output" in report["output"]
    assert len(report["output"]) < 2 * LIMITS.keep_output_chars + 2000
