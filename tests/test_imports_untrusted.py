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
    dated = tmp_path / "dated.zip"
    with zipfile.ZipFile(dated, "w") as z:
        z.writestr(zipfile.ZipInfo("old.txt", date_time=(2001, 2, 3, 4, 5, 6)), "x")
    extract_zip(dated, tmp_path / "out7")
    import time

    assert time.localtime((tmp_path / "out7" / "old.txt").stat().st_mtime)[:6] == (2001, 2, 3, 4, 5, 6)
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


def test_mcpmark_refuses_a_state_link_that_leaves_and_comes_back(tmp_path: Path) -> None:
    """Round 8: a state folder's symlink was judged by where it resolves in the checkout, so ``notes/a ->
    ../notes/a.txt`` passed and was copied, as a link, into ``--out/states/notes``, whose copy in each workspace led to
    ``<tmp>/notes/a.txt`` (a path any local user can create). It is refused at the import in one line naming it."""
    checkout = tmp_path / "mcpmark"
    mcpmark_task(checkout, "standard/notes/shout")
    state = checkout / "test_environments" / "notes"
    state.mkdir(parents=True)
    (state / "a.txt").write_text("a\n")
    (state / "a").symlink_to("../notes/a.txt")
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and err.count("\n") == 1 and "state folder: symlink" in err and "notes/a points out of" in err
    assert not (tmp_path / "bench" / "tasks.jsonl").exists()
    (state / "a").unlink()
    (state / "a").symlink_to("a.txt")  # a link that stays inside is copied as before
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 0, err
    assert (tmp_path / "bench" / "states" / "notes" / "a").read_text() == "a\n"


@pytest.mark.parametrize(("field", "value", "said"), [
    ("tags", "abc", "meta.json tags is not a list: 'abc'"),  # once split into the tags 'a', 'b', 'c'
    ("tags", [{"a": 1}], "meta.json tags must be strings"),  # once the tag "{'a': 1}"
    ("difficulty", [1], "meta.json difficulty is not a string"),  # once the tag '[1]'
    ("category_id", 5, "meta.json category_id is not a string"),
    ("description", b"\xff\xfe Shout.", "description.md is not UTF-8 (invalid start byte at byte 0)"),  # once '\ufffd'
])
def test_mcpmark_refuses_meta_and_description_of_the_wrong_kind(tmp_path: Path, field: str, value: object,
                                                                 said: str) -> None:
    checkout = tmp_path / "mcpmark"
    folder = mcpmark_task(checkout, "standard/notes/shout")
    (checkout / "test_environments" / "notes").mkdir(parents=True)
    if field == "description":
        (folder / "description.md").write_bytes(value)  # type: ignore[arg-type]
    else:
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, field: value}))
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and err.count("\n") == 1, err
    assert f"task tasks/filesystem/standard/notes/shout: {said}" in err
    assert not (tmp_path / "bench" / "tasks.jsonl").exists()


def test_mcpmark_says_when_states_is_not_a_folder(tmp_path: Path) -> None:
    checkout = tmp_path / "mcpmark"
    mcpmark_task(checkout, "standard/notes/shout")
    code, stdout, err = run_import(checkout, tmp_path / "bench", "--states", str(tmp_path / "stats"))  # a typo
    said = f"mcp-gym tasks import: --states {tmp_path / 'stats'}: not a folder (want one holding <category>/ or "
    assert code == 1 and err == said + "<category>.zip)\n"
    assert stdout == "" and not (tmp_path / "bench").exists()  # before: every task skipped, "no initial state"


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


ENV_VERIFY = '''import os, sys
from pathlib import Path
seen = sorted(os.environ)
root = Path(os.environ["FILESYSTEM_TEST_DIR"])
home = Path(os.environ["HOME"])
if "OPENAI_API_KEY" in os.environ or "MCP_GYM_CALLER_SECRET" in os.environ:
    print("verify.py sees the caller's variables:", seen); sys.exit(1)
if list(home.iterdir()) or os.environ["TMPDIR"] != str(home):
    print("HOME is not a fresh empty folder"); sys.exit(1)
if not (root / "{source}").is_file() or Path.cwd() != root.resolve():
    print("not run in the workspace"); sys.exit(1)
print("ENV", " ".join(seen))
'''


def two_level_checkout(root: Path) -> Path:
    """MCPMark's layout at 89d7967, in small: ``easy/`` and ``standard/`` levels sharing a category and a task name,
    one initial state in test_environments/, one category without any."""
    for level in ("easy", "standard"):
        mcpmark_task(root, f"{level}/file_context/uppercase", verify=ENV_VERIFY.format(source="file_01.txt"))
    mcpmark_task(root, "standard/papers/find_math_paper")
    (root / "tasks" / "filesystem" / "easy" / ".gitkeep").write_text("")
    (root / "test_environments" / "file_context").mkdir(parents=True)
    (root / "test_environments" / "file_context" / "file_01.txt").write_text("hello\n")
    return root


def printed_command(stdout: str, out: Path) -> list[str]:
    """The eval command the import printed, as argv, with our Python filesystem server for npx's (same tools)."""
    import shlex
    import sys

    from test_benchmarks import FS, RUN

    line = next(x.strip() for x in stdout.splitlines() if x.strip().startswith("mcp-gym eval "))
    argv = shlex.split(line)
    assert any(a.startswith("+env.servers.fs=") for a in argv) and "env.trust_task_code=true" in argv
    assert sys.executable  # the server the printed command names is npm's; the test's is its Python twin
    return [FS if a.startswith("+env.servers.fs=") else a for a in argv[1:]] + [f"out={out}", *RUN]


def results(out: Path) -> dict[str, object]:
    return json.loads((out / "report" / "results.json").read_text(encoding="utf-8"))["summary"]


@pytest.mark.slow  # 12 s at load 14 on 2 cores (~2.5 s+ in CI): the heavy lane, which CI still runs
def test_mcpmark_two_levels_import_and_the_printed_command_grades_every_episode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from mcp_gym.cli import main
    from mcp_gym.tasks import load_task_source

    checkout = two_level_checkout(tmp_path / "mcpmark")
    out = tmp_path / "bench"
    code, stdout, err = run_import(checkout, out)
    assert code == 0, err
    tasks = {t.id: t for t in load_task_source(out / "tasks.jsonl")}
    assert set(tasks) == {"easy__file_context__uppercase", "standard__file_context__uppercase"}
    assert "level:easy" in tasks["easy__file_context__uppercase"].tags
    assert ("skipped tasks/filesystem/standard/papers/find_math_paper: no initial state for category 'papers'"
            in stdout) and "2 tasks (file_context 2); 1 skipped" in stdout
    assert "runs each task's own verify.py" in stdout  # the printed text says the command runs task code
    # the ids are stable: a second import gives the same ones
    assert run_import(checkout, tmp_path / "bench2")[0] == 0
    assert [t.id for t in load_task_source(tmp_path / "bench2" / "tasks.jsonl")] == list(tasks)

    (tmp_path / "caller-home").mkdir()
    (tmp_path / "caller-home" / ".netrc").write_text("machine x password y\n")
    monkeypatch.setenv("HOME", str(tmp_path / "caller-home"))  # verify.py's HOME is a fresh empty folder instead
    monkeypatch.setenv("OPENAI_API_KEY", "sk-caller-secret")
    monkeypatch.setenv("MCP_GYM_CALLER_SECRET", "x")
    argv = printed_command(stdout, tmp_path / "eval")
    capsys.readouterr()
    assert main([*argv, "samples=1"]) == 0  # every episode graded: one per task (not eval's 4) is enough to see it
    summary = results(tmp_path / "eval")
    assert (summary["episodes"], summary["graded"], summary["grading_errors"]) == (2, 2, 0)
    assert summary["success_rate"] == 1.0  # verify.py saw neither key, a fresh HOME, and ran in the workspace
    from mcp_gym.recording import read_tables

    steps, _ = read_tables(tmp_path / "eval")
    reasons = [json.loads(i)["grade"]["reason"] for i in steps.column("info").to_pylist() if i and '"grade"' in i]
    env_line = next(r for r in reasons if "ENV" in r)
    assert env_line.split("ENV ", 1)[1].split() == ["FILESYSTEM_TEST_DIR", "HOME", "LANG", "PATH",
                                                    "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "TMPDIR"]


@pytest.mark.slow  # two 8-episode evals on npm server-filesystem: the heavy lane
def test_eval_says_why_when_no_episode_or_some_fail_to_grade(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from mcp_gym.cli import main

    checkout = two_level_checkout(tmp_path / "mcpmark")
    out = tmp_path / "bench"
    code, stdout, _ = run_import(checkout, out)
    assert code == 0
    argv = [a for a in printed_command(stdout, tmp_path / "untrusted") if a != "env.trust_task_code=true"]
    capsys.readouterr()
    assert main(argv) == 1  # the grader is task code: without the flag nothing is graded, and eval says so
    err = capsys.readouterr().err
    assert "no episode was graded: 8 of 8 episodes failed to grade" in err and "shared by 8" in err
    assert "env.trust_task_code=true" in err  # the first error's own line says what to do
    assert results(tmp_path / "untrusted")["grading_errors"] == 8  # the report is still written

    (out / "verify" / "easy__file_context__uppercase.py").unlink()  # one task's grader breaks
    assert main(printed_command(stdout, tmp_path / "some")) == 0
    err = capsys.readouterr().err
    assert "warning: 4 of 8 episodes failed to grade" in err and "easy__file_context__uppercase" in err


def test_an_import_never_writes_through_links_planted_in_its_out_folder(tmp_path: Path) -> None:
    """Round 7: ``--out`` may be an earlier import's folder handed over, holding symlinks at the names an import
    writes (``.tasks.jsonl.tmp``, the grader module, ``verify/<task>.py``) pointing at the user's files. Each file is
    written to a new randomly named sibling and renamed: the user's files stay as they were."""
    checkout = tmp_path / "mcpmark"
    mcpmark_task(checkout, "standard/a/b")
    (checkout / "test_environments" / "a").mkdir(parents=True)
    out = tmp_path / "bench"
    (out / "verify").mkdir(parents=True)
    victims = {name: tmp_path / f"victim-{i}" for i, name in
               enumerate([".tasks.jsonl.tmp", "mcpmark_grader.py", "verify/standard__a__b.py"])}
    for name, victim in victims.items():
        victim.write_text("export PATH=$HOME/bin:$PATH  # the user's own\n")
        (out / name).symlink_to(victim)
    code, _, err = run_import(checkout, out)
    assert code == 0, err
    assert all(v.read_text() == "export PATH=$HOME/bin:$PATH  # the user's own\n" for v in victims.values())
    assert not (out / "tasks.jsonl").is_symlink() and "standard__a__b" in (out / "tasks.jsonl").read_text()
    assert not (out / "verify" / "standard__a__b.py").is_symlink()


@pytest.mark.parametrize("folder", ["states", "verify"])
def test_an_import_never_writes_through_a_folder_link_planted_in_its_out_folder(tmp_path: Path, folder: str) -> None:
    """Round 8: a handed-over ``--out`` whose ``states`` was a symlink to a folder of the user's had the import remove
    the user's ``<category>/`` there and copy the checkout's state in its place (a category ``.ssh`` with an
    ``authorized_keys``, and ``states -> ~``); ``verify -> ~/bin`` had the checkout's ``verify.py`` written there as
    ``<task>.py``. Such a folder is refused in one line; nothing of the user's is touched."""
    checkout = tmp_path / "mcpmark"
    mcpmark_task(checkout, "standard/a/b")
    (checkout / "test_environments" / "a").mkdir(parents=True)
    (checkout / "test_environments" / "a" / "authorized_keys").write_text("ssh-ed25519 AAAA attacker\n")
    victim = tmp_path / "home"
    (victim / "a").mkdir(parents=True)
    (victim / "a" / "keep.txt").write_text("the user's own\n")
    out = tmp_path / "bench"
    out.mkdir()
    (out / folder).symlink_to(victim)
    code, _, err = run_import(checkout, out)
    assert code == 1 and err.count("\n") == 1, err
    assert f"{folder} is a symlink; refusing to write through it" in err
    assert sorted(p.relative_to(victim).as_posix() for p in victim.rglob("*")) == ["a", "a/keep.txt"]
    (out / folder).unlink()
    (out / "states").mkdir()
    (out / "states" / "a").symlink_to(victim / "a")  # one category's folder: replaced, never followed
    code, _, err = run_import(checkout, out)
    assert code == 0, err
    assert sorted(p.relative_to(victim).as_posix() for p in victim.rglob("*")) == ["a", "a/keep.txt"]
    assert (out / "states" / "a" / "authorized_keys").is_file() and not (out / "states" / "a").is_symlink()


def test_mcpmark_refuses_a_file_too_large_to_be_the_benchmarks_unread(tmp_path: Path) -> None:
    """Round 7: a ``meta.json`` of 100 MiB that is a hole (a sparse file, no disk used; it could be gigabytes) was read
    whole into memory. A file over ``MAX_FILE_BYTES`` (64 MiB) is refused from its size, in one line naming it."""
    from mcp_gym.jobs._untrusted import MAX_FILE_BYTES

    checkout = tmp_path / "mcpmark"
    folder = mcpmark_task(checkout, "standard/a/b")
    (checkout / "test_environments" / "a").mkdir(parents=True)
    with open(folder / "meta.json", "wb") as f:
        f.truncate(MAX_FILE_BYTES + (36 << 20))
    code, _, err = run_import(checkout, tmp_path / "bench")
    assert code == 1 and err.count("\n") == 1, err
    assert "meta.json" in err and f"over the {MAX_FILE_BYTES}" in err, err
    assert not (tmp_path / "bench" / "tasks.jsonl").exists()
