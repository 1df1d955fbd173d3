"""Masking the episode's workspace path as ``{workspace}`` in what a step returns (``mask_workspace``): both the path as
created and its resolved form, the resolution made once per episode's workspace (not a walk of the file system on
every step), and made anew for a new episode's workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_gym._workspace import mask_workspace


def test_both_forms_of_a_symlinked_workspace_are_masked_on_every_step(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    workspace = tmp_path / "link"
    for _ in range(3):
        out = mask_workspace({"a": f"{workspace}/x", "b": [f"{real}/y"], str(real): 1}, workspace)
        assert out == {"a": "{workspace}/x", "b": ["{workspace}/y"], "{workspace}": 1}


def test_the_workspace_is_resolved_once_per_episode_not_per_step(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    realpath = os.path.realpath

    def counting(path: str, *args: object, **kwargs: object) -> str:
        calls.append(str(path))
        return realpath(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "realpath", counting)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for _ in range(5):
        assert mask_workspace(f"{workspace}/f", workspace) == "{workspace}/f"
    assert calls == [str(workspace)]
    # the next episode's workspace (a new path object, here at the same place, now a symlink elsewhere): resolved anew
    other = tmp_path / "other"
    other.mkdir()
    workspace.rmdir()
    workspace.symlink_to(other)
    again = Path(str(workspace))
    assert mask_workspace(f"{other}/f", again) == "{workspace}/f"
    assert calls == [str(workspace), str(workspace)]
