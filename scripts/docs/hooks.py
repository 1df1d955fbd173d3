"""MkDocs hook (``hooks:`` in mkdocs.yml): before anything reads the package, build the view of the package as it
installs (``scripts/package_view.py``: ``build/package-view/mcp_gym`` with envs/, servers/ and conf/ in it). The API
reference's loader (griffe), like mypy, finds a package by its folder and does not follow pyproject's package-dir, so
``mcp_gym.make_env`` (defined in ``envs/``) would not resolve from the checkout's ``mcp_gym/``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority


@event_priority(100)  # before mkdocstrings sets up its loader on the view's path
def on_config(config: Any) -> Any:
    """Build the view (replacing an older one, so a moved module is never stale)."""
    path = Path(__file__).resolve().parents[1] / "package_view.py"
    spec = importlib.util.spec_from_file_location("package_view", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build()
    return config
