"""How ``mcp-gym tasks generate`` (:mod:`mcp_gym.jobs.generate`) turns real results into a check, and tells a
near-duplicate: a state check from a read's value before and after a solution (narrowed to what a second run agrees
on), and the keys under which two tasks count as one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp_gym.jobs.proposers import Proposal, as_text, clocklike, steady, unmasked

__all__: list[str] = []  # internal to mcp_gym.jobs.generate


def diff(before: Any, after: Any) -> Any:
    """What ``after`` has that ``before`` has not (``None``: nothing): new keys and changed values of a dict, new
    items of a list, a changed scalar."""
    if isinstance(after, dict) and isinstance(before, dict):
        out = {}
        for k, v in after.items():
            if k not in before:
                out[k] = v
            elif before[k] != v and (d := diff(before[k], v)) is not None:
                out[k] = d
        return out or None
    if isinstance(after, list) and isinstance(before, list):
        old = [json.dumps(x, sort_keys=True) for x in before]
        new = [x for x in after if json.dumps(x, sort_keys=True) not in old]
        return new or None
    return None if before == after else after


def expectation(read: Any, before: Any, after: Any) -> dict[str, Any] | None:
    """How a check on ``read`` tells ``after`` from ``before`` (an ``mcp`` grader's ``subset``/``contains``, or the
    ``files`` grader's ``expect``). Dates, times and timestamps are no part of it (:func:`steady`): a value that
    changes only with the clock is no change, and is never checked."""
    if before is None or after is None:
        return None
    if read == "files":
        exp: dict[str, Any] = {k: v for k, v in after.items() if steady(before.get(k)) != steady(v)
                               and not clocklike(v or "")}
        exp.update({k: None for k in before if k not in after})
        return {"expect": exp} if exp else None
    before, after = steady(before), steady(after)
    if isinstance(after, (dict, list)) and isinstance(before, (dict, list)):
        d = unmasked(diff(before, after))
        if d is not None:
            return {"subset": d}
        # a changed text field whose new text carries a time: the new lines of that field, at its path
        old: dict[str, Any] = before if isinstance(before, dict) else {}
        for k, v in after.items() if isinstance(after, dict) and isinstance(before, dict) else ():
            if isinstance(v, str) and isinstance(old.get(k), str) and v != old[k] and k.isidentifier():
                lines = new_lines(old[k], v)
                return {"path": f"$.{k}", "contains": lines} if lines else None
        return None
    new = new_lines(as_text(before), as_text(after))
    return {"contains": new} if new else None


def new_lines(before: str, after: str) -> list[str]:
    """The lines of ``after`` that ``before`` lacks, without those holding a masked time."""
    old = {line.strip() for line in before.splitlines()}
    return list(dict.fromkeys(line.strip() for line in after.splitlines()
                              if line.strip() and line.strip() not in old and unmasked(line.strip()) is not None))


def at(exp: Mapping[str, Any], value: Any) -> Any:
    """The part of a read's value an expectation is about (its ``path``, as the ``mcp`` grader takes it)."""
    if "path" not in exp or not isinstance(value, dict):
        return value
    return value.get(exp["path"][2:])


def holds(exp: Mapping[str, Any], value: Any) -> bool:
    from mcp_gym.graders.state import subset_match

    if "subset" in exp:
        return subset_match(exp["subset"], value)
    if "contains" in exp:
        return all(s in as_text(at(exp, value)) for s in exp["contains"])
    return isinstance(value, dict) and all(value.get(k) == v for k, v in exp["expect"].items())


def narrow(exp: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """The part of ``exp`` that also holds for ``value`` (a second run), or ``None``."""
    if holds(exp, value):
        return exp
    if "contains" in exp:
        keep = [s for s in exp["contains"] if s in as_text(at(exp, value))]
        return {**exp, "contains": keep} if keep else None
    if "expect" in exp:
        keep2 = {k: v for k, v in exp["expect"].items() if isinstance(value, dict) and value.get(k) == v}
        return {"expect": keep2} if keep2 else None
    sub = exp["subset"]
    if isinstance(sub, list):
        keep3 = [x for x in sub if holds({"subset": [x]}, value)]
        return {"subset": keep3} if keep3 else None
    if isinstance(sub, dict):
        keep4 = {k: v for k, v in sub.items() if holds({"subset": {k: v}}, value)}
        return {"subset": keep4} if keep4 else None
    return None


def same_calls(solution: Sequence[Mapping[str, Any]], grader: Any, answer: Any) -> str:
    """A task's calls with every repeat of an earlier identical call left out, its check and its answer: two tasks
    with the same key differ only by repeated calls (a walk that created the same entity twice proposed "create X"
    and "create X, then create X" with the same check), and the first kept stands for both."""
    calls = dict.fromkeys(json.dumps({"tool": c["tool"], "arguments": c.get("arguments") or {}}, sort_keys=True,
                                     default=str) for c in solution)
    return json.dumps(["calls", list(calls), grader, answer], sort_keys=True, default=str)


def answered(p: Proposal, answer: Any) -> str | None:
    """An answer task's answered call, the place in its result and the answer (``None`` for a state task): two tasks
    with the same key ask the same question of the same call, one with calls before it that change nothing in the
    answer (PyPI mcp-shell-server: "call `head`, then `wc` with stdin `cat`" beside "call `wc` with stdin `cat`",
    the same count: the unannotated `head` counted as a change the `wc` might need)."""
    spec = p.check.get("answer") if isinstance(p.check, dict) else None
    if not isinstance(spec, dict) or answer is None:
        return None
    k = spec.get("step")
    if not isinstance(k, int) or not 1 <= k <= len(p.solution):
        return None
    call = p.solution[k - 1]
    return json.dumps(["answered", call["tool"], call.get("arguments") or {}, spec.get("path"), answer],
                      sort_keys=True, default=str)
