"""A griffe extension for the API reference: docstring examples (``>>>`` lines and their output) become code blocks.

The docstrings are written for ``help()`` and doctest (tests/test_doctests.py runs them); rendered as Markdown, a
``>>>`` line would be a paragraph and ``x["key"]`` a broken reference link. scripts/docs/mkdocs.yml loads this file
by path.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_examples(text: str) -> str:
    """``text`` with every run of doctest lines (a ``>>>`` line, its ``...`` continuations and its output, up to a blank
    line) put in a ``pycon`` fenced block at the run's indentation."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        out += [f"{indent}```pycon", *(f"{indent}{b}" for b in block), f"{indent}```"]
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fences the doctest examples of every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring (if any) with its examples fenced."""
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_examples(obj.docstring.value)
