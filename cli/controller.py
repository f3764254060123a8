"""``gpucluster controller``: reconcile the GPUCluster into the DRA stack."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
from typing import Any

from gpucluster import logs
from gpucluster.cli import Subparsers, options
from gpucluster.controller.runtime import DEFAULT_NODE_WORKERS, run_controller
from gpucluster.dra import gates
from gpucluster.dra.model import AllocatorInputError
from gpucluster.errors import EXIT_OK, InputError
from gpucluster.kube.client import Kube, KubeError

log = logging.getLogger("gpucluster.controller")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="reconcile the GPUCluster into the DRA stack",
        description=(
            "Watch the GPUCluster singleton and reconcile it into its operands (DRA driver, DCGM, DCGM Exporter, "
            "DRA validator), label GPU nodes, and report status. Replicas elect a leader through a Lease."
        ),
    )
    options.add_operator_namespace(parser)
    options.add_kubeconfig(parser)
    parser.add_argument("--health-port", type=int, default=8081, help="port of /healthz, /readyz, /metrics")
    parser.add_argument("--no-leader-election", action="store_true", help="reconcile without holding the Lease")
    parser.add_argument(
        "--claim-template-grace-period",
        type=options.finite,
        default=600.0,
        metavar="SECONDS",
        help="keep a ResourceClaimTemplate created for translated pods this long after no pod refers to it (600)",
    )
    parser.add_argument(
        "--delete-stranded-pods",
        action="store_true",
        help="delete controller-owned pods admitted untranslated while the webhook was down, so they are recreated",
    )
    parser.add_argument(
        "--kube-api-qps",
        type=options.finite,
        default=-1.0,
        metavar="QPS",
        help="client-side limit of requests to the API server a second, as client-go's QPS: 0 takes client-go's "
        "default (5), a negative value none (default: none, as controller-runtime's: the API server's priority "
        "and fairness limits clients; 65,000 nodes are labelled at about 1,000 writes a second)",
    )
    parser.add_argument(
        "--kube-api-burst",
        type=int,
        default=0,
        metavar="N",
        help="requests at once above --kube-api-qps, as client-go's Burst (default 0: client-go's 10)",
    )
    parser.add_argument(
        "--node-workers",
        type=int,
        default=DEFAULT_NODE_WORKERS,
        metavar="N",
        help=f"nodes labelled at once: the label writes in flight (default {DEFAULT_NODE_WORKERS})",
    )
    parser.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        default="",
        help="DRA feature gates of the cluster, for explaining pending pods "
        "(default: Kubernetes' for the server's version, from /version)",
    )
    options.add_logging(parser)
    parser.set_defaults(func=run)


async def _main(args: argparse.Namespace) -> None:
    kube = await Kube.connect(args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst)
    try:
        options = await allocator_options(kube, args.feature_gates)
    except BaseException:
        await kube.close()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await run_controller(
            kube, args.namespace, dict(os.environ), stop,
            health_port=args.health_port, leader_election=not args.no_leader_election,
            template_grace_period=args.claim_template_grace_period, delete_stranded_pods=args.delete_stranded_pods,
            allocator_options=options, node_workers=args.node_workers,
        )  # fmt: skip
    finally:
        await kube.close()


async def allocator_options(kube: Kube, text: str) -> dict[str, Any]:
    """The server's allocator version (``/version``; 1.34 when unreadable) and ``--feature-gates``
    checked against it: what pending pods are explained with."""
    try:
        version = gates.supported_version(await kube.get("/version"))
    except (KubeError, OSError) as exc:
        log.warning("cannot read the server version, explaining with Kubernetes 1.34 error=%s", exc)
        version = "1.34"
    try:
        overrides = gates.setting(text, version)
    except AllocatorInputError as exc:
        raise InputError(f"--feature-gates: {exc}") from None
    effective = gates.resolve(version, overrides)
    log.info(
        "pending pods are explained with kubernetesVersion=%s featureGates=%s",
        version,
        ",".join(f"{name}={str(on).lower()}" for name, on in sorted(effective.items())),
    )
    return {"kubernetes_version": version, "feature_gates": overrides}


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_format, args.log_level)
    if args.feature_gates:
        try:
            gates.parse(args.feature_gates)  # malformed before connecting; versions once connected
        except AllocatorInputError as exc:
            raise InputError(f"--feature-gates: {exc}") from None
    if args.node_workers < 1:
        raise InputError(f"--node-workers {args.node_workers}: must be at least 1")
    if args.kube_api_burst < 0:
        raise InputError(f"--kube-api-burst {args.kube_api_burst}: must not be negative")
    if args.claim_template_grace_period < 0:
        raise InputError(f"--claim-template-grace-period {args.claim_template_grace_period}: must not be negative")
    gc.collect()
    gc.freeze()
    asyncio.run(_main(args))
    return EXIT_OK
