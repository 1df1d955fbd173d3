"""mcp-gym: any Model Context Protocol server as a Gymnasium environment.

    from mcp_gym import MCPEnv, Stdio
    env = MCPEnv(servers={"fs": Stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "."])})

Importing the package registers the bundled environments (``gymnasium.make("mcp_gym/SQL-v0")``): at once where
Gymnasium is imported, else when it is, so that a process that never uses Gymnasium does not import it. The public names
below are imported on first use, so server processes (``python -m mcp_gym.servers.sql``) start without loading the
client, the recorder or pyarrow.
"""

from __future__ import annotations

import importlib
import importlib.abc
from typing import TYPE_CHECKING, Any

from mcp_gym._lazy import lazy_names
from mcp_gym._version import __version__ as __version__

_EXPORTS: dict[str, str] = {
    "MCPEnv": "mcp_gym.env",
    "MCPGymError": "mcp_gym.errors",
    "Limits": "mcp_gym.options",
    "Scoring": "mcp_gym.options",
    "Connection": "mcp_gym.options",
    "InvalidAction": "mcp_gym.env",
    "ToolCallFailed": "mcp_gym.env",
    "Stdio": "mcp_gym.client.specs",
    "Http": "mcp_gym.client.specs",
    "Sse": "mcp_gym.client.specs",
    "InProcess": "mcp_gym.client.specs",
    "ServerUnavailableWarning": "mcp_gym.client.host",
    "StatefulServerWarning": "mcp_gym._stateful",
    "Replay": "mcp_gym.cassette",
    "ToolCallSpace": "mcp_gym.spaces",
    "Utf8Text": "mcp_gym.spaces",
    "TextMapping": "mcp_gym.spaces",
    "Task": "mcp_gym.tasks",
    "ConventionReward": "mcp_gym.rewards",
    "StepContext": "mcp_gym.rewards",
    "read_reward": "mcp_gym.rewards",
    "RecordTrajectories": "mcp_gym.recording",
    "make_env": "mcp_gym.envs",
    "VectorMCPEnv": "mcp_gym.vector",
    "AsyncWrapper": "mcp_gym.async_env",
    "areset": "mcp_gym.async_env",
    "astep": "mcp_gym.async_env",
    "aclose": "mcp_gym.async_env",
}
__all__ = [
    "MCPEnv",
    "MCPGymError",
    "Limits",
    "Scoring",
    "Connection",
    "InvalidAction",
    "ToolCallFailed",
    "Stdio",
    "Http",
    "Sse",
    "InProcess",
    "ServerUnavailableWarning",
    "StatefulServerWarning",
    "Replay",
    "ToolCallSpace",
    "Utf8Text",
    "TextMapping",
    "Task",
    "ConventionReward",
    "StepContext",
    "read_reward",
    "RecordTrajectories",
    "make_env",
    "VectorMCPEnv",
    "AsyncWrapper",
    "areset",
    "astep",
    "aclose",
    "sft",
    "recording",
]

if TYPE_CHECKING:
    from mcp_gym import recording, sft
    from mcp_gym._stateful import StatefulServerWarning
    from mcp_gym.async_env import AsyncWrapper, aclose, areset, astep
    from mcp_gym.cassette import Replay
    from mcp_gym.client.host import ServerUnavailableWarning
    from mcp_gym.client.specs import Http, InProcess, Sse, Stdio
    from mcp_gym.env import InvalidAction, MCPEnv, ToolCallFailed
    from mcp_gym.envs import make_env
    from mcp_gym.errors import MCPGymError
    from mcp_gym.options import Connection, Limits, Scoring
    from mcp_gym.recording import RecordTrajectories
    from mcp_gym.rewards import ConventionReward, StepContext, read_reward
    from mcp_gym.spaces import TextMapping, ToolCallSpace, Utf8Text
    from mcp_gym.tasks import Task
    from mcp_gym.vector import VectorMCPEnv


__getattr__ = lazy_names(__name__, _EXPORTS, ("sft", "recording"))


def _refuse_left_over_folders() -> None:
    """``mcp_gym.envs``, ``mcp_gym.servers`` and ``mcp_gym.conf`` are the top-level folders ``envs/``, ``servers/`` and
    ``conf/`` (pyproject's package-dir). A folder of that name left inside ``mcp_gym/`` by an older checkout (its
    ``__pycache__``, which git leaves behind) would shadow one as an empty namespace package: one clear line instead."""
    import os

    here = os.path.dirname(__file__)
    for name in ("envs", "servers", "conf"):
        left = os.path.join(here, name)
        if os.path.isdir(left) and not os.path.isfile(os.path.join(left, "__init__.py")):
            raise ImportError(f"{left} is left over from an older checkout (mcp_gym.{name} is the top-level folder "
                              f"{name}/ now): remove it")


def _register() -> None:
    """Register the bundled envs with Gymnasium: at once where Gymnasium is imported already, else as soon as it is
    (:class:`_RegisterWithGymnasium`), so that a process that never imports it (a bundled server, ``mcp-gym
    export-sft``) does not pay for it."""
    import sys

    if "gymnasium" in sys.modules:
        from mcp_gym.envs import register_all

        register_all()
    else:
        sys.meta_path.insert(0, _RegisterWithGymnasium())


class _RegisterWithGymnasium(importlib.abc.MetaPathFinder):
    """An import hook (the first of ``sys.meta_path``) that registers the bundled envs right after the ``gymnasium``
    package is executed, before its ``import`` returns, then leaves ``sys.meta_path``; other imports it passes on. A
    ``find_spec`` that does not import (a check that Gymnasium is installed) leaves it in place."""

    def __init__(self) -> None:
        self.finding: set[int] = set()  # threads asking the finders after this one (which ask this one again)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "gymnasium":  # first: every other import passes here
            return None
        import importlib.util
        import threading

        me = threading.get_ident()
        if me in self.finding:
            return None

        self.finding.add(me)
        try:
            spec = importlib.util.find_spec(name)  # the finders after this one
        finally:
            self.finding.discard(me)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader, self)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """``loader``, whose ``exec_module`` then registers the bundled envs, gives the module its own loader back and
    takes ``hook`` out of ``sys.meta_path``."""

    def __init__(self, loader: Any, hook: _RegisterWithGymnasium) -> None:
        self.loader = loader
        self.hook = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        import sys

        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        from mcp_gym.envs import register_all

        register_all()
        if self.hook in sys.meta_path:
            sys.meta_path.remove(self.hook)


_refuse_left_over_folders()
_register()
