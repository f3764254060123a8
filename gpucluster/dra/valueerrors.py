"""What the DRA value parsers (quantities, semantic versions) share: an error that names its input
and keeps the upstream library's own text, and the way the input is quoted in it."""

from __future__ import annotations

import json


class ValueParseError(ValueError):
    """``str(err)`` names the input (``invalid quantity "1.5.3": ...``); ``err.reason`` is the bare
    upstream error text (Kubernetes' or blang/semver's)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason: str = message if reason is None else reason


def quote_input(s: str) -> str:
    """The input as an error message shows it: JSON-quoted, cut at 200 characters."""
    if len(s) > 200:
        s = s[:200] + "..."
    return json.dumps(s, ensure_ascii=False)
