"""Exceptions raised by the CEL front end and by compiled programs."""

from __future__ import annotations


class CelError(Exception):
    """Base class of every CEL error."""


class CelCompileError(CelError):
    """The expression does not parse, does not type-check or is too long or too expensive.

    ``str(error)`` is ``"<line>:<column>: <message>"``; line and column are 1-based.
    """

    def __init__(self, expression: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{line}:{column}: {message}")
        self.expression = expression
        self.line = line
        self.column = column
        self.message = message


class CelRuntimeError(CelError):
    """Evaluation failed (for example ``no such key: x``); the claim cannot be allocated.

    Also used internally as the CEL error value while an expression is being evaluated.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
