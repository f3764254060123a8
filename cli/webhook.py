"""``gpucluster webhook``: serve the admission webhook over HTTPS."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import resource
import tempfile
from dataclasses import replace
from pathlib import Path

from gpucluster import logs
from gpucluster.certs.authority import new_ca, new_serving_cert, service_dns_names
from gpucluster.cli import Subparsers, options
from gpucluster.clusterstate import ClusterState
from gpucluster.dra import gates, worker
from gpucluster.dra.model import SUPPORTED_VERSIONS, AllocatorInputError
from gpucluster.errors import EXIT_OK, InputError
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.reflector import run_reflectors
from gpucluster.manifests import load_objects
from gpucluster.policy import TRANSLATION_MODES, Settings
from gpucluster.webhook import feasibility
from gpucluster.webhook.clientauth import (
    DEFAULT_ALLOWED_NAMES,
    ClientAuthError,
    load_ca_bundle,
    parse_allowed_names,
    protect,
)
from gpucluster.webhook.expiry import ExpiryReporter
from gpucluster.webhook.server import ServerLimits, build_app, default_host, serve
from gpucluster.webhook.tls import DEFAULT_EXPIRY_MARGIN, DEFAULT_POLL_INTERVAL, ReloadingTLS

log = logging.getLogger("gpucluster.webhook")

# What the rules read: the GPU management models, DeviceClasses and slices for claim checks,
# namespaces for opt-outs and the admin-access label.
WEBHOOK_KINDS = [
    "Namespace", "ClusterPolicy", "GPUCluster", "NVIDIADriver", "DeviceClass", "ResourceSlice", "ResourceClaimTemplate",
]  # fmt: skip


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "webhook",
        help="serve the validating and mutating admission webhook over HTTPS",
        description="Serve /validate, /mutate, /healthz, /readyz and /metrics over HTTPS (TLS 1.2+).",
    )
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default $GPUCLUSTER_BIND_ADDRESS when set, else 0.0.0.0)",
    )
    parser.add_argument("--port", type=int, default=9443, help="HTTPS port of the reviews (default 9443)")
    parser.add_argument(
        "--health-port",
        type=int,
        default=None,
        metavar="P",
        help="also serve /healthz, /readyz and /metrics over HTTPS on port P, never asking for a client "
        "certificate and never serving reviews (needed with --client-ca-file: kubelet probes present none)",
    )
    certs = parser.add_mutually_exclusive_group()
    certs.add_argument("--cert-dir", metavar="DIR", help="directory with tls.crt and tls.key, reloaded on change")
    certs.add_argument(
        "--self-signed", action="store_true", help="generate a CA and serving certificate in a temporary directory"
    )
    source = parser.add_mutually_exclusive_group()
    options.add_kubeconfig(source)
    source.add_argument("--cluster", metavar="FILE", help="static cluster view from a file, for offline use")
    parser.add_argument("--translation-mode", choices=TRANSLATION_MODES, default="auto")
    parser.add_argument("--operator-namespace", default=os.environ.get("OPERATOR_NAMESPACE", "gpu-operator"))
    parser.add_argument("--service-name", default="gpucluster-webhook", help="Service name in the certificate SANs")
    parser.add_argument(
        "--shutdown-delay",
        type=options.finite,
        default=5.0,
        help="seconds /readyz reports 503 before the listener closes on SIGTERM (default 5)",
    )
    parser.add_argument(
        "--client-ca-file",
        metavar="F",
        help="PEM CA bundle: the review port's TLS handshake requires a client certificate it verifies "
        "(kube-apiserver presents one when its AdmissionConfiguration kubeConfigFile says so); needs --health-port",
    )
    parser.add_argument(
        "--client-allowed-names",
        metavar="NAMES",
        default=",".join(DEFAULT_ALLOWED_NAMES),
        help="comma-separated common names a client certificate may have, like kube-apiserver's "
        "--requestheader-allowed-names; '' allows any certificate the CA verifies "
        f"(default {','.join(DEFAULT_ALLOWED_NAMES)})",
    )
    limits = ServerLimits()
    server = parser.add_argument_group("connections (defaults are kube-apiserver's)")
    server.add_argument(
        "--read-header-timeout",
        type=options.positive_seconds,
        default=limits.read_header_timeout,
        metavar="S",
        help="close a connection whose request header (or TLS handshake) is not complete "
        f"within S seconds (default {limits.read_header_timeout:g})",
    )
    server.add_argument(
        "--read-body-timeout",
        type=options.positive_seconds,
        default=limits.read_body_timeout,
        metavar="S",
        help=f"answer 408 and close when a body takes longer (default {limits.read_body_timeout:g})",
    )
    server.add_argument(
        "--idle-timeout",
        type=options.positive_seconds,
        default=limits.idle_timeout,
        metavar="S",
        help=f"close keep-alive connections idle this long (default {limits.idle_timeout:g})",
    )
    server.add_argument(
        "--max-connections",
        type=int,
        default=limits.max_connections,
        metavar="N",
        help="connections held at most; when full the least busy one is closed to make room, and a new one "
        f"is refused (closed) only while all are answering (default {limits.max_connections})",
    )
    server.add_argument(
        "--max-connections-per-peer",
        type=int,
        default=limits.max_connections_per_peer,
        metavar="N",
        help="connections one peer address may hold; at the cap its own least busy connection makes room "
        f"(default {limits.max_connections_per_peer})",
    )
    server.add_argument(
        "--first-byte-timeout",
        type=options.positive_seconds,
        default=limits.first_byte_timeout,
        metavar="S",
        help="close a connection that has not finished its TLS handshake and sent the first byte of a request "
        f"within S seconds of connecting (default {limits.first_byte_timeout:g})",
    )
    server.add_argument(
        "--feasibility-processes",
        type=int,
        default=None,
        metavar="N",
        help="allocator processes per lane (two lanes) for claim reviews, each started on first use "
        "(default: the CPUs the container may use, its affinity mask and CFS quota, "
        f"at most {feasibility.MAX_DEFAULT_PROCESSES})",
    )
    server.add_argument(
        "--feasibility-deadline",
        type=options.positive_seconds,
        default=worker.DEFAULT_DEADLINE,
        metavar="S",
        help="give up the claim feasibility check after S seconds and warn that it was cut short "
        f"(default {worker.DEFAULT_DEADLINE:g})",
    )
    rotation = parser.add_argument_group("serving certificate")
    rotation.add_argument(
        "--cert-poll-interval",
        type=options.positive_seconds,
        default=DEFAULT_POLL_INTERVAL,
        metavar="S",
        help=f"look for a new tls.crt/tls.key every S seconds (default {DEFAULT_POLL_INTERVAL:g})",
    )
    rotation.add_argument(
        "--cert-expiry-margin",
        type=options.positive_seconds,
        default=DEFAULT_EXPIRY_MARGIN,
        metavar="S",
        help="log an error (again hourly), send a Warning event and set the GPUCluster condition "
        "WebhookCertificateValid=False when the serving certificate expires within S seconds; a new pair that "
        "does is not loaded over a good one. /readyz fails only once the certificate cannot be served "
        f"(expired, not yet valid, not for the Service) (default {DEFAULT_EXPIRY_MARGIN:g})",
    )
    rotation.add_argument(
        "--cert-dns-names",
        metavar="NAMES",
        default=None,
        help="comma-separated names the certificate must cover, or '' for no check "
        "(default <service-name>.<operator-namespace>.svc)",
    )
    dra = parser.add_argument_group("claim feasibility check")
    dra.add_argument(
        "--kubernetes-version",
        choices=SUPPORTED_VERSIONS,
        default=None,
        help="allocator semantics to follow (default: the server's, from /version; 1.34 with --cluster)",
    )
    dra.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        default="",
        help=f"DRA feature gates of the cluster (default: Kubernetes' for the version): {', '.join(gates.GATES)}",
    )
    options.add_logging(parser)
    parser.set_defaults(func=run)


def feature_gates(text: str, version: str) -> tuple[tuple[str, bool], ...]:
    """``--feature-gates`` checked against ``version``, as :class:`Settings` holds it."""
    try:
        return tuple(sorted(gates.setting(text, version).items()))
    except AllocatorInputError as exc:
        raise InputError(f"--feature-gates: {exc}") from None


async def server_version(kube: Kube) -> str:
    """The allocator version of the server (``/version``); 1.34 when it cannot be read."""
    try:
        return gates.supported_version(await kube.get("/version"))
    except (KubeError, OSError) as exc:
        log.warning("cannot read the server version, following Kubernetes 1.34 error=%s", exc)
        return "1.34"


def self_signed_dir(service: str, namespace: str) -> Path:
    """Write a fresh CA and serving pair into a private temporary directory."""
    directory = Path(tempfile.mkdtemp(prefix="gpucluster-webhook-"))
    ca = new_ca()
    names = [*service_dns_names(service, namespace), "localhost"]
    pair = new_serving_cert(ca, names, ip_addresses=["127.0.0.1", "::1"])
    for name, data in (("ca.crt", ca.cert_pem), ("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600 if name.endswith(".key") else 0o644)
    return directory


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_format, args.log_level)
    if not 0 < args.port < 65536:
        raise InputError(f"--port {args.port}: must be between 1 and 65535")
    if args.cert_dir:
        cert_dir = Path(args.cert_dir)
        for name in ("tls.crt", "tls.key"):
            if not (cert_dir / name).is_file():
                raise InputError(f"{cert_dir / name}: no such file (--cert-dir needs tls.crt and tls.key)")
    elif args.self_signed:
        cert_dir = self_signed_dir(args.service_name, args.operator_namespace)
        print(f"self-signed CA: {cert_dir / 'ca.crt'}", flush=True)
    else:
        raise InputError("give --cert-dir DIR or --self-signed")
    static = ClusterState.from_objects(load_objects(args.cluster)) if args.cluster else None
    settings = Settings(translation_mode=args.translation_mode, operator_namespace=args.operator_namespace)
    # Checked now against the version given (or the one assumed until the server answers), and
    # again against the server's version once it is known.
    version = args.kubernetes_version or "1.34"
    settings = replace(settings, kubernetes_version=version, feature_gates=feature_gates(args.feature_gates, version))
    try:
        args.client_ca = load_ca_bundle(Path(args.client_ca_file)) if args.client_ca_file else None
    except ClientAuthError as exc:
        raise InputError(f"--client-ca-file {exc}") from None
    if args.client_ca and args.health_port is None:
        raise InputError("--client-ca-file needs --health-port: kubelet probes present no client certificate")
    if args.health_port is not None and not (0 < args.health_port < 65536 and args.health_port != args.port):
        raise InputError(f"--health-port {args.health_port}: must be between 1 and 65535 and not --port")
    args.allowed_names = parse_allowed_names(args.client_allowed_names)
    for name, value in (
        ("--max-connections", args.max_connections),
        ("--max-connections-per-peer", args.max_connections_per_peer),
    ):
        if value < 1:
            raise InputError(f"{name} {value}: must be at least 1")
    if args.feasibility_processes is not None and args.feasibility_processes < 1:
        raise InputError(f"--feasibility-processes {args.feasibility_processes}: must be at least 1")
    names = (
        [f"{args.service_name}.{args.operator_namespace}.svc"]
        if args.cert_dns_names is None
        else [n.strip() for n in args.cert_dns_names.split(",") if n.strip()]
    )
    tls = ReloadingTLS(
        cert_dir / "tls.crt", cert_dir / "tls.key", poll_interval=args.cert_poll_interval,
        required_names=names, expiry_margin=args.cert_expiry_margin,
    )  # fmt: skip
    args.limits = ServerLimits(
        read_header_timeout=args.read_header_timeout, read_body_timeout=args.read_body_timeout,
        idle_timeout=args.idle_timeout, max_connections=args.max_connections,
        max_connections_per_peer=args.max_connections_per_peer, first_byte_timeout=args.first_byte_timeout,
    )  # fmt: skip
    pool = feasibility.configure(deadline=args.feasibility_deadline, processes=args.feasibility_processes)
    log.info("claim feasibility lanes processes=%d each, started on first use", pool.processes)
    _raise_open_files_limit()
    tls.reload_if_changed()
    if not tls.loaded:
        raise InputError(f"{cert_dir}: tls.crt and tls.key do not form a valid certificate and key pair")
    # Everything imported so far lives as long as the process: keep it out of the collector's
    # way, so that collections triggered by per-review garbage stay cheap.
    gc.collect()
    gc.freeze()
    args.host = args.host or default_host()
    try:
        asyncio.run(_serve(args, tls, settings, static))
    except OSError as exc:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return EXIT_OK


async def _serve(args: argparse.Namespace, tls: ReloadingTLS, settings: Settings, static: ClusterState | None) -> None:
    if static is not None:
        _log_gates(settings)
        app = build_app(static, settings, tls=tls, limits=args.limits)
        protect(app, tls, args.client_ca, args.allowed_names)
        await serve(
            app, tls, host=args.host, port=args.port, shutdown_delay=args.shutdown_delay, health_port=args.health_port
        )
        return
    kube = await Kube.connect(args.kubeconfig)
    try:
        if args.kubernetes_version is None:
            version = await server_version(kube)
            settings = replace(
                settings, kubernetes_version=version, feature_gates=feature_gates(args.feature_gates, version)
            )
        _log_gates(settings)
        cluster = ClusterState()
        reflectors = asyncio.create_task(run_reflectors(kube, cluster, WEBHOOK_KINDS))
        expiry = asyncio.create_task(ExpiryReporter(kube, cluster, tls).run(args.cert_poll_interval))
        try:
            app = build_app(cluster, settings, tls=tls, limits=args.limits)
            protect(app, tls, args.client_ca, args.allowed_names)
            await serve(
                app, tls, host=args.host, port=args.port, shutdown_delay=args.shutdown_delay,
                health_port=args.health_port,
            )  # fmt: skip
        finally:
            reflectors.cancel()
            expiry.cancel()
    finally:
        await kube.close()


def _raise_open_files_limit() -> None:
    """Every connection is a file descriptor: lift the soft limit to the hard one, as Go's runtime does."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20), hard)
            )
    except (ValueError, OSError) as exc:
        log.debug("open files limit unchanged error=%s", exc)


def _log_gates(settings: Settings) -> None:
    effective = gates.resolve(settings.kubernetes_version, dict(settings.feature_gates))
    log.info(
        "claim checks follow kubernetesVersion=%s featureGates=%s",
        settings.kubernetes_version,
        ",".join(f"{name}={str(on).lower()}" for name, on in sorted(effective.items())),
    )
