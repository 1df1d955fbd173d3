"""Names a package imports on first use (PEP 562): one ``__getattr__`` for ``mcp_gym``, ``mcp_gym.jobs`` and
``mcp_gym.recording``, so that importing a package does not import what only some of its names need."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, exports: Mapping[str, str], submodules: Collection[str] = ()) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``exports`` is taken from the module it maps to, imported
    then, and kept in the package (the next lookup finds it without this function); a name of ``submodules`` is that
    submodule, imported then; anything else is an ``AttributeError`` as for any module."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            vars(sys.modules[package])[name] = value  # as a global of the package (no module __setattr__ involved)
            return value
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
