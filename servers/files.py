"""Files: a sandboxed per-episode workspace as an MCP server.

Every episode gets its own temporary directory, filled from the task's initial tree and removed when the episode is
replaced (reset), evicted or the process exits (also on SIGTERM when run with ``python -m``). Workspaces live in a
per-process folder under ``$TMPDIR/mcp-gym-files-<uid>/``; folders left by processes that died without cleaning up
(SIGKILL) are removed by a later server starting there, once an hour old.

Tools: ``list_directory``, ``read_file``, ``write_file``, ``move_file``, ``search_files``, ``make_directory``,
``delete_file``. Tasks and grading: :mod:`mcp_gym.envs.files.tasks`.

Sandbox rules (checked on every path before anything is touched; a refused call changes nothing):

* Paths are relative to the workspace root; a leading ``/`` also means the workspace root. An absolute path that
  starts with the workspace's real host path is accepted too.
* Refused: null bytes, text that is not valid Unicode (a lone surrogate such as ``"\\udcff"``), names over 255 and
  paths over 1,024 UTF-8 bytes (all before anything touches the disk); any ``..`` component; absolute paths whose
  first component is a host top-level entry (such as ``/etc`` or ``/tmp``) that does not exist in the workspace
  root; any path whose real path (all symlinks resolved) leaves the workspace, so a symlink pointing outside can be
  neither read nor written through. No tool creates symlinks; file operations act on the resolved real path (and
  open files with ``O_NOFOLLOW``).
* Roots (best effort): if the client declares the ``roots`` capability, every call asks it for ``roots/list`` (a
  ``ListRoots`` resolver, so it works in both protocol eras) and only paths inside the workspace AND inside one of
  the ``file://`` roots are allowed. A client with no ``file://`` roots is not restricted further.

Run: ``python -m mcp_gym.servers.files`` (stdio) or ``... --transport http --port 8000``.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlparse

from mcp.server.mcpserver import Context, ListRoots
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Resolve
from mcp.types import ListRootsResult
from pydantic import BaseModel, Field

from mcp_gym.envs.files.tasks import task_by_id
from mcp_gym.serverkit import EpisodeServer

__all__ = ["server"]

MAX_FILE_BYTES = 64_000
MAX_TOTAL_BYTES = 2_000_000
MAX_ENTRIES = 2_000
MAX_LISTED = 200
MAX_MATCHES = 50
MAX_PATH = 1024
"""Longest accepted path, in UTF-8 bytes."""
MAX_NAME_BYTES = 255
"""Longest file or folder name, in UTF-8 bytes (the limit of Linux file systems)."""
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(eq=False)
class Workspace:
    """The state of one episode: a private temporary directory (deleted when this object is garbage-collected)."""

    root: Path
    task_id: str | None = None
    _cleanup: weakref.finalize = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), ignore_errors=True)

    def rel(self, p: Path) -> str:
        """Workspace-relative display form of a real path (``"/"`` for the root), always valid text."""
        return _shown(p.relative_to(self.root).as_posix()) if p != self.root else "/"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists but belongs to someone else
    return True


STALE_AFTER_S = 3600
"""A workspace folder of a dead process is reaped once it has been untouched this long (seconds)."""


@functools.cache
def _process_home(pid: int) -> Path:
    """This process's folder for workspaces (created once per pid; removed at exit). Also reaps the folders of dead
    processes (no such pid, untouched for :data:`STALE_AFTER_S`). Falls back to a plain temporary folder if the shared
    parent is not a private directory of ours."""
    parent = Path(tempfile.gettempdir()) / f"mcp-gym-files-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        parent.mkdir(mode=0o700, exist_ok=True)
        st = parent.lstat()
        if parent.is_symlink() or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            raise PermissionError(f"{parent} is not a private directory")
        for stale in parent.iterdir():
            owner = stale.name.split("-", 1)[0]
            old = time.time() - stale.lstat().st_mtime > STALE_AFTER_S
            if old and owner.isdigit() and int(owner) != pid and not _pid_alive(int(owner)):
                shutil.rmtree(stale, ignore_errors=True)
        home = Path(tempfile.mkdtemp(prefix=f"{pid}-", dir=parent))
    except OSError:
        home = Path(tempfile.mkdtemp(prefix=f"mcp-gym-files-{pid}-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home.resolve()


def new_state(task_id: str | None, seed: int) -> Workspace:
    """A fresh workspace holding ``task_id``'s initial tree (empty without a task). ``seed`` is not used: the tree is
    fully determined by the task."""
    try:
        data = task_by_id(task_id).data if task_id is not None else {}
    except KeyError as e:
        raise ToolError(str(e)) from None
    ws = Workspace(Path(tempfile.mkdtemp(prefix="ws-", dir=_process_home(os.getpid()))), task_id)
    for d in data.get("dirs", ()):
        (ws.root / d).mkdir(parents=True, exist_ok=True)
    for rel, content in data.get("files", {}).items():
        path = ws.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8", newline="")
    return ws


def snapshot(ws: Workspace) -> dict[str, Any]:
    """The final tree for verifiers: ``files`` ``{path: text}``, ``dirs``, ``symlinks`` ``{path: target}`` (never
    followed) and ``workspace`` (the host directory, e.g. to advertise it as a client root)."""
    files: dict[str, str] = {}
    dirs: list[str] = []
    links: dict[str, str] = {}
    for here, dirnames, filenames in os.walk(ws.root, followlinks=False):
        base = Path(here)
        for name in sorted(dirnames + filenames):
            p = base / name
            rel = ws.rel(p)
            if p.is_symlink():
                links[rel] = _shown(os.readlink(p))
            elif p.is_dir():
                dirs.append(rel)
            elif p.is_file():
                files[rel] = p.read_bytes()[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
    return {"files": files, "dirs": sorted(dirs), "symlinks": links, "workspace": str(ws.root)}


server: EpisodeServer[Workspace] = EpisodeServer(
    "mcp-gym-files",
    new_state,
    snapshot=snapshot,
    max_episodes=1024,
    instructions=(
        "A private workspace of text files. Paths are relative to the workspace root ('/' is the root, e.g. "
        "'docs/a.txt' or '/docs/a.txt'); '..' and paths outside the workspace are refused. Explore with "
        "list_directory and search_files, read with read_file, change files with write_file, move_file, "
        "make_directory and delete_file."
    ),
)


# -- path resolution -------------------------------------------------------------------------------------------
def _client_roots(ctx: Context) -> ListRoots | None:
    """Ask the client for its roots, if it declared the capability."""
    caps = ctx.client_capabilities
    return ListRoots() if caps is not None and caps.roots is not None else None


ClientRoots = Annotated[ListRootsResult | None, Resolve(_client_roots)]
"""Tool parameter filled with the client's ``roots/list`` answer (not part of the tool's input schema)."""


def _inside(p: Path, base: Path) -> bool:
    return p == base or base in p.parents


def _root_dirs(roots: ListRootsResult | None) -> list[Path]:
    """Real paths of the client's ``file://`` roots."""
    if roots is None:
        return []
    uris = (urlparse(str(r.uri)) for r in roots.roots)
    return [Path(os.path.realpath(unquote(u.path))) for u in uris if u.scheme == "file"]


def _check_text(path: str) -> None:
    """Refuse a path that no file system takes as written: null bytes, text that is not valid Unicode (lone
    surrogates: Linux would store raw bytes that no later listing can report), names over :data:`MAX_NAME_BYTES`
    and paths over :data:`MAX_PATH` bytes. Nothing is touched before this check."""
    if "\x00" in path:
        raise ToolError("Refused: the path contains a null byte.")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ToolError(f"Refused: the path {path!r} is not valid Unicode (character {e.start} is a lone surrogate "
                        f"{path[e.start]!r}); use plain UTF-8 text.") from None
    if len(encoded) > MAX_PATH:
        raise ToolError(f"Refused: the path is {len(encoded)} bytes long (UTF-8); the limit is {MAX_PATH}.")
    for part in path.replace("\\", "/").split("/"):
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise ToolError(f"Refused: the name {part[:40]!r}... is {len(part.encode('utf-8'))} bytes long (UTF-8); "
                            f"a file or folder name may have at most {MAX_NAME_BYTES} bytes.")


def _shown(name: str) -> str:
    """A file name as valid text (a name made outside the tools may hold undecodable bytes: shown escaped)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def resolve(ws: Workspace, path: str, roots: ListRootsResult | None = None) -> Path:
    """The real host path of workspace path ``path``, or ToolError if any sandbox rule refuses it (see module doc)."""
    _check_text(path)
    raw = path.strip().replace("\\", "/")
    host_root = str(ws.root)
    if raw == host_root or raw.startswith(host_root + "/"):
        raw = raw[len(host_root) :]
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolError(f"Refused: {path!r} contains '..'; paths must stay inside the workspace.")
    if raw.startswith("/") and parts and not os.path.lexists(ws.root / parts[0]) and os.path.lexists("/" + parts[0]):
        raise ToolError(
            f"Refused: {path!r} is a host path outside the workspace. Paths are relative to the workspace root "
            f"('/' is the workspace root); write {'/'.join(parts)!r} for a path inside it."
        )
    real = Path(os.path.realpath(ws.root.joinpath(*parts)))
    if not _inside(real, ws.root):
        raise ToolError(f"Refused: {path!r} leads outside the workspace (through a symbolic link).")
    allowed = _root_dirs(roots)
    if allowed and not any(_inside(real, r) for r in allowed):
        raise ToolError(f"Refused: {path!r} is outside the roots this client allows.")
    return real


def _os_error(e: OSError, path: str) -> ToolError:
    return ToolError(f"{e.strerror or e.__class__.__name__}: {path!r}")


def _usage(ws: Workspace) -> tuple[int, int]:
    """(entries, total bytes) of the workspace."""
    entries = size = 0
    for here, dirnames, filenames in os.walk(ws.root, followlinks=False):
        entries += len(dirnames) + len(filenames)
        size += sum(os.lstat(os.path.join(here, f)).st_size for f in filenames)
    return entries, size


def _write(real: Path, content: bytes) -> None:
    fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(content)


def _read(real: Path) -> str:
    fd = os.open(real, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_FILE_BYTES + 1).decode("utf-8", errors="replace")


# -- result models ---------------------------------------------------------------------------------------------
class Entry(BaseModel):
    """One directory entry."""

    name: str
    type: str = Field(description='"file", "directory" or "symlink"')
    size: int | None = Field(default=None, description="Size in bytes (files only)")


class Listing(BaseModel):
    """Contents of a directory."""

    path: str
    entries: list[Entry]
    total: int = Field(description="Number of entries (only the first 200 are returned)")


class FileText(BaseModel):
    """A file's content."""

    path: str
    content: str
    size: int


class Written(BaseModel):
    """Result of a write."""

    path: str
    size: int
    created: bool = Field(description="True if the file did not exist before")


class Moved(BaseModel):
    """Result of a move."""

    source: str
    destination: str


class Match(BaseModel):
    """A search hit: a file whose path matches (line is null) or one matching line of a file."""

    path: str
    line: int | None = None
    text: str | None = None


class SearchResults(BaseModel):
    """Search hits."""

    query: str
    matches: list[Match]
    total: int = Field(description="Number of hits (only the first 50 are returned)")


class PathResult(BaseModel):
    """Result of creating or deleting a path."""

    path: str
    changed: bool = Field(description="False if nothing had to be done")


# -- tools -----------------------------------------------------------------------------------------------------
@server.tool(read_only=True, idempotent=True, title="List directory")
async def list_directory(path: str = "/", roots: ClientRoots = None) -> Listing:
    """List the files and folders in a workspace directory, sorted by name.

    Args:
        path: Directory relative to the workspace root; "/" (the default) is the root itself.

    Returns each entry's name, type ("file", "directory" or "symlink") and size in bytes for files.
    """
    ws = server.state
    real = resolve(ws, path, roots)
    if not real.is_dir():
        what = "Not a directory" if real.exists() else "No such directory"
        raise ToolError(f"{what}: {path!r}. Use list_directory('/') to see the workspace; read_file reads files.")
    entries = []
    for p in sorted(real.iterdir(), key=lambda p: p.name):
        kind = "symlink" if p.is_symlink() else "directory" if p.is_dir() else "file"
        entries.append(Entry(name=_shown(p.name), type=kind, size=p.lstat().st_size if kind == "file" else None))
    return Listing(path=ws.rel(real), entries=entries[:MAX_LISTED], total=len(entries))


@server.tool(read_only=True, idempotent=True, title="Read file")
async def read_file(path: str, roots: ClientRoots = None) -> FileText:
    """Read a text file of the workspace.

    Args:
        path: File path relative to the workspace root, e.g. "docs/readme.md".

    Returns the file's content (UTF-8; at most 64 kB) and its size in bytes.
    """
    ws = server.state
    real = resolve(ws, path, roots)
    if not real.is_file():
        raise ToolError(f"No such file: {path!r}. Use list_directory or search_files to find files.")
    if real.stat().st_size > MAX_FILE_BYTES:
        raise ToolError(f"{path!r} is too large to read (over {MAX_FILE_BYTES} bytes).")
    try:
        content = _read(real)
    except OSError as e:
        raise _os_error(e, path) from None
    return FileText(path=ws.rel(real), content=content, size=real.stat().st_size)


@server.tool(destructive=True, idempotent=True, title="Write file")
async def write_file(path: str, content: str, roots: ClientRoots = None) -> Written:
    """Create a file or replace a file's whole content. Missing parent folders are created. To change part of a
    file, read it first and write back the full new content.

    Args:
        path: File path relative to the workspace root, e.g. "notes/todo.txt".
        content: The complete new text of the file (at most 64 kB).

    Returns the path, the new size and whether the file was created.
    """
    ws = server.state
    real = resolve(ws, path, roots)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ToolError(f"Refused: the content is not valid Unicode (character {e.start} is a lone surrogate); "
                        "nothing was written.") from None
    if real == ws.root or real.is_dir():
        raise ToolError(f"{path!r} is a directory; give a file path.")
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"The content is too large ({len(data)} bytes; the limit is {MAX_FILE_BYTES}).")
    entries, used = _usage(ws)
    old = real.stat().st_size if real.is_file() else 0
    if used - old + len(data) > MAX_TOTAL_BYTES or entries >= MAX_ENTRIES:
        raise ToolError("The workspace is full; delete something first.")
    created = not real.exists()
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        _write(real, data)
    except OSError as e:
        raise _os_error(e, path) from None
    return Written(path=ws.rel(real), size=len(data), created=created)


@server.tool(title="Move file")
async def move_file(source: str, destination: str, roots: ClientRoots = None) -> Moved:
    """Move or rename a file or folder. Missing parent folders of the destination are created. Never overwrites: if
    the destination is an existing folder the source is moved into it, if it is an existing file the call fails.

    Args:
        source: Path of the file or folder to move, e.g. "report.txt".
        destination: New path, e.g. "txt/report.txt", or an existing folder such as "txt".

    Returns the final source and destination paths.
    """
    ws = server.state
    src = resolve(ws, source, roots)
    dst = resolve(ws, destination, roots)
    if src == ws.root:
        raise ToolError("The workspace root cannot be moved.")
    if not src.exists():
        raise ToolError(f"No such file or folder: {source!r}.")
    if dst.is_dir():  # move into the folder (a relative path: the host-path rule must not apply)
        folder = ws.rel(dst)
        dst = resolve(ws, src.name if folder == "/" else f"{folder}/{src.name}", roots)
    if dst.exists() or dst.is_symlink():
        raise ToolError(f"{ws.rel(dst)!r} already exists; choose another destination.")
    if _inside(dst, src):
        raise ToolError("A folder cannot be moved into itself.")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, dst)
    except OSError as e:
        raise _os_error(e, source) from None
    return Moved(source=ws.rel(src), destination=ws.rel(dst))


@server.tool(read_only=True, idempotent=True, title="Search files")
async def search_files(query: str, path: str = "/", roots: ClientRoots = None) -> SearchResults:
    """Find files whose path or content contains some text (case-insensitive). Use it to locate information without
    reading every file.

    Args:
        query: Text to look for, e.g. "INV-1234" or ".csv".
        path: Folder to search in (recursively), relative to the workspace root; default "/" (everything).

    Returns up to 50 hits: files whose path contains the query (line null) and matching lines (1-based line
    number and the line's text).
    """
    ws = server.state
    base = resolve(ws, path, roots)
    needle = query.casefold()
    if not needle.strip():
        raise ToolError("The query is empty.")
    if not base.is_dir():
        raise ToolError(f"Not a directory: {path!r}.")
    hits: list[Match] = []
    for here, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(here) / name
            if p.is_symlink() or not p.is_file():
                continue
            rel = ws.rel(p)
            if needle in rel.casefold():
                hits.append(Match(path=rel))
            if p.stat().st_size <= MAX_FILE_BYTES:
                for no, line in enumerate(_read(p).splitlines(), 1):
                    if needle in line.casefold():
                        hits.append(Match(path=rel, line=no, text=line.strip()[:200]))
    return SearchResults(query=query, matches=hits[:MAX_MATCHES], total=len(hits))


@server.tool(idempotent=True, title="Make directory")
async def make_directory(path: str, roots: ClientRoots = None) -> PathResult:
    """Create a folder (and any missing parent folders). Does nothing if it already exists.

    Args:
        path: Folder path relative to the workspace root, e.g. "archive/2024".
    """
    ws = server.state
    real = resolve(ws, path, roots)
    if real.exists() and not real.is_dir():
        raise ToolError(f"{path!r} exists and is a file.")
    existed = real.is_dir()
    if not existed and _usage(ws)[0] >= MAX_ENTRIES:
        raise ToolError("The workspace is full; delete something first.")
    try:
        real.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _os_error(e, path) from None
    return PathResult(path=ws.rel(real), changed=not existed)


@server.tool(destructive=True, idempotent=True, title="Delete file")
async def delete_file(path: str, roots: ClientRoots = None) -> PathResult:
    """Delete a file or an empty folder permanently. Only use it when the task requires removing something.

    Args:
        path: Path relative to the workspace root.
    """
    ws = server.state
    real = resolve(ws, path, roots)
    if real == ws.root:
        raise ToolError("The workspace root cannot be deleted.")
    try:
        if real.is_dir():
            real.rmdir()
        elif real.exists():
            real.unlink()
        else:
            raise ToolError(f"No such file or folder: {path!r}.")
    except OSError as e:
        raise _os_error(e, path) from None
    return PathResult(path=ws.rel(real), changed=True)


if __name__ == "__main__":
    from mcp_gym.envs.serve import main

    main("files")
