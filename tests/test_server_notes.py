"""The Notes server over real MCP: reference solutions, random play, isolation of concurrent episodes (stdio and
HTTP), resources and tool annotations.

This module also hosts the small transport helpers (``episode``, ``run_reference``, ``stdio_params``, ``serve_http``)
that the Maze and Files server tests import.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from conftest import start_http_server, stop_process
from mcp import Client, StdioServerParameters

from mcp_gym.envs._common import submitted_answer
from mcp_gym.envs.notes import tasks as env
from mcp_gym.servers.notes import server
from mcp_gym.tasks import Task

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- helpers shared with the other server tests ------------------------------------------------------------------
def episode(name: str) -> dict[str, str]:
    """Request ``_meta`` selecting an episode."""
    return {"mcp-gym/episode": name}


async def call(client: Client, ep: str, tool: str, args: Mapping[str, Any] | None = None) -> Any:
    """Call a tool in episode ``ep``; return the result."""
    return await client.call_tool(tool, dict(args or {}), meta=episode(ep))


async def state_of(client: Client, ep: str) -> dict[str, Any]:
    """The ``mcp_gym_state`` snapshot of episode ``ep``."""
    res = await call(client, ep, "mcp_gym_state")
    assert not res.is_error, res.content
    return json.loads(res.content[0].text)


async def run_reference(client: Client, envmod: ModuleType, task: Task, ep: str) -> float:
    """Reset ``ep`` to ``task``, play its reference solution (all steps but ``submit``) and return the verify score."""
    res = await call(client, ep, "mcp_gym_reset", {"task_id": task.id, "seed": 0})
    assert not res.is_error, res.content
    for step in task.solution[:-1]:
        res = await call(client, ep, step["tool"], step["arguments"])
        assert not res.is_error, (task.id, step, res.content)
    return envmod.verify(task, submitted_answer(task), await state_of(client, ep))


def stdio_params(name: str) -> StdioServerParameters:
    """Launch ``python -m mcp_gym.envs.<name>.server`` over stdio."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", f"mcp_gym.envs.{name}.server"], env={"PATH": os.environ["PATH"]}
    )


@asynccontextmanager
async def serve_http(name: str) -> AsyncIterator[str]:
    """Run ``python -m mcp_gym.envs.<name>.server --transport http`` on a free port; yield its ``/mcp`` URL."""
    proc, url = start_http_server(f"mcp_gym.envs.{name}.server")
    try:
        yield url
    finally:
        stop_process(proc)


def tool_hints(tools: Any) -> dict[str, tuple[bool, bool, bool]]:
    """``{tool: (readOnly, destructive, idempotent)}`` of a tools/list result."""
    return {
        t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint, t.annotations.idempotent_hint)
        for t in tools.tools
    }


# -- tests -------------------------------------------------------------------------------------------------------
def test_task_set_shape() -> None:
    tasks = env.generate_tasks(0)
    assert len(tasks) >= 100 and len({t.id for t in tasks}) == len(tasks)
    assert sum(t.split == "test" for t in tasks) == len(tasks) // 5
    assert [t.to_record() for t in tasks[:10]] == [t.to_record() for t in env.generate_tasks(0)[:10]]
    assert env.generate_tasks(1)[0].prompt != tasks[0].prompt or env.generate_tasks(1)[0].data != tasks[0].data
    assert all(t.solution[-1]["tool"] == "submit" for t in tasks)
    assert {t.data["kind"] for t in tasks} == set(env.KINDS)
    assert env.task_by_id(tasks[7].id) is env.task_by_id(tasks[7].id) and env.task_by_id(tasks[7].id) == tasks[7]


@pytest.mark.slow
async def test_reference_solutions_solve_every_task() -> None:
    tasks = env.generate_tasks(0)
    async with Client(server.mcp, cache=None) as client:
        scores = [await run_reference(client, env, t, "ref") for t in tasks]
    failed = [t.id for t, s in zip(tasks, scores, strict=True) if s < env.SUCCESS_THRESHOLD]
    assert not failed


async def test_verifier_is_not_fooled() -> None:
    tasks = {kind: next(t for t in env.generate_tasks(0) if t.data["kind"] == kind) for kind in env.KINDS}
    async with Client(server.mcp, cache=None) as client:
        # question: a wrong answer and an empty one score 0; the right one with noise around it (case, quotes) is fine
        q = tasks["question"]
        await call(client, "fool-q", "mcp_gym_reset", {"task_id": q.id})
        st = await state_of(client, "fool-q")
        assert env.verify(q, "", st) == 0.0 and env.verify(q, "I don't know", st) == 0.0
        assert env.verify(q, f'  "{q.answer.upper()}". ', st) == 1.0
        # store: one note holding every fact (and the right tag) does not count
        s = tasks["store"]
        await call(client, "fool-s", "mcp_gym_reset", {"task_id": s.id})
        everything = " ".join(f["sentence"] for f in s.data["facts"])
        for fact in s.data["facts"]:
            tags = [s.data["tag"]]
            await call(client, "fool-s", "create_note", {"title": fact["title"], "content": everything, "tags": tags})
        assert env.verify(s, "done", await state_of(client, "fool-s")) == 0.0
        # tag: tagging every note scores 0
        t = tasks["tag"]
        await call(client, "fool-t", "mcp_gym_reset", {"task_id": t.id})
        for n in t.data["notes"]:
            await call(client, "fool-t", "tag_note", {"title": n["title"], "tags": [t.data["tag"]]})
        assert env.verify(t, "done", await state_of(client, "fool-t")) == 0.0


async def random_episode(client: Client, task: Task, ep: str, rng: random.Random) -> float:
    """Play 12 random but well-formed calls and a random answer; return the verify score."""
    await call(client, ep, "mcp_gym_reset", {"task_id": task.id, "seed": rng.randrange(100)})
    words = ["project", "meeting", "trip", "contact", "room", "note", "facts", "done", "budget"]
    for _ in range(12):
        titles = [n["title"] for n in (await state_of(client, ep))["notes"]] or ["none"]
        tool, args = rng.choice(
            [
                ("create_note", {"title": f"note {rng.randrange(99)}", "content": rng.choice(words), "tags": []}),
                ("search_notes", {"query": rng.choice(words)}),
                ("read_note", {"title": rng.choice(titles)}),
                ("tag_note", {"title": rng.choice(titles), "tags": [rng.choice(env.TAGS)]}),
                ("list_notes", {}),
                ("delete_note", {"title": rng.choice(titles)}),
            ]
        )
        await call(client, ep, tool, args)
    answer = rng.choice(["", "done", rng.choice(words), f"+1-555-{rng.randint(1000, 9999)}"])
    return env.verify(task, answer, await state_of(client, ep))


async def test_random_play_scores_far_below_reference() -> None:
    rng = random.Random(0)
    tasks = rng.sample(env.generate_tasks(0), 20)
    async with Client(server.mcp, cache=None) as client:
        scores = [await random_episode(client, t, f"rand-{i}", rng) for i, t in enumerate(tasks)]
    mean = sum(scores) / len(scores)
    print(f"notes random-play mean score: {mean:.3f}")
    assert mean < 0.3


async def test_resources_follow_the_episode() -> None:
    task = next(t for t in env.generate_tasks(0) if t.data["kind"] == "question")
    async with Client(server.mcp, cache=None) as client:
        await call(client, "res-a", "mcp_gym_reset", {"task_id": task.id})
        await call(client, "res-b", "mcp_gym_reset", {})
        await call(client, "res-b", "create_note", {"title": "Groceries / weekly", "content": "eggs", "tags": ["x"]})
        index_a = (await client.read_resource("notes://index", meta=episode("res-a"))).contents[0].text
        index_b = (await client.read_resource("notes://index", meta=episode("res-b"))).contents[0].text
        assert all(n["title"] in index_a for n in task.data["notes"]) and "Groceries" not in index_a
        assert "Groceries / weekly" in index_b and task.data["notes"][0]["title"] not in index_b
        uri = "notes://" + quote("Groceries / weekly", safe="")
        assert uri in index_b
        text = (await client.read_resource(uri, meta=episode("res-b"))).contents[0].text
        assert "eggs" in text and "Tags: x" in text
        templates = await client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["notes://{title}"]


async def test_tool_errors_and_structured_output() -> None:
    async with Client(server.mcp, cache=None) as client:
        await call(client, "err", "mcp_gym_reset", {})
        ok = await call(client, "err", "create_note", {"title": "A", "content": "alpha beta", "tags": ["t"]})
        assert ok.structured_content == {"title": "A", "content": "alpha beta", "tags": ["t"], "uri": "notes://A"}
        dup = await call(client, "err", "create_note", {"title": "a", "content": "again"})
        assert dup.is_error and "already exists" in dup.content[0].text
        missing = await call(client, "err", "read_note", {"title": "nope"})
        assert missing.is_error and "No note titled" in missing.content[0].text
        found = await call(client, "err", "search_notes", {"query": "BETA alpha"})
        assert found.structured_content["total"] == 1
        tagged = await call(client, "err", "tag_note", {"title": "A", "tags": ["T", "u"]})
        assert tagged.structured_content["tags"] == ["t", "u"]
        assert (await state_of(client, "err"))["notes"] == [{"title": "A", "content": "alpha beta", "tags": ["t", "u"]}]


async def test_annotations() -> None:
    async with Client(server.mcp, cache=None) as client:
        hints = tool_hints(await client.list_tools())
    assert hints["search_notes"] == hints["read_note"] == hints["list_notes"] == (True, False, True)
    assert hints["create_note"] == (False, False, False)
    assert hints["tag_note"] == (False, False, True)
    assert hints["delete_note"] == (False, True, True)


async def _isolated_episodes(client: Client, prefix: str, n: int) -> None:
    """Give each of ``n`` concurrent episodes its own notes, then check each state holds only its own notes."""

    async def play(i: int) -> None:
        ep = f"{prefix}-{i}"
        await call(client, ep, "mcp_gym_reset", {})
        for k in range(3):
            res = await call(client, ep, "create_note", {"title": f"{ep}/{k}", "content": f"c{i}", "tags": [ep]})
            assert not res.is_error, res.content

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(play, i)
    for i in range(n):
        notes = (await state_of(client, f"{prefix}-{i}"))["notes"]
        assert [n["title"] for n in notes] == [f"{prefix}-{i}/{k}" for k in range(3)]
        assert {n["content"] for n in notes} == {f"c{i}"}


@pytest.mark.slow
async def test_stdio_64_concurrent_episodes_one_process() -> None:
    async with Client(stdio_params("notes"), cache=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"create_note", "search_notes", "read_note", "tag_note", "list_notes"} <= names
        await _isolated_episodes(client, "stdio", 64)


@pytest.mark.slow
async def test_http_16_concurrent_clients() -> None:
    async with serve_http("notes") as url:

        async def one(i: int) -> None:
            async with Client(url, cache=None) as client:
                assert "list_notes" in {t.name for t in (await client.list_tools()).tools}
                await _isolated_episodes(client, f"http{i}", 1)

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
