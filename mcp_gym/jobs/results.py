"""What a collection reports, shared by the local launcher (:mod:`mcp_gym.jobs.collect`) and the Ray launcher
(:mod:`mcp_gym.jobs.ray_launcher`), so that neither imports the other's module for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mcp_gym.errors import MCPGymError

if TYPE_CHECKING:
    from mcp_gym.vector import EpisodeResult

__all__ = ["CollectResult", "JobFailed", "JobInterrupted"]


class JobInterrupted(MCPGymError):
    """The job was stopped by Ctrl-C after saving its finished episodes; rerun the same command to resume."""


class JobFailed(MCPGymError, RuntimeError):
    """More episodes failed to run than ``launcher.max_errors`` allows (the finished episodes are saved: fix the cause
    and rerun the same command to resume), every episode started with a server unavailable, or none of this run's
    episodes ran; the message quotes the first error."""


@dataclass
class CollectResult:
    """What a collection did (counts only: memory stays bounded however many episodes run)."""

    out: Path
    planned: int
    already_done: int
    finished: int = 0
    """Episodes this run finished (recorded)."""
    successes: int = 0
    errors: list[EpisodeResult] = field(default_factory=list)
    """Episodes that failed to run (not recorded; a rerun retries them)."""
    seconds: float = 0.0
    steps: int = 0
    unavailable: int = 0
    """Finished episodes that started with a server unavailable (see :attr:`EpisodeResult.unavailable`)."""
    unavailable_reason: str | None = None
    """The first of those episodes' reason."""

    def check_servers(self) -> None:
        """Raise :class:`JobFailed` if every episode this run finished started with a server unavailable, or if no
        episode of this run finished and some failed to run (fewer than ``launcher.max_errors``: else the job stopped
        already), e.g. every task has a ``fixture`` and no server names ``{workspace}``."""
        if self.errors and not self.finished:
            raise JobFailed(f"all {len(self.errors)} episodes of this run failed to run (none recorded); first error: "
                            f"{self.errors[0].error}")
        if self.finished and self.unavailable == self.finished:
            raise JobFailed(f"all {self.finished} episodes of this run started without a server: "
                            f"{self.unavailable_reason} (they are recorded in {self.out}: fix the server, then rerun "
                            "into another out= or after deleting that directory)")

    def add(self, r: EpisodeResult) -> None:
        """Count a finished episode (keeping only failed ones)."""
        if r.error is None:
            self.finished += 1
            self.successes += bool(r.success)
            if r.unavailable is not None:
                self.unavailable += 1
                self.unavailable_reason = self.unavailable_reason or r.unavailable
        else:
            self.errors.append(r)
