"""Drives the BFCL server over stdio with given calls per turn, grades with mcp-gym's BFCL grader, and compares with
BFCL's own checker run directly on the same calls (BFCL call strings), for tests/test_bfcl.py."""

from __future__ import annotations

import ast
import json
import random
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from mcp_gym.envs.bfcl import check, grade
from mcp_gym.graders.base import EpisodeContext
from mcp_gym.jobs.bfcl import gt_call
from mcp_gym.tasks import Task


def perturbations(strings: list[list[str]], rng: random.Random,
                  held: dict[str, list[str]]) -> dict[str, list[list[str]]]:
    """Ground truth and three perturbed trajectories (BFCL call strings per turn): a dropped call, a changed argument,
    a later turn's call done early (never a held-back function before its turn: the server does not offer it)."""
    out = {"ground_truth": strings}
    calls = [(t, i) for t, turn in enumerate(strings) for i in range(len(turn))]
    if calls:
        t, i = rng.choice(calls)
        out["dropped"] = [[c for j, c in enumerate(turn) if (k, j) != (t, i)] for k, turn in enumerate(strings)]
        for t, i in rng.sample(calls, len(calls)):
            node = ast.parse(strings[t][i], mode="eval").body
            values = [*node.args, *(k.value for k in node.keywords)]
            lit = next((v for v in values if isinstance(v, ast.Constant) and isinstance(v.value, (str, int, float))
                        and not isinstance(v.value, bool)), None)
            if lit is None:
                continue
            lit.value = lit.value + "_x" if isinstance(lit.value, str) else lit.value + 1
            changed = [list(turn) for turn in strings]
            changed[t][i] = ast.unparse(node)
            out["changed"] = changed
            break
    hidden_until = {n: int(k) for k, names in held.items() for n in names}
    def name(t: int, i: int) -> str:
        return ast.parse(strings[t][i], mode="eval").body.func.id  # type: ignore[attr-defined]

    later = [(t, i) for t, i in calls if t > 0 and hidden_until.get(name(t, i), -1) <= t - 1]
    if later:
        t, i = rng.choice(later)
        early = [list(turn) for turn in strings]
        early[t - 1].append(early[t].pop(i))
        out["early"] = early
    return out


async def play(client: Client, task_id: str, turns: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """One episode on the server's default episode: reset, each turn's calls (turn i >= 1 started with mcp_gym_turn),
    and the state snapshot."""
    await client.call_tool("mcp_gym_reset", {"task_id": task_id, "seed": 0})
    for n, calls in enumerate(turns):
        if n:
            await client.call_tool("mcp_gym_turn", {"turn": n})
        for c in calls:
            await client.call_tool(c["tool"], c["arguments"])
    res = await client.call_tool("mcp_gym_state", {})
    return json.loads(res.content[0].text)


def signatures_of(root: Path, task_id: str) -> dict[str, list[str]]:
    from mcp_gym.jobs.bfcl import _Copy  # noqa: PLC2701 - the importer's own reader of the copy
    copy = _Copy(root)
    entry, _ = check.entry(root, task_id)
    sigs: dict[str, list[str]] = {}
    for cls in entry["involved_classes"]:
        sigs.update(copy.signatures(cls, task_id))
    return sigs


def compare(root: Path, task_ids: list[str], seed: int = 0) -> list[dict[str, Any]]:
    """For each task: every trajectory of :func:`perturbations`, mcp-gym's verdict (server + grader) and BFCL's own."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_gym.servers.bfcl", "--bfcl", str(root)])

    async def main() -> None:
        async with Client(params) as client:
            for task_id in task_ids:
                entry, gt = check.entry(root, task_id)
                sigs = signatures_of(root, task_id)
                for kind, strings in perturbations(gt, rng, entry.get("missed_function") or {}).items():
                    turns = [[gt_call(s, sigs) for s in turn] for turn in strings]
                    state = await play(client, task_id, turns)
                    ctx = EpisodeContext(Task(id=task_id, prompt=""), "", None, ("bfcl",), (), None, "submit", state)
                    mine = await anyio.to_thread.run_sync(grade.verify, ctx)
                    rows.append({"id": task_id, "kind": kind, "strings": strings, "mcp_gym": mine["passed"],
                                 "reason": mine["reason"]})

    anyio.run(main)
    direct = grade.run_checks(root, [{"id": r["id"], "strings": r["strings"]} for r in rows], timeout=600)
    for r, d in zip(rows, direct, strict=True):
        r["bfcl"] = d["valid"]
        r["bfcl_reason"] = f"{d.get('error_type')}: {d.get('error_message')}"
    return rows
