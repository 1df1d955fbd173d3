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
              values: Callable[[Any], tuple[Iterable[str], str]]) -> frozenset[str]:
    """The values a read after step ``i`` returned in both runs of the walk (``values``: a result's values and its
    text): an answer of step ``i`` among them, or a whole word of one of their texts, is confirmed (:func:`holds`)."""
    out: set[str] = set()
    for j in range(i + 1, len(steps)):
        if steps[j].ok and stable[j] is not None and reads(steps[j]):
            found, text = values(stable[j])
            out |= set(found)
            out.add("\ue002" + text)  # the whole text, for whole words (holds)
    return frozenset(out)


def holds(answer: str, seen: frozenset[str]) -> bool:
    """Whether ``answer`` is one of the values :func:`confirmed` found, or a whole word or value of one of the texts
    the reads returned."""
    if answer in seen:
        return True
    pattern = re.compile(rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\w)")
    return any(s.startswith("\ue002") and pattern.search(s) for s in seen)
