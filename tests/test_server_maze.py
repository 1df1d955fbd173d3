"""The Maze server over real MCP: layouts, reference solutions, random play, the key-gated ``unlock`` tool and its
notifications in both protocol eras, per-episode ``maze://state``, concurrency (stdio and HTTP), annotations."""

from __future__ import annotations

import random

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.types import ResourceUpdatedNotification, ToolListChangedNotification
from test_server_notes import call, run_reference, serve_http, state_of, stdio_params, tool_hints

from mcp_gym.envs.maze import tasks as env
from mcp_gym.servers.maze import server
from mcp_gym.tasks import Task

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


TASKS = env.generate_tasks(0)


def moves_until_key(task: Task) -> list[dict]:
    """The reference moves up to and including picking up the key."""
    lay = env.Layout.from_rows(task.data["rows"])
    pos, out = lay.start, []
    for s in task.solution:
        out.append(s)
        pos = env.step(pos, s["arguments"]["direction"])
        if pos == lay.key:
            return out
    raise AssertionError("the reference solution never reaches the key")


def test_layouts() -> None:
    assert len(TASKS) >= 100 and len({tuple(t.data["rows"]) for t in TASKS}) == len(TASKS)
    assert sum(t.split == "test" for t in TASKS) == len(TASKS) // 5
    for t in TASKS:
        lay = env.Layout.from_rows(t.data["rows"])
        assert 5 <= lay.size <= 7 and lay.rows() == list(t.data["rows"])
        # the door is the only way into the goal, and the key is reachable without it
        assert [q for q in lay.neighbours(lay.goal) if q not in lay.walls] == [lay.door]
        assert env.shortest_path(lay, lay.start, [lay.key], [lay.door, lay.goal]) is not None
        assert t.solution[-1]["tool"] == "submit" and any(s["tool"] == "unlock" for s in t.solution)
        assert len(t.solution) <= env.MAX_STEPS
    assert env.task_by_id(TASKS[3].id) == TASKS[3]


@pytest.mark.slow
async def test_reference_solutions_solve_every_task() -> None:
    async with Client(server.mcp, cache=None) as client:
        for t in TASKS:
            assert await run_reference(client, env, t, "ref") >= env.SUCCESS_THRESHOLD, t.id
            st = await state_of(client, "ref")
            assert st["moves"] == len(t.solution) - 2  # every step but unlock and submit is a move
            assert st["total_reward"] == pytest.approx(1.0 - 0.01 * (st["moves"] - 1))


async def test_random_play_scores_far_below_reference() -> None:
    rng = random.Random(0)
    scores = []
    async with Client(server.mcp, cache=None) as client:
        for i, t in enumerate(rng.sample(TASKS, 20)):
            ep = f"rand-{i}"
            await call(client, ep, "mcp_gym_reset", {"task_id": t.id})
            for _ in range(env.MAX_STEPS - 1):
                tool = rng.choice(["move"] * 6 + ["look", "unlock"])
                args = {"direction": rng.choice(list(env.DIRECTIONS))} if tool == "move" else {}
                await call(client, ep, tool, args)
            scores.append(env.verify(t, "done", await state_of(client, ep)))
    mean = sum(scores) / len(scores)
    print(f"maze random-play mean score: {mean:.3f}")
    assert mean < 0.3


def _blocked_start(task: Task) -> str | None:
    lay = env.Layout.from_rows(task.data["rows"])
    cells = {d: env.step(lay.start, d) for d in env.DIRECTIONS}
    blocked = [d for d, q in cells.items() if not lay.inside(q) or q in lay.walls]
    return blocked[0] if blocked else None


async def test_moves_walls_rewards_and_goal() -> None:
    t = next(t for t in TASKS if _blocked_start(t))
    lay = env.Layout.from_rows(t.data["rows"])
    async with Client(server.mcp, cache=None) as client:
        await call(client, "walls", "mcp_gym_reset", {"task_id": t.id})
        res = (await call(client, "walls", "move", {"direction": _blocked_start(t)})).structured_content
        assert res["position"] == list(lay.start) and res["moved"] is False
        assert res["reward"] == pytest.approx(-0.01) and res["done"] is False
        assert "position (" in res["status"] and "key: not held" in res["status"]
        bad = await call(client, "walls", "move", {"direction": "north"})
        assert bad.is_error
        for s in t.solution[:-2]:
            await call(client, "walls", s["tool"], s["arguments"])
        last = (await call(client, "walls", "move", t.solution[-2]["arguments"])).structured_content
        assert last["done"] is True and last["reward"] == 1.0 and last["position"] == list(lay.goal)
        after = (await call(client, "walls", "move", {"direction": "up"})).structured_content
        assert after["done"] is True and after["reward"] == 0.0


async def _gate_scenario(client: Client, ep: str, task: Task) -> None:
    """Before the key: unlock hidden and refused; walk to the key; after: listed. Caller checks notifications."""
    await call(client, ep, "mcp_gym_reset", {"task_id": task.id})
    names = {t.name for t in (await client.list_tools(meta={"mcp-gym/episode": ep})).tools}
    assert "unlock" not in names and {"move", "look"} <= names
    refused = await call(client, ep, "unlock")
    assert refused.is_error and "not available" in refused.content[0].text
    for s in moves_until_key(task):
        assert not (await call(client, ep, s["tool"], s["arguments"])).is_error
    names = {t.name for t in (await client.list_tools(meta={"mcp-gym/episode": ep})).tools}
    assert "unlock" in names
    # another episode of the same server still does not see it
    other = {t.name for t in (await client.list_tools(meta={"mcp-gym/episode": ep + "-other"})).tools}
    assert "unlock" not in other


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_unlock_gated_handshake_era_over_stdio() -> None:
    got: list[object] = []

    async def on_message(msg: object) -> None:
        got.append(msg)

    async with Client(stdio_params("maze"), cache=None, mode="legacy", message_handler=on_message) as client:
        assert client.protocol_version != "2026-07-28"
        await client.subscribe_resource("maze://state")
        await _gate_scenario(client, "legacy", TASKS[1])
        with anyio.fail_after(60):  # a bound on hangs: it ends as soon as the notification came
            while not any(isinstance(m, ToolListChangedNotification) for m in got):
                await anyio.sleep(0.01)
        assert sum(isinstance(m, ToolListChangedNotification) for m in got) == 1
        assert any(isinstance(m, ResourceUpdatedNotification) and str(m.params.uri) == "maze://state" for m in got)


async def test_unlock_gated_2026_era_over_stdio() -> None:
    async with Client(stdio_params("maze"), cache=None) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(tools_list_changed=True, resource_subscriptions=["maze://state"]) as sub:
            await _gate_scenario(client, "modern", TASKS[2])
            events: list[object] = []
            with anyio.fail_after(60):  # a bound on hangs: it ends as soon as the notification came
                async for ev in sub:
                    events.append(ev)
                    if any(isinstance(e, ToolsListChanged) for e in events):
                        break
        assert any(isinstance(e, ResourceUpdated) and str(e.uri) == "maze://state" for e in events)


async def test_unlock_only_next_to_the_door() -> None:
    def far_from_door(t: Task) -> bool:
        lay = env.Layout.from_rows(t.data["rows"])
        return lay.door not in lay.neighbours(lay.key)

    t = next(t for t in TASKS if far_from_door(t))
    async with Client(server.mcp, cache=None) as client:
        await call(client, "door", "mcp_gym_reset", {"task_id": t.id})
        for s in moves_until_key(t):
            await call(client, "door", s["tool"], s["arguments"])
        st = await state_of(client, "door")
        assert st["has_key"] is True and st["door_open"] is False
        res = await call(client, "door", "unlock")
        assert res.is_error and "no door next to you" in res.content[0].text
        assert (await state_of(client, "door"))["door_open"] is False


async def test_state_resource_is_per_episode() -> None:
    async with Client(server.mcp, cache=None) as client:
        await call(client, "view-a", "mcp_gym_reset", {"task_id": TASKS[0].id})
        await call(client, "view-b", "mcp_gym_reset", {"task_id": TASKS[1].id})
        await call(client, "view-b", "move", TASKS[1].solution[0]["arguments"])
        a = (await client.read_resource("maze://state", meta={"mcp-gym/episode": "view-a"})).contents[0].text
        b = (await client.read_resource("maze://state", meta={"mcp-gym/episode": "view-b"})).contents[0].text
        for text, t, ep in ((a, TASKS[0], "view-a"), (b, TASKS[1], "view-b")):
            size = len(t.data["rows"])
            assert text.startswith(f"Maze {size}x{size}")
            pos = (await state_of(client, ep))["position"]
            assert f"position ({pos[0]}, {pos[1]})" in text
            grid = text.splitlines()[1 : 1 + size]
            assert grid[pos[0]].split()[pos[1]] == "A"
        look = (await call(client, "view-a", "look")).structured_content
        assert look["grid"] == a


async def test_annotations() -> None:
    async with Client(server.mcp, cache=None) as client:
        await call(client, "ann", "mcp_gym_reset", {"task_id": TASKS[0].id})
        for s in moves_until_key(TASKS[0]):
            await call(client, "ann", s["tool"], s["arguments"])
        hints = tool_hints(await client.list_tools(meta={"mcp-gym/episode": "ann"}))
    assert hints["look"] == (True, False, True)
    assert hints["move"] == (False, False, False)
    assert hints["unlock"] == (False, False, True)


async def _isolated_episodes(client: Client, prefix: str, n: int) -> None:
    """Each of ``n`` concurrent episodes walks a different number of steps in a different maze; check each state."""

    def plan(i: int) -> tuple[Task, list[dict]]:
        t = TASKS[i % len(TASKS)]
        steps = moves_until_key(t)
        return t, steps[: 1 + i % len(steps)]

    async def play(i: int) -> None:
        t, steps = plan(i)
        await call(client, f"{prefix}-{i}", "mcp_gym_reset", {"task_id": t.id})
        for s in steps:
            assert not (await call(client, f"{prefix}-{i}", s["tool"], s["arguments"])).is_error

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(play, i)
    for i in range(n):
        t, steps = plan(i)
        pos = env.Layout.from_rows(t.data["rows"]).start
        for s in steps:
            pos = env.step(pos, s["arguments"]["direction"])
        st = await state_of(client, f"{prefix}-{i}")
        assert (st["task_id"], st["position"], st["moves"]) == (t.id, list(pos), len(steps))


@pytest.mark.slow
async def test_stdio_64_concurrent_episodes_one_process() -> None:
    async with Client(stdio_params("maze"), cache=None) as client:
        assert not (await client.call_tool("look", {})).is_error
        await _isolated_episodes(client, "stdio", 64)


@pytest.mark.slow
async def test_http_16_concurrent_clients() -> None:
    async with serve_http("maze") as url:

        async def one(i: int) -> None:
            async with Client(url, cache=None) as client:
                assert "move" in {t.name for t in (await client.list_tools()).tools}
                await _isolated_episodes(client, f"http{i}", 1 + i % 2)

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
