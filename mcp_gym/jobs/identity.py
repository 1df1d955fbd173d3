"""Run identity: a run directory holds the episodes of one job config, and a rerun never reports another's.

A job records in its run directory's manifest (``metadata["identity"]``) the resolved config of everything that shapes
its episodes: the env and its options, a digest of its task set, the policy and its options (model, base URL,
temperature, ...; for a local ``policy=hf`` model also a digest of its files), ``seed``, ``split``, ``samples``,
``episodes`` and the episode limit. Settings that only change how fast or where episodes run (``launcher.*``,
``recorder.*``, ``out``, ``env.transport``, timeouts, the API key) are left out.

A rerun into the same directory (:func:`check_rerun`):

* with the same identity resumes: it runs only the planned episodes not yet recorded;
* with more ``episodes`` or ``samples``, or a wider task slice (``env.task_ids``, ``env.max_tasks``: ``env.task_set``
  digests the whole set they cut), everything else equal, extends the plan and runs only the new episodes;
* with anything else refuses with one line naming the differing keys (``old -> new``) and the fix (``out=...``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_gym.errors import MCPGymError
from mcp_gym.protocol import redact_text

if TYPE_CHECKING:
    from mcp_gym.recording.store import RunStore

__all__ = ["JobRefused"]

GROWABLE = ("samples", "episodes", "env.task_ids", "env.max_tasks")
"""Identity keys a rerun may change when its plan holds every planned episode (the plan is extended); the task slice
is among them because ``env.task_set`` pins the whole set it is cut from."""
_ENV_OPERATIONAL = frozenset({"transport", "url", "connect_timeout", "call_timeout", "task_env_allow", "grader_timeout",
                              "trust_task_code", "spare_servers", "resolve_npx"})
"""Env options that change how episodes run, not what they are (the tasks' own ``env`` is in ``env.task_set``)."""
_POLICY_OPERATIONAL = frozenset({"api_key", "timeout", "retries", "max_concurrency"})
"""Policy options that change how requests are made, not what the policy does."""


class JobRefused(MCPGymError, ValueError):
    """A job refuses to run, for a reason given in one line (the CLI prints it without a traceback)."""


class RunConfigMismatch(JobRefused):
    """The run directory holds episodes of another config."""


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for k in sorted(value, key=str):
            _flatten(f"{prefix}.{k}" if prefix else str(k), value[k], out)
    else:
        out[prefix] = list(value) if isinstance(value, tuple) else value


def task_set_digest(tasks: Sequence[Any]) -> str | None:
    """A short digest of a task set's records (prompts, answers, data, splits): changes when the tasks do, even
    under the same ids (``None`` without tasks)."""
    if not tasks:
        return None
    h = hashlib.blake2b(digest_size=8)
    for t in tasks:
        record = t.to_record()
        if not record.get("tags"):
            record.pop("tags", None)  # tasks without tags keep the digest they had before tasks had tags
        if not record.get("turns"):
            record.pop("turns", None)  # single-turn tasks keep the digest they had before tasks had turns
        h.update(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\x1e")
    return h.hexdigest()


def model_digest(model: Any) -> str | None:
    """A digest of a local model (a directory saved with ``save_pretrained``, or one file): each file's name, size and
    three sampled 64 kB blocks of its content, so a model retrained into the same path is another run (``None`` when
    ``model`` is not a local path). Sampling keeps this cheap for multi-GB weights; retrained weights differ there."""
    if not isinstance(model, str) or not model:
        return None
    path = Path(model).expanduser()
    if not path.exists():
        return None
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    h = hashlib.blake2b(digest_size=8)
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.relative_to(path) if path.is_dir() else f.name}\0{size}\0".encode())
        with f.open("rb") as fh:
            for offset in sorted({0, max(0, size // 2 - 32768), max(0, size - 65536)}):
                fh.seek(offset)
                h.update(fh.read(65536))
    return h.hexdigest()


def run_identity(
    env: Mapping[str, Any], policy: Mapping[str, Any], *, seed: Any, split: Any, samples: Any = None,
    episodes: Any = None, tasks: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The identity of a job: dotted keys (``env.name``, ``policy.model``, ``seed``, ...) -> resolved values.

    ``env.max_steps`` left unset (``None``) resolves to a bundled env's own limit, so ``env.max_steps=10`` on Counter
    (whose limit is 10) is the same run. With ``tasks`` (the job's tasks), ``env.task_set`` is their digest.
    """
    env = {k: v for k, v in env.items() if k not in _ENV_OPERATIONAL}
    if isinstance(env.get("judge"), Mapping):  # the judge's key is a secret, not part of what shapes the episodes
        env["judge"] = {k: v for k, v in env["judge"].items() if k not in _POLICY_OPERATIONAL}
    if env.get("max_steps") is None and not env.get("servers") and env.get("name"):
        try:
            from mcp_gym.envs import env_module

            env["max_steps"] = int(env_module(str(env["name"])).MAX_STEPS)
        except (ValueError, ImportError):
            pass
    policy = {k: v for k, v in policy.items() if k not in _POLICY_OPERATIONAL}
    if policy.get("kind") == "hf":  # a local model's path names no version: retrained weights are another run
        policy["model_files"] = model_digest(policy.get("model"))
    out: dict[str, Any] = {}
    _flatten("env", env, out)
    if tasks is not None:
        out["env.task_set"] = task_set_digest(tasks)
    _flatten("policy", policy, out)
    out.update(seed=seed, split=split, samples=samples, episodes=episodes)
    return {k: redact_text(v) if isinstance(v, str) else v for k, v in out.items()}  # a URL's token is not identity


def identity_diff(old: Mapping[str, Any], new: Mapping[str, Any], *, skip: Sequence[str] = ()) -> list[str]:
    """``key: old -> new`` for every key whose value differs (keys in ``skip`` left out)."""
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
            if k not in skip and old.get(k) != new.get(k)]


def check_rerun(
    location: str, manifest: Mapping[str, Any], keys: Sequence[str], identity: Mapping[str, Any]
) -> bool:
    """Decide what a job may do in a run directory that has ``manifest``; returns ``True`` when the plan must be
    (re)written (a new run, or a grown plan), ``False`` to resume as planned.

    Raises :class:`RunConfigMismatch` (one line: the differing keys and the fix) when the directory holds episodes of
    another config, or planned episodes that the new plan does not contain.
    """
    planned = manifest.get("planned")
    if planned is None:
        return True
    old = (manifest.get("metadata") or {}).get("identity")
    fix = f"rerun with another out=... (or delete {location})"
    if old is None:  # a run made before run identities were recorded: compare what its metadata has
        meta = manifest.get("metadata") or {}
        if "env" in meta and "policy" in meta:
            old = run_identity(meta["env"], meta["policy"], seed=meta.get("seed"), split=meta.get("split"),
                               samples=identity.get("samples"), episodes=identity.get("episodes"))
            if "env.task_set" in identity:
                old["env.task_set"] = identity["env.task_set"]  # not recorded then
    if old is not None:
        diff = identity_diff(old, identity, skip=GROWABLE)
        if diff:
            raise RunConfigMismatch(f"{location} holds episodes of another config ({'; '.join(diff)}): {fix}")
    if list(planned) == list(keys):
        return False
    if set(planned) <= set(keys):
        return True  # more episodes or samples: extend the plan
    grown = identity_diff(old or {}, identity, skip=[k for k in set(identity) | set(old or {})
                                                    if k not in GROWABLE]) if old else []
    what = "; ".join(grown) if grown else "the planned episodes differ (the env's task set changed?)"
    raise RunConfigMismatch(f"{location} holds episodes of another plan ({what}); only growing episodes/samples "
                            f"or the task slice (env.task_ids, env.max_tasks) extends a run: {fix}")


def plan_run(store: RunStore, keys: Sequence[str], metadata: dict[str, Any]) -> None:
    """Plan a job's episodes in its run store (local and Ray jobs alike): a new run, a resumed one, or a grown plan;
    raises :class:`RunConfigMismatch` when the store holds another config's run (see :func:`check_rerun`; the run
    identity is ``metadata["identity"]``)."""
    keys = list(keys)
    if check_rerun(store.location, store.manifest(), keys, metadata.get("identity") or {}):
        store.plan(keys, metadata=metadata, replace=True)


@contextlib.contextmanager
def hold_run(location: str | Path) -> Iterator[None]:
    """Hold the job lock of a run directory on this machine (:class:`~mcp_gym.recording.run.RunLock`) for the
    ``with`` block: a second job into the same directory refuses (:class:`JobRefused`, one line naming the holder)
    instead of mixing its episodes with this one's. Runs elsewhere (``s3://``, ...) have no lock to take."""
    from mcp_gym.recording.run import RunBusy, RunLock
    from mcp_gym.recording.store import RunStore

    store = RunStore(str(location))
    if not store.is_local:
        yield
        return
    try:
        lock = RunLock(store.root).acquire()
    except RunBusy as e:
        raise JobRefused(str(e)) from None
    try:
        yield
    finally:
        lock.release()
