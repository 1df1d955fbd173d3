"""verl's private names mcp-gym uses (``verl`` 0.9, the optional ``[verl]`` extra), each with why; see
:mod:`mcp_gym._compat`.

* ``verl.experimental.agent_loop.agent_loop._agent_loop_registry``: the table of agent loops a rollout worker in this
  process instantiates by name. verl's public ``register`` decorator records only a class (``{"_target_": ...}``);
  an mcp-gym loop also needs its settings (the env, budgets), which verl otherwise reads from the YAML file named
  by ``agent_loop_config_path`` (:func:`mcp_gym.verl.agent_loop_entry` writes that entry). Without the table,
  :func:`mcp_gym.verl.register` stops with a one-line error saying to use that file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["agent_loop_registry", "missing"]

_WHERE = "verl.experimental.agent_loop.agent_loop._agent_loop_registry"


def agent_loop_registry() -> dict[str, dict[str, Any]]:
    """verl's in-process table of agent loops by name (raises ``RuntimeError`` naming it when verl moved it)."""
    from verl.experimental.agent_loop import agent_loop

    table = getattr(agent_loop, "_agent_loop_registry", None)
    if not isinstance(table, dict):
        raise RuntimeError(f"this verl has no {_WHERE}: register mcp-gym's agent loop through an "
                           "agent_loop_config_path file instead (mcp_gym.verl.agent_loop_entry)")
    return table


def missing() -> list[str]:
    """The verl names used here that the installed verl lacks (``[]`` when all are there, or verl is absent)."""
    try:
        from verl.experimental.agent_loop import agent_loop
    except ImportError:  # the optional extra is not installed: nothing to check
        return []
    return [] if isinstance(getattr(agent_loop, "_agent_loop_registry", None), dict) else [_WHERE]
