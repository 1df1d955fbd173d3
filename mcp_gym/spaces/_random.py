"""Random word-like text drawn from a numpy Generator (shared by the text spaces and the schema sampler)."""

from __future__ import annotations

import numpy as np

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = "0123456789"
_PUNCT = " -_.,:/"
_UNICODE = "éèüößñçøåæłžčäàâîôΩλπждя中文日本語한국😀✓€"
# (pool, cumulative probability) -- mostly lowercase so strings look like words, with a little of everything else.
_POOLS: tuple[tuple[str, float], ...] = (
    (_LOWER, 0.72),
    (_DIGITS, 0.80),
    (_UPPER, 0.86),
    (_PUNCT, 0.93),
    (_UNICODE, 1.0),
)
# Characters used when a regex construct asks for "any character except ...".
_ANY_POOL = _LOWER + _UPPER + _DIGITS + " -_.,:/@#!?()[]{}+=*&%$~'\"<>|;" + "éüßñ中😀"


def _random_text(rng: np.random.Generator, length: int) -> str:
    """Return ``length`` random characters, word-like (mostly lowercase), never starting or ending with a space."""
    chars: list[str] = []
    for i in range(length):
        u = rng.random()
        pool = next(chars_ for chars_, cum in _POOLS if u < cum)
        if pool is _PUNCT and (i == 0 or i == length - 1):
            pool = _LOWER
        chars.append(pool[int(rng.integers(len(pool)))])
    return "".join(chars)


def _random_word(rng: np.random.Generator, low: int = 3, high: int = 8) -> str:
    """Return a random lowercase ASCII word of ``low..high`` letters."""
    n = int(rng.integers(low, high + 1))
    return "".join(_LOWER[int(i)] for i in rng.integers(0, len(_LOWER), size=n))
