"""A Ctrl-C that C code drops still ends the job (exit status 130).

Python runs a signal handler in whatever Python code runs next; called back from C that does not pass errors on
(pydantic-core building a validator, a ``gc`` callback, a ``__del__``), the ``KeyboardInterrupt`` is dropped with an
"Exception ignored in ..." line. A fresh-clone run of the README's test command saw a job Ctrl-C'd while pydantic-core
built a schema validator run all its 400 episodes and exit 0. Here a trusted async grader drops a
``KeyboardInterrupt`` the same way (a ``__del__``, the deterministic form of that drop) in a real ``eval`` run in its
own process: the job must end 130, not 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GRADER = '''
class _Dropped:
    def __del__(self):
        raise KeyboardInterrupt  # dropped: "Exception ignored in: <function _Dropped.__del__ ...>"


async def drop(ctx):
    _Dropped()
    return {"passed": True, "reason": "graded"}
'''


def test_a_ctrl_c_that_c_code_drops_still_ends_the_job_130(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "dropper.py").write_text(GRADER)
    tasks = bench / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "Say hi", "answer": "hi", "grader": "dropper:drop"})
                             + "\n" for i in range(3)))
    server = f'+env.servers.c="{sys.executable} -m mcp_gym.servers.counter"'
    done = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "eval", "env=custom", server, f"env.tasks={tasks}",
                           "env.trust_task_code=true", "policy=oracle", "samples=1", f"out={tmp_path / 'out'}",
                           "launcher.progress=false", "plots=false"],
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert "Exception ignored" in done.stderr and "KeyboardInterrupt" in done.stderr, done.stderr[-2000:]
    assert done.returncode == 130, (done.returncode, done.stderr[-2000:])
    assert "rerun the same command to resume" in done.stderr
