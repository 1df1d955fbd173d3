"""What a task file may not ask for, as data: the environment variable names it may not set (code loading, network
traffic, mcp-gym's own switches) and the parts of a grader spec that are checked (the ``module:function`` paths it
would import, its mapping specs, the ``judge`` options that are the job config's). :class:`mcp_gym.tasks.TaskDataError`
is raised by the check that applies them (``mcp_gym.tasks``: ``load_task_source``, ``load_tasks``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["CODE_LOADING_ENV", "NETWORK_ENV"]


CODE_LOADING_ENV: tuple[str, ...] = (
    # the dynamic loader and libc's own loadable modules
    "LD_*", "DYLD_*", "GCONV_PATH", "LOCPATH", "NLSPATH", "GLIBC_TUNABLES",
    # which program runs; shells' start-up code; programs that tools start by name
    "PATH", "SHELL", "ENV", "BASH_ENV", "BASH_FUNC_*", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "ZDOTDIR",
    "IFS", "EDITOR", "VISUAL", "PAGER", "*_PAGER", "BROWSER", "*_ASKPASS", "*_EXECUTABLE_PATH",
    # where programs read their configuration (start-up hooks, user site-packages, .npmrc, .gitconfig) from
    "HOME", "XDG_*", "USERPROFILE", "APPDATA", "LOCALAPPDATA",
    # interpreters, runtimes and the package managers that fetch servers (npx, uvx, pip)
    "PYTHON*", "VIRTUAL_ENV", "CONDA_*", "UV_*", "PIP_*", "NODE_*", "NPM_CONFIG_*", "YARN_*", "PNPM_*", "COREPACK_*",
    "BUN_*", "DENO_*", "ELECTRON_*", "PLAYWRIGHT_*", "PUPPETEER_*", "PERL*", "RUBY*", "GEM_*", "BUNDLE_*",
    "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "JAVA_HOME", "CLASSPATH", "LUA_*", "TCLLIBPATH", "R_*",
    "PHPRC", "PHP_INI_SCAN_DIR", "DOTNET_*", "CORECLR_*", "COMPLUS_*", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN", "GOROOT",
    "GOPATH", "GOENV", "CARGO_*", "RUSTUP_*", "RUSTC*", "RUSTFLAGS",
    # tools servers run (git hooks and helpers, OpenSSL engines, compilers of native modules)
    "GIT_*", "OPENSSL_*", "CC", "CXX", "CPP", "LD", "AR", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "MAKEFLAGS",
    "MFLAGS",
)
"""Environment variable names (``fnmatch`` patterns, matched case-insensitively) a task file may not set: each changes
which program runs or what code a program loads (``NODE_OPTIONS=--require x.js``, ``PYTHONPATH``, ``LD_PRELOAD``,
``HOME`` with a fixture holding start-up files, ...). Every other name (a server's own settings) is allowed."""


NETWORK_ENV: tuple[str, ...] = (
    # proxies (curl, requests, httpx, Node, Go read them in either case)
    "*_PROXY", "PROXY",
    # which certificates a program trusts, and where it writes its TLS session keys
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "*_CA_BUNDLE", "*_CA_CERT", "*_CA_CERTS",
    "*_CA_FILE", "*_CA_PATH", "SSLKEYLOGFILE",
    # where a server sends its requests (and the user's credentials with them)
    "*BASE_URL", "*API_BASE", "*API_URL", "*ENDPOINT", "*ENDPOINT_URL", "*ENDPOINTS", "HOST", "*_HOST", "*_HOSTNAME",
    "URL", "*_URL", "URI", "*_URI", "*_SERVER", "*_SERVER_URL", "*_ADDR", "*_ADDRESS", "*_DOMAIN",
)
"""Environment variable names (``fnmatch`` patterns, matched case-insensitively) a task file may not set either: each
changes where a program's network traffic goes or whom it trusts (``HTTPS_PROXY``, ``SSL_CERT_FILE``,
``SSLKEYLOGFILE``, ``OPENAI_BASE_URL``, ``API_BASE``, ``DB_HOST``, ``DATABASE_URL``, ...), so a server that calls out
with the user's credentials could send them elsewhere. The user's own config allows names (``env.task_env_allow``)."""


_OWN_ENV: tuple[str, ...] = ("MCP_GYM_*",)
"""mcp-gym's own switches, which its bundled servers read (``MCP_GYM_CODE_SANDBOX=unsafe`` turns the Code server's
bubblewrap sandbox off, ``MCP_GYM_CODE_SANDBOX_UID`` picks the sandbox's host uid): never a task file's to set."""


def _code_paths(spec: Any) -> list[str]:
    """The ``module:function`` paths a grader spec names (a bare string, ``python`` kinds, and ``all``/``any``/
    ``weighted`` members)."""
    if isinstance(spec, str):
        return [spec] if ":" in spec else []
    if isinstance(spec, (list, tuple)):
        return [p for m in spec for p in _code_paths(m)]
    if isinstance(spec, Mapping):
        out = [str(spec["function"])] if spec.get("kind") == "python" and isinstance(spec.get("function"), str) else []
        return out + _code_paths(spec.get("of") or [])
    return []


_BUNDLED_GRADERS = re.compile(r"mcp_gym\.graders(\.[a-z][a-z0-9_]*)?|mcp_gym\.envs\.[a-z][a-z0-9_]*\.grade")
"""The modules whose public names a task file's ``module:function`` grader may name without ``trust_task_code``: the
bundled graders (``mcp_gym.graders`` and its modules, an env's ``grade`` module: BFCL's ``mcp_gym.envs.bfcl.grade``).
Any other module of mcp-gym (``mcp_gym._wsdir:sweep``) is no grader."""


_JUDGE_CONFIG_ONLY = ("base_url", "api_key")
"""``judge`` grader options a task file may not set: the endpoint and the key are the job config's (``env.judge``)."""


def _grader_mappings(spec: Any) -> list[Mapping[str, Any]]:
    """The mapping specs in a grader spec (itself, a list's items, and ``all``/``any``/``weighted`` members)."""
    if isinstance(spec, (list, tuple)):
        return [m for item in spec for m in _grader_mappings(item)]
    if isinstance(spec, Mapping):
        return [spec, *_grader_mappings(spec.get("of") or [])]
    return []
