"""The group-relative judge (RULER-like) on real rollouts of the npm server-memory: one request scores a group of
rollouts of the same task against each other; the grades are recorded like the judge grader's; a reply that leaves a
rollout unscored is refused, never paid."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from _chat_server import chat_completion, serve_chat_completions
from conftest import npm_bin

from mcp_gym import MCPEnv, Stdio
from mcp_gym.graders import JudgeSettings
from mcp_gym.graders.base import GraderError
from mcp_gym.graders.judge import GroupJudge
from mcp_gym.tasks import Task

pytestmark = pytest.mark.thirdparty

TASK = Task(id="alice", prompt="Record that Alice likes tea.", rubric="Alice's observation 'likes tea' is stored.")


def rollouts() -> list[dict[str, Any]]:
    """Two real rollouts on server-memory: one that does the task, one that does nothing."""
    env = MCPEnv({"memory": Stdio(npm_bin("mcp-server-memory"), env={"MEMORY_FILE_PATH": "{workspace}/m.jsonl"})},
                 [TASK])
    out = []
    try:
        for calls in ([{"tool": "create_entities", "arguments": {"entities": [
                {"name": "Alice", "entityType": "person", "observations": ["likes tea"]}]}}], []):
            env.reset(seed=0, options={"task_id": "alice"})
            for c in calls:
                env.step(c)
            out.append({"transcript": list(env.unwrapped.transcript), "answer": "done" if calls else None})
    finally:
        env.close()
    return out


def test_group_judge_scores_a_group_in_one_request() -> None:
    group = rollouts()
    requests: list[dict[str, Any]] = []

    def reply(body: dict[str, Any], headers: Any) -> dict[str, Any]:
        requests.append(body)
        scores = [{"id": 1, "score": 0.1, "reasoning": "did nothing"},  # in any order, by id
                  {"id": 0, "score": 0.9, "reasoning": "stored it"}]
        if len(requests) == 2:
            scores = scores[1:]  # a rollout left unscored
        return chat_completion(body, {"role": "assistant", "content": "Comparing.\n" + json.dumps({"scores": scores})})

    with serve_chat_completions(reply) as url:
        judge = GroupJudge(JudgeSettings(model="judge-m", base_url=url))
        grades = anyio.run(judge.grade_group, TASK, group)
        assert [g.score for g in grades] == [0.9, 0.1]
        assert [g.passed for g in grades] == [True, False]
        assert grades[0].details == {"judge_score": 0.9, "reasoning": "stored it", "model": "judge-m",
                                     "group_size": 2, "verdict": "pass"}
        assert len(requests) == 1 and "<attempt id=1>" in requests[0]["messages"][1]["content"]
        with pytest.raises(GraderError, match=r"attempts \[1\] are not scored"):
            anyio.run(judge.grade_group, TASK, group)
