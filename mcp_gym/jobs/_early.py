"""A job's first servers, started as soon as its config exists (issue 40): while the job imports the MCP SDK, plans
and builds its envs, each slot's first ``{workspace}`` server boots, so the first resets find it up.

Only where re-rooting applies from the first start (the pool on, no cassette recording, every ``{workspace}`` server
a command line naming server-filesystem with the workspace as one whole argument): each such server starts in an
empty placeholder workspace, and an env's first reset takes it (:func:`mcp_gym._workspace.prepare_episode_servers`),
connects, checks it as any first start is checked (it reports exactly the placeholder as its allowed directory),
removes the placeholder and re-roots it to the episode's fresh workspace (:mod:`mcp_gym._reroot`); a server that does
not pass is replaced by a fresh start. Standard library and light imports only (nothing here may import the MCP SDK,
pyarrow or Gymnasium: that is the time the servers boot in)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["start_early_servers", "stop_early_servers"]


def start_early_servers(cfg: Any) -> int:
    """Start the first servers of up to ``min(launcher.num_envs, launcher.max_connecting)`` slots of a local
    ``collect`` or ``eval`` job whose servers qualify (see the module docstring); how many sets were started."""
    if cfg.get("command") not in ("collect", "eval"):
        return 0
    launcher = cfg.get("launcher") or {}
    env = cfg.get("env") or {}
    if launcher.get("kind", "local") != "local" or not env.get("servers"):
        return 0
    if (spare := env.get("spare_servers")) is not None and int(spare) <= 0:
        return 0
    from mcp_gym._reroot import PLACEHOLDER, mentions_workspace, names_filesystem_server, template_key
    from mcp_gym._wsdir import new_workspace
    from mcp_gym.client import _prespawn
    from mcp_gym.client.specs import Stdio, normalise_servers
    from mcp_gym.jobs.schema import to_dict

    try:
        specs = normalise_servers(to_dict(env)["servers"])
    except Exception:  # noqa: BLE001 - a bad entry: the job says so where it builds its env
        return 0
    templates = {a: s for a, s in specs.items() if isinstance(s, Stdio) and mentions_workspace(s)}
    if not templates or any(getattr(s, "record", None) is not None for s in specs.values()):  # the pool is off
        return 0
    if not all(names_filesystem_server(t) for t in templates.values()):
        return 0
    slots = max(1, min(int(launcher.get("num_envs") or 1), int(launcher.get("max_connecting") or 2)))
    key = template_key(templates)
    for _ in range(slots):
        workspace = new_workspace()  # private, named after this process (a sweep of dead ones first)
        _prespawn.offer(key, workspace)  # first: stop_early_servers removes it whatever happens next
        for t in templates.values():
            args = [str(workspace) if a == PLACEHOLDER else a for a in t.args]
            try:
                _prespawn.launch([t.command, *args], dict(t.env or {}), None if t.cwd is None else str(t.cwd))
            except OSError:  # not startable here: the env's own start says why
                return slots
    return slots


def stop_early_servers() -> None:
    """Stop the early servers no env took and remove their placeholder workspaces (the job's end)."""
    prespawn = sys.modules.get("mcp_gym.client._prespawn")  # not imported: none started (export-sft imports none)
    if prespawn is not None:
        prespawn.stop_all()
