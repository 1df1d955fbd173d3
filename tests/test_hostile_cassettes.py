"""Crafted cassettes (issue 26, item 12): a line that parses but is not what the format says fails ``Replay()`` with a
:class:`~mcp_gym.cassette.CassetteError` naming the file, line and field, never a bare ``AttributeError``,
``KeyError`` or ``RecursionError`` (at load, or later in a replay). The cassette is recorded from the bundled Counter
server in process, then edited line by line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_gym.cassette import CassetteError, Replay
from mcp_gym.client.specs import InProcess
from mcp_gym.env import MCPEnv
from mcp_gym.envs import load_env_tasks
from mcp_gym.servers.counter import make_server


def _env(spec: Any) -> MCPEnv:
    return MCPEnv({"testing": spec}, load_env_tasks("Counter")[:1], env_id="test/Cassette-v0")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The lines of a cassette of one Counter episode (reset, a listing, one call)."""
    path = tmp_path_factory.mktemp("cassette") / "testing.jsonl"
    env = _env(InProcess(make_server(), record=path))
    env.reset(seed=1)
    env.step(load_env_tasks("Counter")[0].solution[0])
    env.close()
    return [json.loads(line) for line in path.read_text().splitlines()]


def _index(lines: list[dict[str, Any]], kind: str, method: str | None = None) -> int:
    return next(i for i, ev in enumerate(lines) if ev["kind"] == kind and (method is None or ev["method"] == method))


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


DEEP = '{"kind": "request", "params": ' + "[" * 100_000 + "]" * 100_000 + "}"

# (what, kind and method of the line to edit, the edit, the field the error must name; None: the whole line)
CRAFTED: list[tuple[str, str, str | None, Any, str | None]] = [
    ("a list, not an object", "request", "tools/call", lambda ev: [ev], None),
    ("a string", "episode", None, lambda ev: '"episode"', None),
    ("nesting past the recursion limit", "request", "tools/call", lambda ev: DEEP, None),
    ("episode without its id", "episode", None, lambda ev: {k: v for k, v in ev.items() if k != "episode"},
     "episode"),
    ("episode id a list", "episode", None, lambda ev: {**ev, "episode": [1]}, "episode"),
    ("seed a string", "episode", None, lambda ev: {**ev, "seed": "1"}, "seed"),
    ("request without seq", "request", "tools/call", lambda ev: {k: v for k, v in ev.items() if k != "seq"}, "seq"),
    ("seq a string", "request", "tools/call", lambda ev: {**ev, "seq": "3"}, "seq"),
    ("method a number", "request", "tools/call", lambda ev: {**ev, "method": 5}, "method"),
    ("params a list", "request", "tools/call", lambda ev: {**ev, "params": [1]}, "params"),
    ("connection an object", "request", "tools/call", lambda ev: {**ev, "connection": {}}, "connection"),
    ("result a list", "request", "tools/call", lambda ev: {**ev, "result": [1]}, "result"),
    ("content a string", "request", "tools/call", lambda ev: {**ev, "result": {"content": "x"}}, "result.content"),
    ("a tool a number", "request", "tools/list", lambda ev: {**ev, "result": {"tools": [1]}}, "result.tools.0"),
    ("error code text", "request", "tools/call", lambda ev: {**ev, "error": {"code": "x", "message": "m"}},
     "error.code"),
    ("capabilities wrong", "header", None, lambda ev: {**ev, "capabilities": {"tools": 5}}, "capabilities.tools"),
    ("version text", "header", None, lambda ev: {**ev, "version": "x"}, "version"),
    ("server info a list", "header", None, lambda ev: {**ev, "server_info": ["x"]}, "server_info"),
    ("server name a number", "header", None, lambda ev: {**ev, "server_info": {"name": 1}}, "server_info.name"),
    ("protocol version a number", "header", None, lambda ev: {**ev, "protocol_version": 2026}, "protocol_version"),
]


@pytest.mark.parametrize(("what", "kind", "method", "edit", "field"), CRAFTED, ids=[c[0] for c in CRAFTED])
def test_a_crafted_line_is_named_by_file_line_and_field(recorded: list[dict[str, Any]], tmp_path: Path, what: str,
                                                        kind: str, method: str | None, edit: Any,
                                                        field: str | None) -> None:
    lines: list[Any] = [dict(ev) for ev in recorded]
    i = _index(lines, kind, method)
    lines[i] = edit(lines[i])
    path = _write(tmp_path / "crafted.jsonl", lines)
    with pytest.raises(CassetteError) as caught:
        Replay(path)
    e = caught.value
    assert (e.path, e.line, e.field) == (path, i + 1, field), str(e)
    message = str(e)
    assert message.startswith(f"{path}:{i + 1}: ") and "\n" not in message and len(message) < 400, message
    if field is not None:
        assert f": {field}: " in message


def test_the_recorded_cassette_replays_and_torn_lines_are_still_skipped(recorded: list[dict[str, Any]],
                                                                        tmp_path: Path) -> None:
    """The checks accept what the recorder writes; an unparsable (torn) line is skipped as before."""
    path = _write(tmp_path / "ok.jsonl", [*recorded, '{"kind": "request", "conn'])
    env = _env(Replay(path))
    try:
        env.reset(seed=1)
        *_, info = env.step(load_env_tasks("Counter")[0].solution[0])
        assert info["error"] is None and not info["is_error"], info
    finally:
        env.close()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for k, v in enumerate(value):
            out += _paths(v, (*prefix, k))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_lines_load_or_fail_with_a_cassette_error(recorded: list[dict[str, Any]], tmp_path: Path,
                                                         data: st.DataObject) -> None:
    """Any value put anywhere in any line: ``Replay()`` either loads the cassette and answers its recorded calls,
    or raises a CassetteError naming a line of the file."""
    lines: list[Any] = [json.loads(json.dumps(ev)) for ev in recorded]
    i = data.draw(st.integers(0, len(lines) - 1))
    where = data.draw(st.sampled_from(_paths(lines[i])))
    value = data.draw(JSON)
    if where:
        target = lines[i]
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] = value
    else:
        lines[i] = value
    path = _write(tmp_path / "fuzzed.jsonl", lines)
    try:
        spec = Replay(path)
    except CassetteError as e:
        assert e.line is None or 1 <= e.line <= len(lines), str(e)
        assert str(e).startswith(str(path)) and "\n" not in str(e)
        return
    server = spec.server
    for ex in server.cassette.all_exchanges():  # every recorded answer looks up and converts without raising
        found = server.lookup(None, ex.method, ex.params)
        assert not isinstance(found, str) or found.startswith("mcp-gym replay:")


# -- round 6: a handed-over run's cassettes folder ---------------------------------------------------------------------
def _replay_in_child(folder: Path) -> subprocess.CompletedProcess[str]:
    """``replay_servers(folder)`` in its own process, bounded: a read that never ends fails the test, never hangs it."""
    code = ("import sys\nfrom mcp_gym.cassette.spec import replay_servers\n"
            "try:\n    replay_servers(sys.argv[1])\nexcept (ValueError, OSError) as e:\n    print(e)\n")
    return subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _plant(recorded: list[dict[str, Any]], tmp_path: Path, plant: str) -> Path:
    """A run whose ``cassettes/`` holds its own ``testing.jsonl`` and ``other.jsonl``: a named pipe, a link to
    ``/dev/zero`` or a link to a cassette of another run of the user's."""
    folder = tmp_path / "run" / "cassettes"
    folder.mkdir(parents=True)
    _write(folder / "testing.jsonl", recorded)
    bad = folder / "other.jsonl"
    if plant == "pipe":
        os.mkfifo(bad)
    elif plant == "zero":
        bad.symlink_to("/dev/zero")
    else:
        bad.symlink_to(_write(tmp_path / "private.jsonl", recorded))
    return tmp_path / "run"


@pytest.mark.parametrize("plant", ["pipe", "zero", "outside"])
def test_a_run_s_cassettes_are_read_only_if_they_are_its_own_regular_files(recorded: list[dict[str, Any]],
                                                                          tmp_path: Path, plant: str) -> None:
    """``replay_servers(run)`` read every ``cassettes/*.jsonl``: a named pipe there waited for a writer without end,
    a link to ``/dev/zero`` read one endless line until memory ran out, and a link to a cassette of another run of
    the user's replayed its recorded results. Each is refused in one line naming it. (In this process: the files are
    opened without blocking; the slow test below runs the pipe in a child, bounded.)"""
    from mcp_gym.cassette.spec import replay_servers

    run = _plant(recorded, tmp_path, plant)
    with pytest.raises(CassetteError, match="other.jsonl: refusing to read this cassette") as e:
        replay_servers(run)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.slow  # a child process; the fast test above covers the same refusals in this process
def test_a_pipe_among_a_run_s_cassettes_does_not_hang_a_replay(recorded: list[dict[str, Any]],
                                                               tmp_path: Path) -> None:
    try:
        done = _replay_in_child(_plant(recorded, tmp_path, "pipe"))
    except subprocess.TimeoutExpired:
        pytest.fail("replay_servers read the pipe without end")
    assert "other.jsonl: refusing to read this cassette" in done.stdout, done.stdout + done.stderr[-2000:]


def test_a_cassette_line_past_the_bound_is_refused(recorded: list[dict[str, Any]], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A line is read at most ``MAX_LINE_BYTES`` at a time: a file of one endless line (sparse, no disk used)
    fails naming the line instead of filling memory."""
    from mcp_gym.cassette import reader

    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1 << 16)
    path = _write(tmp_path / "testing.jsonl", recorded)
    with open(path, "ab") as f:
        f.truncate(f.tell() + (1 << 20))
    with pytest.raises(CassetteError, match=r"testing.jsonl:\d+: a line longer than 65536 bytes"):
        Replay(path)
