"""Re-rooting a warm per-episode server to the next episode's workspace over MCP roots, where that is provably the same
as starting it anew in that workspace (issue 40: no episode waits for a server to start).

A server qualifies when all of these hold (checked, never assumed):

- its command line names the workspace only as one whole argument ``{workspace}`` (not in its environment, working
  directory or inside a longer argument), so the workspace is all it is rooted in;
- it introduces itself as a known filesystem server whose only per-process state is its list of allowed directories
  (:data:`FILESYSTEM_SERVERS`: ``@modelcontextprotocol/server-filesystem``, which replaces that list with the client's
  roots on ``notifications/roots/list_changed``), and reports the list through its ``list_allowed_directories`` tool;
- its first start (without the roots capability, as without a pool) reports exactly the workspace as allowed.

A server whose command line names ``server-filesystem`` starts with the roots capability but refuses ``roots/list``
(an error answer: server-filesystem then keeps its command-line directories, as without roots) until those checks
passed; another server that passes them does so from its next start. From then on ``roots/list`` is answered with the
connection's current workspace, and a reset re-roots it: the previous workspace must be gone already (the env removes
it just before; a re-root refuses otherwise), the new root is announced, and the re-root counts only once
the server's own ``list_allowed_directories`` reports exactly the new workspace, within ``connect_timeout``. A root
update of the server still in flight for an older root cannot land afterwards: the server checks that a root exists
before taking it, and every older root has been removed. Anything else (a refusal, a timeout, an error) falls back to
a fresh start."""

from __future__ import annotations

import dataclasses
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mcp_gym.client.specs import Stdio

if TYPE_CHECKING:
    import mcp.types as mt

    from mcp_gym.client.connection import HostCallbacks, ServerConnection

__all__ = ["FILESYSTEM_SERVERS", "ALLOWED_TOOL", "Roots", "mentions_workspace", "rerootable_template",
           "names_filesystem_server", "template_key", "allowed_directories", "Rerooter"]

FILESYSTEM_SERVERS = frozenset({"secure-filesystem-server"})
"""``serverInfo.name`` of servers whose only per-process state is their allowed directories (server-filesystem)."""

ALLOWED_TOOL = "list_allowed_directories"
"""The tool such a server reports its allowed directories with (one per line after a heading line)."""

PLACEHOLDER = "{workspace}"


def mentions_workspace(spec: Any) -> bool:
    """Whether a stdio server's arguments, environment or working directory name ``{workspace}``."""
    if isinstance(spec, Stdio):
        return any(PLACEHOLDER in str(x) for x in (*spec.args, *(spec.env or {}).values(), spec.cwd or ""))
    return False


def rerootable_template(spec: Any) -> bool:
    """A stdio spec naming ``{workspace}`` exactly once, as a whole argument, and nowhere else."""
    if not isinstance(spec, Stdio):
        return False
    elsewhere = [*(spec.env or {}).values(), os.fspath(spec.cwd) if spec.cwd else "", spec.command]
    return (sum(a == PLACEHOLDER for a in spec.args) == 1 and sum(PLACEHOLDER in a for a in spec.args) == 1
            and not any(PLACEHOLDER in str(x) for x in elsewhere))


def names_filesystem_server(spec: Any) -> bool:
    """A :func:`rerootable_template` whose command line names server-filesystem: its connections advertise roots from
    its first start (the MCP SDK is not imported: a job asks this before it imports the SDK)."""
    return rerootable_template(spec) and any("server-filesystem" in x for x in (spec.command, *spec.args))


def template_key(templates: Any) -> tuple[Any, ...]:
    """What a set of ``{workspace}`` server templates (``{alias: Stdio}``) started ahead of a job's envs is offered and
    claimed under (:mod:`mcp_gym.jobs._early`)."""
    return tuple((alias, t.command, tuple(t.args), tuple(sorted((t.env or {}).items())), str(t.cwd or ""))
                 for alias, t in sorted(templates.items()))


class Roots:
    """The roots one connection advertises: its current workspace (``roots/list`` answers with it) once ``armed``."""

    def __init__(self, workspace: Path, armed: bool) -> None:
        self.workspace = workspace
        self.armed = armed
        """False: ``roots/list`` gets an error answer (the server keeps its command-line directories)."""
        self.answered = anyio.Event()
        """Set once a ``roots/list`` was answered with the current workspace."""

    async def list_roots(self, context: Any) -> mt.ListRootsResult | mt.ErrorData:
        import mcp.types as mt

        if not self.armed:
            return mt.ErrorData(code=mt.INVALID_REQUEST, message="mcp-gym offers no roots to this server yet")
        result = mt.ListRootsResult(roots=[mt.Root.model_validate({"uri": self.workspace.resolve().as_uri()})])
        self.answered.set()
        return result

    def callbacks(self, base: HostCallbacks) -> HostCallbacks:
        """``base`` with this object answering ``roots/list`` (which also declares the roots capability)."""
        return dataclasses.replace(base, list_roots=self.list_roots)


async def allowed_directories(conn: ServerConnection, timeout: float) -> list[str] | None:
    """What the server reports as its allowed directories (``None``: no answer, an error, or an unknown format)."""
    import mcp.types as mt

    try:
        result = await conn.call_tool(ALLOWED_TOOL, {}, timeout=timeout)
    except Exception:  # noqa: BLE001 - no report: not provably re-rootable
        return None
    texts = [c.text for c in result.content if isinstance(c, mt.TextContent)]
    if result.is_error or len(texts) != 1 or not texts[0].startswith("Allowed directories:"):
        return None
    return [line for line in texts[0].splitlines()[1:] if line]


def own_roots_free(conn: Any) -> bool:
    """No roots of the user's own (``MCPEnv(roots=...)``) are advertised on ``conn`` (a template: always true)."""
    callbacks = getattr(conn, "callbacks", None)
    if callbacks is None or callbacks.list_roots is None:
        return True
    return isinstance(getattr(callbacks.list_roots, "__self__", None), Roots)


class Rerooter:
    """Which aliases of one env may be re-rooted, and the roots of their connections."""

    def __init__(self) -> None:
        self.learned: set[str] = set()
        """Aliases whose server passed the checks of the module docstring (their next starts advertise roots)."""
        self.roots: weakref.WeakKeyDictionary[ServerConnection, Roots] = weakref.WeakKeyDictionary()
        """The roots each connection started with the roots capability advertises."""
        self.rerooted = 0
        """Resets that re-rooted a warm server instead of starting one (for benchmarks and tests)."""

    def advertises(self, alias: str, template: Any) -> bool:
        """New connections of ``alias`` advertise roots: it was learned, or its command line names server-filesystem."""
        return alias in self.learned or names_filesystem_server(template)

    def armed(self, conn: ServerConnection) -> bool:
        """``conn`` answers ``roots/list`` with its workspace (it can be re-rooted)."""
        roots = self.roots.get(conn)
        return roots is not None and roots.armed

    def connection(self, alias: str, template: Any, spec: Any, workspace: Path,
                   own: ServerConnection) -> ServerConnection:
        """A new (unstarted) connection of ``alias`` with ``own``'s callbacks and tap (advertising roots: see
        :meth:`advertises`)."""
        from mcp_gym.client.connection import ServerConnection

        if not self.advertises(alias, template) or not own_roots_free(own):
            return ServerConnection(alias, spec, own.callbacks, own.tap_factory)
        roots = Roots(workspace, alias in self.learned)
        conn = ServerConnection(alias, spec, roots.callbacks(own.callbacks), own.tap_factory)
        self.roots[conn] = roots
        return conn

    async def learn(self, alias: str, template: Any, conn: ServerConnection, workspace: Path) -> None:
        """Check a fresh server of ``alias`` (rooted in ``workspace``) against the module docstring's rules."""
        if alias in self.learned or conn.status != "ready" or not rerootable_template(template):
            return
        if not own_roots_free(conn) or conn.info()["name"] not in FILESYSTEM_SERVERS:
            return
        report = await allowed_directories(conn, conn.spec.connect_timeout)
        if report == [os.path.realpath(workspace)]:
            self.learned.add(alias)
            if conn in self.roots:
                self.roots[conn].armed = True

    def can_reroot(self, alias: str, conn: ServerConnection, unfilled: Any) -> bool:
        """``conn`` is a ready, roots-advertising server of a learned alias whose spec is ``unfilled`` (the episode's
        spec with ``{workspace}`` not filled in) but for the workspace, and its previous workspace is gone."""
        roots = self.roots.get(conn)
        if alias not in self.learned or roots is None or not roots.armed or conn.status != "ready" \
                or conn.client is None:
            return False
        old = str(roots.workspace)
        if os.path.lexists(old) or not isinstance(conn.spec, Stdio):
            return False
        return bool(unfilled == dataclasses.replace(conn.spec, args=[PLACEHOLDER if a == old else a
                                                                     for a in conn.spec.args]))

    async def reroot(self, conn: ServerConnection, workspace: Path, spec: Any) -> bool:
        """Move ``conn``'s root to ``workspace``; True once the server reports exactly it (else the caller restarts)."""
        import mcp.types as mt

        roots = self.roots[conn]
        roots.workspace, roots.answered = workspace, anyio.Event()
        want, delay = [os.path.realpath(workspace)], 0.0
        client = conn.client
        assert client is not None  # can_reroot checked it
        with anyio.move_on_after(conn.spec.connect_timeout):
            try:
                await client.session.send_notification(mt.RootsListChangedNotification())
            except Exception:  # noqa: BLE001 - a dead session: restart
                return False
            await roots.answered.wait()
            while True:  # the server applies the roots it was given asynchronously: ask until it reports them
                report = await allowed_directories(conn, conn.spec.connect_timeout)
                if report == want:
                    conn.spec = spec
                    self.rerooted += 1
                    return True
                if report is None:
                    return False
                await anyio.sleep(delay)
                delay = min(0.05, delay * 2 or 0.001)
        return False
