"""The package as it installs, for the static checks: a tree of symlinks ``VIEW/mcp_gym/`` with ``mcp_gym/``'s entries
and the top-level folders ``pyproject.toml`` maps into it (``envs/`` as ``mcp_gym/envs``, ``servers/``, ``conf/``).

The import checker (import-linter's grimp) and the type checker (mypy) find a package by its folder and walk it; they
do not follow setuptools' mapping (``[tool.setuptools.package-dir]``) nor its editable finder, so run on the checkout
they would miss ``mcp_gym.envs``, ``mcp_gym.servers`` and ``mcp_gym.conf``. Run on this view they see the package as a
wheel installs it::

    python scripts/package_view.py mypy            # python -m mypy on the whole package (pyproject's [tool.mypy])
    python scripts/package_view.py lint-imports    # the import-linter contracts (pyproject's [tool.importlinter])

The view lives in ``build/package-view/`` (rebuilt on every run, so a moved file is never stale; mypy keeps its cache
there). tests/test_layout.py and tests/test_types.py run both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEW = ROOT / "build" / "package-view"


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Import name -> folder of ``mcp_gym`` and of every package ``pyproject.toml``'s ``package-dir`` maps (read
    with a pattern, so the view builds on Python 3.10 without ``tomllib``)."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    table = re.search(r"^\[tool\.setuptools\.package-dir\]\n(.*?)(?:^\[|\Z)", text, re.M | re.S)
    mapped = dict(re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', table.group(1), re.M)) if table else {}
    return {"mcp_gym": root / "mcp_gym", **{name: root / folder for name, folder in mapped.items()}}


def build(dest: Path = VIEW, root: Path = ROOT) -> Path:
    """Write the view into ``dest`` (replacing what is there) and return ``dest``; ``dest/mcp_gym`` is the package."""
    package = dest / "mcp_gym"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in (root / "mcp_gym").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in package_dirs(root).items():
        if name == "mcp_gym":
            continue
        parts = name.split(".")
        if parts[0] != "mcp_gym" or len(parts) != 2:
            raise SystemExit(f"package-dir {name!r}: the view maps only direct subpackages of mcp_gym")
        if (package / parts[1]).exists():
            raise SystemExit(f"package-dir {name!r}: mcp_gym/{parts[1]} exists too")
        (package / parts[1]).symlink_to(folder)
    return dest


def command(tool: str, args: list[str], dest: Path = VIEW) -> tuple[list[str], Path, dict[str, str]]:
    """The command line, working directory and environment that run ``tool`` (``mypy`` or ``lint-imports``) on
    the view in ``dest``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(dest), os.environ.get("PYTHONPATH")) if p)}
    if tool == "mypy":
        config = str(ROOT / "pyproject.toml")
        return [sys.executable, "-m", "mypy", "--config-file", config, *args, "mcp_gym"], dest, env
    if tool == "lint-imports":
        # run in the view: `python -c` puts the working directory first on sys.path, and the checkout's would win
        return [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
                str(ROOT / "pyproject.toml"), "--no-cache", *args], dest, env
    raise SystemExit(f"unknown tool {tool!r}: use mypy or lint-imports")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python scripts/package_view.py mypy|lint-imports [ARGS...]")
    dest = build()
    cmd, cwd, env = command(argv[0], argv[1:], dest)
    return subprocess.run(cmd, cwd=cwd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
