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
    # with the ratio and member checks off, the total stops it, counting what is written (not what headers say)
    with pytest.raises(UntrustedInput, match="expands past the limit of 8388608 bytes in all"):
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
