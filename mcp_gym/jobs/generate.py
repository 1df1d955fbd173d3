"""``mcp-gym tasks generate``: tasks for any MCP server, proposed by a generator and kept only if running them says so.

Every proposal (:class:`~mcp_gym.jobs.proposers.Proposal`) is run in fresh episodes under the env's ``reset_mode``, as
``tasks validate``, ``eval`` and ``collect`` run the tasks (a fresh workspace and server process when a server command
line names ``{workspace}``, a fresh process with ``reset_mode=restart``) before it is kept:

1. its reference solution runs without a tool error (else ``solution failed``);
2. the check comes from the real results: an answer task's answer is the value its solution's call returned at the
   named place; a state task's check is the first named read (a read-only tool call, a resource, the workspace's
   files) whose value after the solution differs from before it, reduced to the part that is the same in a second
   fresh run (else ``check not derivable``, or ``flaky`` when two runs disagree);
3. the task, as written to the file, passes with its solution (as ``mcp-gym tasks validate`` runs it) and fails with no
   action (``policy=noop``: else ``passes with no action``);
4. it is not a near-duplicate of a kept task (same calls and check, or same tools, check and answer);
5. on a server without ``{workspace}``: its answer still holds after the kept solutions ran again (else ``flaky``).

Kept tasks go to ``OUT/tasks.jsonl`` (splits ``train``/``validation``/``test`` by a seeded hash of the solution, so
tasks sharing a solution share a split); every proposal and its verdict to ``OUT/proposals.jsonl``. A rerun extends
the file: proposals already judged are skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from mcp_gym._reroot import mentions_workspace
from mcp_gym.jobs._checks import answered, expectation, narrow, same_calls
from mcp_gym.jobs._untrusted import too_deep
from mcp_gym.jobs.config import env_factory, server_specs, to_dict
from mcp_gym.jobs.identity import JobRefused
from mcp_gym.jobs.proposers import (
    ExploreProposer,
    Proposal,
    beside_clock,
    clocklike,
    extract,
    reports_failure,
    result_value,
    servers_started,
    steady,
)
from mcp_gym.tasks import Task, load_tasks, save_tasks

__all__ = ["GenerateResult", "generate_tasks"]

DROP_REASONS = ("malformed", "solution failed", "passes with no action", "flaky", "duplicate",
                "check not derivable", "claim not confirmed")
"""Why a proposal is dropped (the summary table's rows)."""
_MAX_FILE_BYTES = 100_000


@dataclass
class GenerateResult:
    """What a generation did: the tasks file, the tasks kept now and before, and the verdict counts of this run."""

    out: Path
    kept: list[Task]
    already: int
    counts: Counter[str] = field(default_factory=Counter)
    drops: list[dict[str, Any]] = field(default_factory=list)


class _Drop(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


# -- running calls in fresh episodes -----------------------------------------------------------------------------------
class _Session:
    """One fresh episode: calls played one at a time."""

    def __init__(self, runner: _Runner, task: Task) -> None:
        self.env = runner.env
        self.runner = runner
        obs, info = self.env.reset(seed=0, options={"task": task})
        servers_started(info)

    def step(self, call: Mapping[str, Any]) -> tuple[bool, Any]:
        obs, _, terminated, truncated, info = self.env.step({"tool": call["tool"],
                                                             "arguments": dict(call["arguments"])})
        ok = not info.get("error") and not info.get("is_error") and not (terminated or truncated)
        self.runner.last_error = None if ok else str((info.get("error") or {}).get("message") or obs["result"])[:300]
        text = str(obs.get("result", ""))
        if ok and self.runner.error_text is not None and self.runner.error_text.search(text):
            ok = False  # a failure reported as an ordinary result (isError false), as mcp-server-sqlite does
            self.runner.last_error = f"the result reads as an error (generator.error_text): {text}"[:300]
        value = result_value(info.get("structured_content"), text)
        if ok and self.runner.error_text is not None and (why := reports_failure(value)) is not None:
            ok = False  # the same in JSON: {"success": false, "error": ...} (mcp-server-motherduck)
            self.runner.last_error = f"the result reports a failure ({why}; generator.error_text: null trusts " \
                                     f"isError alone): {text}"[:300]
        self.runner.calls += 1
        if not ok:
            self.runner.failed += 1
            self.runner.first_error = self.runner.first_error or f"{call['tool']}: {self.runner.last_error}"
        return ok, value

    def read(self, read: Any) -> Any:
        """A state read as the ``mcp``/``files`` graders see it (``{workspace}`` masked), or ``None`` if it fails."""
        from mcp_gym._workspace import expand_workspace, mask_workspace
        from mcp_gym.graders.session import SessionAccess

        env = self.env
        if read == "files":
            return _files(env.workspace) if env.workspace is not None else None
        access = SessionAccess(env.host, env.call_timeout)
        try:
            if "resource" in read:
                value = env.runtime.call(access.read, read.get("server"), str(read["resource"]))
            else:
                entry = env.host.resolve(read["tool"])
                if entry is None:
                    return None
                args = expand_workspace({"tool": "x", "arguments": dict(read.get("arguments") or {})},
                                        env.workspace)["arguments"]
                value = env.runtime.call(access.call, entry.server, entry.server_tool, args)
        except Exception:  # noqa: BLE001 - a read that fails is no check
            return None
        if too_deep(value):
            return None  # too deep to compare: no check
        if isinstance(read, dict) and "tool" in read:
            from mcp_gym.graders.state import wrapped_json

            inner = wrapped_json(value)  # {"result": TEXT}: the JSON in TEXT, as the check will read it (unwrap_json)
            if too_deep(inner):
                return None
            self.runner.unwrapped[json.dumps(read, sort_keys=True, default=str)] = inner is not value
            value = inner
        return mask_workspace(value, env.workspace)

    def close(self) -> None:
        pass


def _files(root: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            p = Path(dirpath, name)
            st = p.lstat()  # a symlink, a named pipe the server made (its read waited without end), a device: no check
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_FILE_BYTES:
                continue
            try:
                out[p.relative_to(root).as_posix()] = p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
    return out


class _Runner:
    """Plays calls in fresh episodes of one env (the tasks' own workspace and fixture)."""

    def __init__(self, env: Any, fixture: str | None, error_text: re.Pattern[str] | None = None) -> None:
        self.env = env
        self.fixture = fixture
        self.error_text = error_text  # a result text it matches is a failed call, whatever its isError
        self.last_error: str | None = None
        self.episodes = 0
        self.calls = self.failed = 0  # calls played, and those that failed (an error result or a refused call)
        self.first_error: str | None = None  # the first failed call: "tool: message"
        self.gave_up = 0  # the walks made before giving up because every call failed (0: did not give up)
        self.unwrapped: dict[str, bool] = {}  # a read (as JSON) -> whether its last value unwrapped {"result": TEXT}

    def task(self, prompt: str = "explore") -> Task:
        return Task(id="proposal", prompt=prompt, fixture=self.fixture)

    def session(self) -> _Session:
        self.episodes += 1
        return _Session(self, self.task())

    def __call__(self, calls: Sequence[Mapping[str, Any]]) -> list[tuple[bool, Any]]:
        s = self.session()
        return [s.step(c) for c in calls]


# -- the checks --------------------------------------------------------------------------------------------------------
_PLACES = re.compile(r"\b(?:step|line)s? \d+\b|\[\d+\]", re.IGNORECASE)
"""The prompt's own numbers: the steps and lines it names (``Step 1: call``, ``line 2``) and list indexes of paths."""


def given_in(answer: str, prompt: str) -> bool:
    """Whether ``answer`` stands in ``prompt`` as a whole word or value (not inside a longer one: ``memo`` is not in
    ``memory``), leaving out the prompt's own step and line numbers (``Step 1`` gives no answer ``1``)."""
    pattern = rf"(?<![\w.]){re.escape(answer.strip())}(?![\w]|\.\w)"
    return re.search(pattern, _PLACES.sub(" ", prompt), re.IGNORECASE) is not None


class _Checker:
    """Runs proposals and decides: a kept :class:`Task`, or a :class:`_Drop` with its reason."""

    def __init__(self, runner: _Runner, prefix: str, seed: int, splits: Mapping[str, float],
                 fixture_rel: str | None) -> None:
        self.runner = runner
        self.env = runner.env
        self.prefix = prefix
        self.seed = seed
        self.splits = dict(splits)
        self.fixture_rel = fixture_rel
        self.seen: set[str] = set()
        self.near: set[str] = set()
        self.prompts: set[str] = set()

    def signature(self, p: Proposal) -> str:
        return hashlib.sha1(json.dumps([p.solution, p.check], sort_keys=True, default=str).encode()).hexdigest()

    def check(self, p: Proposal) -> Task:
        if p.malformed:
            raise _Drop(p.reason if p.reason in DROP_REASONS else "malformed", p.malformed)
        names = set(self.env.action_space.tool_names) - {"submit"}
        unknown = sorted({c["tool"] for c in p.solution} - names)
        if unknown:
            raise _Drop("malformed", f"unknown tool(s) {unknown}")
        for c in p.solution:
            problem = self.env.action_space.validation_error({"tool": c["tool"], "arguments": c["arguments"]})
            if problem is not None:
                raise _Drop("malformed", f"{c['tool']}: {problem.message}"[:300])
        sig = self.signature(p)
        if sig in self.seen:
            raise _Drop("duplicate", "the same calls and check as an earlier proposal")
        self.seen.add(sig)
        if p.prompt in self.prompts:  # what the agent is shown: two such tasks are one task to it
            raise _Drop("duplicate", "the same prompt as a kept task (checked by another read)")
        grader, answer, kind = self._derive(p)
        task = Task(id="", prompt=p.prompt, solution=tuple(p.solution), answer=answer, grader=grader,
                    fixture=self.runner.fixture, tags=())
        near = json.dumps([[c["tool"] for c in p.solution], grader, answer], sort_keys=True, default=str)
        if near in self.near:
            raise _Drop("duplicate", "same tools, check and answer as a kept task")
        same = same_calls(p.solution, grader, answer)
        if same in self.near:
            raise _Drop("duplicate", "the same calls (a repeated call aside), check and answer as a kept task")
        asked = answered(p, answer)
        if asked is not None and asked in self.near:
            raise _Drop("duplicate", "the same call, place and answer as a kept task: its other calls do not change "
                                     "the answer")
        from mcp_gym.jobs.validate import check_task

        tid = f"{self.prefix}-{hashlib.sha1(near.encode()).hexdigest()[:10]}"
        task = replace(task, id=tid)
        self.env.tasks.append(task)
        try:
            result = check_task(self.env, task)
            self.runner.episodes += 1
            if result.status != "passed":
                if result.failed_call:
                    raise _Drop("solution failed", result.reason[:300])
                raise _Drop("flaky", f"the task fails in a fresh run: {result.reason}"[:300])
            if self._noop(task):
                raise _Drop("passes with no action", "the check passes before any call")
        finally:
            self.env.tasks.remove(task)
        self.near |= {near, same} | ({asked} if asked is not None else set())
        self.prompts.add(p.prompt)
        n = len(p.solution)
        level = "easy" if n == 1 else "medium" if n <= 3 else "hard"
        tags = (*p.tags, f"kind:{kind}", f"calls:{n}", f"difficulty:{level}", f"generator:{p.source}")
        key = json.dumps(p.solution, sort_keys=True)
        return replace(task, split=self._split(key), tags=tags, fixture=self.fixture_rel)

    def _split(self, key: str) -> str:
        """The split of a solution: a seeded hash, so tasks with the same solution share a split (any order, any
        rerun)."""
        u = (zlib.crc32(f"{self.seed}:{key}".encode()) & 0xFFFFFFFF) / 2**32
        acc = 0.0
        total = sum(self.splits.values()) or 1.0
        for name, share in self.splits.items():
            acc += share / total
            if u < acc:
                return name
        return list(self.splits)[-1]

    def _noop(self, task: Task) -> bool:
        env = self.env
        env.reset(seed=0, options={"task_id": task.id})
        self.runner.episodes += 1
        _, _, _, _, info = env.step({"tool": "submit", "arguments": {"answer": ""}})
        grade = info.get("grade")
        return bool(grade and grade.get("passed"))

    def _play(self, s: Any, p: Proposal) -> list[Any]:
        values = []
        for n, c in enumerate(p.solution, 1):
            ok, value = s.step(c)
            if not ok:
                raise _Drop("solution failed", f"call {n} {c['tool']}: {self.runner.last_error}")
            values.append(value)
        return values

    def _derive(self, p: Proposal) -> tuple[Any, Any, str]:
        """Run the solution in fresh episodes; the grader spec and answer the real results give."""
        if "answer" in p.check:
            spec = p.check["answer"]
            k, path = spec["step"], spec["path"]
            if not 1 <= k <= len(p.solution):
                raise _Drop("malformed", f"answer step {k} is not a call of the solution")
            values = self._play(self.runner.session(), p)
            answer = extract(values[k - 1], path)
            if answer is None:
                raise _Drop("check not derivable", f"no value at {path} in what call {k} returned")
            if clocklike(answer):
                raise _Drop("check not derivable", f"the answer {answer!r} is a date or time: it changes with the "
                                                   "clock")
            if beside_clock(values[k - 1], path):
                raise _Drop("check not derivable", f"the answer {answer!r} at {path} is in an object that holds a "
                                                   "date or time: it changes with the clock")
            if given_in(answer, p.prompt) or answer.casefold() in ("", "null"):
                raise _Drop("check not derivable", f"the answer {answer!r} is given in the prompt")
            again = extract(self._play(self.runner.session(), p)[k - 1], path)
            if again != answer:
                raise _Drop("flaky", f"two fresh runs return {answer!r} and {again!r} at {path}"[:300])
            return dict(kind="exact"), answer, "answer"
        reads = [r for r in p.check["state"] if r == "files" or isinstance(r, dict)]
        if not reads:
            raise _Drop("malformed", "state check names no read")
        if "files" in reads and self.env.workspace_servers == frozenset():
            reads.remove("files")
        s = self.runner.session()
        before = [s.read(r) for r in reads]
        self._play(s, p)
        after = [s.read(r) for r in reads]
        found = [(r, e) for r, b, a in zip(reads, before, after, strict=True) if (e := expectation(r, b, a))]
        if not found:
            if any(b is not None and steady(b) == steady(a) for b, a in zip(before, after, strict=True)):
                raise _Drop("passes with no action", "the reads return the same before and after the solution")
            raise _Drop("check not derivable", "no read's value changes with the solution")
        s2 = self.runner.session()
        self._play(s2, p)
        for read, exp in found:
            narrowed = narrow(exp, s2.read(read))
            if narrowed is not None:
                return self._grader(read, narrowed), None, "state"
        raise _Drop("flaky", "what the solution changes differs between two fresh runs")

    def _grader(self, read: Any, exp: dict[str, Any]) -> dict[str, Any]:
        if read == "files":
            return dict(kind="files", **exp)
        spec: dict[str, Any] = dict(kind="mcp")
        if "resource" in read:
            spec["resource"] = read["resource"]
            server = read.get("server")
        else:
            entry = self.env.host.resolve(read["tool"])
            spec.update(tool=entry.server_tool, arguments=dict(read.get("arguments") or {}))
            server = entry.server
            if self.runner.unwrapped.get(json.dumps(read, sort_keys=True, default=str)):
                spec["unwrap_json"] = True  # compared with the JSON in the text, not the text (absent: the text)
        if len(self.env.host.connections) > 1 and server:
            spec["server"] = server
        return {**spec, **exp}


# -- the job -----------------------------------------------------------------------------------------------------------
def _proposals(cfg: DictConfig, runner: _Runner, checker: _Checker, kept: list[Task],
               max_walks: int, bar: Any = None) -> Iterator[Proposal]:
    gen = to_dict(cfg.generator)
    kind = gen.pop("kind", "explore")
    gen.pop("error_text", None)  # the runner's (_error_text), not the proposer's
    if kind == "explore":
        walks_seed = gen.pop("seed", None)  # the walks' own seed; the splits stay on the job's `seed`
        explorer = ExploreProposer(seed=int(cfg.seed if walks_seed is None else walks_seed), **gen)
        w = 0
        while w < max_walks:  # bounded: walks whose results never agree between two runs propose nothing
            walk = explorer.walk(runner, runner.env, w)
            yield from explorer.proposals(walk, w)
            w += 1
            if bar is not None:  # a run that keeps nothing for long says why as it goes: its calls fail
                bar.set_postfix_str(f"walk {w}/{max_walks}, calls failed {runner.failed}/{runner.calls}")
            if explorer.max_failed_walks and w >= explorer.max_failed_walks and runner.failed == runner.calls > 0:
                runner.gave_up = w  # every call of every walk failed: more walks of the same draws would too
                return
    elif kind == "llm":
        from mcp_gym.jobs.proposers import LLMProposer

        llm = LLMProposer(**gen)
        try:
            yield from llm.proposals(runner.env, kept, seed=int(cfg.seed))
        finally:
            runner.env.runtime.call(llm.aclose)
    else:
        raise ValueError(f"generator.kind must be explore or llm, not {kind!r}")


def generate_tasks(cfg: DictConfig, out: str | Path, *, show: bool = True) -> GenerateResult:
    """Propose tasks with ``cfg.generator``, keep those the checks pass, write ``out/tasks.jsonl``.

    Raises:
        JobFailed: No task was kept (and fewer than ``n`` were there before): the message says why in one line (every
            call failed, and the keys to set; or the drops by reason). With ``generator=explore`` the walks stop
            after ``generator.max_failed_walks`` walks when every call so far failed.
    """
    out = Path(out)
    n = int(cfg.n)
    dry = bool(cfg.get("dry_run"))
    env_cfg = to_dict(cfg.env)
    if not env_cfg.get("servers"):
        raise ValueError("tasks generate needs a custom env with servers (env=custom '+env.servers.NAME=\"cmd\"')")
    if env_cfg.get("task_ids") is not None or env_cfg.get("max_tasks") is not None:  # not silently ignored
        raise JobRefused("tasks generate proposes new tasks; env.task_ids and env.max_tasks slice the task set of "
                         "the jobs that play one (n= is how many tasks to keep)")
    path = out / "tasks.jsonl"
    ledger = out / "proposals.jsonl"
    if not dry:
        _refuse_planted(out)
    existing = load_tasks(path) if path.exists() and not dry else []
    # written back as they were: load_tasks resolves a fixture to its path (inside out, checked), which the file
    # must not hold (a task file's fixture is relative: the next rerun, or eval, refused the absolute one)
    existing = [replace(t, fixture=os.path.relpath(t.fixture, out.resolve())) if t.fixture else t for t in existing]
    judged: set[str] = set()
    if ledger.exists() and not dry:
        with ledger.open(encoding="utf-8") as f:
            judged = {json.loads(line)["signature"] for line in f if line.strip()}
    fixture_rel = fixture_abs = None
    if cfg.get("fixture"):
        src = Path(str(cfg.fixture)).expanduser()
        if not src.is_dir():
            raise FileNotFoundError(f"tasks generate: fixture {src} is not a directory")
        _refuse_fixture_without_workspace(env_cfg, str(cfg.fixture))
        fixture_rel = "fixture"
        fixture_abs = str((out / fixture_rel).resolve()) if not dry else str(src.resolve())
        if not dry and not (out / fixture_rel).exists():
            shutil.copytree(src, out / fixture_rel, symlinks=True)
        if not dry:  # the copy (or a rerun's) is every episode's workspace: checked as a task file's fixture
            _refuse_planted(out, fixture_rel)
    # Proposals are judged under the env's reset_mode, as tasks validate, eval and collect run the tasks (default auto:
    # a server without {workspace} keeps its process from one run to the next unless env.reset_mode=restart), so a
    # value that depends on earlier episodes (npm server-sequential-thinking's thoughtHistoryLength) makes no answer.
    env_cfg.setdefault("reset_mode", "auto")
    env = env_factory(env_cfg, [])()
    runner = _Runner(env, fixture_abs, _runner_error_text(cfg))
    checker = _Checker(runner, str(env_cfg.get("name") or "task"), int(cfg.seed), to_dict(cfg.splits), fixture_rel)
    for t in existing:
        checker.near |= {json.dumps([[c["tool"] for c in t.solution], t.grader, t.answer], sort_keys=True,
                                    default=str), same_calls(t.solution, t.grader, t.answer)}
        checker.prompts.add(t.prompt)
    checker.seen |= judged
    want = min(n, 3) if dry else n
    cap = int(cfg.get("max_proposals") or 30 * max(n, 1))
    result = GenerateResult(path, [], len(existing))
    bar = tqdm(total=want, desc="tasks generate", unit="task", disable=not show, dynamic_ncols=True,
               initial=0 if dry else min(len(existing), want))
    records: list[dict[str, Any]] = []
    props: dict[str, Proposal] = {}  # the proposal of each task kept in this run
    try:
        if len(existing) < want or dry:
            have = 0 if dry else len(existing)
            shown = list(existing)  # what the llm proposer is shown: grows as tasks are kept
            for count, p in enumerate(_proposals(cfg, runner, checker, shown, cap, bar)):
                if have >= want or count >= cap:
                    break
                sig = checker.signature(p)
                if sig in judged:
                    continue
                rec: dict[str, Any] = {"signature": sig, "source": p.source, "prompt": p.prompt,
                                       "solution": p.solution, "check": p.check}
                try:
                    task = checker.check(p)
                except _Drop as d:
                    result.counts[d.reason] += 1
                    rec.update(verdict=d.reason, detail=d.detail)
                    result.drops.append({"reason": d.reason, "detail": d.detail, "prompt": p.prompt[:200]})
                else:
                    result.counts["kept"] += 1
                    result.kept.append(task)
                    props[task.id] = p
                    shown.append(task)
                    have += 1
                    bar.update(1)
                    rec.update(verdict="kept", task_id=task.id)
                records.append(rec)
        if result.kept and len(env.workspace_servers) < len(env.host.connections):
            _recheck_answers(checker, result, props, records, existing)
        samples = int(cfg.get("samples") or 0)
        if samples > 0 and result.kept:
            result.kept = _measure(cfg, env, result.kept, samples, fixture_abs)
    finally:
        bar.close()
        env.close()
        if not dry:
            out.mkdir(parents=True, exist_ok=True)
            save_tasks([*existing, *result.kept], path)
            fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with open(fd, "a", encoding="utf-8") as f:  # never through a symlink planted since the start
                for rec in records:
                    f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
    if show:
        _print(result, dry, runner)
    if not result.kept and (dry or len(existing) < want):
        from mcp_gym.jobs.results import JobFailed

        raise JobFailed(_why_none(result, runner, dry))
    return result


def _recheck_answers(checker: _Checker, result: GenerateResult, props: Mapping[str, Proposal],
                     records: list[dict[str, Any]], existing: Sequence[Task] = ()) -> None:
    """A server without ``{workspace}`` keeps its state from one episode to the next (a database on a fixed path, a
    process's memory): an answer read from that state holds only until another task's solution changes it, and the
    oracle, which submits the stored answer, would never show it. Play every task's solution once more (those of the
    file's earlier tasks too: an eval plays them all), then each new answer task's: one whose answer moved is dropped
    (*flaky*), as an eval in another order would fail it."""
    earlier = [Proposal(t.prompt, [dict(c) for c in t.solution], {}, "earlier") for t in existing if t.solution]
    for p in [*earlier, *(props[task.id] for task in result.kept)]:
        with contextlib.suppress(_Drop):  # a solution that fails when played again changes no more than it did
            checker._play(checker.runner.session(), p)
    for task in list(result.kept):
        p = props[task.id]
        if "answer" not in p.check:
            continue
        k, path = p.check["answer"]["step"], p.check["answer"]["path"]
        try:
            again = extract(checker._play(checker.runner.session(), p)[k - 1], path)
        except _Drop:
            again = None
        if again == task.answer:
            continue
        detail = (f"its answer {task.answer!r} at {path} became {again!r} after the kept tasks' solutions ran again: "
                  "the server keeps state between runs (give it a {workspace})")[:300]
        result.kept.remove(task)
        result.counts["kept"] -= 1
        result.counts["flaky"] += 1
        result.drops.append({"reason": "flaky", "detail": detail, "prompt": p.prompt[:200]})
        for rec in records:
            if rec.get("task_id") == task.id:
                rec.update(verdict="flaky", detail=detail)
                del rec["task_id"]


def _refuse_planted(out: Path, fixture: str | None = None) -> None:
    """A rerun reads and extends ``out/tasks.jsonl`` and ``out/proposals.jsonl`` and copies ``out/fixture`` into
    every episode's workspace; ``out`` may be a folder handed over (someone's generated task set to extend), holding a
    symlink at those names (``proposals.jsonl`` -> ``~/.bashrc`` was appended to, ``fixture`` -> ``~/.ssh`` copied
    into the workspaces, its files listed and read into answers), a hard link, a named pipe or a device. Each is
    refused in one line naming it; a ``fixture`` folder is checked as a task file's (no symlink out of it, no pipe,
    device or outside hard link)."""
    from mcp_gym.jobs._untrusted import UntrustedInput, check_tree
    from mcp_gym.tasks import _not_regular

    fix = " (a rerun extends only what tasks generate wrote there: use a new out=, or copy the files in with cp)"
    if fixture is not None:
        try:
            check_tree(out, out / fixture, what="fixture")
        except UntrustedInput as e:
            raise JobRefused(f"{e}: refusing to copy it into the workspaces{fix}") from None
        return
    for name in ("tasks.jsonl", "proposals.jsonl", "fixture"):
        try:
            st = (out / name).lstat()
        except FileNotFoundError:
            continue
        folder = name == "fixture"
        why = ("is a symlink" if stat.S_ISLNK(st.st_mode) else
               None if folder and stat.S_ISDIR(st.st_mode) else
               "is not a folder" if folder else
               f"is a {_not_regular(st.st_mode) or 'folder'}, not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"is a hard link ({st.st_nlink} names)" if st.st_nlink > 1 else None)
        if why is not None:
            what = "copy it into the workspaces" if folder else "read or extend it"
            raise JobRefused(f"{out / name} {why}: refusing to {what}{fix}")


def _refuse_fixture_without_workspace(env_cfg: Mapping[str, Any], fixture: str) -> None:
    """A ``fixture`` is copied into each episode's workspace, which only a server started on ``{workspace}`` sees:
    without one, every proposal would fail at its first reset (a traceback naming the internal task 'proposal')."""
    if not any(mentions_workspace(spec) for spec in server_specs(env_cfg).values()):
        names = ", ".join(sorted(str(a) for a in env_cfg["servers"]))
        raise JobRefused(f"fixture={fixture} is copied into each episode's workspace, but no server command line names "
                         f"{{workspace}} (servers: {names}): start the server on it (an argument, an env variable, or "
                         f"cwd: \"{{workspace}}\"), or leave out fixture=")


def _error_text(pattern: Any, key: str = "generator.error_text") -> re.Pattern[str] | None:
    """``key`` compiled by :func:`~mcp_gym.options.compile_error_text` (case-insensitive; ``None``/empty: off), or a
    one-line ``ConfigError`` naming ``key``."""
    from mcp_gym.jobs.schema import ConfigError
    from mcp_gym.options import compile_error_text

    try:
        return compile_error_text(pattern, key)
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def _runner_error_text(cfg: DictConfig) -> re.Pattern[str] | None:
    """What the runner reads as a failed call: ``env.error_text`` when the user sets it (the env flags those results
    itself, and eval, collect and tasks validate do alike), else ``generator.error_text`` (on by default)."""
    env_text = cfg.env.get("error_text")
    if env_text is not None and env_text != "":
        return _error_text(env_text, "env.error_text")
    return _error_text(cfg.generator.get("error_text"))


def _why_none(result: GenerateResult, runner: _Runner, dry: bool) -> str:
    """Why a run kept no task, in one line, with the keys to set."""
    judged = sum(result.counts.values())
    first = " ".join(str(runner.first_error).split())
    keys = "give the arguments the server accepts with generator.fixed or generator.values"
    if not judged and runner.calls and runner.failed == runner.calls:  # nothing to judge: every call fails
        walks = "walk" if runner.gave_up == 1 else f"{runner.gave_up} walks"
        failed = (f"all {runner.calls} calls of the first {walks} failed, so the walks stopped "
                  f"(generator.max_failed_walks; first: {first})" if runner.gave_up else
                  f"all {runner.calls} calls failed (first: {first})")
        return f"no proposal: {failed}; {keys}"
    if not judged and runner.calls:
        failed = f"; {runner.failed} of {runner.calls} calls failed (first: {first}): {keys}" if runner.failed else ""
        env = runner.env
        shared = env.reset_mode in ("auto", "none") and len(env.workspace_servers) < len(env.host.connections)
        restart = (" (a server without {workspace} keeps its process from one run to the next: env.reset_mode=restart "
                   "gives each a new one, and tasks validate, eval and collect need the same setting)")
        restart = restart if shared else ""
        return ("no proposal: no result made a task (a value that differs between two fresh runs, or a date or time, "
                f"makes none){restart}{failed}")
    if not judged:
        return "no proposal: the generator proposed nothing"
    drops = ", ".join(f"{reason} {result.counts[reason]}" for reason in DROP_REASONS if result.counts[reason])
    where = "" if dry else f"; {result.out.parent / 'proposals.jsonl'} gives each proposal's reason"
    return f"no task kept: {judged} proposals dropped ({drops}){where}"


def _measure(cfg: DictConfig, env: Any, tasks: list[Task], samples: int, fixture_abs: str | None) -> list[Task]:
    """Each task's pass rate over ``samples`` episodes of ``cfg.policy`` (a ``pass_rate:X`` tag)."""
    from mcp_gym.jobs.config import build_policy, episode_seed

    policy = build_policy(to_dict(cfg.policy))
    out = []
    try:
        for t in tasks:
            run = replace(t, fixture=fixture_abs)
            env.tasks.append(run)
            passed = 0
            for k in range(samples):
                passed += bool(env.runtime.call(_episode, env, policy, run.id, episode_seed(int(cfg.seed),
                                                                                             f"{t.id}#{k}")))
            env.tasks.remove(run)
            out.append(replace(t, tags=(*t.tags, f"pass_rate:{passed / samples:.2f}")))
    finally:
        env.runtime.call(policy.aclose)
    return out


async def _episode(env: Any, policy: Any, task_id: str, seed: int) -> bool:
    obs, info = await env.areset(seed=seed, options={"task_id": task_id})
    agent = policy.agent(env, obs, info, seed)
    for _ in range(env.max_steps + 1):
        action = await agent.act(obs, info)
        action = {k: v for k, v in action.items() if k in ("tool", "arguments")}
        obs, _, terminated, truncated, info = await env.astep(action)
        if terminated or truncated:
            return bool(info.get("success"))
    return False


def _print(result: GenerateResult, dry: bool, runner: _Runner) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if dry:
        for t in result.kept[:3]:
            console.print_json(data=t.to_record(), default=str, ensure_ascii=True)  # model text: no raw escapes
    table = Table(title="Proposals", title_justify="left")
    table.add_column("verdict")
    table.add_column("proposals", justify="right")
    table.add_row("kept", str(result.counts["kept"]))
    for reason in DROP_REASONS:
        table.add_row(f"dropped: {reason}", str(result.counts[reason]))
    console.print(table)
    splits = Counter(t.split for t in result.kept)
    where = "(dry run: nothing written)" if dry else str(result.out)
    console.print(f"{len(result.kept)} new tasks ({', '.join(f'{k} {v}' for k, v in sorted(splits.items()))}), "
                  f"{result.already} before; {runner.episodes} fresh episodes run; {where}")
