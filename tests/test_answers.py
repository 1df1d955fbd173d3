"""One answer normaliser: a bundled env's verifier and the graders of a custom env judge an answer alike."""

from __future__ import annotations

import asyncio

import pytest

from mcp_gym.envs.lookup import tasks as lookup
from mcp_gym.envs.sql import tasks as sql
from mcp_gym.graders.answers import ExactGrader, OneOfGrader
from mcp_gym.graders.base import GradeContext
from mcp_gym.tasks import Task, normalise_answer

# the four inputs the two former normalisers disagreed on (issue 28), and one they agreed on
PROBES = ["ＰＡＲＩＳ", '"Paris', "Paris..", "'Paris'.", " “Paris” "]


@pytest.mark.parametrize("answer", PROBES)
def test_bundled_verifier_and_graders_agree(answer: str) -> None:
    task = Task("t-1", "Capital of France?", "test", answer="Paris")
    assert normalise_answer(answer) == "paris"
    # a bundled env's verifier (lookup, sql) ...
    assert lookup.verify(task, answer, {}) == 1.0
    assert sql.verify(task, answer, {}) == 1.0
    # ... and the graders a custom env gets (exact is the default for a task with an answer)
    ctx = GradeContext(task, answer)
    assert asyncio.run(ExactGrader().grade(ctx)).passed
    assert asyncio.run(OneOfGrader(options=["Lyon", "Paris"]).grade(ctx)).passed


@pytest.mark.parametrize("answer", ["Pariss", "Paris, France", "P aris", ""])
def test_a_different_answer_still_fails_everywhere(answer: str) -> None:
    task = Task("t-1", "Capital of France?", "test", answer="Paris")
    assert lookup.verify(task, answer, {}) == 0.0
    assert not asyncio.run(ExactGrader().grade(GradeContext(task, answer))).passed


def test_the_rule() -> None:
    assert normalise_answer(None) == "" and normalise_answer(42) == "42" and normalise_answer(["a"]) == '["a"]'
    assert normalise_answer("  Hello \n  World  ") == "hello world"
    assert normalise_answer("3.5") == "3.5" and normalise_answer("U.S.") == "u.s" and normalise_answer(".5") == ".5"
    assert normalise_answer("ﬁle…") == "file"  # NFKC: the ligature and the ellipsis become plain
