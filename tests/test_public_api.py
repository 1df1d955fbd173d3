"""The public API is curated: every public module says what it exports (``__all__``), and the names exist."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
from package_layout import PACKAGE_DIRS, source_paths

import mcp_gym

README = Path(__file__).resolve().parents[1] / "README.md"


def taught_text() -> str:
    """README.md and every docs page: where the public names are taught."""
    docs = sorted(README.parent.joinpath("docs").rglob("*.md"))
    return "\n".join(p.read_text(encoding="utf-8") for p in [README, *docs])


MAPPED = [name for name in PACKAGE_DIRS if name != "mcp_gym"]
"""The subpackages pyproject.toml maps in from the top level: mcp_gym.envs, mcp_gym.servers, mcp_gym.conf."""
OPTIONAL = {"mcp_gym.skyrl": "skyrl_gym", "mcp_gym.openenv": "openenv.core", "mcp_gym.verl": "verl"}
"""Modules that need an extra to import (module -> the package it needs): checked where that package is installed."""


def public_modules() -> list[str]:
    """Modules whose dotted path has no ``_``-private part (``__main__`` entry points and Hydra configs excluded), and
    no module of an extra that is not installed."""
    names = []
    found = list(pkgutil.walk_packages(mcp_gym.__path__, "mcp_gym."))
    for mapped in MAPPED:  # envs/, servers/, conf/: not in mcp_gym's folder (pyproject's package-dir)
        found += [pkgutil.ModuleInfo(None, mapped, True),  # type: ignore[arg-type]
                  *pkgutil.walk_packages(importlib.import_module(mapped).__path__, f"{mapped}.")]
    for m in found:
        parts = m.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] == "conf":
            continue
        if m.name in OPTIONAL and importlib.util.find_spec(OPTIONAL[m.name].split(".")[0]) is None:
            continue
        names.append(m.name)
    return names


def _resolves(mod: object, name: str) -> bool:
    """``mod.name`` exists: it resolves, or it is a lazy name whose optional extra is missing here (the module's
    ``__getattr__`` knows it and raises ``ImportError`` for the extra; an unknown name raises ``AttributeError``)."""
    try:
        getattr(mod, name)
    except AttributeError:
        return False
    except ImportError:
        return True
    return True


def test_every_public_module_declares_its_exports() -> None:
    missing, undefined = [], []
    for name in public_modules():
        mod = importlib.import_module(name)
        exports = getattr(mod, "__all__", None)
        if exports is None:
            defined = [k for k, v in vars(mod).items()
                       if not k.startswith("_") and getattr(v, "__module__", name) == name
                       and not isinstance(v, type(mcp_gym))]
            if defined:  # an empty package __init__ (``mcp_gym.client``, an env folder) has nothing to declare
                missing.append(name)
            continue
        undefined += [f"{name}.{n}" for n in exports if not _resolves(mod, n)]
    assert not missing, f"modules without __all__: {missing}"
    assert not undefined, f"__all__ names that do not exist: {undefined}"


def test_the_package_exports_what_the_readme_teaches() -> None:
    """Every name of ``mcp_gym.__all__`` resolves and appears in the README or the docs, and every ``mcp_gym.<Name>``
    and ``from mcp_gym import ...`` they use is exported."""
    text = taught_text()
    for name in mcp_gym.__all__:
        assert getattr(mcp_gym, name) is not None
        assert re.search(rf"\b{name}\b", text), f"mcp_gym.{name} is exported but neither README nor docs mention it"
    used = set(re.findall(r"\bmcp_gym\.([A-Za-z_]\w*)\b", text))
    for imports in re.findall(r"^from mcp_gym import ([\w, ]+)$", text, flags=re.M):
        used |= {n.strip() for n in imports.split(",")}
    modules = {m.name for m in pkgutil.iter_modules(mcp_gym.__path__)} | {n.split(".")[1] for n in MAPPED}
    not_python = {"schema_version"}  # ``mcp_gym.schema_version``: a key of the Parquet files' metadata
    taught = {n for n in used if n not in modules | not_python}
    assert taught <= set(mcp_gym.__all__), f"README/docs use names not exported: {taught - set(mcp_gym.__all__)}"


def _signature(value: object) -> str:
    try:
        return str(inspect.signature(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # not callable, or a builtin-derived class (exceptions)
        return ""


CURATED = ("chat", "viewer", "graders", "jobs", "recording")


def _outside_uses(package: str) -> set[str]:
    """Names imported (``from mcp_gym.<package>... import name``) or read as attributes (``jobs.collect``) by the
    library's modules outside ``package`` and by ``scripts/``, plus every word of the Hydra configs."""
    files = [p for rel, p in source_paths().items() if rel != f"{package}.py" and not rel.startswith(f"{package}/")]
    files += README.parent.joinpath("scripts").rglob("*.py")
    used: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"mcp_gym.{package}"):
                used |= {a.name for a in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == package:
                used.add(node.attr)
    for conf in PACKAGE_DIRS["mcp_gym.conf"].rglob("*.yaml"):
        used |= set(re.findall(r"\w+", conf.read_text(encoding="utf-8")))
    return used


@pytest.mark.parametrize("package", CURATED)
def test_exports_are_what_users_or_other_packages_need(package: str) -> None:
    """A name in the ``__all__`` of these packages (and their modules) is taught by the README or the configs, imported
    across a package boundary, or a type in the signature of such a name; internal helpers stay out of ``__all__``."""
    readme = set(re.findall(r"\w+", taught_text()))
    needed = readme | _outside_uses(package)
    top = importlib.import_module(f"mcp_gym.{package}")
    modules = [top] + [importlib.import_module(m.name) for m in
                       pkgutil.walk_packages(getattr(top, "__path__", []), f"mcp_gym.{package}.")]
    exported = {(m.__name__, n): getattr(m, n) for m in modules for n in getattr(m, "__all__", [])}
    signatures = " ".join(_signature(v) for (_, n), v in exported.items() if n in needed)
    extra = {f"{m}.{n}" for (m, n) in exported if n not in needed and not re.search(rf"\b{n}\b", signatures)}
    assert not extra, f"exported but neither taught nor imported by another package: {sorted(extra)}"


def test_every_error_mcp_gym_raises_on_purpose_is_an_mcpgymerror(tmp_path: Path) -> None:
    """One root to catch (``except mcp_gym.MCPGymError``), and each error is still the built-in it was."""
    from mcp_gym.cassette.reader import CassetteError
    from mcp_gym.client.connection import ConnectionLost, ListingTimeout
    from mcp_gym.graders.base import GraderError
    from mcp_gym.jobs.identity import JobRefused
    from mcp_gym.jobs.schema import ConfigError
    from mcp_gym.recording.shards import ShardRefused
    from mcp_gym.servers._bwrap import SandboxUnavailable
    from mcp_gym.sft import NothingToExport
    from mcp_gym.tasks import TaskDataError

    for cls, builtin in [(ConfigError, ValueError), (TaskDataError, ValueError), (ShardRefused, ValueError),
                         (NothingToExport, ValueError), (JobRefused, ValueError), (CassetteError, ValueError),
                         (ListingTimeout, TimeoutError), (SandboxUnavailable, RuntimeError),
                         (ConnectionLost, Exception), (GraderError, Exception), (mcp_gym.InvalidAction, Exception)]:
        assert issubclass(cls, mcp_gym.MCPGymError) and issubclass(cls, builtin), cls
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"id": "t1", "turns": [{"answer": "no prompt"}]}\n')
    with pytest.raises(mcp_gym.MCPGymError) as caught:  # a real refusal, caught by the root
        mcp_gym.tasks.load_task_source(bad)
    assert "t1" in str(caught.value) and caught.value.error["message"] == str(caught.value)


SERVER_SIDE_ERRORS = {"mcp_gym.servers.sql.FunctionRefused"}
"""Error classes that never leave a server process: the SQL server's refusal inside an SQLite function (its client
sees the tool's error result)."""


def test_every_public_error_class_of_the_package_derives_from_the_root() -> None:
    """Every exception class the package defines under a public name (warnings aside) is an ``MCPGymError``, so
    ``except mcp_gym.MCPGymError`` catches what a user can meet; private ones (``_Answer``, ``StepAside``) are caught
    inside the module that raises them."""
    outside = []
    for module in public_modules():  # private modules' classes (``_compat``'s ``StepAside``) are internal too
        for name, value in vars(importlib.import_module(module)).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and not issubclass(value, Warning)
                    and value.__module__ == module and not name.startswith("_")
                    and f"{module}.{name}" not in SERVER_SIDE_ERRORS and not issubclass(value, mcp_gym.MCPGymError)):
                outside.append(f"{module}.{name}")
    assert not outside, f"public error classes outside MCPGymError: {outside}"
