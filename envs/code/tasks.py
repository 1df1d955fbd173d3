"""Code environment: write a small Python function that passes hidden unit tests.

Tasks come from 14 problem families (sums, rotations, ciphers, number bases, ...) crossed with their parameters, so
every task has its own constant (``K``, ``D``, ``B``, ...) stated in the prompt. Each task carries a reference
implementation and 10 hidden tests (edge cases + random inputs, expected values computed from the reference). The agent
writes ``solution.py`` with the server's ``write_file`` tool and checks it with ``run_tests``, which only reports
pass/fail counts and the solution's own output.

Grading (:func:`verify`) uses the server snapshot: the reward is ``passed / total`` of the LAST ``run_tests`` call, and
only if the workspace has not changed since (the snapshot's ``files_hash`` equals the hash recorded with that run);
otherwise 0. So the final code must have been tested, and editing after testing forfeits the reward.

Nothing is stored on disk: tasks are regenerated from seeds.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_gym.envs._common import call, split_of, submit, task_rng
from mcp_gym.tasks import Task

__all__ = [
    "SERVER", "MAX_STEPS", "SUCCESS_THRESHOLD", "OBSERVE_RESOURCES", "STEP_REWARDS",
    "generate_tasks", "task_by_id", "verify",
]

SERVER = "code"
MAX_STEPS = 16
SUCCESS_THRESHOLD = 1.0
OBSERVE_RESOURCES: list[str] = ["code://workspace"]
STEP_REWARDS = False
"""Ignore ``run_tests``' per-step ``reward`` (passed/total): only the verifier's score at ``submit`` counts, so
calling ``run_tests`` repeatedly earns nothing (see :func:`mcp_gym.envs.make_env`)."""
SOLUTION_FILE = "solution.py"
TESTS_PER_TASK = 10

Args = list[Any]


@dataclass(frozen=True)
class Family:
    """A problem template: ``statement`` and ``reference`` are formatted with one of ``params``."""

    entry: str
    signature: str
    statement: str
    reference: str
    params: Sequence[Mapping[str, Any]]
    inputs: InputMaker
    """``(rng, params) -> [args, ...]``: edge cases first, then random inputs (``TESTS_PER_TASK`` in all)."""


def _ints(rng: random.Random, lo: int = -20, hi: int = 40, max_len: int = 12) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(1, max_len))]


InputMaker = Callable[[random.Random, Mapping[str, Any]], list[Args]]


def _int_lists(*edge: list[int]) -> InputMaker:
    """Inputs ``[[xs], ...]``: the edge lists, then random lists."""
    return lambda rng, p: [[list(e)] for e in edge] + [[_ints(rng)] for _ in range(TESTS_PER_TASK - len(edge))]


_WORDS = ["a", "an", "ox", "cat", "dog", "tree", "house", "bright", "quantum", "river", "mountain", "elephant",
          "algorithm", "keyboard", "sun", "moon", "sky", "jump", "python", "banana", "window", "triangle", "umbrella",
          "zebra", "notebook", "lantern"]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(1, 10))]
    return " ".join(w.capitalize() if rng.random() < 0.3 else w for w in words)


def _text(rng: random.Random) -> str:
    alphabet = string.ascii_lowercase * 3 + string.ascii_uppercase + string.digits + " .,!?-"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))


def _runs(rng: random.Random) -> str:
    return "".join(rng.choice("abcxyz") * rng.randint(1, 7) for _ in range(rng.randint(1, 8)))


FAMILIES: tuple[Family, ...] = (
    Family(
        "sum_above", "sum_above(xs: list[int]) -> int",
        "returns the sum of the elements of `xs` that are strictly greater than {k} (0 if there are none).",
        "def sum_above(xs):\n    return sum(x for x in xs if x > {k})\n",
        [{"k": k} for k in (-3, 0, 2, 5, 7, 10, 12, 20, 25, 33)],
        lambda rng, p: [[[]], [[p["k"]]], [[p["k"] + 1, p["k"]]]] + [[_ints(rng)] for _ in range(7)],
    ),
    Family(
        "count_multiples", "count_multiples(xs: list[int]) -> int",
        "returns how many elements of `xs` are divisible by {d} (0 and negative multiples count too).",
        "def count_multiples(xs):\n    return sum(1 for x in xs if x % {d} == 0)\n",
        [{"d": d} for d in (2, 3, 4, 5, 6, 7, 8, 9, 11, 13)],
        _int_lists([], [0], [-4, 4, 9]),
    ),
    Family(
        "rotate_left", "rotate_left(xs: list[int]) -> list[int]",
        "returns a new list: `xs` rotated left by {k} positions (the rotation wraps around when {k} is larger than "
        "the length; an empty list gives []). Example for a rotation by 1: [1, 2, 3] -> [2, 3, 1].",
        "def rotate_left(xs):\n    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[k:] + xs[:k]\n",
        [{"k": k} for k in (1, 2, 3, 4, 5, 7, 9, 10, 13, 100)],
        _int_lists([], [5], [1, 2]),
    ),
    Family(
        "caesar", "caesar(text: str) -> str",
        "returns `text` with every lowercase ASCII letter shifted {k} places forward in the alphabet, wrapping from "
        "'z' back to 'a'; all other characters (uppercase letters, digits, spaces, punctuation) are unchanged.",
        "def caesar(text):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c "
        "for c in text)\n",
        [{"k": k} for k in (1, 2, 3, 5, 7, 11, 13, 17, 20, 25)],
        lambda rng, p: [[""], ["xyz"], ["Hello, World!"]] + [[_text(rng)] for _ in range(7)],
    ),
    Family(
        "chunks", "chunks(xs: list[int]) -> list[list[int]]",
        "splits `xs` into consecutive chunks of {n} elements, in order; the last chunk may be shorter. An empty list "
        "gives [].",
        "def chunks(xs):\n    return [xs[i:i + {n}] for i in range(0, len(xs), {n})]\n",
        [{"n": n} for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11)],
        lambda rng, p: [[[]], [list(range(p["n"]))], [list(range(p["n"] + 1))],
                        *([_ints(rng, max_len=25)] for _ in range(7))],
    ),
    Family(
        "fizzbuzz", "fizzbuzz(n: int) -> list[str]",
        "returns a list of n strings, one for each i = 1..n: 'FizzBuzz' if i is divisible by both {a} and {b}, "
        "'Fizz' if only by {a}, 'Buzz' if only by {b}, otherwise str(i). fizzbuzz(0) == [].",
        "def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n        s = ('Fizz' if i % {a} == 0 else '') + "
        "('Buzz' if i % {b} == 0 else '')\n        out.append(s or str(i))\n    return out\n",
        [{"a": a, "b": b} for a, b in ((3, 5), (2, 7), (3, 4), (4, 6), (2, 3), (5, 7), (3, 8), (4, 5), (6, 9), (2, 5))],
        lambda rng, p: [[0], [1], [p["a"] * p["b"]]] + [[rng.randint(2, 40)] for _ in range(7)],
    ),
    Family(
        "long_words", "long_words(text: str) -> list[str]",
        "returns the words of `text` (split on whitespace) that have at least {n} characters, lowercased, in order "
        "of first appearance and without duplicates.",
        "def long_words(text):\n    out = []\n    for w in text.lower().split():\n"
        "        if len(w) >= {n} and w not in out:\n            out.append(w)\n    return out\n",
        [{"n": n} for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11)],
        lambda rng, p: [[""], ["Tree tree TREE"]] + [[_sentence(rng)] for _ in range(8)],
    ),
    Family(
        "to_base", "to_base(n: int) -> str",
        "returns the representation of the non-negative integer n in base {b}, using the digits 0-9 then lowercase "
        "letters a-z, without prefix or leading zeros; to_base(0) == '0'.",
        "def to_base(n):\n    digits = '0123456789abcdefghijklmnopqrstuvwxyz'\n    if n == 0:\n        return '0'\n"
        "    out = ''\n    while n:\n        n, r = divmod(n, {b})\n        out = digits[r] + out\n    return out\n",
        [{"b": b} for b in (2, 3, 4, 5, 6, 7, 8, 9, 12, 16)],
        lambda rng, p: [[0], [1], [p["b"]]] + [[rng.randint(2, 10**rng.randint(1, 6))] for _ in range(7)],
    ),
    Family(
        "top_k", "top_k(xs: list[int]) -> list[int]",
        "returns the {k} most frequent values of `xs`, most frequent first; values with equal counts are ordered "
        "from smallest to largest. If `xs` has fewer than {k} distinct values, return all of them.",
        "def top_k(xs):\n    counts = {{}}\n    for x in xs:\n        counts[x] = counts.get(x, 0) + 1\n"
        "    ranked = sorted(counts, key=lambda v: (-counts[v], v))\n    return ranked[:{k}]\n",
        [{"k": k} for k in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)],
        lambda rng, p: [[[]], [[3, 1, 2]], *([_ints(rng, 0, 6, 20)] for _ in range(8))],
    ),
    Family(
        "pair_count", "pair_count(xs: list[int]) -> int",
        "returns the number of index pairs (i, j) with i < j and xs[i] + xs[j] == {t}.",
        "def pair_count(xs):\n    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) "
        "if xs[i] + xs[j] == {t})\n",
        [{"t": t} for t in (-2, 0, 3, 5, 7, 8, 10, 12, 15, 20)],
        lambda rng, p: [[[]], [[p["t"]]], [[0, p["t"], p["t"], 0]]] + [[_ints(rng, -5, 15, 14)] for _ in range(7)],
    ),
    Family(
        "digit_power_sum", "digit_power_sum(n: int) -> int",
        "returns the sum of the decimal digits of the non-negative integer n, each raised to the power {p}.",
        "def digit_power_sum(n):\n    return sum(int(d) ** {p} for d in str(n))\n",
        [{"p": p} for p in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)],
        lambda rng, p: [[0], [9], [10]] + [[rng.randint(0, 10**rng.randint(1, 9))] for _ in range(7)],
    ),
    Family(
        "window_sums", "window_sums(xs: list[int]) -> list[int]",
        "returns the sums of every window of {w} consecutive elements of `xs`, from left to right (an empty list "
        "if `xs` has fewer than {w} elements).",
        "def window_sums(xs):\n    return [sum(xs[i:i + {w}]) for i in range(len(xs) - {w} + 1)]\n",
        [{"w": w} for w in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)],
        lambda rng, p: [[[]], [list(range(p["w"] - 1))], [list(range(p["w"]))],
                        *([_ints(rng, max_len=16)] for _ in range(7))],
    ),
    Family(
        "compress_runs", "compress_runs(text: str) -> str",
        "replaces every maximal run of the same character that is at least {m} long by its length followed by the "
        "character (e.g. a run of 5 'a' becomes '5a'); shorter runs are kept as they are.",
        "def compress_runs(text):\n    out, i = [], 0\n    while i < len(text):\n        j = i\n"
        "        while j < len(text) and text[j] == text[i]:\n            j += 1\n"
        "        out.append(f'{{j - i}}{{text[i]}}' if j - i >= {m} else text[i:j])\n        i = j\n"
        "    return ''.join(out)\n",
        [{"m": m} for m in (2, 3, 4, 5, 6)],
        lambda rng, p: [[""], ["a" * p["m"]], ["b" * (p["m"] - 1)]] + [[_runs(rng)] for _ in range(7)],
    ),
    Family(
        "every_nth", "every_nth(text: str) -> str",
        "returns the characters of `text` at positions 0, {n}, {n2}, ... (the indices that are multiples of {n}), "
        "joined into a string.",
        "def every_nth(text):\n    return text[::{n}]\n",
        [{"n": n, "n2": 2 * n} for n in (2, 3, 4, 5, 6, 7, 8)],
        lambda rng, p: [[""], ["a"]] + [[_text(rng)] for _ in range(8)],
    ),
)


def _task_id(seed: int, i: int) -> str:
    return f"code-{i:04d}" if seed == 0 else f"code-s{seed}-{i:04d}"


def _combos() -> list[tuple[Family, Mapping[str, Any]]]:
    """(family, params) pairs, interleaving families so consecutive tasks differ."""
    width = max(len(f.params) for f in FAMILIES)
    return [(f, f.params[j]) for j in range(width) for f in FAMILIES if j < len(f.params)]


def reference_function(code: str, entry: str) -> Callable[..., Any]:
    """Compile trusted reference code and return its entry function."""
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<reference {entry}>", "exec"), namespace)
    return namespace[entry]


def _make_task(seed: int, i: int, family: Family, params: Mapping[str, Any]) -> Task:
    rng = task_rng(SERVER, seed, i)
    code = family.reference.format(**params)
    fn = reference_function(code, family.entry)
    inputs = family.inputs(rng, params)
    assert len(inputs) == TESTS_PER_TASK, family.entry
    tests = [{"args": args, "expected": json.loads(json.dumps(fn(*copy.deepcopy(args))))} for args in inputs]
    example = tests[-1]
    shown = f"{family.entry}({', '.join(json.dumps(a) for a in example['args'])})"
    statement = (f"Write a Python function `{family.signature}` in the file `{SOLUTION_FILE}` that "
                 f"{family.statement.format(**params)}\n\nExample: {shown} == {json.dumps(example['expected'])}")
    prompt = (f"{statement}\n\nSave the file with write_file, check it with run_tests (it runs {TESTS_PER_TASK} hidden "
              "unit tests and reports how many pass), fix it until all pass, then submit. Only the standard library is "
              "available; no network.")
    return Task(
        id=_task_id(seed, i),
        prompt=prompt,
        split=split_of(i),
        solution=(call("write_file", path=SOLUTION_FILE, content=code), call("run_tests"), submit("done")),
        data={"family": family.entry, "entry": family.entry, "file": SOLUTION_FILE, "params": dict(params),
              "statement": statement, "reference": code, "tests": tests},
    )


@functools.lru_cache(maxsize=8)
def _tasks(seed: int) -> tuple[Task, ...]:
    return tuple(_make_task(seed, i, f, p) for i, (f, p) in enumerate(_combos()))


def generate_tasks(seed: int = 0) -> list[Task]:
    """The task set for ``seed``: 132 problems (14 families x their parameters); ``i % 5 == 4`` is the test split.

    ``seed`` changes the hidden test inputs (not the problems)."""
    return list(_tasks(seed))


_ID = re.compile(r"code-(?:s(\d+)-)?(\d{4})")


def task_by_id(task_id: str) -> Task:
    """The generated task with this id (``code-0042`` for seed 0, ``code-s7-0042`` for seed 7)."""
    m = _ID.fullmatch(task_id)
    tasks = _tasks(int(m.group(1) or 0)) if m else ()
    if m is None or int(m.group(2)) >= len(tasks):
        raise KeyError(f"unknown code task {task_id!r}")
    return tasks[int(m.group(2))]


def verify(task: Task, answer: str | None, state: Mapping[str, Any]) -> float:
    """``passed / total`` of the last ``run_tests`` of this task, if the workspace is unchanged since; else 0.

    ``state`` is the code server's snapshot (``task_id``, ``files_hash``, ``last_run``); ``answer`` is ignored."""
    run = state.get("last_run")
    if not run or state.get("task_id") != task.id or run.get("files_hash") != state.get("files_hash"):
        return 0.0
    total = int(run.get("total") or 0)
    return float(run.get("passed", 0)) / total if total else 0.0
