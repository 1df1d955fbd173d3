"""Jobs behind the ``mcp-gym`` command: collect, evaluate, export SFT data, and the end-to-end demo.

Each takes a job config (the Hydra tree in ``conf/``, the package ``mcp_gym.conf``) and an output
directory; see :mod:`mcp_gym.cli` for the command line. :func:`env_config`, :func:`server_specs` and
:func:`env_factory` turn an env config (a custom benchmark's config file) into the env the jobs and trainer faces run.

The names below are imported on first use, so a job imports only what it runs (``export-sft`` neither the MCP client
nor matplotlib).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from mcp_gym._lazy import lazy_names

_EXPORTS: dict[str, str] = {
    "collect": "mcp_gym.jobs.collect",
    "evaluate": "mcp_gym.jobs.evaluate",
    "export_sft": "mcp_gym.jobs.export",
    "demo": "mcp_gym.jobs.demo",
    "env_config": "mcp_gym.jobs.config",
    "server_specs": "mcp_gym.jobs.config",
    "env_factory": "mcp_gym.jobs.config",
    "CollectResult": "mcp_gym.jobs.results",
    "EvalResult": "mcp_gym.jobs.evaluate",
    "JobFailed": "mcp_gym.jobs.results",
    "JobInterrupted": "mcp_gym.jobs.results",
    "JobRefused": "mcp_gym.jobs.identity",
}
__all__ = [
    "collect",
    "evaluate",
    "export_sft",
    "demo",
    "env_config",
    "server_specs",
    "env_factory",
    "CollectResult",
    "EvalResult",
    "JobFailed",
    "JobInterrupted",
    "JobRefused",
]

if TYPE_CHECKING:
    from mcp_gym.jobs.collect import collect
    from mcp_gym.jobs.config import env_config, env_factory, server_specs
    from mcp_gym.jobs.demo import demo
    from mcp_gym.jobs.evaluate import EvalResult, evaluate
    from mcp_gym.jobs.export import export_sft
    from mcp_gym.jobs.identity import JobRefused
    from mcp_gym.jobs.results import CollectResult, JobFailed, JobInterrupted


__getattr__ = lazy_names(__name__, _EXPORTS)


class _Jobs(types.ModuleType):
    """This package: ``collect``, ``evaluate`` and ``demo`` are job functions named as their modules. Importing such a
    module sets the package's attribute to the module; here it becomes the module's function, as it was when this
    package imported them all."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}" and name in _EXPORTS:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Jobs
