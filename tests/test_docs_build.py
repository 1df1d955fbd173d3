"""The documentation site builds with zero warnings (``mkdocs build --strict``), and every page README.md links to
exists, anchors included.

The build needs the ``[docs]`` extra (mkdocs, mkdocs-material, mkdocstrings); without it that test skips, saying so.
CI installs the extra. The link check needs nothing.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = ROOT / "scripts" / "docs" / "mkdocs.yml"
"""The site's configuration (not at the top level: the design card's layout; not in docs/: MkDocs refuses a docs_dir
that holds its own config)."""


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.extras  # .ci/run's second stage runs it with the [docs] extra installed
@pytest.mark.skipif(not _installed("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"),
                    reason='the docs build needs the [docs] extra: pip install -e ".[docs]"')
def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS),
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "WARNING" not in output, output[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()  # the reference was generated from the docstrings
    assert "ToolCallSpace" in (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension gives a heading (its default slugify)."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_page_the_readme_links_to_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not re.match(r"[a-z]+://", t)]
    assert len(links) >= 10
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.is_file() or (anchor and anchor not in anchors(target)):
            broken.append(link)
    assert not broken, f"README.md links to what does not exist: {broken}"
    docs = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")}
    for page in ("docs/index.md", "docs/getting-started.md", "docs/performance.md", "docs/api.md"):
        assert page in docs


def test_the_bundled_env_pages_are_generated_from_the_envs() -> None:
    """docs/envs/<env>.md is what scripts/docs/env_pages.py makes of the env now (its tools, limits, tasks, config):
    a changed env without regenerated pages fails here, naming the command that fixes it."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs" / "env_pages.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    from mcp_gym.envs import BUNDLED_ENVS

    assert {p.stem for p in (ROOT / "docs" / "envs").glob("*.md")} == {*BUNDLED_ENVS.values(), "index"}
