"""Did-you-mean: the nearest allowed words to an unknown one (a spec key, a preset, a command)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` of `choices` that look like `word` (difflib's ratio >= 0.6, case ignored), only
    those about as close as the closest (a clear best match comes alone)."""
    pool = {c.lower(): c for c in choices}
    scored = []
    for key in difflib.get_close_matches(word.lower(), list(pool), n=n, cutoff=0.6):
        scored.append((difflib.SequenceMatcher(None, word.lower(), key).ratio(), pool[key]))
    best = max((r for r, _ in scored), default=0.0)
    return [c for r, c in scored if r >= best - 0.05]


def did_you_mean(word: object, choices: Iterable[str]) -> str | None:
    """`did you mean 'x'?` (or 'x' or 'y') for a near miss of `word`, else None."""
    if not isinstance(word, str) or not word:
        return None
    close = close_matches(word, choices)
    return ("did you mean " + " or ".join(repr(c) for c in close) + "?") if close else None


class UnknownNameError(ValueError):
    """A name that is not one of `choices` (a preset, say): the message lists them, and
    `spec_error` turns the near misses into the error's hint."""

    def __init__(self, what: str, name: object, choices: Iterable[str]) -> None:
        self.name, self.choices = name, list(choices)
        super().__init__(f"unknown {what} {name!r}; allowed: {', '.join(self.choices)}")
