"""The Lookup server: a directory of accounts and their access codes, one directory per episode.

Tool: ``lookup(account)`` returns the account's access code (an ``isError`` result for an unknown account). The
directories come from :mod:`mcp_gym.envs.lookup.tasks`; without a task, a plain client gets a directory drawn from the
seed.

Run: ``python -m mcp_gym.servers.lookup`` (stdio) or ``... --transport http --port 8000``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from mcp_gym.envs.lookup.tasks import ACCOUNTS_PER_TASK, NAMES, new_code, task_by_id
from mcp_gym.serverkit import EpisodeServer

__all__ = ["server"]


@dataclass
class Directory:
    """The state of one episode: its task and its accounts (account -> code), plus the accounts looked up."""

    task_id: str | None
    accounts: dict[str, str]
    looked_up: list[str] = field(default_factory=list)


def new_state(task_id: str | None, seed: int) -> Directory:
    """The directory of ``task_id``; without a task, one drawn from ``seed``."""
    if task_id is None:
        rng = random.Random(f"mcp-gym/lookup/default/{seed}")
        accounts = {a: new_code(rng) for a in rng.sample(NAMES, ACCOUNTS_PER_TASK)}
        return Directory(None, accounts)
    try:
        return Directory(task_id, dict(task_by_id(task_id).data["accounts"]))
    except KeyError as e:
        raise ToolError(str(e)) from None


def snapshot(s: Directory) -> dict[str, Any]:
    """The task and the accounts looked up so far (the verifier grades the submitted answer)."""
    return {"task_id": s.task_id, "looked_up": list(s.looked_up)}


server: EpisodeServer[Directory] = EpisodeServer(
    "mcp-gym-lookup",
    new_state,
    snapshot=snapshot,
    version="1.0.0",
    instructions="A directory of accounts. lookup(account) tells an account's access code.",
)


@server.tool(read_only=True, idempotent=True, title="Look up an account")
async def lookup(account: Annotated[str, Field(description="The account name, e.g. Ada")]) -> str:
    """The access code of `account`."""
    s = server.state
    key = account.strip()
    if key not in s.accounts:
        raise ToolError(f"no account {account!r} in this directory")
    s.looked_up.append(key)
    return f'account "{key}": code "{s.accounts[key]}"'


if __name__ == "__main__":
    from mcp_gym.envs.serve import main

    main("lookup")
