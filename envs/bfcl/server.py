"""The former name of :mod:`mcp_gym.servers.bfcl` (``servers/bfcl.py``): ``python -m mcp_gym.envs.bfcl.server``
and imports of this name keep working."""

from mcp_gym.envs.serve import former_module

former_module(__name__, "mcp_gym.servers.bfcl")
