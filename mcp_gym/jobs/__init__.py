"""Jobs behind the ``mcp-gym`` command: collect, evaluate, export SFT data, and the end-to-end demo.

Each takes a job config (the Hydra tree in ``conf/``, the package ``mcp_gym.conf``) and an output
directory; see :mod:`mcp_gym.cli` for the command line. :func:`env_config`, :func:`server_specs` and
:func:`env_factory` turn an env config (a custom benchmark's config file) into the env the jobs and trainer faces run.
"""

from mcp_gym.jobs.collect import CollectResult, JobInterrupted, collect
from mcp_gym.jobs.config import env_config, env_factory, server_specs
from mcp_gym.jobs.demo import demo
from mcp_gym.jobs.evaluate import EvalResult, evaluate
from mcp_gym.jobs.export import export_sft
from mcp_gym.jobs.identity import JobRefused
from mcp_gym.jobs.results import JobFailed

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
