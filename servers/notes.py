"""Notes: a small per-episode notebook as an MCP server.

Tools: ``create_note``, ``search_notes``, ``read_note``, ``tag_note``, ``list_notes``, ``delete_note``.
Resources: ``notes://index`` (all titles) and the template ``notes://{title}`` (one note as text).
Tasks and grading live in :mod:`mcp_gym.envs.notes.tasks`.

Run: ``python -m mcp_gym.servers.notes`` (stdio) or ``... --transport http --port 8000``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import BaseModel, Field

from mcp_gym.envs.notes.tasks import note_matches, task_by_id
from mcp_gym.serverkit import EpisodeServer

__all__ = ["server"]

MAX_NOTES = 200
MAX_TITLE = 120
MAX_CONTENT = 5000
MAX_TAGS = 12
MAX_TAG_LEN = 40
MAX_RESULTS = 25


@dataclass
class Note:
    """One note."""

    title: str
    content: str
    tags: list[str] = field(default_factory=list)


@dataclass
class Notebook:
    """The state of one episode: notes keyed by case-folded title, in creation order."""

    notes: dict[str, Note] = field(default_factory=dict)

    def get(self, title: str) -> Note:
        note = self.notes.get(title.strip().casefold())
        if note is None:
            raise ToolError(f"No note titled {title!r}. Use list_notes or search_notes to find the exact title.")
        return note


def new_state(task_id: str | None, seed: int) -> Notebook:
    """The initial notebook of ``task_id`` (empty without a task); ``seed`` only shuffles the note order."""
    book = Notebook()
    if task_id is None:
        return book
    try:
        seeded = list(task_by_id(task_id).data.get("notes", ()))
    except KeyError as e:
        raise ToolError(str(e)) from None
    random.Random(seed).shuffle(seeded)
    for n in seeded:
        book.notes[n["title"].casefold()] = Note(n["title"], n["content"], list(n["tags"]))
    return book


def snapshot(book: Notebook) -> dict[str, Any]:
    """``{"notes": [{"title", "content", "tags"}, ...]}`` for the verifiers."""
    return {"notes": [{"title": n.title, "content": n.content, "tags": list(n.tags)} for n in book.notes.values()]}


server: EpisodeServer[Notebook] = EpisodeServer(
    "mcp-gym-notes",
    new_state,
    snapshot=snapshot,
    instructions=(
        "A personal notebook. Find information with search_notes (keywords) or list_notes, read a note with "
        "read_note, save information with create_note and organise notes with tag_note. Titles are unique "
        "(case-insensitive). Each note is also the resource notes://{title}; notes://index lists them all."
    ),
)


# -- result models ---------------------------------------------------------------------------------------------
class NoteOut(BaseModel):
    """A full note."""

    title: str
    content: str
    tags: list[str]
    uri: str = Field(description="Resource URI of the note")


class NoteSummary(BaseModel):
    """A note's title and tags, with a content snippet for search hits."""

    title: str
    tags: list[str]
    snippet: str | None = None


class NoteList(BaseModel):
    """Notes matching a listing or a search."""

    notes: list[NoteSummary]
    total: int = Field(description="Number of matching notes (only the first ones are returned)")


class Deleted(BaseModel):
    """Result of a deletion."""

    title: str
    deleted: bool


def _uri(title: str) -> str:
    return "notes://" + quote(title, safe="")


def _out(note: Note) -> NoteOut:
    return NoteOut(title=note.title, content=note.content, tags=list(note.tags), uri=_uri(note.title))


def _clean_tags(tags: list[str] | None) -> list[str]:
    out: list[str] = []
    for t in tags or []:
        t = t.strip()
        if not t or len(t) > MAX_TAG_LEN:
            raise ToolError(f"Tags must be 1-{MAX_TAG_LEN} characters; got {t!r}.")
        if t.casefold() not in {o.casefold() for o in out}:
            out.append(t)
    return out


def _snippet(content: str, query: str, width: int = 80) -> str:
    lower = content.casefold()
    terms = query.casefold().split()
    at = min((i for i in (lower.find(t) for t in terms) if i >= 0), default=0)
    start = max(0, at - width // 4)
    text = content[start : start + width]
    return ("..." if start else "") + text + ("..." if start + width < len(content) else "")


# -- tools -----------------------------------------------------------------------------------------------------
@server.tool(title="Create note")
async def create_note(title: str, content: str, tags: list[str] | None = None) -> NoteOut:
    """Create a new note. Use it to save information for later.

    Args:
        title: Unique title of the note (case-insensitive; at most 120 characters). Fails if a note with this
            title already exists: pick another title or use tag_note to change an existing note's tags.
        content: The text of the note (at most 5000 characters).
        tags: Optional labels for grouping notes, e.g. ["project", "urgent"].

    Returns the stored note, including its resource URI.
    """
    book = server.state
    title = title.strip()
    if not title or len(title) > MAX_TITLE:
        raise ToolError(f"The title must be 1-{MAX_TITLE} characters long.")
    if len(content) > MAX_CONTENT:
        raise ToolError(f"The content is too long ({len(content)} characters; the limit is {MAX_CONTENT}).")
    if title.casefold() in book.notes:
        raise ToolError(f"A note titled {title!r} already exists; choose another title.")
    if len(book.notes) >= MAX_NOTES:
        raise ToolError(f"The notebook is full ({MAX_NOTES} notes); delete a note first.")
    clean = _clean_tags(tags)
    if len(clean) > MAX_TAGS:
        raise ToolError(f"A note can have at most {MAX_TAGS} tags.")
    note = book.notes[title.casefold()] = Note(title, content, clean)
    return _out(note)


@server.tool(read_only=True, idempotent=True, title="Search notes")
async def search_notes(query: str) -> NoteList:
    """Find notes by keywords. Use it to locate the note that holds some information before reading it.

    Args:
        query: One or more words; a note matches when every word occurs (case-insensitively, also inside longer
            words) in its title, content or tags. Example: "Ada Okafor" or "project budget".

    Returns the matching notes (title, tags and a content snippet around the first match), at most 25.
    """
    if not query.strip():
        raise ToolError("The query is empty; give one or more keywords.")
    hits = [n for n in server.state.notes.values() if note_matches(query, n.title, n.content, n.tags)]
    shown = [NoteSummary(title=n.title, tags=list(n.tags), snippet=_snippet(n.content, query)) for n in hits]
    return NoteList(notes=shown[:MAX_RESULTS], total=len(hits))


@server.tool(read_only=True, idempotent=True, title="Read note")
async def read_note(title: str) -> NoteOut:
    """Read the full content and tags of one note.

    Args:
        title: The note's title (case-insensitive), as shown by list_notes or search_notes.

    Returns the note. Fails if no note has this title.
    """
    return _out(server.state.get(title))


@server.tool(idempotent=True, title="Tag note")
async def tag_note(title: str, tags: list[str]) -> NoteOut:
    """Add tags to an existing note (tags it already has are kept; adding a tag twice has no effect).

    Args:
        title: The note's title (case-insensitive).
        tags: Tags to add, e.g. ["follow-up"].

    Returns the updated note.
    """
    note = server.state.get(title)
    merged = _clean_tags([*note.tags, *tags])
    if len(merged) > MAX_TAGS:
        raise ToolError(f"A note can have at most {MAX_TAGS} tags.")
    note.tags = merged
    return _out(note)


@server.tool(read_only=True, idempotent=True, title="List notes")
async def list_notes(tag: str | None = None) -> NoteList:
    """List the titles and tags of all notes, oldest first.

    Args:
        tag: If given, only notes carrying this tag (case-insensitive).

    Returns at most 25 notes and the total count.
    """
    notes = list(server.state.notes.values())
    if tag:
        notes = [n for n in notes if tag.strip().casefold() in {t.casefold() for t in n.tags}]
    shown = [NoteSummary(title=n.title, tags=list(n.tags)) for n in notes[:MAX_RESULTS]]
    return NoteList(notes=shown, total=len(notes))


@server.tool(destructive=True, idempotent=True, title="Delete note")
async def delete_note(title: str) -> Deleted:
    """Delete a note permanently. Only use it when asked to remove a note.

    Args:
        title: The note's title (case-insensitive).

    Returns the deleted title; fails if no note has this title.
    """
    note = server.state.get(title)
    del server.state.notes[note.title.casefold()]
    return Deleted(title=note.title, deleted=True)


# -- resources -------------------------------------------------------------------------------------------------
@server.mcp.resource("notes://index", name="index", title="Notebook index", mime_type="text/plain")
def notes_index() -> str:
    """Every note of the notebook: one line per note with its title, tags and resource URI."""
    notes = server.state.notes.values()
    if not notes:
        return "The notebook is empty."
    lines = [f"- {n.title} [{', '.join(n.tags)}] {_uri(n.title)}" for n in notes]
    return f"{len(lines)} notes:\n" + "\n".join(lines)


@server.mcp.resource("notes://{title}", name="note", title="Note", mime_type="text/markdown")
def note_resource(title: str) -> str:
    """One note as Markdown: its title, tags and content (``title`` is URL-encoded in the URI)."""
    note = server.state.notes.get(title.strip().casefold())
    if note is None:
        raise ResourceNotFoundError(f"No note titled {title!r}")
    return f"# {note.title}\n\nTags: {', '.join(note.tags) or '(none)'}\n\n{note.content}\n"


if __name__ == "__main__":
    from mcp_gym.envs.serve import main

    main("notes")
