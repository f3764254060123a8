"""Subcommands of the ``gpucluster`` CLI.

Each module exposes ``register(subparsers)``, which adds its parser and sets ``func`` to a
``run(args) -> int`` returning the exit code.
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
