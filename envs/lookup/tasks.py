"""Lookup: read an account's access code with a tool and submit it (copy a fact from a tool result into the answer).

Served by ``servers/lookup.py`` (server name ``lookup``). Each task seeds a small directory of accounts
(first names) with access codes (``colour-animal``, one of 400); the prompt names one account, only ``lookup`` reveals
its code, and the verifier checks the submitted answer against that code (reward 1 at ``submit``, else 0). Codes are
drawn per task, independently of the account, so no answer can be memorised from the train split: a policy has to read
it from the ``lookup`` result (a blind guess of a valid code hits 1 time in 400, a random string never). The task set is
large (:data:`N_TASKS`, 80 % train) so that a model trained on the oracle's episodes sees many distinct examples
(``scripts/examples/sft_from_scratch.py``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from mcp_gym.envs._common import call, split_of, submit, task_lookup, task_rng
from mcp_gym.tasks import Task, normalise_answer

__all__ = ["SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "generate_tasks", "verify"]

SERVER = "lookup"
MAX_STEPS = 6
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = []
N_TASKS = 1000
ACCOUNTS_PER_TASK = 5
NAMES = (
    "Ada", "Bruno", "Chloe", "Dario", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Keiko", "Luca", "Maya",
    "Nils", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tomas", "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zoe",
    "Amir", "Bianca", "Cyrus", "Dalia", "Emil", "Fiona", "Gustav", "Hana", "Ivo", "Jana", "Kofi", "Lena", "Marco",
    "Nadia",
)
"""Account names (40)."""
COLOURS = (
    "amber", "azure", "black", "bronze", "coral", "crimson", "golden", "green", "indigo", "ivory", "jade", "lilac",
    "navy", "olive", "orange", "purple", "ruby", "silver", "teal", "white",
)
ANIMALS = (
    "badger", "bison", "cobra", "crane", "eagle", "falcon", "ferret", "gecko", "heron", "lynx", "moose", "otter",
    "panda", "raven", "salmon", "shark", "tiger", "walrus", "wolf", "zebra",
)
"""Access codes are ``colour-animal`` (20 x 20 = 400 codes)."""


def new_code(rng: random.Random) -> str:
    """A random access code, e.g. ``"amber-otter"``."""
    return f"{rng.choice(COLOURS)}-{rng.choice(ANIMALS)}"


def generate_tasks(seed: int = 0) -> list[Task]:
    """:data:`N_TASKS` tasks, reproducible from ``seed``; every 5th task is in the ``"test"`` split.

    ``Task.data["accounts"]`` maps each account of the task's directory to its code; ``data["account"]`` is the one
    the prompt asks for. No two tasks ask for the same account with the same code, so the oracle's episodes are all
    distinct and none of a test task occurs in the train split."""
    tasks, asked = [], set()
    for i in range(N_TASKS):
        rng = task_rng(SERVER, seed, i)
        codes = {a: new_code(rng) for a in rng.sample(NAMES, ACCOUNTS_PER_TASK)}
        account = rng.choice(sorted(codes))
        while (account, codes[account]) in asked:  # every task asks a distinct (account, code): no test task's
            codes[account] = new_code(rng)  # episode repeats a train task's
        asked.add((account, codes[account]))
        prompt = f'Look up the access code of account "{account}", then submit the code.'
        solution = (call("lookup", account=account), submit(codes[account]))
        data = {"accounts": codes, "account": account}
        tasks.append(Task(f"lookup-{i:04d}", prompt, split_of(i), solution, codes[account], data))
    return tasks


task_by_id = task_lookup(generate_tasks)


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """1.0 iff the submitted answer is the asked account's code (and the episode served this task), else 0.0."""
    same_task = state.get("task_id", task.id) == task.id
    return 1.0 if same_task and normalise_answer(answer) == normalise_answer(task.answer) else 0.0
