"""Reading a run directory someone else handed over: ``mcp-gym view RUN``, ``load`` and a job resuming the run read
only the run's own files. Before, ``mcp-gym view`` embedded ``report/x.png`` as a plot whatever it was: a link to
``~/.ssh/id_rsa`` put the user's key, base64, into the page it wrote into the run (for the attacker to collect, or in
a report the user shares); ``report/results.json``, ``manifest.json`` or a shard that was a named pipe made it wait
without end, and ``/dev/zero`` grow without end; and ``.hydra/config.yaml`` naming ``launcher.storage`` made it read
the episodes of another run of the user's into that page. Now each file must resolve inside the run and be a regular
file (``mcp_gym.recording._contained``), and another place for the shards is read only when the user names it
(``--storage``). Each refusal is one line naming the file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import counter_eval_run

from mcp_gym.recording import load

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAhostile5secret\n"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run directory (an eval on the bundled Counter server)."""
    return counter_eval_run(tmp_path_factory.mktemp("runs") / "eval")


@pytest.fixture
def handed_over(tmp_path: Path, recorded: Path) -> Path:
    run = tmp_path / "handed-over"
    shutil.copytree(recorded, run, symlinks=True)
    (run / "report.html").unlink(missing_ok=True)
    return run


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    key = tmp_path / "home" / ".ssh" / "id_rsa"
    key.parent.mkdir(parents=True)
    key.write_text(KEY)
    return key


def _view(*args: str) -> subprocess.CompletedProcess[str]:
    """``mcp-gym view`` in its own process, bounded: a read that blocks on a pipe fails the test, never hangs it."""
    return subprocess.run([sys.executable, "-m", "mcp_gym.cli", "view", *args], capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


def _refused(proc: subprocess.CompletedProcess[str], name: str, why: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and why in lines[0], proc.stderr


def _no_key_anywhere(run: Path) -> None:
    import base64

    for page in [run / "report.html", *run.rglob("*.html")]:
        if page.is_file() and not page.is_symlink():
            text = page.read_text()
            assert "hostile5secret" not in text and base64.b64encode(KEY.encode()).decode()[:40] not in text


@pytest.mark.parametrize("name", ["report/x.png", "report/results.json", "manifest.json", ".hydra/config.yaml"])
def test_a_run_file_linked_to_a_user_s_key_is_refused_never_embedded(handed_over: Path, secret: Path,
                                                                     name: str) -> None:
    target = handed_over / name
    target.unlink(missing_ok=True)
    target.symlink_to(secret)
    proc = _view(str(handed_over))
    _refused(proc, name, "leads out of the run directory")
    _no_key_anywhere(handed_over)


def test_a_report_folder_leading_out_of_the_run_is_refused(handed_over: Path, secret: Path) -> None:
    """``report/`` itself a link to the user's ``~/.ssh`` (holding ``results.json`` and ``id_rsa.png`` there)."""
    ssh = secret.parent
    shutil.copy(handed_over / "report" / "results.json", ssh / "results.json")
    (ssh / "id_rsa.png").symlink_to(secret)
    shutil.rmtree(handed_over / "report")
    (handed_over / "report").symlink_to(ssh, target_is_directory=True)
    _refused(_view(str(handed_over)), "results.json", "leads out of the run directory")
    _no_key_anywhere(handed_over)


@pytest.mark.parametrize("name", ["report/y.png", "report/results.json", "manifest.json", ".hydra/config.yaml",
                                  "episodes/part-x-00000.parquet", ".wal/w-00001.wal"])
def test_a_named_pipe_in_the_run_is_refused_unread(handed_over: Path, name: str) -> None:
    """A pipe nobody writes to: opening it for reading would wait for a writer without end."""
    target = handed_over / name
    target.parent.mkdir(exist_ok=True)
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    _refused(_view(str(handed_over)), name, "a named pipe, not a regular file")


@pytest.mark.parametrize("name", ["report/results.json", "manifest.json", "steps/part-x-00000.parquet"])
def test_a_device_linked_into_the_run_is_refused_unread(handed_over: Path, name: str) -> None:
    target = handed_over / name
    target.unlink(missing_ok=True)
    target.symlink_to("/dev/zero")
    _refused(_view(str(handed_over)), name, "leads out of the run directory")


def test_a_shard_linked_into_another_run_of_the_user_s_is_refused(tmp_path: Path, handed_over: Path,
                                                                  recorded: Path) -> None:
    private = tmp_path / "private"
    shutil.copytree(recorded, private)
    for table in ("episodes", "steps"):
        for shard in (handed_over / table).glob("*.parquet"):
            shard.unlink()
        for i, shard in enumerate(sorted((private / table).glob("*.parquet"))):
            (handed_over / table / f"part-linked-{i:05d}.parquet").symlink_to(shard)
    with pytest.raises(ValueError, match="part-linked-00000.parquet.*leads out of the run directory"):
        load(handed_over)
    _refused(_view(str(handed_over)), "part-linked-00000.parquet", "leads out of the run directory")


def test_links_that_stay_inside_the_run_are_followed(handed_over: Path) -> None:
    """A run copied with its own links (a plot linked to another plot of the run) is still whole."""
    report = handed_over / "report"
    shutil.copy(report / "results.json", handed_over / "results-copy.json")
    (report / "results.json").unlink()
    (report / "results.json").symlink_to(handed_over / "results-copy.json")
    proc = _view(str(handed_over))
    assert proc.returncode == 0, proc.stderr
    assert (handed_over / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_a_run_config_naming_another_run_as_its_storage_is_not_followed(tmp_path: Path, recorded: Path) -> None:
    """A handed-over run with no shards whose ``.hydra/config.yaml`` names ``launcher.storage``: another run of the
    user's (it could be the user's bucket). Followed, its episodes went into the page written into the handed-over
    run. Now the view refuses, naming the storage, and reads it only when the user names it."""
    private = tmp_path / "private"
    shutil.copytree(recorded, private)
    hostile = tmp_path / "hostile"
    (hostile / ".hydra").mkdir(parents=True)
    (hostile / ".hydra" / "config.yaml").write_text(f"command: collect\nlauncher:\n  kind: ray\n  storage: {private}\n")
    proc = _view(str(hostile))
    _refused(proc, "launcher.storage", f"--storage '{private}'")
    assert not (hostile / "report.html").exists()
    proc = _view(str(hostile), "--storage", str(private))  # the user names where the shards are
    assert proc.returncode == 0, proc.stderr
    assert (hostile / "report.html").is_file()


@pytest.mark.parametrize("text", ["[1, 2]", "{\"per_task\": 3}", "not json", "[" * 100_000])
def test_a_malformed_results_file_is_refused_in_one_line(handed_over: Path, text: str) -> None:
    (handed_over / "report" / "results.json").write_text(text)
    _refused(_view(str(handed_over)), "results.json", "results file")


# -- round 6: a write-ahead-log segment's size, and hard links ---------------------------------------------------------
def _wal_segment(run: Path) -> Path:
    from mcp_gym.recording.schema import EpisodeRecord, StepRecord
    from mcp_gym.recording.wal import WalFile

    episode = EpisodeRecord(episode_id="wal-e0", episode_key="wal#0", length=1, recorder="env", started_at=0,
                            ended_at=1).row()
    wal = WalFile(run / ".wal" / "20000101T000000-1-dead00-00000.wal", fsync=False)
    wal.append((episode, [StepRecord(episode_id="wal-e0", step_index=0, timestamp=0, tool="add").row()]))
    wal.close()
    return wal.path


def test_a_huge_write_ahead_log_segment_is_refused_unread(handed_over: Path) -> None:
    """A segment was read whole (``read_bytes``): a sparse file of 3 GiB (no disk used) cost 3 GiB of memory, one
    larger than memory ended the viewer. Now a segment over ``WAL_SEGMENT_LIMIT`` is refused in one line, unread."""
    from mcp_gym.recording.wal import WAL_SEGMENT_LIMIT

    before = load(handed_over).episodes.num_rows
    seg = _wal_segment(handed_over)
    assert load(handed_over).episodes.num_rows == before + 1  # a real segment's episode is read
    os.truncate(seg, WAL_SEGMENT_LIMIT + 1)
    with pytest.raises(ValueError, match="write-ahead-log segment of the run: 2147483649 bytes, over the"):
        load(handed_over)


@pytest.mark.slow  # mcp-gym view in its own process
def test_mcp_gym_view_refuses_a_huge_write_ahead_log_segment_in_one_line(handed_over: Path) -> None:
    from mcp_gym.recording.wal import WAL_SEGMENT_LIMIT

    seg = _wal_segment(handed_over)
    os.truncate(seg, WAL_SEGMENT_LIMIT + 1)
    _refused(_view(str(handed_over)), seg.name, "over the 2147483648 allowed")


def test_a_frame_claiming_more_than_the_segment_holds_is_a_torn_tail(handed_over: Path) -> None:
    """A frame header saying 4 GiB in a segment of a few bytes: nothing is allocated for it, the frames before it
    are read and the rest is ignored, as a torn tail."""
    import struct

    before = load(handed_over).episodes.num_rows
    seg = _wal_segment(handed_over)
    with open(seg, "ab") as f:
        f.write(struct.pack("<II", 0xFFFFFFF0, 0) + b"x" * 64)
    assert load(handed_over).episodes.num_rows == before + 1


def test_a_writer_starts_a_new_segment_before_readers_would_refuse_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's side of the bound: it publishes its shard (and so drops its segment) once the segment holds
    ``WAL_ROLL_BYTES``, long before ``WAL_SEGMENT_LIMIT``, whatever its ``shard_bytes``."""
    from mcp_gym.recording import TrajectoryWriter, writer

    monkeypatch.setattr(writer, "WAL_ROLL_BYTES", 1)
    with TrajectoryWriter(tmp_path / "run", fsync="never", row_group_rows=1) as w:
        for i in range(3):
            ep = w.start_episode(key=f"k{i}")
            ep.add_step("add", {})
            ep.finish()
        assert len(list((tmp_path / "run" / "episodes").glob("part-*.parquet"))) == 3
        assert not list((tmp_path / "run" / ".wal").glob("*.wal"))


def _hard_link_secret(run: Path, tmp_path: Path, name: str) -> None:
    secret = tmp_path / "home" / "secret.json"
    secret.parent.mkdir()
    secret.write_text('{"per_task": [], "summary": {"auth": "hostile5secret"}, "auths": "hostile5secret"}')
    target = run / name
    target.unlink(missing_ok=True)
    os.link(secret, target)


@pytest.mark.parametrize("name", ["report/x.png", "report/results.json", "manifest.json", ".hydra/config.yaml"])
def test_a_run_file_hard_linked_to_a_user_s_file_is_refused(handed_over: Path, tmp_path: Path, name: str) -> None:
    """A hard link has no "outside": ``report/x.png`` as a second name of ``~/.docker/config.json`` (a tarball
    extracted as root, Python's ``tarfile`` before 3.14, or a machine without ``fs.protected_hardlinks``) passed
    every check, and ``mcp-gym view`` put it, base64, into the page it wrote into the run. mcp-gym writes these files
    with one name: one with more is refused, unread."""
    from mcp_gym.viewer import load_run

    _hard_link_secret(handed_over, tmp_path, name)
    with pytest.raises(ValueError, match=f"{name}: refusing to read this file of the run: it has 2 names") as e:
        load_run(handed_over)
    assert "hostile5secret" not in str(e.value)


@pytest.mark.slow  # mcp-gym view in its own process
def test_mcp_gym_view_refuses_a_hard_linked_plot_in_one_line(handed_over: Path, tmp_path: Path) -> None:
    _hard_link_secret(handed_over, tmp_path, "report/x.png")
    _refused(_view(str(handed_over)), "report/x.png", "it has 2 names (a hard link")
    _no_key_anywhere(handed_over)


def test_shards_and_segments_of_a_hard_link_backup_still_read(handed_over: Path, tmp_path: Path) -> None:
    """A hard-link backup (``cp -al``, ``rsync --link-dest``) gives every shard a second name: shards and WAL
    segments must pass their own format's checks (a foreign file fails them), so they read with several names."""
    before = load(handed_over).episodes.num_rows
    _wal_segment(handed_over)
    backup = tmp_path / "backup"
    backup.mkdir()
    for p in [*handed_over.glob("episodes/*.parquet"), *handed_over.glob("steps/*.parquet"),
              *handed_over.glob(".wal/*.wal")]:
        os.link(p, backup / f"{p.parent.name}-{p.name}")
    assert load(handed_over).episodes.num_rows == before + 1


def test_a_job_resuming_a_run_with_a_huge_segment_stops_in_one_line(handed_over: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A job resuming the run reads its WAL segments (done episodes, a dead writer's recovery): a refused segment ends
    it with one line naming the file, exit status 1, not a traceback."""
    from conftest import COUNTER_EVAL

    from mcp_gym.cli import main
    from mcp_gym.recording.wal import WAL_SEGMENT_LIMIT

    seg = _wal_segment(handed_over)
    os.truncate(seg, WAL_SEGMENT_LIMIT + 1)
    assert main(["eval", *COUNTER_EVAL, "policy=oracle", "samples=1", f"out={handed_over}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mcp-gym eval: ") and seg.name in err[-1] and "over the 2147483648 allowed" in err[-1]
    assert not [line for line in err if "Traceback" in line]
