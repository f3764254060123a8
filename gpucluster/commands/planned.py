"""Commands of the CLI contract that later work fills in.

They are registered with their documented flags so that ``--help`` shows the whole contract;
running one says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpucluster.commands import Subparsers
from gpucluster.errors import EXIT_USAGE

Flag = tuple[tuple[str, ...], dict[str, Any]]

PLANNED: dict[str, tuple[str, list[Flag]]] = {
    "validate": ("validate GPUCluster manifests and print them with defaults applied", []),
    "webhook": (
        "serve the validating and mutating admission webhook over HTTPS",
        [
            (("--port",), {"type": int, "default": 9443, "help": "HTTPS port (default 9443)"}),
            (("--cert-dir",), {"metavar": "DIR", "help": "directory holding tls.crt and tls.key"}),
            (("--self-signed",), {"action": "store_true", "help": "serve with a generated self-signed cert"}),
            (("--kubeconfig",), {"metavar": "F", "help": "kubeconfig of the cluster to watch"}),
            (("--cluster",), {"metavar": "FILE", "help": "static cluster view from a file, for offline use"}),
        ],
    ),
    "controller": (
        "reconcile the GPUCluster into the DRA stack",
        [
            (("--namespace",), {"default": "gpu-operator", "help": "operator namespace (default gpu-operator)"}),
            (("--kubeconfig",), {"metavar": "F", "help": "kubeconfig of the cluster"}),
        ],
    ),
    "run": (
        "webhook and controller together; with no cluster configured, also the sandbox",
        [(("--kubeconfig-out",), {"metavar": "F", "help": "where to write the sandbox's kubeconfig"})],
    ),
    "sandbox": (
        "a local simulated GPU cluster that kubectl can talk to",
        [
            (("--nodes",), {"type": int, "default": 2, "help": "simulated GPU nodes"}),
            (("--gpus-per-node",), {"type": int, "default": 8, "help": "GPUs on each node"}),
            (("--kubeconfig-out",), {"metavar": "F", "help": "where to write the kubeconfig"}),
        ],
    ),
    "render": (
        "print the operands a GPUCluster reconciles into, as a YAML stream",
        [
            (("-f", "--filename"), {"required": True, "metavar": "FILE", "help": "GPUCluster manifest"}),
            (("--namespace",), {"default": "gpu-operator", "help": "operator namespace"}),
        ],
    ),
    "admit": (
        "answer an AdmissionReview offline, as the webhook would",
        [
            (("-f", "--filename"), {"required": True, "metavar": "FILE", "help": "AdmissionReview JSON"}),
            (("--cluster",), {"metavar": "FILE", "help": "cluster objects the rules read"}),
            (("-o", "--output"), {"choices": ["json"], "default": "json"}),
        ],
    ),
    "match": (
        "evaluate CEL device selectors against ResourceSlices",
        [
            (("-e", "--expression"), {"action": "append", "required": True, "metavar": "EXPR"}),
            (("-f", "--filename"), {"required": True, "metavar": "FILE", "help": "ResourceSlices"}),
            (("-o", "--output"), {"choices": ["json", "table", "summary"], "default": "table"}),
        ],
    ),
    "explain": (
        "say whether claims can be allocated, and why not",
        [
            (("--claim",), {"required": True, "metavar": "FILE"}),
            (("--cluster",), {"required": True, "metavar": "FILE"}),
            (("--node",), {"metavar": "NAME"}),
            (("--kubernetes-version",), {"choices": ["1.34", "1.35", "1.36"], "default": "1.34"}),
            (("-o", "--output"), {"choices": ["json", "text"], "default": "text"}),
        ],
    ),
    "migrate": (
        "rewrite manifests that request nvidia.com/gpu into DRA claims",
        [
            (("-f", "--filename"), {"required": True, "metavar": "FILE|DIR|-"}),
            (("-o", "--output"), {"metavar": "FILE|DIR"}),
            (("--check",), {"action": "store_true", "help": "exit 1 and list what would change"}),
        ],
    ),
    "audit": (
        "list workloads in a live cluster that still request GPUs as extended resources",
        [
            (("--kubeconfig",), {"metavar": "F"}),
            (("-o", "--output"), {"choices": ["table", "json"], "default": "table"}),
        ],
    ),
    "certs": (
        "generate, rotate and inject the webhook's serving certificates",
        [(("action",), {"choices": ["generate", "rotate", "inject"]})],
    ),
}


def _not_implemented(args: argparse.Namespace) -> int:
    print(f"gpucluster {args.command}: not implemented yet", file=sys.stderr)
    return EXIT_USAGE


def register(subparsers: Subparsers, name: str) -> None:
    """Register the planned command ``name`` with its documented flags."""
    help_text, flags = PLANNED[name]
    parser = subparsers.add_parser(name, help=f"{help_text} (not implemented yet)", description=help_text)
    for names, options in flags:
        parser.add_argument(*names, **options)
    parser.set_defaults(func=_not_implemented)
