"""The private names of dependencies mcp-gym uses, counted: in all (each fenced in ``mcp_gym/_compat/``) and on the
``env.step`` path.

``tests/test_layout.py`` keeps them inside ``mcp_gym/_compat`` and ``tests/test_compat.py`` checks that each is still
there. This file counts them: a scan of the ``_compat`` modules (attribute reaches ``x._name``, names given as strings
to ``getattr``/``hasattr``, private modules and names imported) must find exactly :data:`EXPECTED`, so a new one fails
here until it is listed (and a removed one until it is struck off); and a stdio and a Streamable HTTP ``env.step``,
traced call by call, must run no ``_compat`` function that reaches one, nor call a private function of a dependency
itself.
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
    "mcp": ["_drive_input_required", "_lowlevel_server"],
    "stdlib": ["_callbacks", "_get_running_loop", "_parser", "_run_until_complete_cb", "_set_running_loop", "_signal"],
    "verl": ["_agent_loop_registry"],
}
"""The private names each ``_compat`` module reaches, by module (its file name)."""

DEPENDENCY_CEILING = 10
"""The most private names of dependencies (the standard library apart) the package may use, :data:`EXPECTED`'s and
:data:`SUBCLASSED`'s together (issue 40: at most 10; 19 listed before, 20 in fact: ``_pool`` went unseen behind a
helper of the same name; then 5, until the lanes fetched ``tools/list`` and stamped their requests themselves; 3 in
``_compat`` and 9 more, unseen, in subclasses' hooks until those were counted: 10 once OpenEnv's tools cache and
TRL's tokenizer were reached through public names)."""

SUBCLASSED: dict[str, list[str]] = {
    "mcp": ["_get_token_endpoint", "_refresh_token"],
    "openenv": ["_parse_result"],
    "trl": ["_async_tool_dicts", "_get_tool_suffix_ids", "_sync_tool_dicts", "_tool_call_loop"],
}
"""Private names of a dependency's class that a subclass of it in mcp-gym overrides or reads (``def _hook``,
``super()._hook()``, ``self._attr`` set by the base): the SDK's OAuth providers' token endpoint and refresh
(``client/_oauth.py``: credentials only to the server's origin), OpenEnv's result parser (its clients' documented
extension point), TRL's ``GRPOTrainer`` tool loop (``trl.py``: a rollout ends where its episode ends). Each subclass
checks at import that its base still has them (an upgrade fails loudly); they count against
:data:`DEPENDENCY_CEILING` with :data:`EXPECTED`'s. The scan of ``_compat`` cannot see these: a method of the same
name is the subclass's own (``test_the_subclasses_reach_only_the_listed_private_names``)."""

UNDOCUMENTED: dict[str, list[str]] = {
    "uvicorn": ["client", "connections", "cycle", "logger", "loop", "more_body", "transport"],
}
"""Attributes of a dependency's objects that its documentation does not offer though they have no leading underscore
(so the scans here cannot see them), by ``_compat`` module, which names them in its ``REACHED``: uvicorn's HTTP
protocol's and request cycle's, which :func:`mcp_gym.serverkit.serve_http`'s slow-client guard reads
(``tests/test_compat.py`` fails, naming it, when an upgrade stops setting one). Counted apart from
:data:`DEPENDENCY_CEILING`, whose count is of underscore names."""

GIVEN_UP: dict[str, list[str]] = {
    "httpx2": ["_SSEEventDecoder", "_connection", "_connections", "_keepalive_expiry", "_pool", "_requests", "_sse",
               "_transport"],
    "hydra": ["_flush_loggers", "_get_rerun_conf", "_internal", "_run_hydra"],
    "mcp": ["_absorb_tool_listing", "_dispatcher", "_stamp", "_tool_output_schemas", "_tool_output_validators"],
}
"""Private names mcp-gym gave up for public API (httpx2.Limits, an SSE byte filter and a session transport of two
httpx2 transports, hydra.main, the SDK's response-cache store and mcp-gym's own output-schema check, the lanes' own
``tools/list`` and stamp): none may come back."""

STEP_PATH: dict[str, list[str]] = {
    "stdlib": ["_callbacks"],
    "(called from mcp-gym)": ["_get_running_loop", "_set_running_loop"],
}
"""The private names a stdio or Streamable HTTP ``env.step`` reaches, by ``_compat`` module (the goal: none of a
dependency). A stdio step whose answer the synchronous read takes runs inline, without a task (``_set_running_loop``,
not ``_callbacks``); one that waits longer, and every HTTP step, runs a task (``_callbacks``)."""


def on_step_path(found: dict[str, list[str]]) -> bool:
    """Whether ``found`` is :data:`STEP_PATH` or a part of it (which steps ran inline depends on the machine)."""
    return all(set(n) <= set(STEP_PATH.get(m, [])) for m, n in found.items())

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

    attributes = own_attributes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _REFLECTION and \
                len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value  # getattr(x, "_name"): a reach even when a function of the module is so named
            if _is_private(name) and name not in attributes and not name.startswith("_mcp_gym"):
                found.add(name)
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


_REFLECTION = {"getattr", "hasattr", "setattr", "delattr"}


def own_attributes(tree: ast.AST) -> set[str]:
    """Attributes ``tree`` gives its own objects (``self.x = ...``, ``__slots__``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") \
                and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            out |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return out


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
    dependencies += sum(len(n) for n in SUBCLASSED.values())
    assert dependencies <= DEPENDENCY_CEILING, f"{dependencies} private names of dependencies"


def test_the_undocumented_attributes_of_dependencies_are_the_listed_ones() -> None:
    """Each ``_compat`` module's ``REACHED`` is :data:`UNDOCUMENTED`'s entry, every name of it is read in that module
    (``x.name``), and no module outside ``_compat`` reaches into uvicorn's protocols."""
    import importlib

    found: dict[str, list[str]] = {}
    for path in sorted(COMPAT.glob("*.py")):
        reached = getattr(importlib.import_module(f"mcp_gym._compat.{path.stem}"), "REACHED", None) \
            if path.stem != "__init__" else None
        if reached:
            found[path.stem] = sorted({n for names in reached.values() for n in names})
            source = path.read_text(encoding="utf-8")
            assert all(re.search(rf"\.{n}\b", source) for n in found[path.stem]), (path.stem, found[path.stem])
    assert found == UNDOCUMENTED, "undocumented attributes of dependencies: list them in UNDOCUMENTED"
    outside = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if COMPAT not in p.parents and "uvicorn.protocols" in p.read_text(encoding="utf-8"))
    assert outside == [], f"uvicorn's protocols reached outside mcp_gym/_compat: {outside}"


def test_no_private_name_given_up_comes_back() -> None:
    found = {name for names in scan().values() for name in names}
    back = {m: sorted(set(n) & found) for m, n in GIVEN_UP.items()}
    assert not any(back.values()), f"private names given up for public API are used again: {back}"
    assert not (COMPAT / "hydra.py").exists(), "Hydra runs through hydra.main: no _compat module for it"
    assert not (COMPAT / "httpx2.py").exists(), "httpx2 is used through its public API: no _compat module for it"


def test_the_scan_sees_reaches() -> None:
    tree = ast.parse("import anyio._backends._asyncio as a\nfrom x import _y\ndef f(s):\n"
                     "    return s._dispatcher, getattr(s, '_stamp'), s._own, {'_meta': 1}\n_own = 1\n"
                     "def _pool(c):\n    return getattr(c, '_pool')\n")
    assert private_names(tree) == {"_backends", "_asyncio", "_y", "_dispatcher", "_stamp", "_pool"}


# -- subclasses of dependencies' classes -------------------------------------------------------------------------------
def _dependency(cls: type) -> str | None:
    """The distribution-level module name of ``cls`` when a dependency defines it (not mcp-gym, the standard library
    or the builtins), else ``None``."""
    top = cls.__module__.split(".")[0]
    return None if top in sys.stdlib_module_names or top in ("builtins", "mcp_gym") else top


_MADE_BY_PYTHON = {"_abc_impl", "_is_protocol", "_is_runtime_protocol"}
"""Private names Python's own machinery puts in a class's namespace (``abc.ABCMeta``, ``typing.Protocol``)."""


def _reached(cls: type) -> set[str]:
    """Private names the class body of ``cls`` defines (methods, attributes) or its methods reach on
    ``self``/``cls``/``super()``."""
    import inspect
    import textwrap

    names = {name for name in vars(cls) if _is_private(name) and name not in _MADE_BY_PYTHON}
    for value in vars(cls).values():
        function = getattr(value, "__func__", getattr(value, "fget", value))
        if not inspect.isfunction(function):
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function)))):
            if isinstance(node, ast.Attribute) and _is_private(node.attr) and (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                    or isinstance(node.value, ast.Call) and ast.unparse(node.value) == "super()"):
                names.add(node.attr)
    return names


def subclass_reaches(cls: type) -> dict[str, set[str]]:
    """The private names ``cls`` (a class of mcp-gym's) reaches of a dependency's class it derives from, by
    dependency: those its body defines or reaches that a dependency class in its MRO defines, or sets on ``self``."""
    import inspect

    out: dict[str, set[str]] = {}
    for name in _reached(cls):
        for base in cls.__mro__[1:]:  # the first class that defines the name owns it (mcp-gym's own: not counted)
            try:
                source = inspect.getsource(base)
            except (OSError, TypeError):  # a compiled class: its namespace only
                source = ""
            if name in vars(base) or re.search(rf"self\.{name}\b", source):
                if (dep := _dependency(base)) is not None:
                    out.setdefault(dep, set()).add(name)
                break
    return out


def _subclasses() -> list[type]:
    """mcp-gym's classes that derive from a dependency's class: every module's (a module whose extra is missing is
    left out) and the ones built by a function (TRL's trainer, the OAuth providers)."""
    import importlib
    import pkgutil

    classes: list[type] = []
    for info in pkgutil.walk_packages(mcp_gym.__path__, "mcp_gym."):
        if info.name.endswith("__main__") or \
                info.name.startswith(("mcp_gym.envs.", "mcp_gym.servers.")) and info.name.count(".") > 2:
            continue  # (a program; an env's and a server's inner modules)
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        classes += [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__]
    from mcp.client.auth.extensions import client_credentials as cc

    from mcp_gym.client._oauth import same_origin

    classes += [same_origin(cc.ClientCredentialsOAuthProvider), same_origin(cc.PrivateKeyJWTOAuthProvider)]
    try:
        from mcp_gym.trl import _episode_grpo_trainer

        classes.append(_episode_grpo_trainer())
    except ImportError:
        pass
    return [c for c in classes if any(_dependency(b) for b in c.__mro__[1:])]


def found_subclass_reaches() -> dict[str, list[str]]:
    """What :func:`subclass_reaches` finds over :func:`_subclasses`, by dependency (run in a child process: it
    imports every module of the package)."""
    found: dict[str, set[str]] = {}
    for cls in _subclasses():
        for dep, names in subclass_reaches(cls).items():
            found.setdefault(dep, set()).update(names)
    return {dep: sorted(names) for dep, names in found.items()}


@pytest.mark.slow  # imports every module (Ray, TRL, OpenEnv, verl: ~6 s), in a child; the heavy lane has every extra
def test_the_subclasses_reach_only_the_listed_private_names() -> None:
    import json
    import subprocess

    code = "import json, test_private_names as t; print(json.dumps(t.found_subclass_reaches()))"
    child = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])
    listed = {dep: names for dep, names in SUBCLASSED.items() if dep == "mcp" or _installed(dep)}
    assert found == listed, "private names of dependencies reached by subclassing (list them in SUBCLASSED, or use " \
        "public API)"


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_the_subclass_scan_sees_reaches() -> None:
    import json

    class Decoder(json.JSONDecoder):  # json is the standard library: not counted
        def _own(self) -> None: ...

    assert subclass_reaches(Decoder) == {}
    from mcp.client.auth.extensions import client_credentials as cc

    from mcp_gym.client._oauth import same_origin

    assert subclass_reaches(same_origin(cc.ClientCredentialsOAuthProvider)) == {
        "mcp": {"_get_token_endpoint", "_refresh_token"}}


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
    assert on_step_path(found) and "_set_running_loop" in found["(called from mcp-gym)"], \
        f"private names on the stdio env.step path: {found}"


@pytest.mark.slow  # 13 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_the_http_step_path_reaches_only_the_listed_private_names() -> None:
    """A Streamable HTTP ``env.step`` (the fast lane, stamped by mcp-gym: no ``ClientSession._stamp``)."""
    from conftest import start_http_server, stop_process

    from mcp_gym import Http

    proc, url = start_http_server("mcp_gym.servers.counter", "--diagnostics")
    e = MCPEnv({"c": Http(url)}, ["Move the counter."], max_steps=1000, call_timeout=30.0)
    try:
        e.reset(seed=0)
        e.step({"tool": "echo", "arguments": {"text": "warm"}})  # the session's stamp is known by now
        found = {m: sorted(n) for m, n in step_path_names(e).items()}
        assert on_step_path(found), f"private names on the Streamable HTTP env.step path: {found}"
        assert e.host.connections["c"].http_wire.calls >= 5  # the steps went on the lane
    finally:
        e.close()
        stop_process(proc)
