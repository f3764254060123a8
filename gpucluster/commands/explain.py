"""``gpucluster explain --claim FILE --cluster FILE``: can these claims be allocated, where, and why not.

Runs the structured allocator of kube-scheduler (:mod:`gpucluster.dra.allocator`) over every node of
the cluster file. Exit 0 when the claims fit on some node, 1 when they do not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpucluster.commands import Subparsers
from gpucluster.dra import gates
from gpucluster.dra.allocator import AllocatorInputError, explain
from gpucluster.dra.model import SUPPORTED_VERSIONS
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, InputError
from gpucluster.manifests import load_objects

_CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain whether ResourceClaims can be allocated, node by node",
        description=(
            "Allocate the claims of --claim together on each node of --cluster (ResourceSlices, "
            "DeviceClasses, Nodes and allocated ResourceClaims) the way kube-scheduler's structured "
            "allocator does, and explain for every request which devices were considered and why each "
            "rejected device could not be used. Exit 0 satisfiable, 1 not satisfiable, 2 bad input."
        ),
    )
    parser.add_argument(
        "--claim",
        required=True,
        metavar="FILE",
        help="ResourceClaims or ResourceClaimTemplates, allocated together (YAML/JSON, - for stdin)",
    )
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="FILE",
        help="ResourceSlices, DeviceClasses, Nodes and allocated ResourceClaims (YAML/JSON stream or List)",
    )
    parser.add_argument("--node", metavar="NAME", help="explain only this node")
    parser.add_argument(
        "--kubernetes-version",
        choices=SUPPORTED_VERSIONS,
        default="1.34",
        help="allocator semantics to follow (default 1.34)",
    )
    parser.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        default="",
        help=f"DRA feature gates of the cluster (default: Kubernetes' for the version): {', '.join(gates.GATES)}",
    )
    parser.add_argument("-o", "--output", choices=["json", "text"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.claim == "-" and args.cluster == "-":
        raise InputError("--claim and --cluster cannot both read stdin")
    objects = load_objects(args.claim)
    claims: list[dict[str, Any]] = [o for o in objects if o.get("kind") in _CLAIM_KINDS]
    if not claims:
        raise InputError(f"{_name(args.claim)}: no ResourceClaim or ResourceClaimTemplate found")
    cluster = load_objects(args.cluster)
    try:
        feature_gates = gates.parse(args.feature_gates)
        gates.resolve(args.kubernetes_version, feature_gates)
    except AllocatorInputError as exc:
        raise InputError(f"--feature-gates: {exc}") from None
    try:
        result = explain(
            claims, cluster, node=args.node, kubernetes_version=args.kubernetes_version, feature_gates=feature_gates
        )
    except AllocatorInputError as exc:
        if exc.source == "claims":
            raise InputError(f"{_name(args.claim)}: {exc}") from None
        if exc.source == "cluster":
            raise InputError(f"{_name(args.cluster)}: {exc}") from None
        raise InputError(str(exc)) from None
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.to_text(), end="")
    return EXIT_OK if result.satisfiable else EXIT_NEGATIVE


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else path
