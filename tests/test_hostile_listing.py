"""A server's tool listing is bounded as a whole (round 9), not only page by page.

Each ``tools/list`` page is one message, bounded by the spec's ``max_message_bytes`` (32 MiB), and a listing follows
at most 1,000 pages: a hostile server answering page after page of huge tool definitions was bounded only by the
listing's time limit (20 pages of one 30 MB tool: 1.3 GB for ``mcp-gym inspect``, held as the job's catalogue), and
the client's cache of checked definitions kept each one, keyed by its whole JSON, after the server was gone. Now one
listing takes at most ``MAX_LISTING_BYTES`` (64 MiB) of definitions, and the cache keeps none over 64 kB. A real raw
stdio server (a script) serves the pages and logs each one it served."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcp_gym import MCPEnv, Stdio
from mcp_gym.client import _tools

PAGES_SERVER = r'''
import json, sys
pages, size, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") is None:
        continue
    method = msg.get("method")
    if method == "initialize":
        res = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
               "serverInfo": {"name": "pages", "version": "1"}}
    elif method == "tools/list":
        n = int((msg.get("params") or {}).get("cursor") or 0)
        with open(log, "a") as f:
            f.write(f"{n}\n")
        res = {"tools": [{"name": f"t{n}", "description": str(n) * size, "inputSchema": {"type": "object"}}]}
        if n + 1 < pages:
            res["nextCursor"] = str(n + 1)
    else:
        res = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) + "\n")
    sys.stdout.flush()
'''


def test_a_listing_of_huge_tools_page_after_page_is_refused_past_its_bound(tmp_path: Path) -> None:
    script, log = tmp_path / "pages.py", tmp_path / "served"
    script.write_text(PAGES_SERVER)
    size = 20 << 20  # 20 MiB a page (under max_message_bytes): the 4th page passes 64 MiB
    server = Stdio(sys.executable, [str(script), "8", str(size), str(log)], connect_timeout=120)
    env = MCPEnv({"s": server}, ["t"], call_timeout=60)
    try:
        _, info = env.reset(seed=0)
        srv = info["servers"]["s"]
        assert srv["tools_error"] is not None and "more than 64 MiB of tool definitions" in srv["tools_error"], srv
        assert env.action_space.tool_names == ["submit"]  # none of its tools offered
        assert max(map(int, log.read_text().split())) == 3  # each listing stopped at the page crossing the bound
        assert all(len(key[1]) <= 16 << 20 for key in _tools._CHECKED)  # no huge definition kept in the cache
        assert _tools._CHECKED.used <= 64 << 20
    finally:
        env.close()


def test_a_listing_under_the_bound_is_whole(tmp_path: Path) -> None:
    script, log = tmp_path / "pages.py", tmp_path / "served"
    script.write_text(PAGES_SERVER)
    server = Stdio(sys.executable, [str(script), "5", str(1 << 20), str(log)], connect_timeout=120)
    env = MCPEnv({"s": server}, ["t"], call_timeout=60)
    try:
        _, info = env.reset(seed=0)
        assert info["servers"]["s"]["tools_error"] is None
        assert sorted(env.action_space.tool_names) == ["submit", "t0", "t1", "t2", "t3", "t4"]
    finally:
        env.close()


def test_the_definition_caches_are_bounded_in_characters() -> None:
    from mcp_gym._memo import BoundedCache

    cache = BoundedCache(entries=100, chars=1000)
    cache.put(("v", "x" * 251), 1)  # over a quarter of the budget: not kept
    assert len(cache) == 0 and cache.used == 0
    for i in range(10):
        cache.put(("v", str(i) * 200), i)  # 200 characters each: the oldest go past 1,000
    assert cache.used <= 1000 and [k[1][0] for k in cache] == ["5", "6", "7", "8", "9"]
    assert cache[("v", "9" * 200)] == 9


UPDATES_SERVER = r'''
import json, sys
count, size = int(sys.argv[1]), int(sys.argv[2])
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
reads = 0
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") is None:
        continue
    method, res = msg.get("method"), {}
    if method == "initialize":
        res = {"protocolVersion": msg["params"]["protocolVersion"], "serverInfo": {"name": "updates", "version": "1"},
               "capabilities": {"tools": {}, "resources": {"subscribe": True}}}
    elif method == "tools/list":
        res = {"tools": [{"name": "flood", "inputSchema": {"type": "object"}}]}
    elif method == "resources/list":
        res = {"resources": [{"uri": "notes://a", "name": "a"}]}
    elif method == "resources/read":
        reads += 1
        res = {"contents": [{"uri": "notes://a", "text": f"read {reads}"}]}
    elif method == "tools/call":
        for i in range(count):  # distinct URIs nobody subscribed to, each under max_message_bytes
            send({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                  "params": {"uri": f"notes://{i}/" + "x" * size}})
        send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "notes://a"}})
        res = {"content": [{"type": "text", "text": "flooded"}]}
    send({"jsonrpc": "2.0", "id": msg["id"], "result": res})
'''

CHILD = r'''
import sys
from mcp_gym import MCPEnv, Stdio, Task

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

env = MCPEnv({"s": Stdio(sys.executable, [sys.argv[1], sys.argv[2], sys.argv[3]], connect_timeout=120)},
             [Task(id="t", prompt="p", resources=["notes://a"])], call_timeout=120)
obs, _ = env.reset(seed=0)
assert obs["resources"]["notes://a"] == "read 1", obs["resources"]
before = hwm()
obs, _, _, _, info = env.step({"tool": "flood", "arguments": {}})
assert info["error"] is None, info["error"]
print(obs["resources"]["notes://a"], hwm() - before)
env.close()
'''


@pytest.mark.slow  # ~5 s (384 MiB of notifications): the heavy lane
def test_a_flood_of_updates_for_unobserved_resources_holds_no_memory(tmp_path: Path) -> None:
    """A server may name any URI in ``notifications/resources/updated``: each one was kept until the step ended, so
    40 distinct URIs of 20 MiB sent during one call held 919 MiB. Only subscribed URIs are kept now; the observed
    resource's own update is still read. (The child's peak memory from VmHWM, as its own process.)"""
    import subprocess

    server, child = tmp_path / "updates.py", tmp_path / "child.py"
    server.write_text(UPDATES_SERVER)
    child.write_text(CHILD)
    done = subprocess.run([sys.executable, str(child), str(server), "24", str(16 << 20)], capture_output=True,
                          text=True, timeout=280, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    text, grew = done.stdout.split()[-3:-1], int(done.stdout.split()[-1])
    assert text == ["read", "2"]  # the observed resource's update was honoured
    assert grew < 300 << 20, f"peak memory grew by {grew >> 20} MiB during the flood"  # 384 MiB of URIs
