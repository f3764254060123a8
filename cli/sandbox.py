"""``gpucluster sandbox``: a local API server double with simulated GPU nodes, for kubectl and e2e tests."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpucluster import logs
from gpucluster.cli import Subparsers, options
from gpucluster.errors import EXIT_OK, InputError

if TYPE_CHECKING:
    from gpucluster.sandbox.sim import SimulationOptions


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="run a local simulated GPU cluster (API server double) that kubectl can use",
        description="Start an in-memory Kubernetes API server over HTTPS with N simulated GPU nodes and the "
        "simulated controllers (slice publishing, DaemonSet/Deployment/ReplicaSet pods and status, resourceclaim controller, "
        "scheduler, kubelet), write a kubeconfig for it, and serve until SIGINT/SIGTERM.",
    )
    parser.add_argument("--nodes", type=int, default=3, help="number of simulated GPU nodes (default 3)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument(
        "--model", default="H100", help="GPU model of every node when --mix is not given (default H100)"
    )
    parser.add_argument(
        "--mix",
        help="GPU models round-robin over the nodes: h100, a100, l4, gb200, each optionally -mig (every other "
        "GPU MIG-partitioned) and :<gpus>, e.g. h100,a100-mig,l4:4,gb200:4",
    )
    for name, what in (
        ("slices", "nodes publishing ResourceSlices when the DRA kubelet-plugin DaemonSet selects them"),
        ("workloads", "the DaemonSet, Deployment and ReplicaSet controllers (pods and status)"),
        ("resourceclaims", "the resourceclaim controller (claims from templates)"),
        ("scheduler", "the scheduler (DRA allocation, binding, FailedScheduling events)"),
        ("kubelet", "the kubelet (bound pods become Running)"),
        ("process-pods", "running pods of the gpucluster and registry.k8s.io/kubectl images as local processes"),
        ("jobs", "the Job controller (batch/v1 Jobs create pods)"),
        ("endpoints", "the EndpointSlice controller (Services get the endpoints of the pods they select)"),
    ):
        dest = "no_" + name.replace("-", "_")
        parser.add_argument(f"--no-{name}", dest=dest, action="store_true", help=f"switch off {what}")
    parser.add_argument("--no-simulation", action="store_true", help="switch off every simulated controller")
    parser.add_argument(
        "--kubeconfig-out",
        metavar="F",
        default="sandbox.kubeconfig",
        help="where to write the kubeconfig (default ./sandbox.kubeconfig)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="HTTPS port (default: a free port)")
    parser.add_argument("--kubernetes-version", default="v1.34.2", help="version /version reports (default v1.34.2)")
    parser.add_argument(
        "--image-archive",
        action="append",
        default=[],
        metavar="TAR",
        help="an OCI image archive the nodes hold (make image: dist/gpucluster-image.tar): pods of its image run "
        "from its root filesystem instead of this install (needs root; repeatable)",
    )
    options.add_logging(parser)
    parser.set_defaults(func=run)


MAX_NODES = 65_000


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_format, args.log_level)
    if not 0 <= args.nodes <= MAX_NODES:
        # Registering nodes takes time and memory in proportion: 99999999999 used to hang silently.
        raise InputError(f"--nodes {args.nodes}: must be between 0 and {MAX_NODES:,} (the largest real clusters)")
    if not 0 <= args.gpus_per_node <= 64:
        raise InputError(f"--gpus-per-node {args.gpus_per_node}: must be between 0 and 64")
    if not 0 <= args.port < 65536:
        raise InputError(f"--port {args.port}: must be between 0 and 65535")
    from gpucluster.sandbox.sim.kubelet import parse_mix

    mix = args.mix or args.model
    try:
        parse_mix(mix)
    except ValueError as exc:
        raise InputError(f"--{'mix' if args.mix else 'model'} {mix}: {exc}") from None
    if args.image_archive:
        from gpucluster.sandbox.sim.images import ImageError, ImageStore

        try:
            ImageStore([Path(a) for a in args.image_archive])  # unpacked now, so the nodes start at once
        except ImageError as exc:
            raise InputError(f"--image-archive: {exc}") from None
    return asyncio.run(_serve(args, mix))


def simulation_options(args: argparse.Namespace, mix: str) -> SimulationOptions | None:
    from gpucluster.sandbox.sim import SimulationOptions

    off = bool(args.no_simulation)
    return SimulationOptions(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        mix=mix,
        slices=not (off or args.no_slices),
        workloads=not (off or args.no_workloads),
        resourceclaims=not (off or args.no_resourceclaims),
        scheduler=not (off or args.no_scheduler),
        kubelet=not (off or args.no_kubelet),
        processes=not (off or args.no_process_pods),
        jobs=not (off or args.no_jobs),
        endpoints=not (off or args.no_endpoints),
        image_archives=tuple(Path(a).resolve() for a in getattr(args, "image_archive", [])),
    )


async def _serve(args: argparse.Namespace, mix: str) -> int:
    from gpucluster.sandbox.server import Sandbox

    started = time.monotonic()
    kubeconfig = Path(args.kubeconfig_out).resolve()
    options = simulation_options(args, mix)
    sandbox = Sandbox(
        host=args.host,
        port=args.port,
        git_version=args.kubernetes_version,
        kubeconfig_path=kubeconfig,
        simulate=options,
    )
    try:
        await sandbox.start()
    except OSError as exc:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    elapsed = time.monotonic() - started
    controllers = ", ".join(c.name for c in sandbox.sim.controllers) if sandbox.sim else ""
    print(
        f"sandbox API server: {sandbox.url} ({args.nodes} GPU nodes, {args.gpus_per_node} GPUs each, mix {mix}; up in {elapsed:.2f}s)"
    )
    print(f"kubeconfig: {kubeconfig}")
    print(f"simulated controllers: {controllers or 'none'}")
    print("try:")
    print(f"  export KUBECONFIG={kubeconfig}")
    print("  kubectl get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.count")
    print("  kubectl apply --server-side -f charts/gpucluster/crds/")
    print("  kubectl label nodes --all nvidia.com/gpu.deploy.dra-driver=true   # what the controller does")
    print("  # a DaemonSet named nvidia-dra-driver-kubelet-plugin selecting those nodes -> ResourceSlices")
    print("  kubectl get resourceslices; kubectl get pods,resourceclaims -o wide")
    print("  kubectl describe pod <name>   # FailedScheduling events say why a claim cannot be allocated")
    print("stop with Ctrl-C", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await sandbox.stop()
        with contextlib.suppress(OSError):
            kubeconfig.unlink()
    return EXIT_OK
