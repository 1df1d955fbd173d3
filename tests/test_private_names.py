"""The private names of dependencies mcp-gym uses, counted: in all (each fenced in ``mcp_gym/_compat/``) and on the
``env.step`` path.

``tests/test_layout.py`` keeps them inside ``mcp_gym/_compat`` and ``tests/test_compat.py`` checks that each is still
there. This file counts them: a scan of the ``_compat`` modules (attribute reaches ``x._name``, names given as strings
to ``getattr``/``hasattr``, private modules and names imported) must find exactly :data:`EXPECTED`, so a new one fails
here until it is listed (and a removed one until it is struck off); and a stdio ``env.step`` traced call by call must
run no ``_compat`` function that reaches one, nor call a private function of a dependency itself.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import mcp_gym
from mcp_gym import MCPEnv, Stdio

COMPAT = Path(mcp_gym.__file__).parent / "_compat"
PACKAGE = Path(mcp_gym.__file__).parent

STDLIB = {"stdlib"}
"""``_compat`` modules of the standard library (the language's own internals, counted apart from dependencies)."""

EXPECTED: dict[str, list[str]] = {
    "httpx2": ["_connections", "_requests", "_transport"],
    "mcp": ["_dispatcher", "_drive_input_required", "_lowlevel_server", "_stamp"],
    "stdlib": ["_callbacks", "_get_running_loop", "_parser", "_run_until_complete_cb", "_signal"],
    "verl": ["_agent_loop_registry"],
}
"""The private names each ``_compat`` module reaches, by module (its file name)."""

DEPENDENCY_CEILING = 8
"""The most private names of dependencies (the standard library apart) the package may use; the goal is 10."""

STEP_PATH: dict[str, list[str]] = {
    "stdlib": ["_callbacks"],
    "(called from mcp-gym)": ["_get_running_loop"],
}
"""The private names a stdio ``env.step`` reaches, by ``_compat`` module (the goal: none of a dependency)."""

_IDENT = re.compile(r"(?<![A-Za-z0-9_])_[A-Za-z][A-Za-z0-9_]*")
_WIRE_KEYS = {"_meta", "_compat"}  # MCP's wire field (a key, not a name); mcp-gym's own package


def private_names(tree: ast.AST, own: set[str] | None = None) -> set[str]:
    """The private names ``tree`` (a module, or a function of one whose own names are ``own``) reaches: attributes,
    identifiers in string constants other than docstrings (``getattr(x, "_name")``, tuples of names), imports."""
    own = set(own or ()) | defined(tree)
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__") and name not in own and \
            not name.startswith("_mcp_gym") and name not in _WIRE_KEYS

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found |= {m for m in _IDENT.findall(node.value) if private(m)}
        elif isinstance(node, ast.Import):
            found |= {p for a in node.names for p in a.name.split(".") if _is_private(p)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                node.module.split(".")[0] != "mcp_gym":
            found |= {p for p in node.module.split(".") if _is_private(p)}
            found |= {a.name for a in node.names if _is_private(a.name)}
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined(tree: ast.AST) -> set[str]:
    """Names ``tree`` defines: functions, classes, arguments, assigned names and ``self.``/``cls.`` attributes,
    import aliases."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            own |= {a.asname for a in node.names if a.asname}
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for t in ast.walk(target):
                    if isinstance(t, ast.Name):
                        own.add(t.id)
                    elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self",
                                                                                                          "cls"):
                        own.add(t.attr)
    return own


def scan() -> dict[str, list[str]]:
    """The private names each ``_compat`` module reaches (modules reaching none are left out)."""
    out = {}
    for path in sorted(COMPAT.glob("*.py")):
        names = private_names(ast.parse(path.read_text(encoding="utf-8")))
        if names:
            out[path.stem] = sorted(names)
    return out


def test_the_private_names_of_dependencies_are_the_listed_ones() -> None:
    found = scan()
    new = {m: sorted(set(n) - set(EXPECTED.get(m, []))) for m, n in found.items()}
    gone = {m: sorted(set(n) - set(found.get(m, []))) for m, n in EXPECTED.items()}
    assert not any(new.values()), f"new private names of dependencies (fence them, test them, list them): {new}"
    assert not any(gone.values()), f"private names no longer used: strike them from EXPECTED: {gone}"
    dependencies = sum(len(n) for m, n in found.items() if m not in STDLIB)
    assert dependencies <= DEPENDENCY_CEILING, f"{dependencies} private names of dependencies"


def test_the_scan_sees_reaches() -> None:
    tree = ast.parse("import anyio._backends._asyncio as a\nfrom x import _y\ndef f(s):\n"
                     "    return s._dispatcher, getattr(s, '_stamp'), s._own, {'_meta': 1}\n_own = 1\n")
    assert private_names(tree) == {"_backends", "_asyncio", "_y", "_dispatcher", "_stamp"}


# -- the env.step path, traced -------------------------------------------------------------------------------------
@pytest.fixture
def env() -> Iterator[MCPEnv]:
    e = MCPEnv({"c": Stdio.python_module("mcp_gym.servers.counter", "--diagnostics")}, ["Move the counter."],
               max_steps=1000, call_timeout=30.0)
    e.reset(seed=0)
    try:
        yield e
    finally:
        e.close()


def _functions(path: Path) -> tuple[ast.Module, dict[int, ast.AST]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    starts: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            starts[node.lineno] = starts.get(first, node)
            starts[first] = node
    return tree, starts


def step_path_names(env: MCPEnv, steps: int = 5) -> dict[str, set[str]]:
    """The private names a stdio ``env.step`` reaches: in the ``_compat`` functions it runs (each function's body
    scanned), and private built-in functions it calls from mcp-gym's own code (``asyncio._get_running_loop``)."""
    ran: set[tuple[str, int]] = set()
    called: set[str] = set()
    package = str(PACKAGE)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(str(COMPAT)):
            ran.add((code.co_filename, code.co_firstlineno))
        elif event == "c_call" and code.co_filename.startswith(package):
            name = getattr(arg, "__name__", "")
            if _is_private(name) and not code.co_filename.startswith(str(COMPAT)):
                called.add(name)

    import threading as threads
    sys.setprofile(profile)
    threads.setprofile(profile)
    try:
        for _ in range(steps):
            _, _, _, _, info = env.step({"tool": "echo", "arguments": {"text": "hi"}})
            assert info["error"] is None, info["error"]
    finally:
        sys.setprofile(None)
        threads.setprofile(None)  # type: ignore[arg-type]  # None removes it
    out: dict[str, set[str]] = {}
    for filename, line in ran:
        path = Path(filename)
        tree, starts = _functions(path)
        node = starts.get(line)
        if node is None:  # the module's own body (imports): not a step's work
            continue
        names = private_names(node, defined(tree))
        if names:
            out.setdefault(path.stem, set()).update(names)
    if called:
        out.setdefault("(called from mcp-gym)", set()).update(called)
    return out


def test_the_step_path_reaches_only_the_listed_private_names(env: MCPEnv) -> None:
    found = {m: sorted(n) for m, n in step_path_names(env).items()}
    assert found == STEP_PATH, f"private names on the stdio env.step path: {found}"
