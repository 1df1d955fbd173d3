"""Claims in the explore walks of ``mcp-gym tasks generate`` (:mod:`mcp_gym.jobs.proposers`): what a call that changes
state says about its own change is the server's word, and an answer task made from it is kept only when a read later in
the walk returns the same value.

npm @cyanheads/git-mcp-server's ``git_stash`` of a clean tree said ``"created": "stash@{0}"`` while ``git stash list``
stayed empty, and a generated task asked for that ``stash@{0}``: a task that teaches an agent to repeat a server's
false claim. A call *changes state* when its tool says so (``readOnlyHint: false``; with ``generator.read_tools``,
a tool not listed), or, for a tool that says nothing, when the workspace's files differ after it. A call *confirms* a
value when it comes later in the walk, returns the value (as one of its result's values, or a whole word of its
text) in both runs of the walk, and reads: its tool says it only reads, or says nothing and the workspace's files are
the same after it. A tool that says nothing, on a server without a workspace, is neither: its answers are kept as
they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__: list[str] = []  # internal to mcp_gym.jobs.proposers

NOT_CONFIRMED = "claim not confirmed"
"""The drop reason of an answer a state-changing call gave about itself that no later read in its walk returned."""


def changes(step: Any) -> bool:
    """Whether a walk's step changed state: its tool says it does not only read, or says nothing and the workspace's
    files changed across it."""
    if step.read_only is not None:
        return not step.read_only
    return step.same_files is False


def reads(step: Any) -> bool:
    """Whether a walk's step only read: its tool says so, or says nothing and the workspace's files did not change."""
    if step.read_only is not None:
        return bool(step.read_only)
    return step.same_files is True


def confirmed(steps: Sequence[Any], stable: Sequence[Any], i: int,
              values: Callable[[Any], tuple[Iterable[str], str]]) -> list[tuple[frozenset[str], str, str]]:
    """What each read after step ``i`` returned in both runs of the walk (``values``: a result's values and its text),
    with its arguments and those of the calls since step ``i`` that may have changed state, as JSON: an answer of step
    ``i`` among its values, or a whole word of its text, is confirmed (:func:`holds`), unless one of those calls was
    given it (a read that echoes its arguments confirms nothing, nor one that lists what a later call wrote: npm
    server-memory's ``Observations deleted successfully``, copied into a created entity's ``entityType``, which
    ``read_graph`` then returned)."""
    out = []
    written: list[str] = []  # the arguments of the calls since step i that may have changed state
    for j in range(i + 1, len(steps)):
        args = json.dumps(steps[j].call.get("arguments"), ensure_ascii=False)
        if steps[j].ok and stable[j] is not None and reads(steps[j]):
            found, text = values(stable[j])
            out.append((frozenset(found), text, "\n".join([*written, args])))
        elif steps[j].ok:
            written.append(args)
    return out


def holds(answer: str, seen: Sequence[tuple[frozenset[str], str, str]]) -> bool:
    """Whether a read of :func:`confirmed` returned ``answer``, as one of its values or a whole word or value of its
    text, without being given it in its arguments."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\w)")
    return any(pattern.search(given) is None and (answer in found or pattern.search(text) is not None)
               for found, text, given in seen)
