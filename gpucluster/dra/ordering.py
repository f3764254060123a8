"""Rich comparisons from one three-way comparison, for the value types of the CEL library."""

from __future__ import annotations

from typing import Any


class Ordered:
    """Equality and ordering from ``_order(other) -> -1 | 0 | 1``; other types compare NotImplemented.

    Subclasses define ``__hash__`` consistently with ``_order``.
    """

    __slots__ = ()

    def _order(self, other: Any) -> int:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._order(other) == 0

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._order(other) != 0

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._order(other) < 0

    def __le__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._order(other) <= 0

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._order(other) > 0

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self._order(other) >= 0
