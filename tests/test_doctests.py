"""The teaching examples in the docstrings of the public API run as written (doctest)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["mcp_gym.env", "mcp_gym.recording.wrapper", "mcp_gym.sft", "mcp_gym.protocol",
                                    "mcp_gym.spaces.errors", "mcp_gym.client.elicitation",
                                    "mcp_gym.client.host"])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{module} has no examples"
    assert result.failed == 0
