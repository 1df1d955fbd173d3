"""Text spaces: :class:`Utf8Text` (any ``str``) and :class:`TextMapping` (``str -> str`` dicts)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector.utils import create_shared_memory

from mcp_gym.spaces._random import _random_text, _random_word

__all__ = ["TextMapping", "Utf8Text"]


class Utf8Text(gymnasium.spaces.Space[str]):
    """Any Python ``str`` (UTF-8 / non-ASCII and the empty string included), with an optional maximum length.

    Use this instead of ``gymnasium.spaces.Text`` for LLM prompts and tool outputs: ``Text.contains`` demands every
    character be in its charset. Length is counted in code points (``len(x)``).
    """

    def __init__(self, max_length: int | None = None, seed: int | np.random.Generator | None = None) -> None:
        """Create the space.

        Args:
            max_length: maximum ``len()`` of a contained string, or ``None`` for no limit.
            seed: seed (or Generator) for :meth:`sample`.
        """
        if max_length is not None:
            if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 0:
                raise ValueError(f"max_length must be a non-negative int or None, got {max_length!r}")
            max_length = int(max_length)
        self.max_length: int | None = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Strings cannot be flattened to a Box: always ``False``."""
        return False

    def contains(self, x: Any) -> bool:
        """Return True iff ``x`` is a ``str`` no longer than ``max_length``."""
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> str:
        """Return a short (at most 12 characters) random string drawn from ``self.np_random``.

        Masks are not supported: ``mask``/``probability`` must be ``None``.
        """
        if mask is not None or probability is not None:
            raise ValueError("Utf8Text.sample does not support mask or probability")
        upper = 12 if self.max_length is None else min(12, self.max_length)
        length = int(self.np_random.integers(min(1, upper), upper + 1))
        return _random_text(self.np_random, length)

    def to_jsonable(self, sample_n: Iterable[str]) -> list[str]:
        """Strings are already JSON: return them as a list."""
        return list(sample_n)

    def from_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        """Strings are already JSON: return them as a list."""
        return list(sample_n)

    def __eq__(self, other: object) -> bool:
        """Two Utf8Text spaces are equal iff their ``max_length`` is equal."""
        return isinstance(other, Utf8Text) and other.max_length == self.max_length

    def __repr__(self) -> str:
        """Return ``Utf8Text()`` or ``Utf8Text(max_length=N)``."""
        return "Utf8Text()" if self.max_length is None else f"Utf8Text(max_length={self.max_length})"


class TextMapping(gymnasium.spaces.Space[dict[str, str]]):
    """A ``dict`` of ``str -> str`` with any keys (e.g. resource URI -> resource text)."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        """Not flattenable to a numpy array."""
        return False

    def contains(self, x: Any) -> bool:
        """True for a dict whose keys and values are all ``str``."""
        return isinstance(x, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in x.items())

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> dict[str, str]:
        """A small random mapping (for tests; envs fill it with real resources)."""
        n = int(self.np_random.integers(0, 3))
        return {f"res://{_random_word(self.np_random)}": _random_text(self.np_random, 8) for _ in range(n)}

    def to_jsonable(self, sample_n: Iterable[dict[str, str]]) -> list[dict[str, str]]:
        """Identity (copies)."""
        return [dict(s) for s in sample_n]

    def from_jsonable(self, sample_n: Sequence[dict[str, str]]) -> list[dict[str, str]]:
        """Identity (copies)."""
        return [dict(s) for s in sample_n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextMapping)

    def __repr__(self) -> str:
        return "TextMapping()"


@create_shared_memory.register(Utf8Text)
@create_shared_memory.register(TextMapping)
def _no_shared_memory(space: gymnasium.spaces.Space[Any], n: int = 1, ctx: Any = None) -> Any:
    """Gymnasium's ``AsyncVectorEnv`` asks for a fixed-size shared buffer per observation; text of any length has
    none. Raised as a ``ValueError`` (not the ``CustomSpaceError`` it rewords into a generic line) so the line says
    what to call instead."""
    raise ValueError(f"{space!r} observations are text of any length, which cannot live in shared memory: use "
                     "gym.make_vec(..., vectorization_mode='async', vector_kwargs={'shared_memory': False}) "
                     "(a process per env), or the default gym.make_vec(...) (mcp_gym.VectorMCPEnv: concurrent calls "
                     "in one process)")
