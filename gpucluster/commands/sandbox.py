"""``gpucluster sandbox``: a local API server double with simulated GPU nodes, for kubectl and e2e tests."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from pathlib import Path

from gpucluster import logs
from gpucluster.commands import Subparsers
from gpucluster.errors import EXIT_OK, InputError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="run a local simulated GPU cluster (API server double) that kubectl can use",
        description="Start an in-memory Kubernetes API server over HTTPS with N simulated GPU nodes, "
        "write a kubeconfig for it, and serve until SIGINT/SIGTERM.",
    )
    parser.add_argument("--nodes", type=int, default=3, help="number of simulated GPU nodes (default 3)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--model", default="H100", help="GPU model of the nodes (default H100)")
    parser.add_argument(
        "--kubeconfig-out",
        metavar="F",
        default="sandbox.kubeconfig",
        help="where to write the kubeconfig (default ./sandbox.kubeconfig)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="HTTPS port (default: a free port)")
    parser.add_argument("--kubernetes-version", default="v1.34.2", help="version /version reports (default v1.34.2)")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--log-level", default="info")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_format, args.log_level)
    if args.nodes < 0:
        raise InputError(f"--nodes {args.nodes}: must not be negative")
    if not 0 <= args.gpus_per_node <= 64:
        raise InputError(f"--gpus-per-node {args.gpus_per_node}: must be between 0 and 64")
    if not 0 <= args.port < 65536:
        raise InputError(f"--port {args.port}: must be between 0 and 65535")
    from gpucluster.dra.simulate import node_object

    try:
        node_object("probe", args.model, 1)
    except (KeyError, ValueError) as exc:
        raise InputError(f"--model {args.model}: {exc}") from None
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from gpucluster.dra.simulate import node_name, node_object
    from sandbox.apiserver.core import Context
    from sandbox.server import Sandbox

    started = time.monotonic()
    kubeconfig = Path(args.kubeconfig_out).resolve()
    sandbox = Sandbox(host=args.host, port=args.port, git_version=args.kubernetes_version, kubeconfig_path=kubeconfig)
    try:
        await sandbox.start()
    except OSError as exc:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    nodes = sandbox.registry.get("", "v1", "nodes")
    assert nodes is not None
    ctx = Context(field_manager="sandbox-kubelet")
    for i in range(args.nodes):
        await sandbox.core.create(nodes, "", node_object(node_name(i), args.model, args.gpus_per_node), ctx)
    elapsed = time.monotonic() - started
    print(
        f"sandbox API server: {sandbox.url} ({args.nodes} GPU nodes, {args.gpus_per_node} x {args.model} each; up in {elapsed:.2f}s)"
    )
    print(f"kubeconfig: {kubeconfig}")
    print("try:")
    print(f"  export KUBECONFIG={kubeconfig}")
    print("  kubectl get nodes")
    print("  kubectl apply --server-side -f charts/gpucluster/crds/")
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
