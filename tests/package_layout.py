"""Where the package's source is in the checkout: ``mcp_gym/`` and the top-level folders ``pyproject.toml`` maps into
it (``envs/`` as ``mcp_gym.envs``, ``servers/``, ``conf/``), read by ``scripts/package_view.py``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("package_view", ROOT / "scripts" / "package_view.py")
assert _spec is not None and _spec.loader is not None
package_view = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package_view)

PACKAGE_DIRS: dict[str, Path] = package_view.package_dirs(ROOT)
"""Import name -> folder: ``{"mcp_gym": ROOT/"mcp_gym", "mcp_gym.envs": ROOT/"envs", ...}``."""


def source_paths(pattern: str = "*.py", dirs: bool = False) -> dict[str, Path]:
    """Path inside the installed package (``env.py``, ``envs/sql/tasks.py``, ``servers/sql.py``) -> the checkout's
    file (or folder, with ``dirs=True``), for every match of ``pattern`` in the package's folders."""
    out: dict[str, Path] = {}
    for name, folder in PACKAGE_DIRS.items():
        prefix = name.split(".")[1:]
        if dirs and prefix:
            out["/".join(prefix)] = folder
        for path in folder.rglob(pattern):
            if "__pycache__" in path.parts or path.is_dir() != dirs:
                continue
            out["/".join([*prefix, *path.relative_to(folder).parts])] = path
    return out


def module_file(module: str) -> Path:
    """The checkout's file of a module of the package (``mcp_gym.servers.sql`` -> ``servers/sql.py``)."""
    name = max((n for n in PACKAGE_DIRS if module == n or module.startswith(n + ".")), key=len)
    rest = module.split(".")[len(name.split(".")):]
    folder = PACKAGE_DIRS[name].joinpath(*rest)
    return folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")
