"""The secrets a job's command line or config gives (``policy.api_key=sk-...``, a server's ``headers`` or ``env``, a
URL's user info or query values) kept out of the ``.hydra/*.yaml`` files Hydra writes into the run directory.

Hydra dumps the job's config (``config.yaml``), its own (``hydra.yaml``, with the overrides again and their
``override_dirname``) and the overrides (``overrides.yaml``) as given, before the job starts; a run directory is
handed over (``mcp-gym view``, ``export-sft``, a bucket), so a key typed on the command line went with it, in files
readable by every local user under the usual umask. :func:`redact_hydra_files` rewrites them with the same masking
as the manifest and the viewer's page: the value of every key whose name may hold a secret (``api_key``, ``token``,
``headers``, ...; :data:`SECRET_WORDS`), of every override naming one (``policy.api_key=...`` in a list or in
``override_dirname``), and URLs' user info and query values anywhere. An interpolation (``${oc.env:OPENAI_API_KEY}``)
is kept: it names where the secret comes from, not the secret.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mcp_gym.protocol import REDACTED, redact_text

__all__ = ["redact_hydra_files"]

SECRET_WORDS = ("key", "token", "secret", "password", "auth", "header", "cookie", "credential")
"""A key (or an override's key path) whose lower-cased name holds one of these has its value masked."""

_INTERPOLATION = re.compile(r"\$\{[\w.:\-/]+(,null)?\}")
_OVERRIDE_START = re.compile(r"[+~]{0,2}[\w.\-/@]+=")
_OVERRIDE = re.compile(r"(?P<key>[+~]{0,2}[\w.\-/@]+)=(?P<value>.*?)(?=,[+~]{0,2}[\w.\-/@]+=|$)", re.DOTALL)


def _secret_name(name: str) -> bool:
    low = name.lower().replace("tokens", "")  # max_tokens, max_new_tokens: a count, no secret
    return any(w in low for w in SECRET_WORDS)


_SCHEME_ONLY = re.compile(r"\s*([A-Za-z]+\s+)?")  # what may stand beside an interpolation: an auth scheme ("Bearer ")


def _masked(value: Any) -> Any:
    """``value`` of a secret-named key, masked: a mapping's or list's leaves one by one; an interpolation kept, alone
    or after an auth scheme (``Bearer ${oc.env:TOKEN}``: it names where the secret comes from, not the secret)."""
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if value in (None, "") or (isinstance(value, str) and _INTERPOLATION.search(value)
                               and _SCHEME_ONLY.fullmatch(_INTERPOLATION.sub("", value))):
        return value
    return REDACTED


def _redact_overrides(text: str) -> str:
    """``a.api_key=sk-1,b=2`` as ``a.api_key=<redacted>,b=2`` (an override, or Hydra's comma-joined
    ``override_dirname``); then URLs masked."""
    def one(m: re.Match[str]) -> str:
        key, value = m.group("key"), m.group("value")
        return f"{key}={_masked(value)}" if _secret_name(key) else m.group(0)

    return redact_text(_OVERRIDE.sub(one, text) if _OVERRIDE_START.match(text) else text)


def redact_config(value: Any) -> Any:
    """``value`` (a config as plain containers) with secrets masked: see the module docstring."""
    if isinstance(value, dict):
        return {k: _masked(v) if _secret_name(str(k)) else redact_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v) for v in value]
    return _redact_overrides(value) if isinstance(value, str) else value


def redact_hydra_files(folder: Path, names: tuple[str, ...]) -> None:
    """Rewrite ``folder/name`` for each of ``names`` that Hydra just wrote, secrets masked (a file unchanged by the
    masking is left as it is; one that is not a regular file, or not YAML, is left to the checks that read it)."""
    from omegaconf import OmegaConf

    from mcp_gym.recording.atomic import write_text_atomic

    for name in names:
        path = folder / name
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
            data = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
        except Exception:  # noqa: BLE001 - not ours to judge here: the run's readers check it
            continue
        masked = redact_config(data)
        if masked != data:
            write_text_atomic(path, OmegaConf.to_yaml(OmegaConf.create(masked)))
