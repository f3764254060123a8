"""``gpucluster explain``: can these claims be allocated, where, and why not.

``explain --claim FILE --cluster FILE`` reads files; ``explain pod/NAME``, ``explain claim/NAME``
and ``explain -f FILE`` (no ``--cluster``) read the configured cluster through the API
(:mod:`gpucluster.cli.explain_live`, imported only then). Either way the structured allocator
of kube-scheduler (:mod:`gpucluster.dra.allocator`) runs over every node. Exit 0 when the claims
fit on some node, 1 when they do not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpucluster.cli import Subparsers, options
from gpucluster.dra import gates
from gpucluster.dra.allocator import AllocatorInputError, explain
from gpucluster.dra.model import SUPPORTED_VERSIONS
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, InputError
from gpucluster.manifests import dump_yaml, load_objects

_CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="explain whether ResourceClaims can be allocated, node by node",
        description=(
            "Allocate the claims of --claim together on each node of --cluster (ResourceSlices, "
            "DeviceClasses, Nodes and allocated ResourceClaims) the way kube-scheduler's structured "
            "allocator does, and explain for every request which devices were considered and why each "
            "rejected device could not be used. Without --cluster, read the configured cluster "
            "(--kubeconfig, else in-cluster, else $KUBECONFIG or ~/.kube/config): pod/NAME explains the "
            "pod's claims on the nodes its nodeSelector and affinity allow, claim/NAME one claim, -f FILE "
            "the claims of a file. Exit 0 satisfiable, 1 not satisfiable, 2 bad input."
        ),
    )
    parser.add_argument(
        "target", nargs="?", metavar="pod/NAME|claim/NAME", help="a pod or ResourceClaim of the cluster"
    )
    parser.add_argument(
        "-f",
        "--claim",
        metavar="FILE",
        help="ResourceClaims or ResourceClaimTemplates, allocated together (YAML/JSON, - for stdin)",
    )
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help="ResourceSlices, DeviceClasses, Nodes and allocated ResourceClaims (YAML/JSON stream or List); "
        "without it, the configured cluster is read",
    )
    parser.add_argument("-n", "--namespace", help="namespace of pod/NAME, claim/NAME (default: the context's)")
    options.add_kubeconfig(parser)
    parser.add_argument("--node", metavar="NAME", help="explain only this node")
    parser.add_argument(
        "--kubernetes-version",
        choices=SUPPORTED_VERSIONS,
        default=None,
        help="allocator semantics to follow (default: the cluster's; 1.34 for files)",
    )
    parser.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        default="",
        help=f"DRA feature gates of the cluster (default: Kubernetes' for the version): {', '.join(gates.GATES)}",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=["text", "wide", "json", "yaml"],
        default="text",
        help="text (default: the first 10 rejected devices per request of a node that does not fit), "
        "wide (every rejected device, on the nodes that fit too), json or yaml",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.target is not None and args.claim is not None:
        raise InputError(f"give {args.target} or -f FILE, not both")
    if args.cluster is not None and args.target is not None:
        if "/" not in args.target or Path(args.target).exists():  # a file given where pod/NAME goes
            raise InputError(
                f"{args.target}: give a file with --claim FILE (-f FILE); pod/NAME and claim/NAME are read from a cluster"
            )
        raise InputError(f"{args.target} is read from the cluster: give --claim FILE with --cluster, or drop --cluster")
    if args.target is None and args.claim is None:
        raise InputError("nothing to explain: give pod/NAME, claim/NAME or -f FILE (with --cluster FILE for files)")
    if args.claim == "-" and args.cluster == "-":
        raise InputError("--claim and --cluster cannot both read stdin")
    claims: list[dict[str, Any]] = []
    if args.claim is not None:
        objects = load_objects(args.claim)
        claims = [o for o in objects if o.get("kind") in _CLAIM_KINDS]
        if not claims:
            raise InputError(f"{_name(args.claim)}: no ResourceClaim or ResourceClaimTemplate found")
    restricted = False
    if args.cluster is not None:
        cluster = load_objects(args.cluster)
        version = args.kubernetes_version or "1.34"
    else:
        import asyncio

        from gpucluster.cli import explain_live

        live = asyncio.run(
            explain_live.read(
                kubeconfig=args.kubeconfig,
                namespace=args.namespace,
                target=args.target,
                claim_objects=claims or None,
            )
        )
        claims, cluster, restricted = live.claims, live.cluster, live.restricted
        version = args.kubernetes_version or live.kubernetes_version
        for note in live.notes:
            print(f"gpucluster explain: {live.subject}: {note}", file=sys.stderr)
    try:
        feature_gates = gates.parse(args.feature_gates)
        gates.resolve(version, feature_gates)
    except AllocatorInputError as exc:
        raise InputError(f"--feature-gates: {exc}") from None
    if not claims:  # the library allocates nothing then (as upstream does); the command has nothing to say
        raise InputError(
            f"{_name(args.claim) if args.claim else args.target}: no ResourceClaim or ResourceClaimTemplate to explain"
        )
    try:
        result = explain(claims, cluster, node=args.node, kubernetes_version=version, feature_gates=feature_gates)
    except AllocatorInputError as exc:
        if exc.source == "claims":
            raise InputError(f"{_name(args.claim) if args.claim else args.target}: {exc}") from None
        if exc.source == "cluster":
            raise InputError(f"{_name(args.cluster) if args.cluster else 'the cluster'}: {exc}") from None
        raise InputError(str(exc)) from None
    if restricted and not result.nodes:
        result.errors = ["no node matches the pod's nodeName, nodeSelector and node affinity"]
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2))
    elif args.output == "yaml":
        sys.stdout.write(dump_yaml(result.to_json()))
    else:
        print(result.to_text(wide=args.output == "wide"), end="")
    return EXIT_OK if result.satisfiable else EXIT_NEGATIVE


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else path
