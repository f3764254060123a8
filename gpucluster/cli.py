"""The ``gpucluster`` command.

Exit codes: 0 success, 1 a negative answer (unsatisfiable, legacy requests found, admission
denied), 2 bad input or usage, with a one-line error on stderr. Never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpucluster import __version__
from gpucluster.errors import EXIT_USAGE, GpuclusterError

# Commands of the ARCHITECTURE.md contract, in its order; each is a module of gpucluster.commands.
CONTRACT = [
    "webhook", "controller", "run", "sandbox", "validate", "render",
    "admit", "match", "explain", "migrate", "audit", "certs",
    "apply",  # beyond the contract: the chart's install hook
]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpucluster",
        description="NVIDIA GPUs on Kubernetes through Dynamic Resource Allocation: admission webhook, "
        "controller and tools for the GPUCluster DRA model.",
        epilog="Exit codes: 0 success, 1 negative answer, 2 bad input or usage.",
    )
    parser.add_argument("--version", action="version", version=f"gpucluster {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in CONTRACT:
        importlib.import_module(f"gpucluster.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except GpuclusterError as exc:
        print(f"gpucluster {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    sys.exit(main())
