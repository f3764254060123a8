"""Drift: the live object's values for the fields we apply, compared with what we applied (pure).

Server-side apply owns exactly the fields our desired object sets, so the part of a live object
that matters is its projection onto the desired object's shape: every key the desired object
has, recursively, with the live value (extra keys the server or other controllers add, such as
defaults, status and their own annotations, are ignored). Lists are compared item by item and
by length. The API server normalizes some values (quantities, defaults inside items), so a
projection can differ from the desired object without any drift: the reconciler remembers the
projection seen right after its own apply and calls any later change of it drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MISSING = {"$missing": True}


def project(desired: Any, live: Any) -> Any:
    """``live`` restricted to the shape of ``desired``; an absent field becomes a marker."""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return live
        return {key: project(value, live[key]) if key in live else _MISSING for key, value in desired.items()}
    if isinstance(desired, list):
        if not isinstance(live, list):
            return live
        return [project(desired[i], item) if i < len(desired) else item for i, item in enumerate(live)]
    return live


def matches(desired: Any, live: Any) -> bool:
    """Whether every field of ``desired`` has the same value in ``live`` (defaults aside)."""
    return bool(project(desired, live) == desired)
