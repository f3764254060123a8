"""The ``gpucluster`` command: the top layer, which wires the shells (webhook, controller, certs,
sandbox) to the core. Each command is a module of this package exposing ``register(subparsers)``,
which adds its parser and sets ``func`` to a ``run(args) -> int`` returning the exit code.

Exit codes: 0 success, 1 a negative answer (unsatisfiable, legacy requests found, admission
denied), 2 bad input or usage, with a one-line error on stderr. Never a traceback for bad input.

Start-up is kept at interpreter speed: a command's module (and with it the Kubernetes client,
aiohttp, the CEL compiler, ...) is imported only when that command runs. ``--help`` and
``--version`` import none of them; the one-line helps below are checked against the modules' own
by tests/test_startup.py.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn, TypeAlias

from gpucluster import __version__
from gpucluster.errors import EXIT_USAGE, GpuclusterError

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

# Commands of the CLI contract (README's command reference), in its order, each a module of this package,
# with the one-line help its register() gives (so --help needs no command module).
COMMANDS: dict[str, str] = {
    "webhook": "serve the validating and mutating admission webhook over HTTPS",
    "controller": "reconcile the GPUCluster into the DRA stack",
    "run": "webhook and controller; with no cluster configured, also a local sandbox cluster",
    "sandbox": "run a local simulated GPU cluster (API server double) that kubectl can use",
    "validate": "validate GPUCluster manifests and print them with defaults applied",
    "render": "print the operand objects a GPUCluster deploys, as a YAML stream",
    "admit": "answer an AdmissionReview offline, as the webhook would",
    "match": "evaluate CEL device selectors against ResourceSlices",
    "explain": "explain whether ResourceClaims can be allocated, node by node",
    "migrate": "rewrite manifests that request nvidia.com/gpu or nvidia.com/mig-* into DRA claims",
    "audit": "list workloads in a cluster that still request GPUs through extended resources",
    "certs": "generate, rotate and inject the webhook's serving certificates",
    # beyond the contract: the chart's install hook
    "apply": "server-side apply objects, waiting until their admission webhooks can be called",
    # beyond the contract: the chart's pre-delete hook
    "cleanup": "delete a release's GPUCluster and NVIDIADriver, refusing while GPU workloads run",
    # beyond the contract: the chart's pre-upgrade hook for releases of chart 0.1.0
    "handover": "mark a Helm release's objects helm.sh/resource-policy=keep before an upgrade drops them",
    # beyond the contract: the real control plane the end-to-end tests are judged by
    "cluster": "build and run the real Kubernetes control plane locally, with simulated GPU nodes",
}
CONTRACT = list(COMMANDS)


def _command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` asks for: the first word that is not an option (the top level has no
    option taking a value), if it names a command."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr, as every other error (argparse prints the usage
    first); the sub-parsers are of this class too (argparse makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        _usage_error(self.prog, message)


def _usage_error(prog: str, message: str) -> NoReturn:
    sys.stderr.write(f"{prog}: error: {message} (see {prog} --help)\n")
    sys.exit(EXIT_USAGE)


def build_parser(load: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the full sub-parsers of the commands in ``load`` (every command when None)
    and a placeholder carrying only the one-line help for the others."""
    parser = _Parser(
        prog="gpucluster",
        description="NVIDIA GPUs on Kubernetes through Dynamic Resource Allocation: admission webhook, "
        "controller and tools for the GPUCluster DRA model.",
        epilog="Exit codes: 0 success, 1 negative answer, 2 bad input or usage.",
    )
    parser.add_argument("--version", action="version", version=f"gpucluster {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        if load is None or name in load:
            importlib.import_module(f"gpucluster.cli.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    command = _command_named(words)
    parser = build_parser([] if command is None else [command])
    args, unknown = parser.parse_known_args(words)
    if unknown:  # the command's, not the top level's
        _usage_error(f"gpucluster {args.command}", f"unrecognized arguments: {' '.join(unknown)}")
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
