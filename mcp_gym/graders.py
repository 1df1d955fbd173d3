"""Graders: how an episode on any MCP server is scored, from a spec in the config or in the task.

A grader turns the end of an episode into a :class:`Grade` (score 0..1, passed, reason, per-grader breakdown). The env
runs one when an episode ends (``submit``, a server's ``done``, or truncation): ``info["grade"]`` holds the grade (the
recorder writes it into the final step's ``info`` column), ``info["success"]`` its ``passed``, and the ``submit``
step's reward its score.

Specs (``env.grader`` in a job config, ``grader=`` of :class:`~mcp_gym.env.MCPEnv`, or a task's own ``grader`` field,
which wins) are a kind name, a ``module:function`` import path, a dict with ``kind`` and options, or a list (all of
them). Without any spec a task with an ``answer`` is graded by normalised exact match.

Answer matchers (on the submitted answer and the task's ``answer``):

* ``exact``: equal after normalisation (Unicode NFKC, case-folded, whitespace collapsed, surrounding quotes and a
  trailing period dropped); a list ``answer`` accepts any of its items.
* ``numeric``: the answer (or the last number in it) within ``abs_tol`` (default 1e-6) / ``rel_tol`` of ``answer``
  (or ``value``).
* ``regex``: ``re.search`` of ``pattern`` (default: the task's ``answer``); ``ignore_case``.
* ``one_of``: the normalised answer is one of ``options`` (default: the task's list ``answer``).
* ``set``: the answer, a JSON list or comma/semicolon/newline separated, equals the task's list ``answer`` as a set
  (score: Jaccard overlap).

Python: ``{"kind": "python", "function": "module:function"}`` (or the bare import path) called as
``(task, answer, state)`` -- the :data:`~mcp_gym.tasks.Verifier` signature, ``state`` being the servers'
``mcp_gym_state`` snapshot -- returning a bool, a number (passed at ``threshold``, default 1), a mapping with
``score``/``passed``/``reason`` or a :class:`Grade`; sync or async.

State checks read the world after the episode:

* ``files``: under ``dir`` (default ``{workspace}``), ``expect`` maps relative paths to their exact contents,
  ``{"contains": s}``, ``{"regex": p}`` or ``null`` (must not exist); ``globs`` maps patterns to a count or
  ``{"min": n, "max": m}``. Defaults: the task's ``data["files"]`` and ``data["globs"]``.
* ``sqlite``: ``query`` on the database ``db`` (opened read-only) returns ``rows`` (in any order unless
  ``ordered``). Defaults: the task's ``data["query"]`` / ``data["rows"]``.
* ``mcp``: a final ``tool`` call (with ``arguments``) or ``resource`` read on the episode's own session (``server``:
  the alias, needed with several servers), its structured content or JSON text compared with ``equals``, ``contains``
  (substrings of the text) or ``subset`` (every expected key/item present, recursively); ``path`` (JSONPath, via
  ``jsonpath-ng``) selects part of it first: the list of matches for a path with ``*``, ``..``, a filter or a slice,
  else the one matched value. Default expectation: the task's ``data["expect"]``.

LLM judge: ``{"kind": "judge"}`` asks an OpenAI-compatible chat-completions endpoint (``base_url``, ``model``,
``api_key``; defaults from the env's ``judge`` settings) to grade the answer and the trajectory against the task's
``rubric``; it must reply with JSON ``{"verdict": "pass"|"fail", "score": 0..1, "reasoning": "..."}``, all recorded in
the grade's ``details``.

Combinations: ``{"kind": "all", "of": [...]}`` (passed if all passed, score the minimum), ``any`` (any passed, the
maximum), ``weighted`` (``of`` items carry ``weight``; score the weighted mean, passed at ``threshold``, default 1).

``{workspace}`` in a grader's string options is the episode's workspace (see ``fixture`` in
:class:`~mcp_gym.tasks.Task`). A grader that cannot grade (a broken verifier, an unreachable judge, a failed final
call) raises :class:`GraderError`: the env then records ``success=None`` and the error, never a silent failure.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import sqlite3
import unicodedata
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_gym.tasks import Task

__all__ = [
    "Grade", "GradeContext", "Grader", "GraderError", "Grading", "JudgeSettings", "make_grader", "normalise_answer",
    "DEFAULT_JUDGE_PROMPT", "DEFAULT_JUDGE_SYSTEM", "GRADER_KINDS",
]


class GraderError(Exception):
    """A grader could not grade the episode (its message names the grader and the task)."""


@dataclass(frozen=True)
class Grade:
    """The outcome of a grader.

    Attributes:
        score: 0..1.
        passed: Whether the episode counts as a success.
        reason: One line saying why.
        grader: The grader's name (its ``name`` option, else its kind).
        kind: The grader's kind (``exact``, ``judge``, ``all``, ...).
        parts: The grades of a combination's members.
        details: Kind-specific facts (a judge's verdict, score and reasoning; a final call's value, ...).
    """

    score: float
    passed: bool
    reason: str
    grader: str
    kind: str
    parts: tuple[Grade, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what ``info["grade"]`` holds)."""
        d: dict[str, Any] = {"grader": self.grader, "kind": self.kind, "score": self.score, "passed": self.passed,
                             "reason": self.reason}
        if self.details:
            d["details"] = dict(self.details)
        if self.parts:
            d["parts"] = [p.to_dict() for p in self.parts]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Grade:
        """Inverse of :meth:`to_dict`."""
        return cls(float(d["score"]), bool(d["passed"]), str(d.get("reason", "")), str(d["grader"]), str(d["kind"]),
                   tuple(cls.from_dict(p) for p in d.get("parts") or ()), dict(d.get("details") or {}))

    def flat(self) -> dict[str, Grade]:
        """Every grade in the tree by path (``"all"``, ``"all/exact"``, ``"all/judge"``, ...; repeated names get
        ``#2``...)."""
        out: dict[str, Grade] = {}

        def walk(g: Grade, prefix: str) -> None:
            path = f"{prefix}/{g.grader}" if prefix else g.grader
            n, key = 1, path
            while key in out:
                n += 1
                key = f"{path}#{n}"
            out[key] = g
            for p in g.parts:
                walk(p, key)

        walk(self, "")
        return out


@dataclass
class GradeContext:
    """What a grader may look at: the task, the submitted answer, the episode's workspace and transcript, and (through
    the env) the servers' state snapshot and the episode's own sessions."""

    task: Task
    answer: str | None
    workspace: Path | None = None
    transcript: Sequence[Mapping[str, Any]] = ()
    """The episode's steps: ``{"tool", "arguments", "result"}`` (result text, shortened)."""
    state_fn: Callable[[], Awaitable[Mapping[str, Any]]] | None = None
    call_fn: Callable[[str | None, str, Mapping[str, Any]], Awaitable[Any]] | None = None
    read_fn: Callable[[str | None, str], Awaitable[Any]] | None = None
    _state: Mapping[str, Any] | None = None

    async def state(self) -> Mapping[str, Any]:
        """The servers' ``mcp_gym_state`` snapshot (``{}`` when none has the tool); read once."""
        if self._state is None:
            self._state = await self.state_fn() if self.state_fn is not None else {}
        return self._state

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], server: str | None = None) -> Any:
        """Call a tool on the episode's own session; returns the structured content, else the JSON or text of the
        result. Raises :class:`GraderError` when the call fails."""
        if self.call_fn is None:
            raise GraderError("no MCP session to call tools on")
        return await self.call_fn(server, tool, arguments)

    async def read_resource(self, uri: str, server: str | None = None) -> Any:
        """Read a resource on the episode's own session (JSON if its text is JSON, else the text)."""
        if self.read_fn is None:
            raise GraderError("no MCP session to read resources from")
        return await self.read_fn(server, uri)

    def fill(self, value: Any) -> Any:
        """``value`` with ``{workspace}`` replaced in its strings (recursively)."""
        if isinstance(value, str):
            if "{workspace}" in value:
                if self.workspace is None:
                    raise GraderError(f"'{value}' names {{workspace}} but task '{self.task.id}' has no workspace "
                                      "(no server command line mentions {workspace})")
                return value.replace("{workspace}", str(self.workspace))
            return value
        if isinstance(value, Mapping):
            return {k: self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return value


class Grader:
    """Base class: ``await grader.grade(ctx) -> Grade``. ``name`` labels it in breakdowns (default: its kind)."""

    kind = "grader"
    reads_state = False
    """It reads the world after the episode (files, a database, the servers): episodes must not share sessions."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.kind

    async def grade(self, ctx: GradeContext) -> Grade:
        """Grade one finished episode."""
        raise NotImplementedError

    def _grade(self, passed: bool, reason: str, score: float | None = None, **details: Any) -> Grade:
        s = (1.0 if passed else 0.0) if score is None else max(0.0, min(1.0, float(score)))
        return Grade(s, bool(passed), reason, self.name, self.kind, (), details)

    def spec(self) -> Any:
        """A JSON-able description (recorded in the run's config)."""
        return {"kind": self.kind, "name": self.name}


# -- answer matchers ------------------------------------------------------------------------------------------------
_QUOTES = ("\"\"", "''", "``", "“”", "‘’")


def normalise_answer(value: Any) -> str:
    """Unicode NFKC, case-folded, whitespace collapsed, surrounding quotes and a trailing period removed."""
    s = unicodedata.normalize("NFKC", value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    s = re.sub(r"\s+", " ", s.casefold()).strip()
    for _ in range(2):
        if len(s) >= 2 and any(s[0] == a and s[-1] == b for a, b in _QUOTES):
            s = s[1:-1].strip()
    return s[:-1].rstrip() if s.endswith(".") and not s.endswith("..") else s


def _expected(task: Task, options: Mapping[str, Any], key: str = "answer") -> Any:
    value = options.get(key, task.answer)
    if value is None:
        raise GraderError(f"task '{task.id}' has no {key} to compare with")
    return value


class ExactGrader(Grader):
    """Normalised exact match with the task's ``answer`` (any item of a list answer)."""

    kind = "exact"

    def __init__(self, name: str | None = None, answer: Any = None) -> None:
        super().__init__(name)
        self.answer = answer

    async def grade(self, ctx: GradeContext) -> Grade:
        expected = self.answer if self.answer is not None else ctx.task.answer
        if expected is None:
            raise GraderError(f"task '{ctx.task.id}' has no answer for the exact grader")
        if ctx.answer is None:
            return self._grade(False, "no answer submitted")
        wanted = [normalise_answer(e) for e in (expected if isinstance(expected, list) else [expected])]
        got = normalise_answer(ctx.answer)
        ok = got in wanted
        return self._grade(ok, f"{'matches' if ok else 'differs from'} the expected answer {expected!r}"
                           + ("" if ok else f" (got {ctx.answer[:200]!r})"))


_NUMBER = re.compile(r"[-+]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", "").replace("_", "").strip())
    except ValueError:
        return None


class NumericGrader(Grader):
    """The answer (or the last number in it) equals the expected number within a tolerance."""

    kind = "numeric"

    def __init__(self, name: str | None = None, value: float | None = None, abs_tol: float = 1e-6,
                 rel_tol: float = 0.0) -> None:
        super().__init__(name)
        self.value, self.abs_tol, self.rel_tol = value, float(abs_tol), float(rel_tol)

    async def grade(self, ctx: GradeContext) -> Grade:
        raw = self.value if self.value is not None else ctx.task.answer
        expected = _to_float(str(raw)) if raw is not None else None
        if expected is None:
            raise GraderError(f"task '{ctx.task.id}': the numeric grader needs a number as answer, got {raw!r}")
        if ctx.answer is None:
            return self._grade(False, "no answer submitted")
        got = _to_float(ctx.answer)
        if got is None:
            found = [v for v in (_to_float(m) for m in _NUMBER.findall(ctx.answer)) if v is not None]
            got = found[-1] if found else None
        if got is None:
            return self._grade(False, f"no number in the answer {ctx.answer[:200]!r}")
        ok = math.isclose(got, expected, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        return self._grade(ok, f"{got:g} {'is' if ok else 'is not'} within tolerance of {expected:g}",
                           got=got, expected=expected)

    def spec(self) -> Any:
        return {**super().spec(), "abs_tol": self.abs_tol, "rel_tol": self.rel_tol}


class RegexGrader(Grader):
    """``re.search(pattern, answer)``; the pattern defaults to the task's ``answer``."""

    kind = "regex"

    def __init__(self, name: str | None = None, pattern: str | None = None, ignore_case: bool = False) -> None:
        super().__init__(name)
        self.pattern, self.flags = pattern, re.IGNORECASE if ignore_case else 0

    async def grade(self, ctx: GradeContext) -> Grade:
        pattern = self.pattern if self.pattern is not None else ctx.task.answer
        if not isinstance(pattern, str):
            raise GraderError(f"task '{ctx.task.id}': the regex grader needs a pattern, got {pattern!r}")
        try:
            rx = re.compile(pattern, self.flags)
        except re.error as e:
            raise GraderError(f"task '{ctx.task.id}': bad regex {pattern!r}: {e}") from None
        if ctx.answer is None:
            return self._grade(False, "no answer submitted")
        ok = rx.search(ctx.answer) is not None
        return self._grade(ok, f"{'matches' if ok else 'does not match'} /{pattern}/")


class OneOfGrader(Grader):
    """The normalised answer is one of ``options`` (default: the task's list answer)."""

    kind = "one_of"

    def __init__(self, name: str | None = None, options: Sequence[Any] | None = None) -> None:
        super().__init__(name)
        self.options = list(options) if options is not None else None

    async def grade(self, ctx: GradeContext) -> Grade:
        options = self.options if self.options is not None else ctx.task.answer
        if not isinstance(options, list) or not options:
            raise GraderError(f"task '{ctx.task.id}': one_of needs a list of options, got {options!r}")
        if ctx.answer is None:
            return self._grade(False, "no answer submitted")
        ok = normalise_answer(ctx.answer) in {normalise_answer(o) for o in options}
        return self._grade(ok, f"{'one' if ok else 'none'} of {options!r}")


def _as_items(answer: str) -> list[Any]:
    try:
        value = json.loads(answer)
    except ValueError:
        value = None
    if isinstance(value, list):
        return value
    return [p for p in re.split(r"[,;\n]", answer) if p.strip()]


class SetGrader(Grader):
    """The answer's items (a JSON list, or comma/semicolon/newline separated) equal the task's list answer as a set;
    score: the Jaccard overlap."""

    kind = "set"

    async def grade(self, ctx: GradeContext) -> Grade:
        expected = ctx.task.answer
        if not isinstance(expected, list):
            raise GraderError(f"task '{ctx.task.id}': the set grader needs a list answer, got {expected!r}")
        if ctx.answer is None:
            return self._grade(False, "no answer submitted")
        want = {normalise_answer(e) for e in expected}
        got = {normalise_answer(e) for e in _as_items(ctx.answer)}
        union = want | got
        score = len(want & got) / len(union) if union else 1.0
        ok = want == got
        reason = "same set" if ok else f"missing {sorted(want - got)}, unexpected {sorted(got - want)}"
        return self._grade(ok, reason, score)


# -- python verifier -------------------------------------------------------------------------------------------------
def _import(path: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"grader {path!r}: a Python grader is 'module:function'")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"grader {path!r}: cannot import {module!r}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"grader {path!r}: {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"grader {path!r}: {attr!r} is not callable")
    return obj  # type: ignore[no-any-return]


class PythonGrader(Grader):
    """A verifier ``(task, answer, state)`` by import path or as a callable."""

    kind = "python"
    reads_state = True

    def __init__(self, name: str | None = None, function: str | Callable[..., Any] | None = None,
                 threshold: float = 1.0) -> None:
        if function is None:
            raise ValueError("a python grader needs function='module:function'")
        self.path = function if isinstance(function, str) else f"{function.__module__}:{function.__qualname__}"
        self.fn = _import(function) if isinstance(function, str) else function
        super().__init__(name or self.path.rpartition(":")[2])
        self.threshold = float(threshold)

    async def grade(self, ctx: GradeContext) -> Grade:
        try:
            out = self.fn(ctx.task, ctx.answer, await ctx.state())
            if inspect.isawaitable(out):
                out = await out
        except GraderError:
            raise
        except Exception as e:  # noqa: BLE001 - reported with the grader's name
            raise GraderError(f"verifier {self.path} failed on task '{ctx.task.id}': {type(e).__name__}: {e}") from e
        if isinstance(out, Grade):
            return out
        if isinstance(out, Mapping):
            score = float(out.get("score", 1.0 if out.get("passed") else 0.0))
            passed = bool(out["passed"]) if "passed" in out else score >= self.threshold
            return self._grade(passed, str(out.get("reason") or f"{self.path} -> {score:g}"), score)
        if isinstance(out, bool):
            return self._grade(out, f"{self.path} -> {out}")
        if isinstance(out, (int, float)) and math.isfinite(out):
            return self._grade(out >= self.threshold, f"{self.path} -> {out:g}", out)
        raise GraderError(f"verifier {self.path} returned {out!r} on task '{ctx.task.id}' (want a bool, number, "
                          "mapping or Grade)")

    def spec(self) -> Any:
        return {**super().spec(), "function": self.path, "threshold": self.threshold}


# -- state checks ----------------------------------------------------------------------------------------------------
def _inside(root: Path, rel: str) -> Path:
    p = (root / rel).resolve()
    if p != root and root not in p.parents:
        raise GraderError(f"files grader: {rel!r} is outside {root}")
    return p


class FilesGrader(Grader):
    """Files under a directory after the episode: contents, substrings, patterns, absence, glob counts."""

    kind = "files"
    reads_state = True

    def __init__(self, name: str | None = None, dir: str = "{workspace}", expect: Mapping[str, Any] | None = None,
                 globs: Mapping[str, Any] | None = None) -> None:
        super().__init__(name)
        self.dir, self.expect, self.globs = dir, expect, globs

    async def grade(self, ctx: GradeContext) -> Grade:
        root = Path(ctx.fill(self.dir)).resolve()
        expect = self.expect if self.expect is not None else ctx.task.data.get("files")
        globs = self.globs if self.globs is not None else ctx.task.data.get("globs")
        if not expect and not globs:
            raise GraderError(f"task '{ctx.task.id}': the files grader has nothing to check (expect/globs, or the "
                              "task's data.files/data.globs)")
        if not root.is_dir():
            raise GraderError(f"files grader: {root} is not a directory")
        checks: list[tuple[str, bool]] = []
        for rel, want in dict(ctx.fill(expect or {})).items():
            path = _inside(root, rel)
            if want is None:
                checks.append((f"{rel} absent", not path.exists()))
                continue
            if not path.is_file():
                checks.append((f"{rel} missing", False))
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if isinstance(want, Mapping) and "contains" in want:
                subs = want["contains"] if isinstance(want["contains"], list) else [want["contains"]]
                checks.append((f"{rel} contains {subs!r}", all(str(s) in text for s in subs)))
            elif isinstance(want, Mapping) and "regex" in want:
                checks.append((f"{rel} matches /{want['regex']}/", re.search(want["regex"], text) is not None))
            else:
                checks.append((f"{rel} == {str(want)[:60]!r}", text == str(want)))
        for pattern, want in dict(globs or {}).items():
            n = sum(1 for _ in root.glob(pattern))
            lo, hi = (want.get("min", 0), want.get("max")) if isinstance(want, Mapping) else (want, want)
            checks.append((f"{pattern}: {n} files", n >= int(lo) and (hi is None or n <= int(hi))))
        failed = [c for c, ok in checks if not ok]
        score = (len(checks) - len(failed)) / len(checks)
        return self._grade(not failed, "all file checks passed" if not failed else "failed: " + "; ".join(failed),
                           score, checks={c: ok for c, ok in checks})


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) if isinstance(r, (list, tuple)) else (r,) for r in rows]


class SQLiteGrader(Grader):
    """A query on an SQLite database after the episode returns the expected rows."""

    kind = "sqlite"
    reads_state = True

    def __init__(self, name: str | None = None, db: str | None = None, query: str | None = None,
                 rows: Sequence[Any] | None = None, ordered: bool = False) -> None:
        super().__init__(name)
        if db is None:
            raise ValueError("an sqlite grader needs db= (a path; {workspace} allowed)")
        self.db, self.query, self.rows, self.ordered = db, query, rows, ordered

    async def grade(self, ctx: GradeContext) -> Grade:
        query = self.query or ctx.task.data.get("query")
        rows = self.rows if self.rows is not None else ctx.task.data.get("rows")
        if not query or rows is None:
            raise GraderError(f"task '{ctx.task.id}': the sqlite grader needs a query and rows (options or the task's "
                              "data.query/data.rows)")
        path = Path(ctx.fill(self.db))
        if not path.is_file():
            raise GraderError(f"sqlite grader: no database at {path}")
        try:
            with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0) as con:
                got = _rows(con.execute(query).fetchall())
        except sqlite3.Error as e:
            raise GraderError(f"sqlite grader: {query!r} on {path}: {e}") from None
        want = _rows(rows)
        ok = got == want if self.ordered else Counter(got) == Counter(want)
        return self._grade(ok, f"{len(got)} rows {'as expected' if ok else f'differ from the expected {want!r}'}",
                           rows=[list(r) for r in got[:50]])


def subset_match(expected: Any, actual: Any) -> bool:
    """True if every key of ``expected`` is in ``actual`` with a matching value, recursively; a list matches when each
    expected item matches a distinct item of the actual list; scalars compare equal (numbers numerically)."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and subset_match(v, actual[k])
                                                   for k, v in expected.items())
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        used: set[int] = set()
        for e in expected:
            hit = next((i for i, a in enumerate(actual) if i not in used and subset_match(e, a)), None)
            if hit is None:
                return False
            used.add(hit)
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return bool(expected == actual)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


class MCPGrader(Grader):
    """A final tool call or resource read on the episode's own session, compared with what the task expects."""

    kind = "mcp"
    reads_state = True

    def __init__(self, name: str | None = None, tool: str | None = None, arguments: Mapping[str, Any] | None = None,
                 resource: str | None = None, server: str | None = None, path: str | None = None,
                 equals: Any = None, contains: Any = None, subset: Any = None) -> None:
        super().__init__(name)
        if (tool is None) == (resource is None):
            raise ValueError("an mcp grader needs exactly one of tool= and resource=")
        self.tool, self.arguments, self.resource, self.server = tool, dict(arguments or {}), resource, server
        self.path = path
        self.expect = {k: v for k, v in (("equals", equals), ("contains", contains), ("subset", subset))
                       if v is not None}

    async def grade(self, ctx: GradeContext) -> Grade:
        expect = self.expect or dict(ctx.task.data.get("expect") or {})
        expect = {k: v for k, v in ctx.fill(expect).items() if k in ("equals", "contains", "subset")}
        if not expect:
            raise GraderError(f"task '{ctx.task.id}': the mcp grader needs equals/contains/subset (options or the "
                              "task's data.expect)")
        if self.tool is not None:
            what = f"{self.tool}({json.dumps(self.arguments)})"
            value = await ctx.call_tool(self.tool, ctx.fill(self.arguments), self.server)
        else:
            what = str(self.resource)
            value = await ctx.read_resource(ctx.fill(self.resource), self.server)
        if self.path:
            from jsonpath_ng.ext import parse as jsonpath

            try:
                matches = [m.value for m in jsonpath(self.path).find(value)]
            except Exception as e:  # noqa: BLE001 - a bad path is the grader's configuration error
                raise GraderError(f"mcp grader: bad path {self.path!r}: {e}") from None
            many = any(tok in self.path for tok in ("*", "[?", "..", ":", ","))
            value = matches if many or len(matches) != 1 else matches[0]
            what += f" {self.path}"
        failed = []
        if "equals" in expect and not (expect["equals"] == value or (
                isinstance(expect["equals"], str) and normalise_answer(expect["equals"]) == normalise_answer(value))):
            failed.append(f"!= {_text(expect['equals'])[:120]}")
        if "contains" in expect:
            subs = expect["contains"] if isinstance(expect["contains"], list) else [expect["contains"]]
            text = _text(value)
            failed += [f"lacks {s!r}" for s in subs if str(s) not in text]
        if "subset" in expect and not subset_match(expect["subset"], value):
            failed.append(f"does not contain {_text(expect['subset'])[:120]}")
        reason = f"{what}: " + ("as expected" if not failed else "; ".join(failed))
        return self._grade(not failed, reason, value=value if len(_text(value)) <= 4000 else _text(value)[:4000])

    def spec(self) -> Any:
        return {**super().spec(), "tool": self.tool, "arguments": self.arguments, "resource": self.resource,
                "server": self.server, "path": self.path, **self.expect}


# -- LLM judge -------------------------------------------------------------------------------------------------------
DEFAULT_JUDGE_SYSTEM = (
    "You grade the work of an AI agent that used tools to do a task. Judge only by the rubric and the evidence given. "
    'Reply with a single JSON object: {"verdict": "pass" or "fail", "score": a number from 0 to 1, "reasoning": '
    '"one short paragraph"}.'
)
DEFAULT_JUDGE_PROMPT = (
    "Task:\n{task}\n\nRubric:\n{rubric}\n\nReference answer (may be empty):\n{reference}\n\n"
    "The agent's tool calls and their results:\n{trajectory}\n\nThe agent's final answer:\n{answer}"
)


@dataclass
class JudgeSettings:
    """Where and how the LLM judge is asked (the ``env.judge`` config; recorded in the run's config)."""

    model: str = "gpt-4o-mini"
    base_url: str = "https://api.openai.com/v1"
    api_key: str | None = None
    system_prompt: str = DEFAULT_JUDGE_SYSTEM
    prompt: str = DEFAULT_JUDGE_PROMPT
    """Template with ``{task}``, ``{rubric}``, ``{reference}``, ``{trajectory}`` and ``{answer}`` (other braces are
    kept as they are)."""
    temperature: float = 0.0
    max_tokens: int | None = 512
    timeout: float = 60.0
    retries: int = 2
    threshold: float = 0.5
    """Score at which a reply without a verdict passes."""

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> JudgeSettings:
        """From a config mapping (``None`` values keep the defaults)."""
        known = set(cls.__dataclass_fields__)
        unknown = set(cfg or {}) - known
        if unknown:
            raise ValueError(f"judge settings: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: v for k, v in dict(cfg or {}).items() if v is not None})

    def public(self) -> dict[str, Any]:
        """The settings without the API key (what the run's config records)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "api_key"}


def _judge_reply(content: str) -> dict[str, Any]:
    """The JSON object of a judge's reply (bare, fenced, or inside text)."""
    text = content.strip()
    candidates = [text, *re.findall(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for c in candidates:
        try:
            value = json.loads(c)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    raise GraderError(f"the judge's reply is not a JSON verdict: {content[:300]!r}")


class JudgeGrader(Grader):
    """An LLM judge behind an OpenAI-compatible chat-completions endpoint, grading against the task's rubric."""

    kind = "judge"

    def __init__(self, name: str | None = None, rubric: str | None = None, settings: JudgeSettings | None = None,
                 **overrides: Any) -> None:
        super().__init__(name)
        base = settings or JudgeSettings()
        self.settings = JudgeSettings(**{**base.__dict__, **{k: v for k, v in overrides.items() if v is not None}})
        self.rubric = rubric

    def _messages(self, ctx: GradeContext) -> list[dict[str, str]]:
        rubric = self.rubric or ctx.task.rubric
        if not rubric:
            raise GraderError(f"task '{ctx.task.id}' has no rubric for the judge")
        steps = "\n".join(f"{i + 1}. {s.get('tool')}({json.dumps(s.get('arguments'), ensure_ascii=False)}) -> "
                          f"{str(s.get('result', ''))[:1000]}" for i, s in enumerate(ctx.transcript)) or "(none)"
        reference = ctx.task.answer if isinstance(ctx.task.answer, str) else (
            json.dumps(ctx.task.answer, ensure_ascii=False) if ctx.task.answer is not None else "")
        fields = {"task": ctx.task.prompt, "rubric": rubric, "reference": reference, "trajectory": steps,
                  "answer": ctx.answer if ctx.answer is not None else "(no answer submitted)"}
        # placeholders by plain replacement: a prompt may show JSON examples with braces
        user = re.sub(r"\{(task|rubric|reference|trajectory|answer)\}", lambda m: str(fields[m.group(1)]),
                      self.settings.prompt)
        return [{"role": "system", "content": self.settings.system_prompt}, {"role": "user", "content": user}]

    async def grade(self, ctx: GradeContext) -> Grade:
        import anyio
        import httpx2 as httpx

        s = self.settings
        body: dict[str, Any] = {"model": s.model, "messages": self._messages(ctx), "temperature": s.temperature}
        if s.max_tokens is not None:
            body["max_tokens"] = s.max_tokens
        headers = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
        url = s.base_url.rstrip("/") + "/chat/completions"
        error = ""
        async with httpx.AsyncClient(timeout=s.timeout, headers=headers) as client:
            for attempt in range(s.retries + 1):
                try:
                    response = await client.post(url, json=body)
                    if response.status_code < 500 and response.status_code != 429:
                        break
                    error = f"HTTP {response.status_code}"
                except httpx.TransportError as e:
                    error = f"{type(e).__name__}: {e}"
                    response = None
                if attempt < s.retries:
                    await anyio.sleep(min(10.0, 0.5 * 2**attempt))
            else:
                raise GraderError(f"judge {s.model} at {url} failed on task '{ctx.task.id}': {error}")
        if response.status_code != 200:
            raise GraderError(f"judge {s.model} at {url}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            content = response.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise GraderError(f"judge {s.model}: unexpected answer {response.text[:300]!r}") from None
        reply = _judge_reply(content)
        verdict = str(reply.get("verdict", "")).strip().lower() or None
        score = reply.get("score")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            score = None
        if verdict not in (None, "pass", "fail"):
            raise GraderError(f"judge {s.model}: verdict {verdict!r} is neither 'pass' nor 'fail'")
        if verdict is None and score is None:
            raise GraderError(f"judge {s.model}: the reply has neither verdict nor score: {content[:300]!r}")
        passed = verdict == "pass" if verdict is not None else float(score) >= s.threshold  # type: ignore[arg-type]
        score = float(score) if score is not None else (1.0 if passed else 0.0)
        reasoning = str(reply.get("reasoning", ""))
        return self._grade(passed, f"judge {s.model}: {verdict or f'score {score:g}'}", score, verdict=verdict,
                           judge_score=score, reasoning=reasoning, model=s.model)

    def spec(self) -> Any:
        return {**super().spec(), "rubric": self.rubric, "judge": self.settings.public()}


# -- combinations ----------------------------------------------------------------------------------------------------
class CombinedGrader(Grader):
    """``all`` (every member passed; score the minimum), ``any`` (one passed; the maximum) or ``weighted`` (weighted
    mean score, passed at ``threshold``)."""

    def __init__(self, kind: str, members: Sequence[Grader], weights: Sequence[float] | None = None,
                 threshold: float = 1.0, name: str | None = None) -> None:
        if kind not in ("all", "any", "weighted"):
            raise ValueError(f"unknown combination {kind!r}")
        if not members:
            raise ValueError(f"'{kind}' grader needs at least one member (of: [...])")
        self.kind = kind
        super().__init__(name)
        self.members = list(members)
        self.weights = [float(w) for w in (weights or [1.0] * len(members))]
        if len(self.weights) != len(self.members) or min(self.weights) < 0 or sum(self.weights) <= 0:
            raise ValueError(f"'{kind}' grader: weights {self.weights} do not fit its {len(members)} members")
        self.threshold = float(threshold)
        self.reads_state = any(m.reads_state for m in members)

    async def grade(self, ctx: GradeContext) -> Grade:
        parts = tuple([await m.grade(ctx) for m in self.members])
        if self.kind == "all":
            passed, score = all(p.passed for p in parts), min(p.score for p in parts)
        elif self.kind == "any":
            passed, score = any(p.passed for p in parts), max(p.score for p in parts)
        else:
            score = sum(w * p.score for w, p in zip(self.weights, parts, strict=True)) / sum(self.weights)
            passed = score >= self.threshold - 1e-12
        n = sum(p.passed for p in parts)
        reason = f"{n}/{len(parts)} passed" + (f", weighted score {score:.3g}" if self.kind == "weighted" else "")
        return Grade(score, passed, reason, self.name, self.kind, parts)

    def spec(self) -> Any:
        return {**super().spec(), "of": [m.spec() for m in self.members], "weights": self.weights,
                "threshold": self.threshold}


# -- specs -----------------------------------------------------------------------------------------------------------
GRADER_KINDS: dict[str, type[Grader]] = {
    "exact": ExactGrader, "numeric": NumericGrader, "regex": RegexGrader, "one_of": OneOfGrader, "set": SetGrader,
    "python": PythonGrader, "files": FilesGrader, "sqlite": SQLiteGrader, "mcp": MCPGrader, "judge": JudgeGrader,
}
"""Grader kinds by spec name (plus the combinations ``all``, ``any``, ``weighted``)."""


def make_grader(spec: Any, judge: JudgeSettings | None = None) -> Grader:
    """A grader from a spec: a :class:`Grader`, a callable verifier, a kind name, ``"module:function"``, a list (all
    of them) or a mapping ``{"kind": ..., **options}``. ``judge``: the default settings of ``judge`` graders.

    Raises ``ValueError`` naming the bad part of the spec."""
    if isinstance(spec, Grader):
        return spec
    if callable(spec):
        return PythonGrader(function=spec)
    if isinstance(spec, str):
        if ":" in spec:
            return PythonGrader(function=spec)
        spec = {"kind": spec}
    if isinstance(spec, (list, tuple)):
        spec = {"kind": "all", "of": list(spec)}
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise ValueError(f"grader spec {spec!r}: give a kind name, 'module:function', a list, or a mapping with 'kind'")
    options = dict(spec)
    kind = str(options.pop("kind"))
    if kind in ("all", "any", "weighted"):
        members = options.pop("of", None)
        if not isinstance(members, list):
            raise ValueError(f"grader spec {dict(spec)!r}: '{kind}' needs of: [...]")
        weights = [float(m.get("weight", 1.0)) if isinstance(m, Mapping) else 1.0 for m in members]
        graders = [make_grader({k: v for k, v in m.items() if k != "weight"} if isinstance(m, Mapping) else m, judge)
                   for m in members]
        return CombinedGrader(kind, graders, weights, float(options.pop("threshold", 1.0)), options.pop("name", None))
    cls = GRADER_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"grader spec {dict(spec)!r}: unknown kind {kind!r}; kinds: "
                         f"{', '.join([*GRADER_KINDS, 'all', 'any', 'weighted'])} or 'module:function'")
    if cls is JudgeGrader:
        options["settings"] = judge
    try:
        return cls(**options)
    except TypeError as e:
        raise ValueError(f"grader spec {dict(spec)!r}: {e}") from None


class Grading:
    """Which grader grades which task: the task's own ``grader`` spec, else the default spec, else normalised exact
    match when the task has an ``answer`` (``None`` when nothing applies: the episode is ungraded).

    Args:
        default: The task set's grader spec (``env.grader``).
        judge: Settings of ``judge`` graders (``env.judge``).
    """

    def __init__(self, default: Any = None, judge: JudgeSettings | Mapping[str, Any] | None = None) -> None:
        self.judge = judge if isinstance(judge, JudgeSettings) else JudgeSettings.from_config(judge)
        self.default = make_grader(default, self.judge) if default is not None else None
        self._cache: dict[str, Grader] = {}

    def for_task(self, task: Task) -> Grader | None:
        """The grader of ``task`` (specs are built once and cached)."""
        if task.grader is not None:
            key = json.dumps(task.grader, sort_keys=True, default=str)
            grader = self._cache.get(key)
            if grader is None:
                try:
                    grader = self._cache[key] = make_grader(task.grader, self.judge)
                except ValueError as e:
                    raise GraderError(f"task '{task.id}': {e}") from None
            return grader
        if self.default is not None:
            return self.default
        if task.answer is not None:
            return self._cache.setdefault("\0exact", ExactGrader())
        return None

    def describe(self) -> dict[str, Any]:
        """The run's grading as JSON-able config: the default spec and the judge settings (no API key)."""
        return {"default": self.default.spec() if self.default is not None else "exact when the task has an answer",
                "judge": self.judge.public()}
