"""The Files server over real MCP: reference solutions, random play, the sandbox (one test per attack class, each
checking the refusal and that nothing outside changed), client roots, workspace clean-up, concurrency (stdio and
HTTP) and annotations."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListRootsResult, Root
from test_server_notes import call, run_reference, serve_http, state_of, stdio_params, tool_hints

from mcp_gym.envs.files import tasks as env
from mcp_gym.servers.files import new_state, resolve, server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


TASKS = env.generate_tasks(0)
ORGANISE = next(t for t in TASKS if t.data["kind"] == "organise")


def test_task_set_shape() -> None:
    assert len(TASKS) >= 100 and len({t.id for t in TASKS}) == len(TASKS)
    assert sum(t.split == "test" for t in TASKS) == len(TASKS) // 5
    assert {t.data["kind"] for t in TASKS} == set(env.KINDS)
    assert all(t.solution[-1]["tool"] == "submit" for t in TASKS)
    assert [t.to_record() for t in env.generate_tasks(0)[:9]] == [t.to_record() for t in TASKS[:9]]
    assert env.task_by_id(TASKS[5].id) == TASKS[5]


@pytest.mark.slow
async def test_reference_solutions_solve_every_task() -> None:
    async with Client(server.mcp, cache=None) as client:
        for t in TASKS:
            assert await run_reference(client, env, t, "ref") >= env.SUCCESS_THRESHOLD, t.id


async def test_verifier_is_not_fooled() -> None:
    edit = next(t for t in TASKS if t.data["kind"] == "edit")
    find = next(t for t in TASKS if t.data["kind"] == "find")
    async with Client(server.mcp, cache=None) as client:
        # organise: copying files to their folders without moving them away scores 0
        await call(client, "fool", "mcp_gym_reset", {"task_id": ORGANISE.id})
        for src, dst in ORGANISE.data["moves"].items():
            await call(client, "fool", "write_file", {"path": dst, "content": ORGANISE.data["files"][src]})
        assert env.verify(ORGANISE, "done", await state_of(client, "fool")) == 0.0
        # ... and so does moving everything but damaging the archived files
        await call(client, "fool", "mcp_gym_reset", {"task_id": ORGANISE.id})
        for src, dst in ORGANISE.data["moves"].items():
            await call(client, "fool", "move_file", {"source": src, "destination": dst})
        assert env.verify(ORGANISE, "done", await state_of(client, "fool")) == 1.0
        for path in ORGANISE.data["files"]:
            if path.startswith("archive/"):
                await call(client, "fool", "delete_file", {"path": path})
        assert env.verify(ORGANISE, "done", await state_of(client, "fool")) == 0.0
        # edit: the right change plus damage to another file scores 0; the change in the wrong file too
        await call(client, "fool", "mcp_gym_reset", {"task_id": edit.id})
        await call(client, "fool", "write_file", {"path": edit.data["path"], "content": edit.data["expected"]})
        assert env.verify(edit, "done", await state_of(client, "fool")) == 1.0
        await call(client, "fool", "write_file", {"path": "README.md", "content": ""})
        assert env.verify(edit, "done", await state_of(client, "fool")) == 0.0
        other = next(p for p in edit.data["files"] if p.startswith("config/") and p != edit.data["path"])
        await call(client, "fool", "mcp_gym_reset", {"task_id": edit.id})
        await call(client, "fool", "write_file", {"path": other, "content": edit.data["expected"]})
        assert env.verify(edit, "done", await state_of(client, "fool")) == 0.0
    # find: only the exact answer counts (leading "/" or "./" is fine)
    assert env.verify(find, "/" + find.answer, {}) == 1.0 and env.verify(find, "./" + find.answer, {}) == 1.0
    assert env.verify(find, find.data["source"].rsplit("/", 1)[-1] + "x", {}) == 0.0 and env.verify(find, None, {}) == 0


def _random_call(rng: random.Random, st: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    files = list(st["files"]) or ["x.txt"]
    dirs = ["/", *st["dirs"]]
    name = f"{rng.choice(['a', 'b', 'c'])}.{rng.choice(env.EXTENSIONS)}"
    return rng.choice(
        [
            ("list_directory", {"path": rng.choice(dirs)}),
            ("read_file", {"path": rng.choice(files)}),
            ("write_file", {"path": rng.choice([*files, name]), "content": rng.choice(["", "hello", "x=1\n"])}),
            ("move_file", {"source": rng.choice(files), "destination": f"{rng.choice(dirs)}/{name}"}),
            ("search_files", {"query": rng.choice(["INV", "ORD", "port", "txt", "the"])}),
            ("make_directory", {"path": rng.choice(env.EXTENSIONS)}),
            ("delete_file", {"path": rng.choice(files)}),
        ]
    )


async def test_random_play_scores_far_below_reference() -> None:
    rng = random.Random(0)
    scores = []
    async with Client(server.mcp, cache=None) as client:
        for i, t in enumerate(rng.sample(TASKS, 20)):
            ep = f"rand-{i}"
            await call(client, ep, "mcp_gym_reset", {"task_id": t.id})
            for _ in range(12):
                await call(client, ep, *_random_call(rng, await state_of(client, ep)))
            st = await state_of(client, ep)
            answer = rng.choice(["", "done", *st["files"]])
            scores.append(env.verify(t, answer, st))
    mean = sum(scores) / len(scores)
    print(f"files random-play mean score: {mean:.3f}")
    assert mean < 0.3


# -- sandbox -----------------------------------------------------------------------------------------------------
def _fingerprint(root: Path) -> dict[str, tuple[bytes | str, int]]:
    """Everything under ``root``: path -> (content or link target, mtime)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        data = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "<dir>"
        out[str(p.relative_to(root))] = (data, st.st_mtime_ns)
    return out


def _attacks(kind: str, ws: Path, outside: Path) -> list[tuple[str, dict[str, Any]]]:
    sentinel, new = outside / "sentinel.txt", outside / "new.txt"
    some_file = next(iter(ORGANISE.data["moves"]))
    if kind in ("traversal", "absolute"):
        if kind == "traversal":
            s, n, o = (os.path.relpath(p, ws) for p in (sentinel, new, outside))
            assert s.startswith("../")
        else:
            s, n, o = str(sentinel), str(new), str(outside)
        return [
            ("read_file", {"path": s}),
            ("write_file", {"path": s, "content": "pwned"}),
            ("write_file", {"path": n, "content": "pwned"}),
            ("move_file", {"source": s, "destination": "stolen.txt"}),
            ("move_file", {"source": some_file, "destination": n}),
            ("delete_file", {"path": s}),
            ("list_directory", {"path": o}),
            ("search_files", {"query": "secret", "path": o}),
            ("make_directory", {"path": f"{o}/made"}),
        ]
    if kind == "symlink_read":
        return [
            ("read_file", {"path": "link_file"}),
            ("read_file", {"path": "link_dir/sentinel.txt"}),
            ("list_directory", {"path": "link_dir"}),
            ("search_files", {"query": "secret", "path": "link_dir"}),
        ]
    if kind == "symlink_write":
        return [
            ("write_file", {"path": "link_file", "content": "pwned"}),
            ("write_file", {"path": "link_dir/new.txt", "content": "pwned"}),
            ("write_file", {"path": "dangling", "content": "pwned"}),
            ("make_directory", {"path": "link_dir/made"}),
            ("move_file", {"source": some_file, "destination": "link_dir/moved.txt"}),
            ("move_file", {"source": "link_dir/sentinel.txt", "destination": "stolen.txt"}),
            ("delete_file", {"path": "link_file"}),
            ("delete_file", {"path": "link_dir/sentinel.txt"}),
        ]
    assert kind == "null_byte"
    return [
        ("read_file", {"path": f"{some_file}\x00"}),
        ("write_file", {"path": "a.txt\x00/../../x", "content": "pwned"}),
        ("move_file", {"source": some_file, "destination": "b\x00.txt"}),
        ("delete_file", {"path": f"{some_file}\x00"}),
        ("list_directory", {"path": "\x00"}),
    ]


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink_read", "symlink_write", "null_byte"])
async def test_sandbox_refuses_and_changes_nothing(kind: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sentinel.txt").write_text("secret sentinel\n")
    ep = f"attack-{kind}"
    async with Client(server.mcp, cache=None) as client:
        await call(client, ep, "mcp_gym_reset", {"task_id": ORGANISE.id})
        ws = Path((await state_of(client, ep))["workspace"])
        assert not ws.is_relative_to(tmp_path)
        # a hostile workspace: links pointing out of it (no tool can create these; the task tree could)
        (ws / "link_dir").symlink_to(outside, target_is_directory=True)
        (ws / "link_file").symlink_to(outside / "sentinel.txt")
        (ws / "dangling").symlink_to(outside / "created.txt")
        before_outside, before_ws = _fingerprint(tmp_path), await state_of(client, ep)
        for tool, args in _attacks(kind, ws, outside):
            res = await call(client, ep, tool, args)
            assert res.is_error, (tool, args, res.content)
            assert "Refused" in res.content[0].text, (tool, args, res.content[0].text)
        hits = (await call(client, ep, "search_files", {"query": "secret"})).structured_content
        assert hits["total"] == 0  # the search never follows links out of the workspace
        assert _fingerprint(tmp_path) == before_outside
        assert await state_of(client, ep) == before_ws


async def test_undecodable_and_overlong_names_are_refused_before_the_disk() -> None:
    task = ORGANISE
    some_file = next(iter(task.data["files"]))
    attempts = [
        ("write_file", {"path": "\udcff.txt", "content": "x"}, "not valid Unicode"),
        ("write_file", {"path": "docs/\ud800/a.txt", "content": "x"}, "not valid Unicode"),
        ("make_directory", {"path": "\udcff"}, "not valid Unicode"),
        ("move_file", {"source": some_file, "destination": "\udcff.txt"}, "not valid Unicode"),
        ("read_file", {"path": "\udcff.txt"}, "not valid Unicode"),
        ("write_file", {"path": "ok.txt", "content": "bad \udcff"}, "content is not valid Unicode"),
        ("write_file", {"path": "a" * 256 + ".txt", "content": "x"}, "at most 255 bytes"),
        ("make_directory", {"path": "é" * 128}, "at most 255 bytes"),  # 256 bytes of UTF-8
        ("write_file", {"path": "/".join(["d" * 200] * 6), "content": "x"}, "the limit is 1024"),
    ]
    async with Client(server.mcp, cache=None) as client:
        await call(client, "names", "mcp_gym_reset", {"task_id": task.id})
        before = await state_of(client, "names")
        for tool, args, message in attempts:
            res = await call(client, "names", tool, args)
            assert res.is_error and "Refused" in res.content[0].text and message in res.content[0].text, (tool, args)
        assert await state_of(client, "names") == before  # nothing was created
        assert not (await call(client, "names", "list_directory", {"path": "/"})).is_error
        longest = await call(client, "names", "write_file", {"path": "b" * 255, "content": "fits"})
        assert not longest.is_error, longest.content
        await call(client, "names", "delete_file", {"path": "b" * 255})
        for step in task.solution[:-1]:  # the episode is still solvable
            assert not (await call(client, "names", step["tool"], step["arguments"])).is_error
        assert env.verify(task, "done", await state_of(client, "names")) >= env.SUCCESS_THRESHOLD


async def test_leading_slash_means_workspace_root() -> None:
    async with Client(server.mcp, cache=None) as client:
        await call(client, "slash", "mcp_gym_reset", {})
        ws = (await state_of(client, "slash"))["workspace"]
        assert not (await call(client, "slash", "write_file", {"path": "/docs/a.txt", "content": "A"})).is_error
        assert (await call(client, "slash", "read_file", {"path": "docs/a.txt"})).structured_content["content"] == "A"
        inside = await call(client, "slash", "read_file", {"path": f"{ws}/docs/a.txt"})
        assert inside.structured_content["path"] == "docs/a.txt"
        moved = await call(client, "slash", "move_file", {"source": "/docs/a.txt", "destination": "/"})
        assert moved.structured_content == {"source": "docs/a.txt", "destination": "a.txt"}
        assert (await state_of(client, "slash"))["files"] == {"a.txt": "A"}


_SEGMENTS = ["..", ".", "", "a", "docs", "link_dir", "link_file", "dangling", "etc", "tmp", "~", "a\x00b", "c:", "\\"]


@settings(max_examples=300, deadline=None, database=None)
@given(parts=st.lists(st.sampled_from(_SEGMENTS), max_size=6), lead=st.sampled_from(["", "/", "./", "<host>/"]))
def test_resolve_never_leaves_the_workspace(parts: list[str], lead: str) -> None:
    """Property: any path made of tricky segments is refused or resolves to a real path inside the workspace."""
    ws = _HOSTILE_WS
    path = lead.replace("<host>", str(ws.root)) + "/".join(parts)
    try:
        real = resolve(ws, path)
    except ToolError as e:
        assert "Refused" in str(e)
        return
    assert real == ws.root or ws.root in real.parents
    assert Path(os.path.realpath(real)) == real


def _hostile_workspace() -> Any:
    ws = new_state(None, 0)
    outside = Path(ws.root).parent / (ws.root.name + "-outside")  # removed with the process folder at exit
    outside.mkdir()
    (ws.root / "docs").mkdir()
    (ws.root / "link_dir").symlink_to(outside, target_is_directory=True)
    (ws.root / "link_file").symlink_to(outside / "secret.txt")
    (ws.root / "dangling").symlink_to(outside / "missing.txt")
    return ws


_HOSTILE_WS = _hostile_workspace()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_client_roots_are_honoured(mode: str, tmp_path: Path) -> None:
    roots: list[str] = []

    async def list_roots(ctx: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=u) for u in roots])

    ep = f"roots-{mode}"
    async with Client(server.mcp, cache=None, mode=mode, list_roots_callback=list_roots) as client:
        await call(client, ep, "mcp_gym_reset", {"task_id": ORGANISE.id})
        ws = Path((await state_of(client, ep))["workspace"])
        archived = next(p for p in ORGANISE.data["files"] if p.startswith("archive/"))
        root_file = next(iter(ORGANISE.data["moves"]))
        roots[:] = [(ws / "archive").as_uri()]
        assert not (await call(client, ep, "read_file", {"path": archived})).is_error
        denied = await call(client, ep, "read_file", {"path": root_file})
        assert denied.is_error and "roots" in denied.content[0].text
        assert (await call(client, ep, "write_file", {"path": "new.txt", "content": "x"})).is_error
        roots[:] = [tmp_path.as_uri()]  # a root that does not meet the workspace: nothing is allowed
        assert (await call(client, ep, "list_directory", {"path": "/"})).is_error
        roots[:] = [ws.parent.as_uri()]  # a root containing the workspace: everything in it is allowed
        assert not (await call(client, ep, "read_file", {"path": root_file})).is_error
    assert "new.txt" not in (await _state_in_process(ep))["files"]


async def _state_in_process(ep: str) -> dict[str, Any]:
    async with Client(server.mcp, cache=None) as client:
        return await state_of(client, ep)


async def test_workspaces_are_removed_on_reset_and_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    async with Client(server.mcp, cache=None) as client:
        await call(client, "gc", "mcp_gym_reset", {"task_id": ORGANISE.id})
        first = Path((await state_of(client, "gc"))["workspace"])
        await call(client, "gc", "mcp_gym_reset", {"task_id": ORGANISE.id})
        second = Path((await state_of(client, "gc"))["workspace"])
        assert second.is_dir() and first != second and not first.exists()
        monkeypatch.setattr(server, "_max_episodes", 2)  # keep only the 2 most recent episodes
        await call(client, "gc-a", "mcp_gym_reset", {})
        await call(client, "gc-b", "mcp_gym_reset", {})
        assert server.episode_count == 2 and not second.exists()


async def _isolated_episodes(client: Client, prefix: str, n: int) -> list[str]:
    """Each of ``n`` concurrent episodes writes and moves its own file; check each tree holds only its own file."""

    async def play(i: int) -> None:
        ep = f"{prefix}-{i}"
        await call(client, ep, "mcp_gym_reset", {})
        assert not (await call(client, ep, "write_file", {"path": f"tmp/{ep}.txt", "content": ep})).is_error
        assert not (await call(client, ep, "make_directory", {"path": "mine"})).is_error
        assert not (await call(client, ep, "move_file", {"source": f"tmp/{ep}.txt", "destination": "mine"})).is_error

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(play, i)
    workspaces = []
    for i in range(n):
        st = await state_of(client, f"{prefix}-{i}")
        assert st["files"] == {f"mine/{prefix}-{i}.txt": f"{prefix}-{i}"} and st["dirs"] == ["mine", "tmp"]
        workspaces.append(st["workspace"])
    assert len(set(workspaces)) == n
    return workspaces


@pytest.mark.slow
async def test_stdio_64_concurrent_episodes_one_process() -> None:
    async with Client(stdio_params("files"), cache=None) as client:
        assert not (await client.call_tool("list_directory", {"path": "/"})).is_error
        workspaces = await _isolated_episodes(client, "stdio", 64)
    with anyio.fail_after(60):  # a bound on hangs: the server exits on stdin EOF and removes its workspaces
        while any(os.path.exists(w) for w in workspaces):
            await anyio.sleep(0.1)


@pytest.mark.slow
async def test_http_16_concurrent_clients() -> None:
    workspaces: list[str] = []
    async with serve_http("files") as url:

        async def one(i: int) -> None:
            async with Client(url, cache=None) as client:
                assert "read_file" in {t.name for t in (await client.list_tools()).tools}
                workspaces.extend(await _isolated_episodes(client, f"http{i}", 2))

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
    assert len(set(workspaces)) == 32
    assert not any(os.path.exists(w) for w in workspaces)  # removed when the server shut down


async def test_annotations() -> None:
    async with Client(server.mcp, cache=None) as client:
        hints = tool_hints(await client.list_tools())
    for ro in ("list_directory", "read_file", "search_files"):
        assert hints[ro] == (True, False, True)
    assert hints["write_file"] == (False, True, True)
    assert hints["delete_file"] == (False, True, True)
    assert hints["move_file"] == (False, False, False)
    assert hints["make_directory"] == (False, False, True)
