"""Errors the CLI turns into exit codes: one line on stderr, never a traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_USAGE = 2


class GpuclusterError(Exception):
    """Base for errors that end a command with a one-line message."""

    exit_code = EXIT_USAGE


class InputError(GpuclusterError):
    """Bad input or usage: exit code 2. The message names the file and the problem."""
