"""``mcp-gym export-sft``: recorded runs -> a chat-format SFT dataset (:func:`mcp_gym.sft.export`)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mcp_gym.jobs.schema import to_dict

__all__ = ["export_sft"]

_NO_SPACE = "no space left on the device (or the disk quota is used up)"


def _disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk or quota: Python's ``OSError`` has the errno, Arrow's
    ``ArrowIOError`` (an ``OSError`` too) only the message."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and (cause.errno in (errno.ENOSPC, errno.EDQUOT) or any(
                text in str(cause) for text in ("No space left on device", "Disk quota exceeded"))):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def export_sft(cfg: DictConfig, out: str | Path) -> Any:
    """Export ``cfg.runs`` (run directories or globs) to ``out`` with the ``cfg.sft`` filters; returns the dataset."""
    import datasets

    from mcp_gym.jobs.identity import JobRefused
    from mcp_gym.jobs.results import JobFailed
    from mcp_gym.jobs.schema import ConfigError
    from mcp_gym.sft import ExportOptions, NothingToExport, export

    datasets.disable_progress_bars()  # one summary line instead of a bar per shard
    # runs=<one path> on the command line is a string, not a list: one run (not one per character)
    runs = [str(cfg.runs)] if isinstance(cfg.runs, (str, Path)) else [str(r) for r in cfg.runs]
    options = to_dict(cfg.sft)
    try:
        ExportOptions(**options)  # a bad option value (sft.layout=bogus): one line naming it, before any run is read
    except ValueError as e:
        raise ConfigError(f"sft: {e}") from None
    try:
        dataset = export(runs, out, format=cfg.format, overwrite=bool(cfg.overwrite), **options)
    except NothingToExport as e:  # the CLI prints it as one line
        raise JobRefused(str(e)) from e
    except OSError as e:
        if not _disk_full(e):
            raise
        raise JobFailed(f"writing the SFT dataset to {out} failed: {_NO_SPACE} (an earlier export there is kept "
                        "whole; free space and rerun)") from e
    sizes = {name: len(ds) for name, ds in dataset.items()} if hasattr(dataset, "items") else {"train": len(dataset)}
    print(f"SFT dataset: {out} ({', '.join(f'{k}: {v} examples' for k, v in sizes.items())})")
    return dataset
