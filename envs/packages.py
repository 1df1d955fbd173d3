"""Envs as packages: installed third-party envs, found through the entry-point group ``mcp_gym.envs``.

An installed env package declares one entry point per env in its ``pyproject.toml``::

    [project.entry-points."mcp_gym.envs"]
    demo-env = "demo_env"

The name (``demo-env``) is the env's name; the value names a package holding what a bundled env has in
``envs/<env>/tasks.py`` and ``servers/<env>.py``: ``<package>.tasks`` (``SERVER``, ``generate_tasks(seed)``,
``task_by_id``, ``verify(task, answer, state)``, ``MAX_STEPS``, ``SUCCESS_THRESHOLD``, ``OBSERVE_RESOURCES``) and
``<package>.server`` (a module defining ``server``, an MCP server object, runnable on its own with ``python -m``).
Installed, the env works as ``gymnasium.make("mcp_gym/<name>-v0")``, ``mcp_gym.make_env("<name>")`` and
``mcp-gym eval env=<name>``. Entry points are only read (never imported) until an env is used, so a broken one
breaks only that env, with one line naming its package (:class:`EnvPackageError`).
``mcp-gym envs new NAME`` scaffolds such a package (:func:`scaffold`).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

from mcp_gym.errors import MCPGymError

__all__ = ["ENTRY_POINT_GROUP", "InstalledEnv", "EnvPackageError", "installed_envs", "list_envs", "scaffold", "main"]

ENTRY_POINT_GROUP = "mcp_gym.envs"
"""The entry-point group installed env packages declare their envs in."""
_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


class EnvPackageError(MCPGymError, ValueError):
    """An installed env that cannot be used (its entry point does not import or lacks the env's shape); the message
    is one line naming the env, its package and what is wrong."""


@dataclass(frozen=True)
class InstalledEnv:
    """An env declared by an installed package (one ``mcp_gym.envs`` entry point; not imported until used)."""

    name: str
    """The env's name (``env=NAME``, ``mcp_gym/NAME-v0``)."""
    value: str
    """The entry point's value: the env's package (``demo_env``)."""
    package: str
    """The distribution declaring it, with its version (``demo-env 0.1.0``)."""

    def _fail(self, what: str) -> EnvPackageError:
        return EnvPackageError(f"installed env {self.name!r} (package {self.package}, entry point "
                               f"{self.name} = {self.value!r}): {what}")

    def _import(self, sub: str) -> ModuleType:
        if ":" in self.value:
            raise self._fail("the entry point must name a module (the env's package), not an object")
        module = f"{self.value}.{sub}"
        try:
            return importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - any import failure of a third-party package is its one-line error
            raise self._fail(f"cannot import {module}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                             ) from None

    def tasks_module(self) -> ModuleType:
        """The env's tasks module (``<package>.tasks``), checked for the bundled envs' shape."""
        mod = self._import("tasks")
        missing = [a for a in ("SERVER", "generate_tasks", "verify", "MAX_STEPS", "SUCCESS_THRESHOLD")
                   if not hasattr(mod, a)]
        if missing:
            raise self._fail(f"{mod.__name__} lacks {', '.join(missing)}")
        return mod

    def server_module(self) -> str:
        """The module of the env's server (``<package>.server``; ``python -m`` runs it over stdio)."""
        return f"{self.value}.server"

    def load_server(self) -> object:
        """The env's server object (``<package>.server.server``)."""
        mod = self._import("server")
        if not hasattr(mod, "server"):
            raise self._fail(f"{mod.__name__} defines no `server`")
        return mod.server


def _package_of(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "?"


def _reserved() -> set[str]:
    """Names an installed env cannot take: the bundled envs' and the ``env`` configs' (``custom``)."""
    from importlib.resources import files

    from mcp_gym.envs import BUNDLED_ENVS

    configs = {p.name.removesuffix(".yaml") for p in (files("mcp_gym.conf") / "env").iterdir()}
    return {n.lower() for n in BUNDLED_ENVS} | configs


def _declared() -> tuple[dict[str, InstalledEnv], list[str]]:
    found: dict[str, InstalledEnv] = {}
    conflicts: list[str] = []
    reserved = _reserved()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        env = InstalledEnv(ep.name, ep.value, _package_of(ep))
        if ep.name.lower() in reserved:
            conflicts.append(str(env._fail("the name is mcp-gym's own env; the installed one is ignored")))
        elif ep.name in found:
            conflicts.append(str(env._fail(f"also declared by package {found[ep.name].package}, which is used")))
        else:
            found[ep.name] = env
    return found, conflicts


def installed_envs() -> dict[str, InstalledEnv]:
    """The envs installed packages declare (entry-point group ``mcp_gym.envs``), by name; nothing is imported.

    Names of bundled envs and ``env`` configs are left out (mcp-gym's own env wins); of two packages declaring one
    name, the first found is kept (``mcp-gym envs list`` reports both cases)."""
    return _declared()[0]


def installed_env(name: str) -> InstalledEnv | None:
    """The installed env of this name, if any."""
    return installed_envs().get(name)


def register_env_configs() -> None:
    """Add an ``env`` config (as ``conf/env/<bundled>.yaml``) for every installed env to Hydra's config store, so
    ``mcp-gym eval env=NAME`` finds it."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name in installed_envs():
        store.store(group="env", name=name, node={
            "name": name, "transport": "stdio", "url": None, "max_steps": None, "call_timeout": 30.0,
            "connect_timeout": 30.0})


# -- scaffolding ------------------------------------------------------------------------------------------------------
def scaffold(name: str, directory: str | Path = ".") -> Path:
    """Write a new installable env package ``<directory>/<name>/`` (``mcp-gym envs new NAME``) and return its path.

    ``name``: lower-case words joined by ``-`` (the env's and the distribution's name; the import package is the
    same with ``_``). Refuses an existing folder."""
    from mcp_gym.envs._template import FILES

    if not _NAME.match(name):
        raise ValueError(f"env name {name!r}: use lower-case letters and digits, words joined by '-' (e.g. demo-env)")
    if name in _reserved():
        raise ValueError(f"env name {name!r} is the name of one of mcp-gym's own envs; choose another")
    root = Path(directory) / name
    if root.exists():
        raise ValueError(f"{root} already exists; choose another name or --dir")
    package = name.replace("-", "_")
    for rel, text in FILES.items():
        path = root / rel.replace("{package}", package)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{{name}}", name).replace("{{package}}", package), encoding="utf-8")
    return root


# -- mcp-gym envs -----------------------------------------------------------------------------------------------------
def _bundled_transport(folder: str) -> str:
    from importlib.resources import files

    from omegaconf import DictConfig, OmegaConf

    conf = files("mcp_gym.conf") / "env" / f"{folder}.yaml"
    if not conf.is_file():
        return "?"
    cfg = OmegaConf.create(conf.read_text(encoding="utf-8"))
    return str(cfg.get("transport", "stdio")) if isinstance(cfg, DictConfig) else "?"


def list_envs() -> tuple[list[dict[str, object]], list[str]]:
    """Every bundled and installed env as a row (``env``, ``id``, ``source``, ``tasks``, ``transport``), and one error
    line per installed env that cannot be loaded or is shadowed (it is left out of the rows; the others are listed)."""
    from mcp_gym._version import __version__
    from mcp_gym.envs import BUNDLED_ENVS, load_env_tasks

    rows: list[dict[str, object]] = []
    for name, folder in BUNDLED_ENVS.items():
        rows.append({"env": folder, "id": f"mcp_gym/{name}-v0", "source": f"mcp-gym {__version__} (bundled)",
                     "tasks": len(load_env_tasks(name)), "transport": _bundled_transport(folder)})
    installed, errors = _declared()
    for name, env in installed.items():
        try:
            n = len(env.tasks_module().generate_tasks(0))
        except EnvPackageError as e:
            errors.append(str(e))
            continue
        except Exception as e:  # noqa: BLE001 - a third-party generate_tasks failing is that env's one-line error
            errors.append(str(env._fail(f"generate_tasks failed: {type(e).__name__}: {e}")).splitlines()[0])
            continue
        rows.append({"env": name, "id": f"mcp_gym/{name}-v0", "source": env.package, "tasks": n,
                     "transport": "stdio"})
    return rows, errors


def main(argv: list[str] | None = None) -> int:
    """``mcp-gym envs list`` and ``mcp-gym envs new NAME [--dir DIR]``; returns the exit status."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="mcp-gym envs", description="Bundled and installed envs; new env packages.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="bundled and installed envs: name, gym id, source package, tasks, transport")
    new = sub.add_parser("new", help="scaffold an installable env package (server, tasks, verifier, test)")
    new.add_argument("name", help="the env's name: lower-case words joined by '-' (e.g. demo-env)")
    new.add_argument("--dir", default=".", help="where to create the package folder NAME/ (default: here)")
    a = p.parse_args(argv)
    if a.command == "new":
        try:
            root = scaffold(a.name, a.dir)
        except ValueError as e:
            print(f"mcp-gym envs new: {e}", file=sys.stderr)
            return 2
        print(f"created {root}: install it with `pip install -e {root}`, then `mcp-gym eval env={a.name} "
              "policy=oracle`")
        return 0
    rows, errors = list_envs()
    cols = ("env", "id", "source", "tasks", "transport")
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    header: dict[str, object] = {c: c for c in cols}
    for r in [header, *rows]:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip())
    for line in errors:
        print(f"mcp-gym envs list: {line}", file=sys.stderr)
    return 1 if errors else 0
