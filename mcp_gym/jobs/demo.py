"""``mcp-gym demo``: the README's end-to-end run on a bundled env, offline and in a minute or two.

1. collect the train split with each demo policy (oracle and random), recorded to Parquet;
2. evaluate each on the test split, ``k`` samples per task (report, plots and a side-by-side table);
3. export the successful collected episodes as a chat-format SFT dataset.
"""

from __future__ import annotations

import importlib.resources
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from mcp_gym.jobs.collect import collect
from mcp_gym.jobs.evaluate import evaluate
from mcp_gym.jobs.export import export_sft
from mcp_gym.jobs.report import print_summary

__all__ = ["demo"]


def policy_config(kind: str) -> DictConfig:
    """The packaged ``conf/policy/<kind>.yaml``."""
    path = importlib.resources.files("mcp_gym.conf").joinpath("policy").joinpath(f"{kind}.yaml")
    text = path.read_text(encoding="utf-8")
    return OmegaConf.create(text)  # type: ignore[return-value]  # a YAML mapping makes a DictConfig


def _job(cfg: DictConfig, **fields: Any) -> DictConfig:
    """A copy of the demo config turned into another job (``command``, ``policy``, ``split``, ...)."""
    sub = cfg.copy()
    with open_dict(sub):
        for key, value in fields.items():
            sub[key] = value
    return sub


def demo(cfg: DictConfig, out: str | Path) -> dict[str, Any]:
    """Run the demo into ``out`` (each stage resumes if rerun); returns the evaluation summaries by policy."""
    out = Path(out)
    t0 = time.perf_counter()
    policies = list(cfg.demo.policies)
    for kind in policies:
        collect(_job(cfg, command="collect", policy=policy_config(kind)), out / f"collect-{kind}")
    summaries = {}
    for kind in policies:
        sub = _job(cfg, command="eval", policy=policy_config(kind), split=cfg.demo.eval_split,
                   samples=cfg.demo.eval_samples, episodes=None, pass_k=cfg.demo.pass_k, plots=True)
        summaries[kind] = evaluate(sub, out / f"eval-{kind}", show=False).summary
    print_summary(summaries, title=f"{cfg.env.name}: {cfg.demo.eval_samples} samples per {cfg.demo.eval_split} task")
    export = _job(cfg, runs=[str(out / f"collect-{k}") for k in policies], format="parquet", overwrite=True,
                  sft={"success_only": True, "seed": cfg.seed})
    export_sft(export, out / "sft")
    print(f"demo finished in {time.perf_counter() - t0:.0f} s: recordings in {out}/collect-*, reports in "
          f"{out}/eval-*/report, SFT data in {out}/sft")
    return summaries
