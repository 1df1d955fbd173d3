"""``mcp-gym export-sft``: recorded runs -> a chat-format SFT dataset (:func:`mcp_gym.sft.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mcp_gym.jobs.config import to_dict

__all__ = ["export_sft"]


def export_sft(cfg: DictConfig, out: str | Path) -> Any:
    """Export ``cfg.runs`` (run directories or globs) to ``out`` with the ``cfg.sft`` filters; returns the dataset."""
    import datasets

    from mcp_gym.jobs.identity import JobRefused
    from mcp_gym.sft import NothingToExport, export

    datasets.disable_progress_bars()  # one summary line instead of a bar per shard
    # runs=<one path> on the command line is a string, not a list: one run (not one per character)
    runs = [str(cfg.runs)] if isinstance(cfg.runs, (str, Path)) else [str(r) for r in cfg.runs]
    try:
        dataset = export(runs, out, format=cfg.format, overwrite=bool(cfg.overwrite), **to_dict(cfg.sft))
    except NothingToExport as e:  # the CLI prints it as one line
        raise JobRefused(str(e)) from e
    sizes = {name: len(ds) for name, ds in dataset.items()} if hasattr(dataset, "items") else {"train": len(dataset)}
    print(f"SFT dataset: {out} ({', '.join(f'{k}: {v} examples' for k, v in sizes.items())})")
    return dataset
