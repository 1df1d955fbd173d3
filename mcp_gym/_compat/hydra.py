"""Hydra's private names mcp-gym uses (``hydra-core`` 1.3), each with why; see :mod:`mcp_gym._compat`.

Hydra has no public entry point for a run from an argument list (the compose API makes configs, not runs: no output
directory, ``.hydra/`` files, callbacks, ``--cfg``/``--help`` or multirun), so ``mcp-gym`` calls what the body of
``hydra.main`` calls:

* ``hydra._internal.utils.get_args_parser`` and ``_run_hydra``: parse Hydra's flags, then run (:func:`run`);
* ``hydra.main._get_rerun_conf`` and ``hydra.core.utils._flush_loggers``: ``--experimental-rerun`` (:func:`rerun`).

Without them ``mcp-gym`` cannot run a job at all: each function raises a ``RuntimeError`` naming what moved.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["args_parser", "run", "rerun", "missing"]

_NAMES = (("hydra._internal.utils", "get_args_parser"), ("hydra._internal.utils", "_run_hydra"),
          ("hydra.main", "_get_rerun_conf"), ("hydra.core.utils", "_flush_loggers"))


def missing() -> list[str]:
    """The Hydra names used here that the installed Hydra lacks (``[]`` when all are there)."""
    out = []
    for module, name in _NAMES:
        try:
            if not hasattr(importlib.import_module(module), name):
                out.append(f"{module}.{name}")
        except ImportError:
            out.append(f"{module}.{name}")
    return out


def _get(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        from hydra import __version__

        raise RuntimeError(f"mcp-gym cannot run jobs with hydra-core {__version__}: it has no {module}.{name} "
                           "(mcp_gym/_compat/hydra.py needs an update; hydra-core 1.3 has it)") from None


def args_parser() -> argparse.ArgumentParser:
    """Hydra's command-line parser (its flags: ``--multirun``, ``--cfg``, ``--help``, ...)."""
    parser: argparse.ArgumentParser = _get("hydra._internal.utils", "get_args_parser")()
    return parser


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, task: Callable[[Any], Any], config_path: str,
        config_name: str) -> None:
    """Run ``task`` on the config composed from ``args`` (parsed by ``parser``), as ``hydra.main`` does."""
    _get("hydra._internal.utils", "_run_hydra")(args=args, args_parser=parser, task_function=task,
                                                 config_path=config_path, config_name=config_name)


def rerun(config_file: str, overrides: Sequence[str], task: Callable[[Any], Any]) -> None:
    """Run ``task`` on the pickled config of an earlier run (``--experimental-rerun``), as ``hydra.main`` does."""
    get_rerun_conf, flush_loggers = _get("hydra.main", "_get_rerun_conf"), _get("hydra.core.utils", "_flush_loggers")
    task(get_rerun_conf(config_file, list(overrides)))
    flush_loggers()
