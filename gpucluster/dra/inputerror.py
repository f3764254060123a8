"""The error for DRA input the API server would have rejected, on its own so that every module of
the allocator (the gates, the model) can raise it without importing another."""

from __future__ import annotations

SUPPORTED_VERSIONS = ("1.34", "1.35", "1.36")
"""The Kubernetes minor versions whose allocator and gates are emulated."""


class AllocatorInputError(ValueError):
    """Input the API server would have rejected: the message names the object and the field path.

    ``source`` says which input it came from: ``"claims"``, ``"cluster"`` or ``""`` (an argument).
    """

    def __init__(self, message: str, source: str = "") -> None:
        super().__init__(message)
        self.source = source
