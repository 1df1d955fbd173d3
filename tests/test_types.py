"""The package type-checks: mypy with the settings in pyproject.toml ([tool.mypy]: strict on the public API, the default
level elsewhere), run on the package as installed (``scripts/package_view.py mypy``: mcp_gym/ with the folders
pyproject.toml maps into it, envs/, servers/ and conf/), reports no error, and the package says it is typed
(PEP 561)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from package_layout import package_view, source_paths

ROOT = Path(__file__).resolve().parent.parent


# The heavy lane: a whole-package static pass, ~15 s of CPU without a mypy cache (42 s at load 5), a third of the fast
# lane's longest tests; `python scripts/package_view.py mypy` (incremental, ~2 s warm) is the check to run before a
# commit, and .ci/run runs this test in its heavy lane. The fast lane keeps the cheap checks below (the configuration
# fails on an error, ...).
@pytest.mark.slow
@pytest.mark.timeout(1800)  # a bound on a hang only
def test_mypy_finds_no_error(tmp_path: Path) -> None:
    cmd, cwd, env = package_view.command("mypy", [], package_view.build(tmp_path / "view"))
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert f"Success: no issues found in {len(source_paths())} source files" in proc.stdout  # mapped folders too


def test_mypy_sees_an_error(tmp_path: Path) -> None:
    """The same configuration fails on a type error in a public module (so the test above can fail)."""
    pytest.importorskip("mypy")
    module = tmp_path / "mcp_gym"
    module.mkdir()
    (module / "__init__.py").write_text("def f(x):\n    return x\n\n\ndef g() -> int:\n    return 'one'\n")
    config = ROOT / "pyproject.toml"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--no-incremental",
                           str(module)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout
    assert "Function is missing a type annotation  [no-untyped-def]" in proc.stdout  # strict on mcp_gym itself
    assert 'Incompatible return value type (got "str", expected "int")  [return-value]' in proc.stdout


def test_the_package_is_marked_typed() -> None:
    assert (ROOT / "mcp_gym" / "py.typed").is_file()
    assert '"mcp_gym" = ["py.typed"]' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_every_type_ignore_names_its_code_and_why() -> None:
    import re

    ignores = {f"{p.relative_to(ROOT)}:{n}": line.strip()
               for p in source_paths().values()
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "type: ignore" in line}
    assert ignores  # the scan sees them
    explained = re.compile(r"# type: ignore\[[a-z-]+(, ?[a-z-]+)*\]  # (?!noqa)\S")
    bare = {k: v for k, v in ignores.items() if not explained.search(v)}
    assert not bare, f"a type: ignore without an error code and a reason: {bare}"
