"""The public API is curated: every public module says what it exports (``__all__``), and the names exist."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import mcp_gym

README = Path(__file__).resolve().parents[1] / "README.md"


def public_modules() -> list[str]:
    """Modules whose dotted path has no ``_``-private part (``__main__`` entry points and Hydra configs excluded)."""
    names = []
    for m in pkgutil.walk_packages(mcp_gym.__path__, "mcp_gym."):
        parts = m.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] == "conf":
            continue
        names.append(m.name)
    return names


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
        undefined += [f"{name}.{n}" for n in exports if not hasattr(mod, n)]
    assert not missing, f"modules without __all__: {missing}"
    assert not undefined, f"__all__ names that do not exist: {undefined}"


def test_the_package_exports_what_the_readme_teaches() -> None:
    """Every name of ``mcp_gym.__all__`` resolves and appears in the README, and every ``mcp_gym.<Name>`` and
    ``from mcp_gym import ...`` the README uses is exported."""
    text = README.read_text(encoding="utf-8")
    for name in mcp_gym.__all__:
        assert getattr(mcp_gym, name) is not None
        assert re.search(rf"\b{name}\b", text), f"mcp_gym.{name} is exported but the README never mentions it"
    used = set(re.findall(r"\bmcp_gym\.([A-Za-z_]\w*)\b", text))
    for imports in re.findall(r"^from mcp_gym import ([\w, ]+)$", text, flags=re.M):
        used |= {n.strip() for n in imports.split(",")}
    modules = {m.name for m in pkgutil.iter_modules(mcp_gym.__path__)}
    not_python = {"schema_version"}  # ``mcp_gym.schema_version``: a key of the Parquet files' metadata
    taught = {n for n in used if n not in modules | not_python}
    assert taught <= set(mcp_gym.__all__), f"README uses names mcp_gym does not export: {taught - set(mcp_gym.__all__)}"
