"""The teaching examples in the docstrings of the public API run as written (doctest)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["mcp_gym.env", "mcp_gym.recording.wrapper", "mcp_gym.sft", "mcp_gym.protocol",
                                    "mcp_gym.spaces.errors", "mcp_gym.client.elicitation",
                                    "mcp_gym.client.host", "mcp_gym.spaces.tool_call"])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{module} has no examples"
    assert result.failed == 0


@pytest.mark.parametrize("name", ["mcp_gym.env:MCPEnv", "mcp_gym.spaces.tool_call:ToolCallSpace",
                                  "mcp_gym.recording.wrapper:RecordTrajectories", "mcp_gym.sft:export"])
def test_the_taught_names_carry_examples(name: str) -> None:
    """The names the README starts from teach by example in their own docstrings (run by the test above)."""
    module, attr = name.split(":")
    obj = getattr(importlib.import_module(module), attr)
    tests = doctest.DocTestFinder(recurse=False).find(obj, attr)
    assert tests and tests[0].examples, f"{name} has no docstring example"
