"""mcp-gym: any Model Context Protocol server as a Gymnasium environment.

    from mcp_gym import MCPEnv, Stdio
    env = MCPEnv(servers={"fs": Stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "."])})
"""

__version__ = "0.1.0"

from mcp_gym.connection import Http, InProcess, Stdio  # noqa: E402
from mcp_gym.env import InvalidAction, MCPEnv, MCPGymError, ToolCallFailed  # noqa: E402
from mcp_gym.envs import make_env, register_all  # noqa: E402
from mcp_gym.rewards import ConventionReward, StepContext, read_reward  # noqa: E402
from mcp_gym.spaces import TextMapping, ToolCallSpace, Utf8Text  # noqa: E402
from mcp_gym.tasks import Task  # noqa: E402

register_all()

__all__ = [
    "MCPEnv",
    "Stdio",
    "Http",
    "InProcess",
    "ToolCallSpace",
    "Utf8Text",
    "TextMapping",
    "Task",
    "MCPGymError",
    "InvalidAction",
    "ToolCallFailed",
    "ConventionReward",
    "StepContext",
    "read_reward",
    "make_env",
]
