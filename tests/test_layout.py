"""The package's shape: the repository's top level (the design card's), the folders pyproject.toml maps into the package
(envs/, servers/, conf/) and the wheel that carries them, import layers and no circles (import-linter contracts in
pyproject.toml, checked on the package as installed), small modules, import paths equal to source paths, and one
vocabulary of error kinds (mcp_gym.protocol)."""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from importlinter import api as importlinter_api
from importlinter import cli as importlinter_cli
from package_layout import PACKAGE_DIRS, module_file, package_view, source_paths

from mcp_gym.protocol import ERROR_KINDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mcp_gym"
CARD_TOP_LEVEL = {"pyproject.toml", "mcp_gym", "envs", "servers", "tests", "conf", "scripts", "README.md", "docs",
                  "CHANGELOG.md"}
"""The repository's top level: the design card's (``pyproject.toml, mcp_gym, envs, servers, tests, conf, scripts,
README.md``), the documentation and the changelog; besides these only dotfiles (``.ci``, ``.gitignore``)."""

MAX_LINES = 700


def _lint(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run import-linter's CLI on ``config``; its logging set-up (``dictConfig``) disables every logger that exists, so
    they are enabled again after it (else a later test in the session never sees ``mcp_gym.client``'s records)."""
    loggers = logging.Logger.manager.loggerDict.values()
    enabled = [lg for lg in loggers if isinstance(lg, logging.Logger) and not lg.disabled]
    try:
        code = importlinter_cli.lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
    finally:
        for lg in enabled:
            lg.disabled = False
    return code, capsys.readouterr().out


def _lint_view(view: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the package as installed (``scripts/package_view.py``: mcp_gym/ with envs/, servers/, conf/
    in it), in a subprocess so the checkout's ``mcp_gym`` imported here is not the one it finds."""
    cmd, cwd, env = package_view.command("lint-imports", ["--no-logo"], view)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_import_contracts_are_kept(tmp_path: Path) -> None:
    """The layers (protocol -> client -> env core -> envs -> servers -> wrappers/faces -> products) hold and no import
    circle exists, over the whole package: the mapped folders envs/ and servers/ included."""
    contracts = importlinter_api.read_configuration(str(ROOT / "pyproject.toml"))["contracts_options"]
    assert {c["type"] for c in contracts} == {"layers", "acyclic_siblings"}
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    assert layers.index("mcp_gym.servers") == layers.index("mcp_gym.envs") - 1, layers
    done = _lint_view(package_view.build(tmp_path / "view"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout
    analysed = int(re.search(r"Analyzed (\d+) files", done.stdout)[1])  # type: ignore[index]
    assert analysed == len(source_paths()), (analysed, len(source_paths()))  # it saw every module, mapped ones too


def test_a_mapped_module_that_breaks_a_layer_breaks_the_contract(tmp_path: Path) -> None:
    """A module in envs/ importing a server, or in servers/ importing the jobs, breaks the layers (so the test above
    sees the mapped folders and can fail)."""
    view = package_view.build(tmp_path / "view")
    for folder, module, source in [("envs", "sql/_up.py", "from mcp_gym.servers import sql\n"),
                                   ("servers", "_up.py", "from mcp_gym.jobs import collect\n")]:
        link = view / "mcp_gym" / folder
        link.unlink()
        for path in sorted(PACKAGE_DIRS[f"mcp_gym.{folder}"].rglob("*.py")):  # a copy with one module more
            rel = path.relative_to(PACKAGE_DIRS[f"mcp_gym.{folder}"])
            if "__pycache__" not in rel.parts:
                (link / rel).parent.mkdir(parents=True, exist_ok=True)
                (link / rel).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        (link / module).write_text(source, encoding="utf-8")
    done = _lint_view(view)
    assert done.returncode == 1, done.stdout[-4000:]
    assert "mcp_gym.envs.sql._up -> mcp_gym.servers.sql" in done.stdout, done.stdout[-4000:]
    assert "mcp_gym.servers._up -> mcp_gym.jobs.collect" in done.stdout, done.stdout[-4000:]


def test_the_circle_check_sees_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The same contract type breaks on a package with a circle (so the test above can fail)."""
    pkg = tmp_path / "circled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circled import b\n")
    (pkg / "b.py").write_text("def f():\n    from circled import a\n")
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.importlinter]\nroot_package = "circled"\n\n[[tool.importlinter.contracts]]\n'
                      'name = "acyclic"\ntype = "acyclic_siblings"\nancestors = ["circled"]\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = _lint(config, capsys)
    assert code == 1 and "BROKEN" in out and (".b -> .a" in out or ".a -> .b" in out), out


def test_no_module_over_700_lines() -> None:
    sizes = {rel: len(p.read_text(encoding="utf-8").splitlines()) for rel, p in source_paths().items()}
    assert len(sizes) > 50  # the scan sees the package
    too_big = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"


@pytest.mark.parametrize(("module", "path"), [
    ("mcp_gym.servers.sql", "servers/sql.py"), ("mcp_gym.envs.counter.tasks", "envs/counter/tasks.py"),
    ("mcp_gym.servers._sandbox", "servers/_sandbox.py"), ("mcp_gym.conf.help", "conf/help.py"),
    ("mcp_gym.client.connection", "mcp_gym/client/connection.py"), ("mcp_gym.protocol", "mcp_gym/protocol.py")])
def test_import_path_is_source_path(module: str, path: str) -> None:
    """A module's import name is its path, with the card's top-level folders as ``mcp_gym.<folder>``."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin) == ROOT / path == module_file(module)


@pytest.mark.parametrize("env", ["counter", "notes", "files", "sql", "code", "maze", "lookup", "bfcl"])
def test_a_servers_former_name_is_the_server(env: str) -> None:
    """``mcp_gym.envs.<env>.server`` (the servers' name before they moved to servers/, in saved configs and printed
    commands) imports as the server module itself (``python -m`` with it: tests/test_layout.py's wheel test)."""
    old = importlib.import_module(f"mcp_gym.envs.{env}.server")
    assert old is importlib.import_module(f"mcp_gym.servers.{env}")
    assert Path(old.__file__) == ROOT / "servers" / f"{env}.py"


def test_every_package_folder_is_a_package_and_configs_ship() -> None:
    """Every folder of the package is a package (``__init__.py``), named in ``pyproject.toml``'s package list (it
    maps envs/, servers/ and conf/ into mcp_gym), and the Hydra configs are package data."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"mcp_gym.envs": "envs", "mcp_gym.servers": "servers", "mcp_gym.conf": "conf"}
    folders = {rel: p for rel, p in source_paths("*", dirs=True).items() if any(p.glob("*.py"))}
    assert not [rel for rel, p in folders.items() if not (p / "__init__.py").is_file()]
    packages = ["mcp_gym", *(f"mcp_gym.{rel.replace('/', '.')}" for rel in folders)]
    assert sorted(setuptools["packages"]) == sorted(packages)
    conf = importlib.resources.files("mcp_gym.conf")
    assert conf.joinpath("config.yaml").is_file() and conf.joinpath("env", "counter.yaml").is_file()


def test_a_folder_left_in_mcp_gym_by_an_older_checkout_is_refused(tmp_path: Path) -> None:
    """``mcp_gym/envs/`` left behind by a checkout from before the move (its ``__pycache__``: git leaves it) would
    shadow the mapped ``envs/`` as an empty namespace package; importing mcp_gym says so in one line instead."""
    package = tmp_path / "mcp_gym"
    package.mkdir()
    for entry in PACKAGE_DIRS["mcp_gym"].iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "envs" / "__pycache__").mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", "import mcp_gym"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: {package / 'envs'} is left over from an older checkout (mcp_gym.envs is the top-level folder "
        "envs/ now): remove it"), done.stderr[-2000:]


def test_the_top_level_is_the_cards() -> None:
    """``git ls-files`` shows the design card's top level (plus docs/, CHANGELOG.md and dotfiles), nothing else."""
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    top = {line.split("/", 1)[0] for line in done.stdout.splitlines()}
    assert {t for t in top if not t.startswith(".")} == CARD_TOP_LEVEL


def test_error_kinds_written_are_the_protocol_ones() -> None:
    """Every ``info["error"]["kind"]`` the package writes is listed in :data:`mcp_gym.protocol.ERROR_KINDS`."""
    pattern = re.compile(r'(?:"kind": |ActionError\(|ToolCallError\(|_error\()"([a-z_]+)"')
    found: dict[str, str] = {}
    for rel, p in source_paths().items():
        # task kinds, grader spec kinds and cassette event kinds are other things
        if rel.startswith(("envs/", "servers/", "graders/", "cassette/")):
            continue
        for kind in pattern.findall(p.read_text(encoding="utf-8")):
            found.setdefault(kind, rel)
    assert len(found) >= 10, found  # the scan sees the writers
    unknown = {k: v for k, v in found.items() if k not in ERROR_KINDS}
    assert not unknown, f"error kinds not in mcp_gym.protocol.ERROR_KINDS: {unknown}"


def test_protocol_is_the_bottom() -> None:
    """``mcp_gym.protocol`` imports nothing from mcp_gym (it must load without the package's dependencies)."""
    source = (PACKAGE / "protocol.py").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import) mcp_gym", source, re.M)
    assert sys.modules["mcp_gym.protocol"].__file__ == str(PACKAGE / "protocol.py")


def test_tool_call_error_is_the_one_error_shape() -> None:
    """``info["error"]`` is a ToolCallError's dict: fixed keys, and only the protocol's kinds."""
    import doctest

    import mcp_gym.protocol as protocol

    assert doctest.testmod(protocol).failed == 0
    err = protocol.ToolCallError("invalid_arguments", "tool 'add': argument 'amount' is required", tool="add",
                                 server="c", argument="amount")
    assert list(err.as_dict()) == ["kind", "tool", "server", "argument", "code", "message"]
    with pytest.raises(ValueError, match="unknown error kind 'oops'"):
        protocol.ToolCallError("oops", "x")


def test_the_docs_layout_names_every_folder_and_module() -> None:
    """The layout section of docs/development.md names every folder and module of the package, so it cannot fall
    behind the folders: package folders as ``name/``, modules by their name (``specs``, ``_stdio``), the bundled envs'
    folders and files as ``counter/`` and ``tasks.py``, the top-level folders mapped into the package (``envs/``,
    ``servers/``) and the servers (``sql``)."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = text[text.index("Layout: the folders"):text.index("- `conf/`")]
    named = set(re.findall(r"`([^`]+)`", section))
    named |= {Path(n).name + ("/" if n.endswith("/") else "") for n in named} | {Path(n).stem for n in named}
    missing = []
    paths = {**source_paths(), **{rel: p for rel, p in source_paths("*", dirs=True).items() if any(p.glob("*.py"))}}
    for rel_name, path in paths.items():
        rel = Path(rel_name)
        if rel.parts[0] == "conf" or path.name in ("__init__.py", "__main__.py"):
            continue
        want = f"{path.name}/" if path.is_dir() else path.name if rel.parts[0] == "envs" else path.stem
        if want not in named:
            missing.append(rel.as_posix())
    assert not missing, f"the layout section of docs/development.md does not name: {sorted(missing)}"


NOT_INSTALLED_DISTS = {"openenv": "openenv-core"}
"""The distribution of an imported module whose name differs from it, for when it is not installed here (with only
[test]): ``openenv`` comes from ``openenv-core`` (the [openenv] extra), not from PyPI's older ``openenv``."""


def test_every_direct_import_is_declared() -> None:
    """Every third-party module the package imports (at the top or inside a function) belongs to a distribution that
    ``pyproject.toml`` declares, in the core dependencies or an extra, each with a lower bound."""
    import ast
    import importlib.metadata

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared: dict[str, str] = {}
    for dep in [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]:
        name = re.match(r"[A-Za-z0-9_.-]+", dep)[0]  # type: ignore[index]
        declared[name.lower().replace("_", "-")] = dep
    assert all(">=" in d or "==" in d for d in declared.values()), declared
    imported: set[str] = set()
    for path in source_paths().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"mcp_gym", "__future__"}
    assert {"mcp", "gymnasium", "pyarrow"} <= third_party  # the scan sees the imports
    dists = importlib.metadata.packages_distributions()
    undeclared = {}
    for module in sorted(third_party):
        names = {d.lower().replace("_", "-") for d in dists.get(module, [NOT_INSTALLED_DISTS.get(module, module)])}
        if not names & set(declared):
            undeclared[module] = sorted(names)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


# -- private names stay private ---------------------------------------------------------------------------------------
NAMED_UNDERSCORE = {"_exit", "_replace", "_asdict", "_fields", "_make"}  # os._exit, namedtuple's API: public names

REACH_ALLOWED: set[tuple[str, str]] = set()
"""(module, reach) pairs still allowed: none since the episode got a home (``mcp_gym.episode``, issue 28 item 3)."""


def private_reaches(source: str, in_compat: bool = False) -> list[str]:
    """What ``source`` (a module of the package) reaches of other modules' private names: ``x._name`` (or
    ``getattr(x, "_name")``) where ``x`` is not ``self``/``cls`` and this module defines no ``_name``; and, outside
    ``mcp_gym._compat``, any private module or name of a dependency it imports. A module's own privates and a
    package's private modules (``mcp_gym.client._http``) are fine. A scan, not a type check: ``x._name`` passes where
    this module defines a ``_name`` of its own (``self._rt = other._rt``)."""
    import ast

    tree = ast.parse(source)
    protocols = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                 and any(ast.unparse(b).endswith("Protocol") for b in c.bases) for n in ast.walk(c) if n is not c}
    own: set[str] = set()  # what this module defines (a Protocol's members describe another module's object)
    for node in ast.walk(tree):
        if id(node) in protocols:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"):
                        own.add(t.attr)
                    elif isinstance(t, ast.Name):
                        own.add(t.id)
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__") and name not in NAMED_UNDERSCORE

    for node in [] if in_compat else ast.walk(tree):
        base, name = None, None
        if isinstance(node, ast.Attribute):
            base, name = node.value, node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "getattr", "hasattr", "setattr") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            base, name = node.args[0], str(node.args[1].value)
        if base is not None and name is not None and private(name) and name not in own and not (
                isinstance(base, ast.Name) and base.id in ("self", "cls")):
            found.append(f"{ast.unparse(base)}.{name}")
        imported: list[tuple[str, str]] = []  # (module, what of it is private)
        if isinstance(node, ast.Import):
            imported = [(a.name, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported = [(node.module, node.module)] + [(node.module, f"{node.module}.{a.name}") for a in node.names
                                                        if private(a.name)]
        for module, what in imported:
            if module.split(".")[0] not in ("mcp_gym", "__future__") and any(map(private, what.split("."))):
                found.append(f"import {what}")
    return sorted(found)


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """mcp_gym modules use each other's public names only, and dependencies' private names only through
    ``mcp_gym._compat`` (one module per dependency, each name tested in tests/test_compat.py)."""
    reaches = set()
    for rel, path in source_paths().items():
        reaches |= {(rel, r) for r in private_reaches(path.read_text(encoding="utf-8"), rel.startswith("_compat/"))}
    assert reaches - REACH_ALLOWED == set(), "private names reached from another module (use a public name, or " \
        "mcp_gym._compat for a dependency's)"
    assert REACH_ALLOWED - reaches == set(), "allowed but no longer reached: remove them from REACH_ALLOWED"


def test_the_private_name_check_sees_reaches() -> None:
    source = ("import _signal\nfrom hydra._internal.utils import run\nfrom json import _private\n"
              "class E(Protocol):\n    _rt: int\n"
              "from mcp_gym.client import _http\n"
              "def f(env, pool):\n    env._rt.call()\n    getattr(pool, '_conns')\n    os._exit(0)\n"
              "class A:\n    def g(self, other):\n        self._x = 1\n        return other._x, self._y\n")
    assert private_reaches(source) == ["env._rt", "import _signal", "import hydra._internal.utils",
                                       "import json._private", "pool._conns"]
    assert private_reaches(source, in_compat=True) == []


# -- the wheel --------------------------------------------------------------------------------------------------------
def _wheel(dest: Path) -> Path:
    """Build mcp-gym's wheel (``pip wheel``, isolated build as a user's) from a copy of the checkout's files (tracked
    and new, not ignored ones: a build in the checkout could pack a stale ``build/lib``) into ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.decode().strip()}")
    src = dest / "src"
    for rel in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(dest)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = dest.glob("mcp_gym-*.whl")
    return wheel


@pytest.mark.slow  # the heavy lane: the README's test command took 5m36s quiet in CI (1311 tests)
@pytest.mark.timeout(900)  # a bound on a hang only (pip fetches setuptools for the isolated build)
def test_the_wheel_carries_envs_servers_and_configs(tmp_path: Path) -> None:
    """The wheel holds the whole package under ``mcp_gym/``: every module and config of mcp_gym/, envs/, servers/
    and conf/ (the folders pyproject.toml maps in), the package data, and nothing at its top level besides."""
    with zipfile.ZipFile(_wheel(tmp_path)) as z:
        names = set(z.namelist())
    want = {f"mcp_gym/{rel}" for pattern in ("*.py", "*.yaml") for rel in source_paths(pattern)}
    assert {"mcp_gym/envs/sql/tasks.py", "mcp_gym/servers/sql.py", "mcp_gym/conf/env/sql.yaml",
            "mcp_gym/envs/sql/server.py", "mcp_gym/conf/config.yaml"} <= want  # the scan sees the mapped folders
    want |= {"mcp_gym/py.typed", "mcp_gym/viewer/page.css", "mcp_gym/viewer/page.js"}
    assert not want - names, f"missing from the wheel: {sorted(want - names)}"
    assert {n.split("/")[0] for n in names if not n.endswith("/")} == {"mcp_gym", "mcp_gym-0.1.0.dist-info"}


@pytest.mark.slow  # a wheel build and a fresh venv: ~1-2 min
@pytest.mark.timeout(1800)  # a bound on a hang only
def test_the_installed_wheel_runs_from_an_empty_folder(tmp_path: Path) -> None:
    """Installed from the wheel into a fresh venv (its dependencies: this interpreter's site-packages, after the
    venv's own), from an empty folder: ``gym.make("mcp_gym/SQL-v0")`` runs an episode, ``mcp-gym eval env=sql
    policy=oracle`` succeeds on every task, ``mcp-gym envs list`` lists the bundled envs, and the SQL server answers
    over stdio by ``mcp-gym serve sql``, its module and its former name: all from the venv, none from the checkout."""
    wheel = _wheel(tmp_path / "dist")
    venv, work = tmp_path / "venv", tmp_path / "empty"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bin_dir / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=600)
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                             capture_output=True, text=True, timeout=60).stdout.strip()
    deps = [p for p in sys.path if p.endswith("-packages")]  # not this checkout (nor an editable finder: not a .pth)
    Path(purelib, "mcp_gym_test_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

    def run(*cmd: object, stdin: str | None = None) -> str:
        done = subprocess.run([str(c) for c in cmd], cwd=work, env=env, input=stdin, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, (cmd, done.stdout[-3000:], done.stderr[-3000:])
        return done.stdout

    episode = run(py, "-c", (
        "import gymnasium as gym, mcp_gym, mcp_gym.envs, mcp_gym.servers.sql, mcp_gym.conf\n"
        "print(*(m.__file__ for m in (mcp_gym, mcp_gym.envs, mcp_gym.servers.sql, mcp_gym.conf)))\n"
        "env = gym.make('mcp_gym/SQL-v0')\n"
        "task = env.unwrapped.tasks[0]\n"
        "obs, info = env.reset(options={'task_id': task.id})\n"
        "for call in task.solution:\n"
        "    obs, reward, terminated, truncated, info = env.step(dict(call))\n"
        "env.close()\n"
        "print('success', info['success'])\n"))
    files, _, result = episode.strip().rpartition("\n")
    assert result == "success True", episode
    assert all(f.startswith(purelib) for f in files.split()), files
    out = work / "eval"
    run(bin_dir / "mcp-gym", "eval", "env=sql", "policy=oracle", "samples=1", f"out={out}")
    summary = json.loads((out / "report" / "results.json").read_text(encoding="utf-8"))["summary"]
    assert summary["episodes"] > 0 and summary["success_rate"] == 1.0, summary
    listing = run(bin_dir / "mcp-gym", "envs", "list")
    assert all(f"mcp_gym/{name}-v0" in listing for name in ("Counter", "SQL", "Code", "Maze")), listing
    hello = ('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
             '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n')
    for cmd in ([bin_dir / "mcp-gym", "serve", "sql"], [py, "-m", "mcp_gym.servers.sql"],
                [py, "-m", "mcp_gym.envs.sql.server"]):
        answer = run(*cmd, stdin=hello)  # stdin then closes: the server answers and exits
        assert '"serverInfo":{"name":"mcp-gym-sql"' in answer.replace(" ", ""), (cmd, answer)
