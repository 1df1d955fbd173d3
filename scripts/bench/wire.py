"""Client CPU per tool call, close to the wire: mcp-gym's ``env.step``, the raw SDK ``Client.call_tool`` and a
hand-written floor, over stdio and Streamable HTTP, in alternating rounds.

* **stdio**: the Node ``server-everything`` (``tool echo``), installed by the tests into ``.mcp-gym-cache/npm``
  (``--everything PATH`` to use another). The floor is an asyncio JSON-RPC client over the pipe: one
  ``json.dumps`` + write per request, one ``readline`` + ``json.loads`` per answer (after the ``initialize``
  handshake); no validation, no cancellation, no timeouts.
* **HTTP**: a bundled Counter server (``python -m mcp_gym.servers.counter --transport http``, SSE answers, as
  ``mcp-gym serve counter --transport http`` serves), tool ``echo``. The floor is a minimal keep-alive HTTP/1.1 POST
  client on asyncio streams: one connection, ``Content-Length`` requests, chunked SSE answers parsed by hand. Beside
  it, the same POSTs through ``httpx2`` (the SDK's HTTP client) and ``aiohttp`` (when installed): what the client
  library alone costs per call.

What is measured is this process's CPU time (``time.process_time``: all its threads, not the server's) per call, not
wall time: on shared cores wall time mostly measures the neighbours. Each round runs ``--calls`` calls on each side,
the order rotating every round so drift does not favour one side; the table gives the median CPU per call and the
median of per-round ratios to the floor and to the raw SDK. The load average is printed with the results.

    python scripts/bench/wire.py --rounds 7 --calls 300
    python scripts/bench/wire.py --only stdio
    python scripts/bench/wire.py --layers        # where a stdio env.step's client CPU goes, layer by layer
    python scripts/bench/wire.py --pool          # a {workspace} server's env.step, the spare-server pool off and on
    git worktree add --detach /tmp/base main && python scripts/bench/wire.py --only stdio --compare /tmp/base

``--compare DIR`` runs the stdio ``env.step`` of another checkout ("before": DIR first on ``PYTHONPATH``, its
``mcp_gym``) and of this one ("after"), each in a child process of its own that reports its own CPU per batch, in the
same alternating rounds, so both ratios to the floor and their ratio come from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from mcp_gym import MCPEnv
from mcp_gym.client.runtime import Runtime
from mcp_gym.client.specs import Http, Stdio

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / ".mcp-gym-cache" / "npm" / "node_modules" / ".bin" / "mcp-server-everything"
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "wire-floor", "version": "0"}}


# -- floors ----------------------------------------------------------------------------------------------------------
class PipeFloor:
    """A hand-written asyncio JSON-RPC client over a stdio server's pipes (the floor for stdio)."""

    def __init__(self, rt: Runtime, argv: list[str]) -> None:
        self.rt, self.argv, self.next_id = rt, argv, 0
        rt.call(self._start)

    async def _start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(*self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                         stderr=subprocess.DEVNULL, limit=1 << 24)
        await self._request("initialize", INIT)
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        rid = self.next_id
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            message = json.loads(await self.proc.stdout.readline())
            if message.get("id") == rid:
                return message["result"]

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        async def run() -> None:
            for _ in range(n):
                await self._request("tools/call", {"name": tool, "arguments": arguments})

        self.rt.call(run)

    def sync_calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        """One synchronous call (the runtime driven by this thread) per request, as ``env.step`` makes."""
        params = {"name": tool, "arguments": arguments}

        async def one() -> None:
            await self._request("tools/call", params)

        for _ in range(n):
            self.rt.call(one)

    def close(self) -> None:
        async def stop() -> None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                self.proc.kill()

        self.rt.call(stop)


class HttpFloor:
    """A minimal keep-alive HTTP/1.1 POST client on asyncio streams (the floor for Streamable HTTP)."""

    def __init__(self, rt: Runtime, port: int) -> None:
        self.rt, self.port, self.next_id, self.session = rt, port, 0, ""
        rt.call(self._start)

    async def _start(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        await self._request("initialize", INIT)
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def _post(self, message: dict[str, Any]) -> tuple[dict[str, str], bytes]:
        body = json.dumps(message).encode()
        head = (f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{self.port}\r\ncontent-type: application/json\r\n"
                f"accept: application/json, text/event-stream\r\ncontent-length: {len(body)}\r\n"
                + (f"mcp-session-id: {self.session}\r\nmcp-protocol-version: 2025-11-25\r\n" if self.session else "")
                + "\r\n")
        self.writer.write(head.encode() + body)
        status = await self.reader.readline()
        if not status:  # the server closed the idle connection (as keep-alive allows): reconnect, send again
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.write(head.encode() + body)
            status = await self.reader.readline()
        assert status.split()[1] in (b"200", b"202"), status
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            headers[name.lower()] = value.strip()
        if "content-length" in headers:
            return headers, await self.reader.readexactly(int(headers["content-length"]))
        chunks = []
        while size := int((await self.reader.readline()).strip(), 16):
            chunks.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()
        return headers, b"".join(chunks)

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        headers, body = await self._post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.session = headers.get("mcp-session-id", self.session)
        if headers.get("content-type", "").startswith("text/event-stream"):
            for line in body.splitlines():
                if line.startswith(b"data:") and line[5:].strip():
                    message = json.loads(line[5:])
                    if message.get("id") == self.next_id:
                        return message["result"]
            raise RuntimeError(f"no answer in {body[:200]!r}")
        return json.loads(body)["result"]

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        async def run() -> None:
            for _ in range(n):
                await self._request("tools/call", {"name": tool, "arguments": arguments})

        self.rt.call(run)

    def close(self) -> None:
        self.writer.close()


class LibraryPost:
    """The same keep-alive POSTs through an HTTP client library (``httpx2``: the SDK's; ``aiohttp``), the session
    opened by :class:`HttpFloor`'s handshake: what the client library alone costs per call."""

    def __init__(self, rt: Runtime, port: int, library: str, session: str) -> None:
        self.rt, self.url, self.library, self.next_id = rt, f"http://127.0.0.1:{port}/mcp", library, 10**6
        self.headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                        "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        rt.call(self._start)

    async def _start(self) -> None:
        if self.library == "aiohttp":
            import aiohttp

            self.client: Any = aiohttp.ClientSession()
        else:
            import httpx2

            self.client = httpx2.AsyncClient()

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        async def run() -> None:
            for _ in range(n):
                self.next_id += 1
                body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                                   "params": {"name": tool, "arguments": arguments}}).encode()
                if self.library == "aiohttp":
                    async with self.client.post(self.url, data=body, headers=self.headers) as r:
                        data = await r.read()
                else:
                    data = (await self.client.post(self.url, content=body, headers=self.headers)).content
                if b'"result"' not in data:
                    raise RuntimeError(f"{self.library}: no result in {data[:200]!r}")

        self.rt.call(run)

    def close(self) -> None:
        self.rt.call(self.client.close if self.library == "aiohttp" else self.client.aclose)


# -- the SDK and mcp-gym ---------------------------------------------------------------------------------------------
class RawSDK:
    """An SDK ``Client`` on its own runtime; ``calls`` awaits ``call_tool`` n times inside that loop."""

    def __init__(self, rt: Runtime, target: Any) -> None:
        self.rt, self.target = rt, target
        rt.call(self._start)

    async def _start(self) -> None:
        self.ready, self.stop, self.done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.rt.task_group.start_soon(self._own)  # one task enters and exits the Client (task affinity)
        await self.ready.wait()

    async def _own(self) -> None:
        try:
            async with Client(self.target, cache=None) as client:
                self.client = client
                self.ready.set()
                await self.stop.wait()
        finally:
            self.done.set()

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        async def run() -> None:
            for _ in range(n):
                await self.client.call_tool(tool, arguments)

        self.rt.call(run)

    def close(self) -> None:
        async def stop() -> None:
            self.stop.set()
            await self.done.wait()

        self.rt.call(stop)


class Gym:
    """``env.step`` on an :class:`MCPEnv` with one server (the sync face, as a training loop calls it)."""

    def __init__(self, rt: Runtime, spec: Any, **settings: Any) -> None:
        self.env = MCPEnv({"s": spec}, ["call the tool"], max_steps=10**9, runtime=rt, **settings)
        self.env.reset(seed=0)
        if self.env.spares.size:  # the pool on: a spare starts after the reset; step once it is up (bounded)
            deadline = time.monotonic() + 120
            while (not self.env.spares.pids or rt.mode != "driven") and time.monotonic() < deadline:
                time.sleep(0.01)
            print(f"pool on: {len(self.env.spares.pids)} spare server(s) up, runtime {rt.mode}", file=sys.stderr)

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        action = {"tool": tool, "arguments": arguments}
        step = self.env.step
        for _ in range(n):
            _, _, _, _, info = step(action)
        if info.get("error") is not None:
            raise RuntimeError(f"env.step failed: {info['error']}")

    def close(self) -> None:
        self.env.close()


class Child:
    """``--compare``: ``env.step`` of a checkout's ``mcp_gym`` (``checkout`` first on ``PYTHONPATH``), in a child
    process (``--serve-gym``) that reports the CPU seconds of each batch; ``calls`` returns them (the parent only
    waits meanwhile)."""

    def __init__(self, checkout: Path, exe: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout.resolve()),
                                                            *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve-gym", "--everything", exe], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._read()
        if not ready.startswith("ready "):
            raise RuntimeError(f"--compare: the child did not start: {ready!r}")
        want = (checkout / "mcp_gym" / "__init__.py").resolve()
        if ready.split(" ", 1)[1] != str(want):  # (an editable install or the current directory came first)
            raise RuntimeError(f"--compare: the child imported {ready.split(' ', 1)[1]}, not {want}")
        print(f"env.step of {want.parent}", file=sys.stderr)

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("--compare: the child process ended")
        return line.strip()

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([tool, arguments, n]) + "\n")
        self.proc.stdin.flush()
        return float(self._read())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve_gym(exe: str) -> None:
    """``--serve-gym``: the child of :class:`Child`: a :class:`Gym` on stdio; each input line ``[tool, arguments,
    n]`` runs ``n`` steps and answers their CPU seconds (this process's)."""
    import mcp_gym

    gym = Gym(Runtime("gym"), Stdio(exe, ["stdio"]))
    try:
        print(f"ready {Path(mcp_gym.__file__).resolve()}", flush=True)
        for line in sys.stdin:
            tool, arguments, n = json.loads(line)
            c0 = time.process_time()
            gym.calls(tool, arguments, n)
            print(time.process_time() - c0, flush=True)
    finally:
        gym.close()


# -- rounds ----------------------------------------------------------------------------------------------------------
def compare(label: str, sides: dict[str, Any], tool: str, arguments: dict[str, Any], rounds: int,
            calls: int) -> list[str]:
    """Alternating rounds of ``calls`` calls per side; the table rows (CPU µs per call, ratios)."""
    for side in sides.values():
        side.calls(tool, arguments, 30)  # warm up
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides.items())
    for k in range(rounds):
        for name, side in order[k % len(order):] + order[: k % len(order)]:
            c0 = time.process_time()
            took = side.calls(tool, arguments, calls)  # a float: the CPU seconds a child process measured
            cpu[name].append(((took if isinstance(took, float) else time.process_time() - c0)) / calls * 1e6)
    rows = []
    if "before: mcp-gym env.step" in cpu and "after: mcp-gym env.step" in cpu:
        ratio = [a / b for a, b in zip(cpu["after: mcp-gym env.step"], cpu["before: mcp-gym env.step"], strict=True)]
        print(f"{label}: env.step after / before, median of per-round ratios: {statistics.median(ratio):.3f} "
              f"({min(ratio):.3f}–{max(ratio):.3f})")
    for name in sides:
        to_floor = [c / f for c, f in zip(cpu[name], cpu["floor"], strict=True)]
        to_sdk = [c / f for c, f in zip(cpu[name], cpu["raw SDK"], strict=True)]
        rows.append(f"| {label} | {name} | {statistics.median(cpu[name]):.0f} "
                    f"({min(cpu[name]):.0f}–{max(cpu[name]):.0f}) | {statistics.median(to_floor):.2f}× "
                    f"| {statistics.median(to_sdk):.2f}× |")
    return rows


class SyncFloor:
    """``--layers``: the floor's requests, one synchronous call each (what a sync face adds to any client)."""

    def __init__(self, floor: PipeFloor) -> None:
        self.floor = floor

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        self.floor.sync_calls(tool, arguments, n)

    def close(self) -> None:
        pass


class Layer:
    """One layer of a stdio ``env.step`` on :class:`Gym`'s env, for ``--layers``: ``calls`` runs it ``n`` times."""

    def __init__(self, gym: Gym, layer: str) -> None:
        self.env, self.layer = gym.env, layer
        self.rt: Runtime = gym.env._rt  # the runtime the Gym was given

    def calls(self, tool: str, arguments: dict[str, Any], n: int) -> None:
        env, action = self.env, {"tool": tool, "arguments": arguments}
        host = env.host
        conn = next(iter(host.connections.values()))

        async def nothing() -> None:
            return None

        async def run() -> None:
            for _ in range(n):
                if self.layer == "astep":
                    await env.astep(action)
                elif self.layer == "host":
                    await host.call(tool, arguments, timeout=env.call_timeout)
                else:
                    await conn.call_tool(tool, arguments, timeout=env.call_timeout)

        if self.layer == "sync":
            for _ in range(n):
                self.rt.call(nothing)
        else:
            self.rt.call(run)

    def close(self) -> None:
        pass


def layer_sides(exe: str) -> dict[str, Any]:
    """``--layers``: the floor, ``env.step``, and each layer under it (all in one loop, no sync call per call), plus
    the floor with one sync call per request and an empty sync call: the differences are what each layer adds per
    step."""
    gym = Gym(Runtime("gym"), Stdio(exe, ["stdio"]))
    floor = PipeFloor(Runtime("floor"), [exe, "stdio"])
    return {"floor": floor,
            "floor, a sync call per call": SyncFloor(floor),
            "raw SDK": RawSDK(Runtime("sdk"), StdioServerParameters(command=exe, args=["stdio"])),
            "mcp-gym env.step": gym,
            "env.astep, one loop": Layer(gym, "astep"),
            "host.call, one loop": Layer(gym, "host"),
            "connection.call_tool, one loop": Layer(gym, "connection"),
            "empty sync call (no I/O)": Layer(gym, "sync")}


def pool_sides(exe: str) -> dict[str, Any]:
    """``--pool``: server-everything with ``{workspace}`` in its environment (a per-episode server), the pool off
    (``spare_servers=0``) and on (the default), each env on its own runtime."""
    spec = Stdio(exe, ["stdio"], env={"MCP_GYM_BENCH_WORKSPACE": "{workspace}"})
    return {"floor": PipeFloor(Runtime("floor"), [exe, "stdio"]),
            "raw SDK": RawSDK(Runtime("sdk"), StdioServerParameters(command=exe, args=["stdio"])),
            "env.step, pool off": Gym(Runtime("off"), spec, spare_servers=0),
            "env.step, pool on": Gym(Runtime("on"), spec, spare_servers=1)}


def stdio_sides(exe: str) -> dict[str, Any]:
    return {"floor": PipeFloor(Runtime("floor"), [exe, "stdio"]),
            "raw SDK": RawSDK(Runtime("sdk"), StdioServerParameters(command=exe, args=["stdio"])),
            "mcp-gym env.step": Gym(Runtime("gym"), Stdio(exe, ["stdio"]))}


def start_counter() -> tuple[subprocess.Popen[bytes], int]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from scale import start_server  # the same server start as scale.py

    return start_server("--diagnostics")


def http_sides(port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/mcp"
    floor = HttpFloor(Runtime("floor"), port)
    sides: dict[str, Any] = {"floor": floor, "httpx2 POST": LibraryPost(Runtime("httpx2"), port, "httpx2",
                                                                          floor.session)}
    try:
        import aiohttp  # noqa: F401 - not a dependency of mcp-gym: measured when installed
    except ImportError:
        pass
    else:
        sides["aiohttp POST"] = LibraryPost(Runtime("aiohttp"), port, "aiohttp", floor.session)
    return {**sides, "raw SDK": RawSDK(Runtime("sdk"), url), "mcp-gym env.step": Gym(Runtime("gym"), Http(url))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--only", choices=["stdio", "http"])
    p.add_argument("--everything", default=str(EVERYTHING), help="server-everything executable (stdio)")
    p.add_argument("--layers", action="store_true", help="stdio only: env.step and each layer under it")
    p.add_argument("--pool", action="store_true", help="stdio only: a {workspace} server's env.step, pool off and on")
    p.add_argument("--compare", metavar="DIR", type=Path,
                   help="stdio: env.step of the mcp_gym in DIR (another checkout) as 'before' and of this checkout as "
                        "'after', each in a child process")
    p.add_argument("--serve-gym", action="store_true", help=argparse.SUPPRESS)  # the child of --compare
    a = p.parse_args()
    if a.serve_gym:
        serve_gym(a.everything)
        return

    rows: list[str] = []
    cleanup: list[Callable[[], None]] = []
    try:
        if a.only != "http":
            if not Path(a.everything).exists():
                sys.exit(f"{a.everything} not found: run the tests once (they install it) or pass --everything")
            sides = (layer_sides if a.layers else pool_sides if a.pool else stdio_sides)(a.everything)
            if a.compare is not None:  # both in child processes alike (the parent holds the other clients)
                sides.pop("mcp-gym env.step", None)
                sides["before: mcp-gym env.step"] = Child(a.compare, a.everything)
                sides["after: mcp-gym env.step"] = Child(ROOT, a.everything)
            cleanup += [s.close for s in sides.values()]
            rows += compare("stdio, server-everything `echo`", sides, "echo", {"message": "hello"}, a.rounds,
                            a.calls)
        if a.only != "stdio" and not a.layers and not a.pool:
            proc, port = start_counter()
            cleanup.append(proc.kill)
            sides = http_sides(port)
            cleanup[-1:-1] = [s.close for s in sides.values()]
            rows += compare("Streamable HTTP, Counter `echo`", sides, "echo", {"text": "hello"}, a.rounds, a.calls)
    finally:
        for fn in cleanup:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - report and go on closing the rest
                print(f"closing: {type(e).__name__}: {e}", file=sys.stderr)
    load = os.getloadavg()
    print(f"client CPU per call, median of {a.rounds} alternating rounds x {a.calls} calls; load average "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print("| transport, server | client | CPU µs/call (range) | × floor | × raw SDK |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
