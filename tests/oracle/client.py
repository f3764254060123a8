"""Talks to a running oracle: one JSON case per line in, one answer per line out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


class OracleError(Exception):
    """The oracle died or answered something that is not an answer."""


class Oracle:
    def __init__(self, binary: Path) -> None:
        self._process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._next = 0

    def ask(self, case: dict[str, Any]) -> dict[str, Any]:
        """One case, one answer: sequential, so neither pipe can fill while the other waits."""
        process = self._process
        assert process.stdin is not None
        self._next += 1
        try:
            process.stdin.write(json.dumps({**case, "id": self._next}, separators=(",", ":")) + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # _read reports the exit and its stderr
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            stderr = self._process.stderr.read() if self._process.stderr else ""
            raise OracleError(f"the oracle exited ({self._process.poll()}): {stderr.strip()[-2000:]}")
        answer: dict[str, Any] = json.loads(line)
        if answer.get("error"):
            raise OracleError(f"the oracle could not run the case: {answer['error']}")
        return answer

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for stream in (self._process.stdout, self._process.stderr):
            if stream:
                stream.close()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
