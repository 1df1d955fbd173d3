"""Another checkout's ``mcp_gym`` (and its ``envs/``, ``servers/`` and ``conf/`` packages), whatever the installed
(editable) mcp-gym maps them to: :func:`install` puts a finder for them first on ``sys.meta_path``.

As a script, it runs a module of that checkout as ``python -m`` would: ``python _checkout.py TOP MODULE [ARGS...]``
(``benchmark_eval.py --compare`` starts each side's ``python -m mcp_gym.servers.bfcl`` this way, so the server a
side's job starts runs that side's code; a server gets the MCP SDK's default environment, not ``PYTHONPATH``)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import runpy
import sys
from pathlib import Path
from typing import Any

FOLDERS = {"mcp_gym": "mcp_gym", "mcp_gym.envs": "envs", "mcp_gym.servers": "servers", "mcp_gym.conf": "conf"}


def install(top: str | Path) -> None:
    """Import ``mcp_gym`` and its ``envs/``, ``servers/`` and ``conf/`` from the checkout ``top`` from now on
    (``mcp_gym.envs`` is the checkout's top-level ``envs/``, so ``PYTHONPATH`` alone would mix two checkouts)."""

    class Checkout(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
            if name not in FOLDERS:
                return None
            folder = Path(top) / FOLDERS[name]
            return importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])

    sys.meta_path.insert(0, Checkout())


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # this folder's scripts are not the module's neighbours
    top, module, *rest = sys.argv[1:]
    install(top)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
