"""``mcp-gym collect``: run planned episodes concurrently and record them; Ctrl-C keeps what finished, a rerun resumes.

The plan (episode keys ``<task id>#<sample>`` and their seeds) is written to the run directory's manifest; a rerun of
the same command skips the recorded keys and runs the rest, so after any number of interruptions the directory holds
exactly the planned episodes.
"""

from __future__ import annotations

import concurrent.futures
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from omegaconf import DictConfig
from tqdm.auto import tqdm

from mcp_gym.client.runtime import Runtime, default_runtime
from mcp_gym.jobs.config import (
    build_policy,
    env_factory,
    needs_own_sessions,
    plan_job,
    to_dict,
)
from mcp_gym.jobs.results import CollectResult, JobFailed, JobInterrupted
from mcp_gym.recording.store import RunStore
from mcp_gym.vector import EpisodeResult, VectorMCPEnv

__all__ = ["collect"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def run_interruptible(job: Callable[[], Awaitable[T]], runtime: Runtime | None = None) -> T:
    """Run ``await job()`` on the runtime loop; on Ctrl-C cancel it, let it clean up, and raise :class:`JobInterrupted`.

    A second Ctrl-C during the clean-up aborts at once. An error in the clean-up (a server that failed to stop, a
    recording that failed to close) is logged and does not replace the interrupt: it is still :class:`JobInterrupted`
    (exit status 130), never a failure of the job.
    """
    rt = runtime or default_runtime()
    scopes: list[anyio.CancelScope] = []
    interrupted = threading.Event()

    async def main() -> T | None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            if not interrupted.is_set():  # else Ctrl-C came before the loop ran this: the job never starts
                return await job()
        return None

    def cancel() -> None:  # on the loop, as main() is: it sees either the flag or main's scope
        for scope in scopes:
            scope.cancel()

    future: concurrent.futures.Future[T | None] | None = None
    try:
        future = rt.submit(main())
        return future.result()  # type: ignore[return-value]  # None only once cancelled, by Ctrl-C (below)
    except KeyboardInterrupt:
        interrupted.set()  # (main, if submit was interrupted after scheduling it, cancels itself as it starts)
        rt.loop.call_soon_threadsafe(cancel)
        if future is None:
            raise
        print("\nInterrupted: stopping running episodes and saving the finished ones (Ctrl-C again to abort)...",
              flush=True)
        try:
            future.result()
        except Exception as e:  # noqa: BLE001 - the clean-up of a cancelled job failed: the Ctrl-C stands (exit 130)
            log.warning("while stopping the interrupted job: %s: %s", type(e).__name__, e)
        raise JobInterrupted("interrupted; finished episodes are saved, rerun the same command to resume") from None


class _Progress:
    """A tqdm bar over planned episodes with steps/s and the success rate so far."""

    def __init__(self, total: int, done: int, enabled: bool, label: str) -> None:
        self.bar = tqdm(total=total, initial=done, desc=label, unit="ep", disable=not enabled, dynamic_ncols=True)
        self.successes = 0
        self.known = 0
        self.finished = 0
        self.t0 = time.perf_counter()

    def update(self, result: EpisodeResult, steps: int) -> None:
        self.finished += 1
        self.successes += bool(result.success)
        self.known += result.success is not None
        rate = steps / max(time.perf_counter() - self.t0, 1e-9)
        success = f"{self.successes / self.finished:.0%}" if self.known else "-"  # unknown: no verifier, no done
        self.bar.set_postfix(steps_s=f"{rate:.1f}", success=success, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def collect(cfg: DictConfig, out: str | Path, *, runtime: Runtime | None = None) -> CollectResult:
    """Run the job's planned episodes with its policy, ``launcher.num_envs`` at a time, recording them in ``out``
    (on Ray actors with ``launcher=ray``, see :mod:`mcp_gym.jobs.ray_launcher`).

    Holds the run directory's job lock throughout (:func:`~mcp_gym.jobs.identity.hold_run`): while another job
    holds it, raises :class:`~mcp_gym.jobs.identity.JobRefused` naming that job. Raises :class:`JobInterrupted` on
    Ctrl-C (after saving finished episodes), and :class:`JobFailed` when more than ``launcher.max_errors`` episodes
    failed to run or when every episode it ran started with a server unavailable. A rerun into ``out`` resumes, or
    extends the plan when only ``episodes``/``samples`` grew; with another config it raises
    :class:`~mcp_gym.jobs.identity.RunConfigMismatch` (see :mod:`mcp_gym.jobs.identity`).
    """
    out = Path(out)
    try:
        if not cfg.recorder.enabled:
            return _collect(cfg, out, runtime)
        from mcp_gym.jobs.config import run_location
        from mcp_gym.jobs.identity import hold_run

        with hold_run(run_location(cfg, out)):  # one job per run directory: a second one refuses, naming this one
            return _collect(cfg, out, runtime)
    finally:
        _stop_checkers()


def _stop_checkers() -> None:
    """Stop the job's BFCL checker processes, if its graders started any (none outlives the job)."""
    forked = sys.modules.get("mcp_gym.envs.bfcl.forked")  # not imported: no BFCL task was graded
    if forked is not None:
        forked.close_all()


MODEL_POLICIES = ("openai", "hf")
"""Policies whose episodes wait for a model: there the job's event loop mostly waits, and matplotlib is imported
ahead for free; with a scripted policy the episodes would pay for it (the import holds the interpreter lock that the
loop needs)."""


def warm_up(cfg: DictConfig) -> threading.Thread | None:
    """Import, on a thread of its own, what the job needs only at its end: pandas, which pyarrow imports when the
    recorder writes its first shard (``pa.array`` of a list asks for it; here through the same call), and matplotlib
    for an ``eval`` with plots whose policy waits for a model (:data:`MODEL_POLICIES`). Started when the first episode
    ends, it moves those imports (~0.2 and ~0.35 s of CPU) from the end of the job into time its episodes spend
    waiting for servers or a model; the first episodes' resets are never slowed. Nothing is computed
    differently, and a failed import is left to where the module is needed (the same error, raised there)."""
    wanted = []
    if cfg.recorder.enabled:
        wanted.append(_pyarrow_pandas)
    if cfg.get("command") == "eval" and cfg.get("plots", True) and cfg.policy.get("kind") in MODEL_POLICIES:
        from mcp_gym.jobs.report import load_plotting

        wanted.append(load_plotting)
    if not wanted:
        return None

    def load() -> None:
        for f in wanted:
            try:
                f()
            except Exception as e:  # noqa: BLE001 - raised again where the module is used
                log.debug("warming up %s failed: %s", f.__name__, e)

    thread = threading.Thread(target=load, name="mcp-gym-warm-up")
    thread.start()
    return thread


def _pyarrow_pandas() -> None:
    """What the recorder's first ``pa.array`` does first: import pandas where it is installed (pyarrow's own lock)."""
    import pyarrow as pa

    pa.array([], pa.string())


def _collect(cfg: DictConfig, out: Path, runtime: Runtime | None) -> CollectResult:
    launcher = cfg.launcher
    if launcher.get("kind", "local") == "ray":
        from mcp_gym.jobs.ray_launcher import collect_ray

        ray_result = collect_ray(cfg, out, runtime=runtime)
        ray_result.check_servers()
        return ray_result
    recording = bool(cfg.recorder.enabled)
    plan = plan_job(cfg, out, RunStore(str(out)) if recording else None)  # refuses another config's directory
    tasks, specs, pending, result = plan.tasks, plan.specs, plan.pending, plan.result
    if not pending:
        return result

    make = env_factory(to_dict(cfg.env), tasks)
    recorder_options = {k: v for k, v in to_dict(cfg.recorder).items() if k != "enabled"}
    num_envs = max(1, min(int(launcher.num_envs), len(pending)))

    async def job() -> None:
        policy = build_policy(to_dict(cfg.policy))

        def env_fn(slot: int) -> Any:
            env: Any = make()
            if recording:
                from mcp_gym.recording import RecordTrajectories

                env = RecordTrajectories(env, out, policy=policy.name, **recorder_options)
            return env

        progress = _Progress(len(specs), result.already_done, bool(launcher.progress), f"{cfg.command} {out.name}")
        share = launcher.get("share_servers")
        if share and needs_own_sessions(to_dict(cfg.env), tasks):
            log.debug("episodes need sessions of their own (workspace, task env or a state grader): not sharing")
            share = None
        vec = VectorMCPEnv(env_fn, num_envs, share_servers=share,
                           max_connecting=int(launcher.get("max_connecting") or 2))
        t0 = time.perf_counter()
        with anyio.CancelScope() as scope:

            def on_result(r: EpisodeResult) -> None:
                if not warming:  # after the first episode: never in the way of the first resets
                    warming.append(warm_up(cfg))
                progress.update(r, vec.steps)
                result.add(r)
                if r.error is not None:
                    log.warning("episode %s failed (not recorded): %s", r.key, r.error)
                    if len(result.errors) > int(launcher.max_errors):
                        scope.cancel()

            try:
                async with vec:
                    await vec.run(policy, pending, on_result=on_result, episode_timeout=launcher.episode_timeout)
            finally:
                progress.close()
                result.seconds = time.perf_counter() - t0
                result.steps = vec.steps
                with anyio.CancelScope(shield=True):
                    await policy.aclose()

    warming: list[threading.Thread | None] = []
    try:
        run_interruptible(job, runtime)
    finally:
        for thread in filter(None, warming):
            thread.join(60.0)  # an import: done by now, unless the episodes took less time than it
    if len(result.errors) > int(launcher.max_errors):
        raise JobFailed(f"stopped after {len(result.errors)} episodes failed to run; first error: "
                           f"{result.errors[0].error}")
    result.check_servers()
    return result
