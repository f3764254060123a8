"""``gpucluster cluster``: Kubernetes' own control plane on this machine, built from Go modules.

``build`` compiles etcd, kube-apiserver, kube-controller-manager and kube-scheduler with the go
command into ``~/.cache/gpucluster/kube/<version>/``; ``up`` runs them on loopback with simulated
GPU nodes (the kubelet stand-in) and serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from gpucluster.cli import Subparsers
from gpucluster.errors import EXIT_OK, InputError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="build and run the real Kubernetes control plane locally, with simulated GPU nodes",
        description="Build Kubernetes' control plane from Go modules (`cluster build`) and run it on loopback "
        "with simulated GPU nodes (`cluster up`): etcd, kube-apiserver with RBAC and Node authorization, "
        "kube-controller-manager, kube-scheduler and a kubelet stand-in whose nodes publish NVIDIA "
        "ResourceSlices and run pods of the gpucluster image as local processes.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="build|up")
    verbs.required = True
    from gpucluster.sandbox.controlplane.build import DEFAULT_VERSION, VERSIONS

    versions = ", ".join(f"{minor} ({full})" for minor, full in VERSIONS.items())
    b = verbs.add_parser("build", help="build the control plane into the cache (idempotent)")
    b.add_argument("--version", default=DEFAULT_VERSION, help=f"Kubernetes version: {versions}")
    b.set_defaults(func=build)
    u = verbs.add_parser("up", help="start the control plane and simulated GPU nodes; Ctrl-C stops it")
    u.add_argument("--version", default=DEFAULT_VERSION, help=f"Kubernetes version: {versions}")
    u.add_argument("--nodes", type=int, default=3, help="simulated GPU nodes (default 3)")
    u.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    u.add_argument("--mix", default="h100", help="GPU models round-robin, e.g. h100,a100-mig,l4:4,gb200")
    u.add_argument(
        "--feature-gates", default="", metavar="G=bool,...", help="feature gates for every control-plane component"
    )
    u.add_argument("--build", action="store_true", help="build the control plane first when it is not built")
    u.add_argument(
        "--kubeconfig-out",
        metavar="F",
        default="kube.kubeconfig",
        help="the admin's kubeconfig (default ./kube.kubeconfig)",
    )
    u.add_argument("--workdir", metavar="DIR", help="state, certificates, per-identity kubeconfigs and logs")
    u.set_defaults(func=up)


def parse_gates(text: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.lower() not in ("true", "false") or not name:
            raise InputError(f"--feature-gates {item!r}: expected Name=true or Name=false")
        gates[name] = value.lower() == "true"
    return gates


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build(args: argparse.Namespace) -> int:
    from gpucluster.sandbox.controlplane import build as builder

    try:
        binaries = builder.build(args.version, say=_say)
    except builder.BuildError as exc:
        raise InputError(str(exc)) from None
    print(binaries.directory)
    return EXIT_OK


def up(args: argparse.Namespace) -> int:
    from gpucluster.sandbox.controlplane import build as builder
    from gpucluster.sandbox.controlplane.cluster import (
        ClusterOptions,
        ControlPlane,
        ControlPlaneError,
        run_until_signal,
    )
    from gpucluster.sandbox.sim.kubelet import parse_mix

    if not 0 < args.nodes <= 500:
        raise InputError(f"--nodes {args.nodes}: must be between 1 and 500")
    if not 0 < args.gpus_per_node <= 64:
        raise InputError(f"--gpus-per-node {args.gpus_per_node}: must be between 1 and 64")
    try:
        parse_mix(args.mix)
        builder.resolve_version(args.version)
    except (ValueError, builder.BuildError) as exc:
        raise InputError(str(exc)) from None
    gates = parse_gates(args.feature_gates)
    out = Path(args.kubeconfig_out)
    if not out.parent.is_dir():
        raise InputError(f"--kubeconfig-out {out}: no such directory {out.parent}")
    if args.workdir and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        raise InputError(f"--workdir {args.workdir}: not a directory")
    if args.build:
        try:
            builder.build(args.version, say=_say)
        except builder.BuildError as exc:
            raise InputError(str(exc)) from None
    options = ClusterOptions(
        version=args.version, nodes=args.nodes, gpus_per_node=args.gpus_per_node, mix=args.mix,
        feature_gates=gates, workdir=Path(args.workdir) if args.workdir else None,
    )  # fmt: skip
    plane = ControlPlane(options, say=_say)
    try:
        plane.up()
    except ControlPlaneError as exc:
        raise InputError(str(exc)) from None
    shutil.copyfile(plane.admin_kubeconfig, out)
    out.chmod(0o600)
    run_until_signal(
        plane,
        [
            f"Kubernetes {plane.version} at {plane.server}, {len(plane.node_names)} GPU nodes",
            f"export KUBECONFIG={out.resolve()}",
            f"identities and logs: {plane.workdir}",
            "kubectl get nodes; Ctrl-C stops the control plane",
        ],
    )
    return EXIT_OK
