"""Writing into a run directory someone else handed over: ``mcp-gym view RUN`` writes its page into the run, and a
job writes its manifest and card there. A run is untrusted data, and it may hold a symlink at the name of the
temporary file the writer uses (``.report.html.<pid>.tmp``: pids are small and predictable in a container, and a run
can carry one link per pid) pointing at a file of the user's (``/root/.bashrc``, ``/etc/shadow``). Before, the writer
opened that name and wrote through the link: running ``mcp-gym view`` as root on a downloaded run replaced the target
with the HTML page. Now the temporary file is made with a random name and ``O_EXCL``
(``mcp_gym.recording.atomic.write_text_atomic``); the target is never touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import COUNTER_EVAL as RUN
from conftest import counter_eval_run

from mcp_gym.cli import main

BASHRC = "export PATH=$HOME/bin:$PATH  # the user's own\n"


@pytest.fixture(scope="module")
def handed_over(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run directory (an eval on the bundled Counter server), as someone else would hand it over."""
    return counter_eval_run(tmp_path_factory.mktemp("runs") / "eval")


def _plant(folder: Path, names: list[str], victim: Path) -> None:
    for name in names:
        (folder / name).symlink_to(victim)


def test_view_never_writes_through_a_symlink_planted_in_the_run(tmp_path: Path, handed_over: Path) -> None:
    victim = tmp_path / "home" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text(BASHRC)
    # the page's temporary name for every pid around this one (the view runs in this process here)
    _plant(handed_over, [f".report.html.{pid}.tmp" for pid in range(max(1, os.getpid() - 50), os.getpid() + 50)],
           victim)
    (handed_over / "report.html").unlink(missing_ok=True)
    (handed_over / "report.html").symlink_to(victim)  # the page's own name: replaced, never followed
    assert main(["view", str(handed_over)]) == 0
    assert victim.read_text() == BASHRC
    page = handed_over / "report.html"
    assert not page.is_symlink() and page.read_text().startswith("<!DOCTYPE html>")
    assert oct(page.stat().st_mode & 0o777) == oct(0o644)
    assert not [p for p in handed_over.iterdir() if p.name.startswith(".report.html.") and not p.is_symlink()]


def test_a_job_s_manifest_and_card_never_write_through_a_planted_symlink(tmp_path: Path, handed_over: Path) -> None:
    """A job run into a handed-over run directory (to add episodes to it) rewrites its manifest, card and report."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(handed_over, run, symlinks=True)
    victim = tmp_path / "shadow"
    victim.write_text("root:$6$hash:19000:0:99999:7:::\n")
    pids = range(max(1, os.getpid() - 50), os.getpid() + 50)
    _plant(run, [f".{name}.{pid}.tmp" for pid in pids for name in ("manifest.json", "README.md")], victim)
    report = ["results.json", "per_task.parquet", "success_by_task.png", "reward_hist.png", "steps_hist.png"]
    for name in report:
        (run / "report" / name).unlink(missing_ok=True)
    _plant(run / "report", report, victim)  # the evaluation report's own names
    args = [a for a in RUN if a != "plots=false"]
    assert main(["eval", *args, "policy=oracle", "samples=2", f"out={run}"]) == 0
    assert victim.read_text() == "root:$6$hash:19000:0:99999:7:::\n"
    assert not (run / "manifest.json").is_symlink()
    assert not [n for n in report if (run / "report" / n).is_symlink() or not (run / "report" / n).stat().st_size]
    (run / "report").rename(run / "old-report")
    (run / "report").symlink_to(tmp_path / "elsewhere", target_is_directory=True)  # report/ itself leading out
    (tmp_path / "elsewhere").mkdir()
    assert main(["eval", *RUN, "policy=oracle", "samples=2", f"out={run}"]) == 0
    assert not list((tmp_path / "elsewhere").iterdir()) and (run / "report" / "results.json").is_file()


@pytest.mark.parametrize("how", ["symlinks", "hard links", "folder link"])
def test_hydra_never_writes_a_job_s_config_through_the_run_s_links(tmp_path: Path, handed_over: Path,
                                                                    how: str) -> None:
    """Round 6. A job resumed in a handed-over run: Hydra writes ``.hydra/config.yaml``, ``hydra.yaml`` and
    ``overrides.yaml`` with ``open(..., "w")``, through whatever the run holds at those names; a link to
    ``~/.bashrc`` (or ``.hydra`` itself linked to a folder of the user's) had the user's file replaced by the job's
    YAML. Now the job replaces such a name before Hydra writes (one line on stderr names it), never writing
    through it."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(handed_over, run, symlinks=True)
    home = tmp_path / "home"
    home.mkdir()
    victims = {name: home / name for name in ("config.yaml", "hydra.yaml", "overrides.yaml")}
    for v in victims.values():
        v.write_text(BASHRC)
    hydra = run / ".hydra"
    if how == "folder link":
        shutil.rmtree(hydra)
        hydra.symlink_to(home, target_is_directory=True)
    else:
        for name, victim in victims.items():
            (hydra / name).unlink()
            (hydra / name).symlink_to(victim) if how == "symlinks" else os.link(victim, hydra / name)
    assert main(["eval", *RUN, "policy=oracle", "samples=1", f"out={run}"]) == 0
    assert all(v.read_text() == BASHRC for v in victims.values())
    assert not hydra.is_symlink() and (hydra / "config.yaml").read_text().startswith("env:")
    assert all((hydra / n).stat().st_nlink == 1 and not (hydra / n).is_symlink() for n in victims)


def test_the_hydra_snapshot_reads_only_regular_files_with_one_name(tmp_path: Path) -> None:
    """The job snapshots ``.hydra/*.yaml`` before Hydra rewrites them (to put them back if it refuses the run): a
    named pipe there made that read wait without end, ``/dev/zero`` grow without end, and a hard link to a file of
    the user's was copied back into the run as a file of its own. Only regular files with one name are read now."""
    from mcp_gym.cli import _snapshot

    folder = tmp_path / ".hydra"
    folder.mkdir()
    (folder / "config.yaml").write_text("env: {}\n")
    os.mkfifo(folder / "x.yaml")
    (folder / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "secret").write_text(BASHRC)
    os.link(tmp_path / "secret", folder / "linked.yaml")
    assert _snapshot(folder, 1 << 20) == {folder / "config.yaml": b"env: {}\n"}


@pytest.mark.slow  # the whole job in its own process; the fast test above reads the same folder
def test_a_pipe_in_the_run_s_hydra_folder_does_not_hang_the_job(tmp_path: Path, handed_over: Path) -> None:
    """The job snapshots ``.hydra/*.yaml`` before Hydra rewrites them (to put them back if it refuses the run): a
    named pipe there (``.hydra/x.yaml``) made that read wait for a writer without end. Only regular files with one
    name are read now; the pipe is left alone. Run in its own process, bounded."""
    import shutil
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(handed_over, run, symlinks=True)
    os.mkfifo(run / ".hydra" / "x.yaml")
    (run / ".hydra" / "zero.yaml").symlink_to("/dev/zero")
    try:
        done = subprocess.run([sys.executable, "-m", "mcp_gym.cli", "eval", *RUN, "policy=oracle", "samples=1",
                               f"out={run}"], capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("the job waited on the pipe in .hydra/ without end")
    assert done.returncode == 0, done.stderr[-2000:]
