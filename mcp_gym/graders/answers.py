"""Answer matchers (exact, numeric, regex, one_of, set) and Python verifiers by import path."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from mcp_gym._schema import bounded_search
from mcp_gym.graders.base import Grade, GradeContext, Grader, GraderError, normalise_answer

__all__: list[str] = []  # internal to mcp_gym.graders: used by its sibling modules only


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
    """``re.search(pattern, answer)`` semantics, matched by :func:`mcp_gym._schema.bounded_search` (the ``regex``
    module, at most :data:`~mcp_gym._schema.PATTERN_TIMEOUT` seconds: a match that takes longer is a failed grade
    saying so); the pattern defaults to the task's ``answer``."""

    kind = "regex"

    def __init__(self, name: str | None = None, pattern: str | None = None, ignore_case: bool = False) -> None:
        super().__init__(name)
        self.pattern, self.ignore_case = pattern, bool(ignore_case)

    async def grade(self, ctx: GradeContext) -> Grade:
        pattern = self.pattern if self.pattern is not None else ctx.task.answer
        if not isinstance(pattern, str):
            raise GraderError(f"task '{ctx.task.id}': the regex grader needs a pattern, got {pattern!r}")
        try:
            ok, why = bounded_search(pattern, ctx.answer or "", ignore_case=self.ignore_case)
        except ValueError as e:
            raise GraderError(f"task '{ctx.task.id}': bad regex: {e}") from None
        if ctx.answer is None:
            return self._grade(False, "no answer submitted")
        if why is not None:
            return self._grade(False, why, timed_out=True)
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
def _module_file(folder: Path, module: str) -> Path | None:
    """The file of ``module`` (dotted) inside ``folder``, if there is one."""
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _load_beside(module: str, file: Path, folder: Path) -> Any:
    """Import ``module`` from ``file`` in ``folder`` (put first on ``sys.path``, so the module's own imports of its
    neighbours, e.g. a benchmark's ``verify.py``, work too); a module of that name imported from elsewhere is
    replaced."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    loaded = sys.modules.get(module)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == file.resolve():
        return loaded
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        del sys.modules[name]
    return importlib.import_module(module)


def _import(path: str, task_dir: Path | None = None, trusted: bool = True) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"grader {path!r}: a Python grader is 'module:function'")
    beside = _module_file(task_dir, module.split(".")[0]) if task_dir is not None else None
    if beside is not None and not trusted:
        raise ValueError(f"grader {path!r}: {beside} is code in the task file's folder, and a task file is data; "
                         "run it only for a benchmark you trust: env.trust_task_code=true")
    try:
        obj: Any = _load_beside(module, beside, task_dir) if beside is not None and task_dir is not None \
            else importlib.import_module(module)
    except ImportError as e:
        where = f" (looked in the task file's folder {task_dir} first)" if task_dir is not None else ""
        raise ValueError(f"grader {path!r}: cannot import {module!r}{where}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"grader {path!r}: {module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"grader {path!r}: {attr!r} is not callable")
    return obj


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether a Python grader takes the :class:`~mcp_gym.graders.EpisodeContext` (one positional parameter) rather
    than ``(task, answer, state)`` (three)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: the old convention
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return False
    return len(positional) == 1 or (len(positional) > 1 and all(p.default is not p.empty for p in positional[1:]))


class PythonGrader(Grader):
    """A Python function by import path or as a callable: ``fn(ctx)`` with the
    :class:`~mcp_gym.graders.EpisodeContext` (a function of one parameter), or the older ``fn(task, answer, state)``;
    sync (run in a worker thread, off the event loop) or async."""

    kind = "python"
    reads_state = True

    def __init__(self, name: str | None = None, function: str | Callable[..., Any] | None = None,
                 threshold: float = 1.0, task_dir: str | Path | None = None, trusted: bool = True) -> None:
        if function is None:
            raise ValueError("a python grader needs function='module:function'")
        self.path = function if isinstance(function, str) else f"{function.__module__}:{function.__qualname__}"
        folder = Path(task_dir).resolve() if task_dir is not None else None
        self.fn = _import(function, folder, trusted) if isinstance(function, str) else function
        super().__init__(name or self.path.rpartition(":")[2])
        self.threshold = float(threshold)
        self.with_context = takes_context(self.fn)
        self.is_async = inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(
            type(self.fn).__call__)  # a callable object with an async __call__

    async def grade(self, ctx: GradeContext) -> Grade:
        try:
            args = (await ctx.episode(),) if self.with_context else (ctx.task, ctx.answer, await ctx.state())
            if self.is_async:
                out = await self.fn(*args)
            else:  # a sync grader (a benchmark's verify.py, a subprocess) must not hold up the other episodes
                out = await anyio.to_thread.run_sync(lambda: self.fn(*args), abandon_on_cancel=True)
            if inspect.isawaitable(out):
                out = await out
        except GraderError:
            raise
        except Exception as e:  # noqa: BLE001 - reported with the grader's name
            raise GraderError(f"verifier {self.path} failed on task '{ctx.task.id}': {type(e).__name__}: {e}") from e
        except SystemExit as e:  # a ported verify.py's sys.exit(): left to rise, it ended the job's loop, which hung
            raise GraderError(f"verifier {self.path} called sys.exit({e.code!r}) on task '{ctx.task.id}' (a grader "
                              "returns its verdict: a bool, number, mapping or Grade)") from None
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


