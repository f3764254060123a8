"""Regular expressions with RE2 semantics (CEL ``matches``, Kubernetes ``find``/``findAll``).

cel-go and Kubernetes use Go's ``regexp`` package, whose syntax and linear-time semantics are
RE2's. Patterns are compiled with the ``re2`` module (google-re2, a dependency of cel-python),
so constructs RE2 does not have (backreferences, lookaround, possessive quantifiers) are
rejected exactly as in Kubernetes and no pattern can backtrack exponentially. Differences that
remain: Go reports errors with its own wording, and Go's ``\\C`` is not accepted by RE2.
Pure literals and ``^literal`` / ``literal$`` / ``^literal$`` skip the engine.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import re2

from gpucluster.dra.cel.errors import CelRuntimeError

_META = frozenset("\\.+*?()|[]{}^$")
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


class Regex(Protocol):
    def search(self, text: str, pos: int = 0) -> Any: ...


class _Match:
    __slots__ = ("_end", "_start")

    def __init__(self, start: int, end: int) -> None:
        self._start = start
        self._end = end

    def start(self) -> int:
        return self._start

    def end(self) -> int:
        return self._end


class _Literal:
    """A pattern without metacharacters, anchored at neither, one or both ends."""

    __slots__ = ("anchor_end", "anchor_start", "text")

    def __init__(self, text: str, anchor_start: bool, anchor_end: bool) -> None:
        self.text = text
        self.anchor_start = anchor_start
        self.anchor_end = anchor_end

    def search(self, text: str, pos: int = 0) -> _Match | None:
        n = len(self.text)
        if self.anchor_start:
            if pos != 0:
                return None
            if self.anchor_end:
                return _Match(0, n) if text == self.text else None
            return _Match(0, n) if text.startswith(self.text) else None
        if self.anchor_end:
            start = len(text) - n
            return _Match(start, len(text)) if start >= pos and text.endswith(self.text) else None
        i = text.find(self.text, pos)
        return None if i < 0 else _Match(i, i + n)


class RegexError(ValueError):
    pass


@functools.lru_cache(maxsize=1024)
def parse_regex(pattern: str) -> Regex:
    """Compile a pattern; raises RegexError with RE2's reason."""
    body = pattern
    anchor_start = body.startswith("^")
    if anchor_start:
        body = body[1:]
    anchor_end = body.endswith("$") and not body.endswith("\\$")
    if anchor_end:
        body = body[:-1]
    if not any(c in _META for c in body):
        return _Literal(body, anchor_start, anchor_end)
    try:
        compiled: Regex = re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        raise RegexError(str(reason)) from None
    return compiled


def compile_regex(pattern: str) -> Regex:
    try:
        return parse_regex(pattern)
    except RegexError as exc:
        raise CelRuntimeError(f"error parsing regexp: {exc}: `{pattern}`") from None


def find_first(regex: Regex, text: str) -> str:
    m = regex.search(text)
    return "" if m is None else text[m.start() : m.end()]


def find_all(regex: Regex, text: str, limit: int) -> list[str]:
    """Go's ``Regexp.FindAllString``: an empty match right after a match is not reported."""
    out: list[str] = []
    pos = 0
    prev_end = -1
    n = len(text)
    if limit < 0:
        limit = n + 1
    while len(out) < limit and pos <= n:
        m = regex.search(text, pos)
        if m is None:
            break
        start, end = m.start(), m.end()
        accept = True
        if end == pos:
            if start == prev_end:
                accept = False
            pos += 1
        else:
            pos = end
        prev_end = end
        if accept:
            out.append(text[start:end])
    return out
