"""Benchmark imports read untrusted checkouts (issue 36, items 1, 7 and 11; issue 38, MCPMark).

The shared containment helpers (:mod:`mcp_gym.jobs._untrusted`) and the MCPMark importer on hostile and real-layout
checkouts: paths and symlinks leaving the checkout, colliding ids, zip bombs, what a trusted grader's ``verify.py``
sees of the caller's environment, both levels of the real layout, skipped categories, and ``eval`` saying why when
grading fails."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from mcp_gym.jobs._untrusted import UniqueIds, UntrustedInput, ZipLimits, contained_path, extract_zip


# -- the shared helpers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel", ["/etc", "../x", "a/../../x", "~/.ssh", "C:\\x", "a\\..\\..\\x", ""])
def test_contained_path_refuses_absolute_dotdot_and_home_names(tmp_path: Path, rel: str) -> None:
    with pytest.raises(UntrustedInput, match="task t1: meta.json category_id"):
        contained_path(tmp_path, rel, what="meta.json category_id", task="t1")


def test_contained_path_refuses_a_symlink_on_the_way_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    assert contained_path(root, "a/b", what="x") == root.resolve() / "a" / "b"  # need not exist
    with pytest.raises(UntrustedInput, match="through a symlink"):
        contained_path(root, "link/secret", what="state folder", task="t")


def test_unique_ids_name_both_tasks_and_refuse_case_twins() -> None:
    ids = UniqueIds()
    ids.add("a_b", "tasks/a_b")
    with pytest.raises(UntrustedInput, match="tasks tasks/a_b and tasks/a/b both map to the id 'a_b'"):
        ids.add("a_b", "tasks/a/b")
    with pytest.raises(UntrustedInput, match="differing only in case"):
        ids.add("A_B", "tasks/A_B")
    assert "a_b" in ids and len(ids) == 1


def bomb(path: Path, mb: int = 315) -> Path:
    """A zip of ``mb`` MB of zeros in one member (~0.3 MB on disk)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z, z.open("cat/zeros.bin", "w") as f:
        block = bytes(2**20)
        for _ in range(mb):
            f.write(block)
    return path


def test_extract_zip_refuses_a_zip_bomb_and_bad_members(tmp_path: Path) -> None:
    archive = bomb(tmp_path / "bomb.zip")
    assert archive.stat().st_size < 0.4 * 2**20
    with pytest.raises(UntrustedInput, match="'cat/zeros.bin' is 330301440 bytes, over the limit of 268435456"):
        extract_zip(archive, tmp_path / "out")  # the defaults
    with pytest.raises(UntrustedInput, match="expands 1.* times, over the limit of 200 \\(a zip bomb\\?\\)"):
        extract_zip(archive, tmp_path / "out1", limits=ZipLimits(max_file_bytes=2**40))
    # with the ratio and member checks off, the total stops it before anything is written
    with pytest.raises(UntrustedInput, match="declares 330301440 bytes in all, over the limit of 8388608"):
        extract_zip(archive, tmp_path / "out2", limits=ZipLimits(max_ratio=1e9, max_file_bytes=2**40,
                                                                 max_total_bytes=8 * 2**20))
    assert sum(f.stat().st_size for f in (tmp_path / "out2").rglob("*") if f.is_file()) <= 8 * 2**20
    # an override lets a large honest archive through
    honest = bomb(tmp_path / "honest.zip", mb=3)
    assert extract_zip(honest, tmp_path / "out3", prefix="cat/", limits=ZipLimits(max_ratio=1e9)) == 3 * 2**20
    assert (tmp_path / "out3" / "zeros.bin").stat().st_size == 3 * 2**20
    for name, what in (("../evil.txt", "leads out"), ("/abs.txt", "leads out")):
        bad = tmp_path / "bad.zip"
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr(name, "x")
        with pytest.raises(UntrustedInput, match=what):
            extract_zip(bad, tmp_path / "out4")
    link = zipfile.ZipInfo("cat/key")
    link.external_attr = (0o120777 << 16)
    with zipfile.ZipFile(tmp_path / "link.zip", "w") as z:
        z.writestr(link, os.path.expanduser("~/.ssh/id_rsa"))
    with pytest.raises(UntrustedInput, match="is a symlink"):
        extract_zip(tmp_path / "link.zip", tmp_path / "out5")
    many = tmp_path / "many.zip"
    with zipfile.ZipFile(many, "w") as z:
        for i in range(11):
            z.writestr(f"f{i}", "x")
    with pytest.raises(UntrustedInput, match="11 members, over the limit of 10"):
        extract_zip(many, tmp_path / "out6", limits=ZipLimits(max_files=10))
    assert json.dumps(ZipLimits().__dict__)  # plain numbers: documented defaults


# -- the MCPMark importer ---------------------------------------------------------------------------------------------
def mcpmark_task(root: Path, rel: str, *, category: str | None = None, task: str | None = None,
                 verify: str = "import sys\nsys.exit(0)\n", text: str = "Do the thing.") -> Path:
    """A task folder ``tasks/filesystem/<rel>`` in MCPMark's layout (text of our own)."""
    folder = root / "tasks" / "filesystem" / rel
    folder.mkdir(parents=True)
    parts = rel.split("/")
    (folder / "description.md").write_text(f"# Task\n\n{text}\n")
    (folder / "verify.py").write_text(verify)
    (folder / "meta.json").write_text(json.dumps({"task_id": task or parts[-1], "category_id": category or parts[-2],
                                                  "difficulty": "L1", "tags": ["content transformation"]}))
    return folder


def run_import(checkout: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from mcp_gym.cli import main

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main(["tasks", "import", "mcpmark", str(checkout), "--out", str(out), *extra])
    return code, o.getvalue(), e.getvalue()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host folder outside the checkout holding a private key (what an import must never copy)."""
    home = tmp_path / "home" / ".ssh"
    home.mkdir(parents=True)
    (home / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY----- secret\n")
    return home


@pytest.mark.parametrize("category", ["ABS", "../../home/.ssh", "x/../../../home"])
def test_mcpmark_refuses_a_category_id_leading_out_of_the_checkout(tmp_path: Path, secret: Path,
                                                                   category: str) -> None:
    checkout = tmp_path / "mcpmark"
    category = str(secret) if category == "ABS" else category
    mcpmark_task(checkout, "standard/notes/shout", category=category)
    (checkout / "test_environments" / "notes").mkdir(parents=True)
    out = tmp_path / "bench"
    code, stdout, err = run_import(checkout, out)
    assert code == 1
    assert err.count("\n") == 1 and "task tasks/filesystem/standard/notes/shout: meta.json category_id" in err
    assert category in err and "leads out of" in err
    assert not (out / "tasks.jsonl").exists()
    assert not [p for p in out.rglob("*") if p.name == "id_rsa"]


def test_mcpmark_refuses_symlinks_leaving_the_checkout(tmp_path: Path, secret: Path) -> None:
    checkout = tmp_path / "mcpmark"
    folder = mcpmark_task(checkout, "standard/notes/shout")
    (checkout / "test_environments" / "notes").mkdir(parents=True)
    (checkout / "test_environments" / "notes" / "a.txt").write_text("a\n")
    (folder / "description.md").unlink()
    (folder / "description.md").symlink_to(secret / "id_rsa")  # the key as the prompt
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and "task tasks/filesystem/standard/notes/shout: description.md leads out of" in err
    assert "id_rsa" in err and "secret" not in err  # the path named, its content not read
    (folder / "description.md").unlink()
    (folder / "description.md").write_text("Shout.\n")
    (folder / "verify.py").unlink()
    (folder / "verify.py").symlink_to(secret / "id_rsa")
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and "verify.py" in err and "leads out of" in err
    (folder / "verify.py").unlink()
    (folder / "verify.py").write_text("import sys\nsys.exit(0)\n")
    # a state folder that is a symlink out, and a symlink inside a state folder pointing out
    (checkout / "test_environments" / "notes" / "key").symlink_to(secret / "id_rsa")
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and "state folder: symlink" in err and "points out of" in err
    shutil_rmtree(checkout / "test_environments" / "notes")
    (checkout / "test_environments" / "notes").symlink_to(secret)
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and "task tasks/filesystem/standard/notes/shout:" in err and "through a symlink" in err
    # a whole level that is a symlink out of the checkout
    outside = tmp_path / "elsewhere"
    mcpmark_task(outside, "notes/peek")
    (checkout / "tasks" / "filesystem" / "easy").symlink_to(outside / "tasks" / "filesystem")
    (checkout / "test_environments" / "notes").unlink()
    (checkout / "test_environments" / "notes").mkdir()
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and "folder tasks/filesystem/easy leads out of" in err and "through a symlink" in err
    assert not [p for p in (tmp_path / "bench").rglob("*") if p.name == "id_rsa"]


def shutil_rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def test_mcpmark_refuses_two_tasks_with_one_id_and_never_overwrites(tmp_path: Path) -> None:
    checkout = tmp_path / "mcpmark"
    mcpmark_task(checkout, "standard/a/b_c", verify="import sys\nsys.exit(0)\n")
    mcpmark_task(checkout, "standard/a/b-slash", task="b/c", verify="import sys\nsys.exit(1)\n")
    (checkout / "test_environments" / "a").mkdir(parents=True)
    out = tmp_path / "bench"
    code, _, err = run_import(checkout, out)
    assert code == 1 and err.count("\n") == 1
    assert "tasks/filesystem/standard/a/b-slash and tasks/filesystem/standard/a/b_c" in err
    assert "'standard__a__b_c'" in err
    assert not (out / "verify").exists() and not (out / "tasks.jsonl").exists()


def test_mcpmark_refuses_a_zip_bomb_state_with_an_override(tmp_path: Path) -> None:
    checkout = tmp_path / "mcpmark"
    mcpmark_task(checkout, "standard/cat/t")
    states = tmp_path / "states"
    states.mkdir()
    bomb(states / "cat.zip")
    code, _, err = run_import(checkout, tmp_path / "bench", "--states", str(states))
    assert code == 1 and err.count("\n") == 1 and "task tasks/filesystem/standard/cat/t:" in err
    assert "cat.zip" in err and "over the limit" in err
    assert not (tmp_path / "bench" / "states" / "cat").exists() and not (tmp_path / "bench" / "tasks.jsonl").exists()
    small = tmp_path / "small"
    small.mkdir()
    bomb(small / "cat.zip", mb=2)  # 2 MiB of zeros: refused at --max-state-mb 1, imported by default
    code, _, err = run_import(checkout, tmp_path / "bench", "--states", str(small), "--max-state-mb", "1")
    assert code == 1 and "2097152 bytes in all, over the limit of 1048576" in err
    code, _, err = run_import(checkout, tmp_path / "bench", "--states", str(small))
    assert code == 1 and "zip bomb" in err  # ~1,000 times: the ratio bound
    code, _, err = run_import(checkout, tmp_path / "bench", "--states", str(small), "--max-state-ratio", "100000")
    assert code == 0, err
    assert (tmp_path / "bench" / "states" / "cat" / "zeros.bin").stat().st_size == 2 * 2**20
