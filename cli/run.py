"""``gpucluster run``: the webhook and the controller; with no cluster configured, also the sandbox.

No cluster configured (no ``--kubeconfig``, no ``$KUBECONFIG``, no ``~/.kube/config``, not in a
pod): start the sandbox API server with its simulated GPU nodes, install the CRDs the chart ships
plus minimal ClusterPolicy and NVIDIADriver CRDs (so every admission rule can be tried), create the
operator namespace, serve the webhook in-process with a freshly generated CA, register it through
real Mutating/ValidatingWebhookConfigurations (``clientConfig.service`` with the CA as
``caBundle``; the sandbox routes the service to the local port), and run the controller.

Against a configured cluster: only the webhook (``--cert-dir`` or a self-signed pair; registered
only when ``--webhook-url`` says where the API server can reach it, otherwise the chart does it)
and the controller.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from gpucluster import logs
from gpucluster.chart import chart_dir, operand_images
from gpucluster.cli import Subparsers, options
from gpucluster.clusterstate import ClusterState
from gpucluster.errors import EXIT_OK, InputError
from gpucluster.kube.client import Kube, KubeError

log = logging.getLogger("gpucluster.run")

SERVICE = "gpucluster-webhook"
CHART_CRDS = chart_dir() / "crds"


def _crd(group: str, version: str, kind: str, plural: str, short: list[str]) -> dict[str, Any]:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Status", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                }
            ],
        },
    }


# Minimal stand-ins for the GPU Operator's device-plugin model CRDs: enough to create the objects
# the admission rules look at (upstream's schemas are far larger).
CLUSTERPOLICY_CRD = _crd("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies", [])
NVIDIADRIVER_CRD = _crd("nvidia.com", "v1alpha1", "NVIDIADriver", "nvidiadrivers", ["nvd", "nvdriver", "nvdrivers"])


def chart_crds() -> list[dict[str, Any]]:
    """The CRDs the chart ships (generated from the models when the chart is not beside the code)."""
    out: list[dict[str, Any]] = []
    if CHART_CRDS.is_dir():
        for path in sorted(CHART_CRDS.glob("*.yaml")):
            out.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    if not out:
        from gpucluster.api.crd import gpucluster_crd

        out.append(gpucluster_crd())
    return out


def chart_env() -> dict[str, str]:
    """The operator environment the chart's defaults give (operand images), plus
    ``DEFAULT_GPU_ALLOCATION_MODE=dra`` so that the sandbox's GPU nodes get the DRA deploy labels."""
    return {"DEFAULT_GPU_ALLOCATION_MODE": "dra", **operand_images()}


def cluster_configured(kubeconfig: str | None) -> bool:
    """Whether a cluster is configured, the way the client would find one."""
    if kubeconfig:
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    if os.environ.get("KUBECONFIG"):
        return True
    return (Path.home() / ".kube" / "config").is_file()


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="webhook and controller; with no cluster configured, also a local sandbox cluster",
        description="Run the admission webhook and the controller against the configured cluster; when no "
        "cluster is configured, start the sandbox (simulated GPU nodes) first, install the CRDs and register "
        "the webhook there. Runs until SIGINT/SIGTERM.",
    )
    options.add_kubeconfig(parser, default=options.KUBECONFIG_DEFAULT + "; with none of them, the embedded sandbox")
    parser.add_argument(
        "--kubeconfig-out",
        metavar="F",
        default="sandbox.kubeconfig",
        help="sandbox only: where to write its kubeconfig (default ./sandbox.kubeconfig)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="sandbox only: the API server's HTTPS port (default: a free one)"
    )
    options.add_operator_namespace(parser)
    parser.add_argument("--nodes", type=int, default=3, help="sandbox only: simulated GPU nodes (default 3)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="sandbox only: GPUs per node (default 8)")
    parser.add_argument(
        "--mix", default="h100", help="sandbox only: GPU models round-robin, e.g. h100,a100-mig,l4:4,gb200"
    )
    parser.add_argument("--webhook-host", default=None, help="listen address (default 127.0.0.1 in the sandbox)")
    parser.add_argument("--webhook-port", type=int, default=None, help="HTTPS port (default: free port / 9443)")
    parser.add_argument("--cert-dir", metavar="DIR", help="tls.crt and tls.key (and ca.crt) instead of a fresh CA")
    parser.add_argument(
        "--webhook-url", help="configured cluster only: register the webhook configurations with this base URL"
    )
    parser.add_argument(
        "--translation-mode", choices=["auto", "always", "audit", "off"], default="auto", help="pod translation"
    )
    parser.add_argument("--no-controller", action="store_true", help="run the webhook only")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument(
        "--client-auth",
        action="store_true",
        help="sandbox only: the webhook requires the client certificate the sandbox API server presents",
    )
    auth.add_argument(
        "--client-ca-file",
        metavar="F",
        help="the webhook requires a client certificate this PEM CA bundle verifies (as gpucluster webhook)",
    )
    parser.add_argument(
        "--client-allowed-names",
        metavar="NAMES",
        default=None,
        help="common names a client certificate may have ('' any; default as gpucluster webhook)",
    )
    parser.add_argument(
        "--delete-stranded-pods",
        action="store_true",
        help="the controller deletes pods stranded untranslated (as operator.strandedPods.delete)",
    )
    parser.add_argument(
        "--claim-template-grace-period",
        type=options.finite,
        default=600.0,
        metavar="S",
        help="seconds a claim template of translated pods outlives the last pod using it (default 600)",
    )
    parser.add_argument(
        "--health-port", type=int, default=None,
        help="port of /healthz, /readyz, /metrics (default: a free port in the sandbox, 8081 otherwise)",
    )  # fmt: skip
    options.add_logging(parser)
    parser.set_defaults(func=run)


@dataclass
class RunOptions:
    kubeconfig: str | None = None
    kubeconfig_out: Path | None = None
    namespace: str = "gpu-operator"
    nodes: int = 3
    gpus_per_node: int = 8
    mix: str = "h100"
    webhook_host: str | None = None
    webhook_port: int | None = None
    cert_dir: Path | None = None
    webhook_url: str | None = None
    translation_mode: str = "auto"
    controller: bool = True
    template_grace_period: float = 600.0  # claim templates of translated pods no pod refers to any more
    delete_stranded_pods: bool = False
    # Client authentication of the webhook: "sandbox" (the sandbox's webhook client CA) or a PEM CA
    # bundle's path; None: off. ``client_allowed_names`` None: the webhook's default.
    client_auth: str | None = None
    client_allowed_names: tuple[str, ...] | None = None
    sandbox: bool | None = None  # None: decide from cluster_configured()
    health_port: int | None = None  # None: a free port in the sandbox, 8081 against a cluster
    sandbox_kwargs: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)  # the controller's, over os.environ


class Stack:
    """Everything ``gpucluster run`` starts, for the command and for end-to-end tests."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.sandbox: Any = None
        self.kube: Kube | None = None
        self.cluster = ClusterState()
        self.webhook_port = 0
        self.ca_pem = b""
        self.kubeconfig: Path | None = None
        self.stop_event = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []  # end when stop_event is set
        self._background: list[asyncio.Task[Any]] = []  # cancelled on stop
        self.controller_started = False
        self.controller: Any = None  # controller.runtime.Controller once started
        self.health_port = 0  # where /healthz, /readyz and /metrics are served
        self._health: Any = None  # aiohttp AppRunner

    @property
    def uses_sandbox(self) -> bool:
        if self.options.sandbox is not None:
            return self.options.sandbox
        return not cluster_configured(self.options.kubeconfig)

    async def start(self) -> None:
        opts = self.options
        if self.uses_sandbox:
            await self._start_sandbox()
        elif opts.kubeconfig:
            self.kubeconfig = Path(opts.kubeconfig)
        self.kube = await Kube.connect(str(self.kubeconfig) if self.kubeconfig else opts.kubeconfig)
        await self._start_webhook()
        if opts.controller:
            self._start_controller()
        else:
            self._start_provisioner()
        await self._start_health()

    # ------------------------------------------------------------ health and metrics

    async def _start_health(self) -> None:
        """/healthz, /readyz (the webhook's caches, and the controller's when it runs) and /metrics
        (the controller's), as the chart's operator Deployment serves them."""
        from aiohttp import web
        from prometheus_client import CollectorRegistry, generate_latest

        controller = self.controller
        empty = CollectorRegistry()

        async def healthz(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def readyz(request: web.Request) -> web.Response:
            problems = [] if self.cluster.synced() else ["webhook caches not synced"]
            if controller is not None:
                ok, detail = controller.ready()
                if not ok:
                    problems.append(f"controller: {detail}")
            return web.Response(status=503 if problems else 200, text=("; ".join(problems) or "ok") + "\n")

        async def metrics(request: web.Request) -> web.Response:
            registry = controller.metrics.registry if controller is not None else empty
            return web.Response(body=generate_latest(registry), content_type="text/plain")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/metrics", metrics)
        port = self.options.health_port
        if port is None:
            port = 0 if self.sandbox is not None else 8081
        host = "127.0.0.1" if self.sandbox is not None else "0.0.0.0"
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise InputError(f"--health-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._health = runner
        addresses = runner.addresses
        self.health_port = int(addresses[0][1]) if addresses else port

    # ------------------------------------------------------------ sandbox

    async def _start_sandbox(self) -> None:
        from gpucluster.sandbox.apiserver.core import Context
        from gpucluster.sandbox.apiserver.errors import ApiError
        from gpucluster.sandbox.server import Sandbox
        from gpucluster.sandbox.sim import SimulationOptions

        opts = self.options
        simulate = SimulationOptions(nodes=opts.nodes, gpus_per_node=opts.gpus_per_node, mix=opts.mix)
        self.sandbox = Sandbox(kubeconfig_path=opts.kubeconfig_out, simulate=simulate, **opts.sandbox_kwargs)
        await self.sandbox.start()
        self.kubeconfig = self.sandbox.kubeconfig_path
        core = self.sandbox.core
        ctx = Context(field_manager="gpucluster")
        crd_rt = core.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        for crd in [*chart_crds(), CLUSTERPOLICY_CRD, NVIDIADRIVER_CRD]:
            try:
                await core.create(crd_rt, "", crd, ctx)
            except ApiError as exc:
                if exc.code != 409:
                    raise
        ns_rt = core.registry.get("", "v1", "namespaces")
        if core.store.get(("", "namespaces"), "", opts.namespace) is None:
            await core.create(ns_rt, "", {"metadata": {"name": opts.namespace}}, ctx)

    # ------------------------------------------------------------ webhook

    def _cert_dir(self) -> Path:
        from gpucluster.cli.webhook import self_signed_dir

        if self.options.cert_dir is not None:
            cert_dir = self.options.cert_dir
            for name in ("tls.crt", "tls.key"):
                if not (cert_dir / name).is_file():
                    raise InputError(f"{cert_dir / name}: no such file (--cert-dir needs tls.crt and tls.key)")
            return cert_dir
        return self_signed_dir(SERVICE, self.options.namespace)

    async def _start_webhook(self) -> None:
        from gpucluster.cli.webhook import WEBHOOK_KINDS
        from gpucluster.kube.reflector import run_reflectors
        from gpucluster.policy import Settings, TranslationMode
        from gpucluster.webhook.server import build_app, serve
        from gpucluster.webhook.tls import ReloadingTLS

        opts = self.options
        assert self.kube is not None
        cert_dir = self._cert_dir()
        ca_file = cert_dir / "ca.crt"
        self.ca_pem = ca_file.read_bytes() if ca_file.is_file() else b""
        tls = ReloadingTLS(cert_dir / "tls.crt", cert_dir / "tls.key")
        tls.reload_if_changed()
        if not tls.loaded:
            raise InputError(f"{cert_dir}: tls.crt and tls.key do not form a valid certificate and key pair")
        mode = cast(TranslationMode, opts.translation_mode)
        settings = Settings(translation_mode=mode, operator_namespace=opts.namespace)
        self._background.append(asyncio.create_task(run_reflectors(self.kube, self.cluster, WEBHOOK_KINDS)))
        app = build_app(self.cluster, settings, tls=tls)
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        sandboxed = self.sandbox is not None
        self._require_client_certificates(app, tls)

        def on_started(bound: int) -> None:
            if not started.done():
                started.set_result(bound)

        host = opts.webhook_host or ("127.0.0.1" if sandboxed else "0.0.0.0")
        port = opts.webhook_port if opts.webhook_port is not None else (0 if sandboxed else 9443)
        self._tasks.append(
            asyncio.create_task(
                serve(
                    app,
                    tls,
                    host=host,
                    port=port,
                    stop=self.stop_event,
                    shutdown_timeout=2.0,
                    on_started=on_started,
                )
            )
        )
        done, _ = await asyncio.wait({started, self._tasks[-1]}, return_when=asyncio.FIRST_COMPLETED)
        if started not in done:
            self._tasks[-1].result()  # raises the listen error
            raise InputError(f"the webhook could not listen on {host}:{port}")
        self.webhook_port = started.result()
        deadline = time.monotonic() + 10
        while not self.cluster.synced() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if sandboxed:
            await self._register_in_sandbox()
        elif opts.webhook_url:
            await self._register_with_url(opts.webhook_url)

    async def _register_in_sandbox(self) -> None:
        from gpucluster.sandbox.apiserver.core import Context
        from gpucluster.webhook.configurations import webhook_configurations

        sandbox = self.sandbox
        ns = self.options.namespace
        sandbox.register_service(ns, SERVICE, 443, ("127.0.0.1", self.webhook_port))
        core = sandbox.core
        ctx = Context(field_manager="gpucluster")
        svc_rt = core.registry.get("", "v1", "services")
        service = {
            "metadata": {"name": SERVICE, "namespace": ns, "labels": {"app.kubernetes.io/name": "gpucluster"}},
            "spec": {
                "selector": {"app.kubernetes.io/name": "gpucluster", "app.kubernetes.io/component": "webhook"},
                "ports": [{"name": "https", "port": 443, "targetPort": self.webhook_port}],
            },
        }
        if core.store.get(("", "services"), ns, SERVICE) is None:
            await core.create(svc_rt, ns, service, ctx)
        for config in webhook_configurations(namespace=ns, service=SERVICE, ca_bundle=self.ca_pem):
            plural = config["kind"].lower() + "s"
            rt = core.registry.get("admissionregistration.k8s.io", "v1", plural)
            await core.patch(
                rt, "", config["metadata"]["name"], "application/apply-patch+yaml", config, ctx, force=True
            )

    async def _register_with_url(self, url: str) -> None:
        from gpucluster.webhook.configurations import webhook_configurations

        assert self.kube is not None
        for config in webhook_configurations(namespace=self.options.namespace, url=url, ca_bundle=self.ca_pem or None):
            plural = config["kind"].lower() + "s"
            path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{config['metadata']['name']}"
            try:
                await self.kube.request(
                    "PATCH",
                    path,
                    body=config,
                    content_type="application/apply-patch+yaml",
                    query=[("fieldManager", "gpucluster"), ("force", "true")],
                )
            except KubeError as exc:
                raise InputError(f"cannot register the webhook configurations: {exc}") from None

    def _require_client_certificates(self, app: Any, tls: Any) -> None:
        from gpucluster.webhook.clientauth import DEFAULT_ALLOWED_NAMES, ClientAuthError, load_ca_bundle, protect

        auth = self.options.client_auth
        if auth is None:
            return
        if auth == "sandbox":
            if self.sandbox is None or self.sandbox.pki is None:
                raise InputError("--client-auth needs the sandbox (with a cluster configured, give --client-ca-file)")
            path = Path(self.sandbox.pki.webhook_client_ca_file)
        else:
            path = Path(auth)
        try:
            ca_pem = load_ca_bundle(path)
        except ClientAuthError as exc:
            raise InputError(f"--client-ca-file {exc}") from None
        names = self.options.client_allowed_names
        protect(app, tls, ca_pem, DEFAULT_ALLOWED_NAMES if names is None else names)

    # ------------------------------------------------------------ controller

    def _start_controller(self) -> None:
        try:
            from gpucluster.controller.runtime import Controller
        except ImportError:  # the controller is optional for webhook-only runs
            log.warning("controller not available; running the webhook only")
            return
        assert self.kube is not None
        env = {**os.environ, **self.options.environment}
        if self.sandbox is not None:  # what the chart's operator Deployment would be given
            env = {**chart_env(), **env}
        env["OPERATOR_NAMESPACE"] = self.options.namespace
        # Built here rather than through run_controller so that the Stack serves its health and metrics.
        self.controller = Controller(
            self.kube, namespace=self.options.namespace, env=env, leader_election=False,
            template_grace_period=self.options.template_grace_period,
            delete_stranded_pods=self.options.delete_stranded_pods,
        )  # fmt: skip
        self._tasks.append(asyncio.create_task(self.controller.run(self.stop_event)))
        self.controller_started = True

    def _start_provisioner(self) -> None:
        """Webhook only: still provision the claim templates translated pods refer to (the webhook creates none)."""
        from gpucluster.controller.provision import Provisioner

        assert self.kube is not None
        kube = self.kube

        async def event(obj: Any, type_: str, reason: str, message: str) -> None:
            log.warning(
                "pod %s/%s: %s: %s", obj["metadata"].get("namespace"), obj["metadata"].get("name"), reason, message
            )

        provisioner = Provisioner(kube, event=event, grace_period=self.options.template_grace_period)
        self._tasks.append(asyncio.create_task(provisioner.run(self.stop_event)))

    # ------------------------------------------------------------ stop

    async def stop(self) -> None:
        self.stop_event.set()
        for task in self._background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for task in self._tasks:
            if not task.done():
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(task), 3.0)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._health is not None:
            await self._health.cleanup()
            self._health = None
        if self.kube is not None:
            await self.kube.close()
            self.kube = None
        if self.sandbox is not None:
            await self.sandbox.stop()
            self.sandbox = None


def options_from(args: argparse.Namespace) -> RunOptions:
    from gpucluster.webhook.clientauth import parse_allowed_names

    if args.nodes < 0:
        raise InputError(f"--nodes {args.nodes}: must not be negative")
    if not 0 <= args.gpus_per_node <= 64:
        raise InputError(f"--gpus-per-node {args.gpus_per_node}: must be between 0 and 64")
    if args.webhook_port is not None and not 0 <= args.webhook_port < 65536:
        raise InputError(f"--webhook-port {args.webhook_port}: must be between 0 and 65535")
    if args.health_port is not None and not 0 <= args.health_port < 65536:
        raise InputError(f"--health-port {args.health_port}: must be between 0 and 65535")
    from gpucluster.sandbox.sim.kubelet import parse_mix

    try:
        parse_mix(args.mix)
    except ValueError as exc:
        raise InputError(f"--mix {args.mix}: {exc}") from None
    if not 0 <= args.port < 65536:
        raise InputError(f"--port {args.port}: must be between 0 and 65535")
    return RunOptions(
        sandbox_kwargs={"port": args.port} if args.port else {},
        kubeconfig=args.kubeconfig,
        kubeconfig_out=Path(args.kubeconfig_out).resolve(),
        namespace=args.namespace,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        mix=args.mix,
        webhook_host=args.webhook_host,
        webhook_port=args.webhook_port,
        cert_dir=Path(args.cert_dir) if args.cert_dir else None,
        webhook_url=args.webhook_url,
        translation_mode=args.translation_mode,
        controller=not args.no_controller,
        health_port=args.health_port,
        template_grace_period=args.claim_template_grace_period,
        delete_stranded_pods=args.delete_stranded_pods,
        client_auth="sandbox" if args.client_auth else args.client_ca_file,
        client_allowed_names=(
            None if args.client_allowed_names is None else parse_allowed_names(args.client_allowed_names)
        ),
    )


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_format, args.log_level)
    if not args.claim_template_grace_period >= 0:
        raise InputError(f"--claim-template-grace-period {args.claim_template_grace_period:g}: must be 0 or more")
    options = options_from(args)
    try:
        asyncio.run(_main(options))
    except OSError as exc:
        raise InputError(f"cannot listen: {exc.strerror or exc}") from None
    return EXIT_OK


async def _main(options: RunOptions) -> None:
    started = time.monotonic()
    stack = Stack(options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stack.stop_event.set)
    try:
        await stack.start()
        gc.collect()
        gc.freeze()
        elapsed = time.monotonic() - started
        if stack.sandbox is not None:
            sandbox = stack.sandbox
            print(f"sandbox API server: {sandbox.url} ({options.nodes} simulated GPU nodes; up in {elapsed:.2f}s)")
            print(f"kubeconfig: {stack.kubeconfig}")
        else:
            print(f"cluster: {options.kubeconfig or os.environ.get('KUBECONFIG') or 'default configuration'}")
        print(f"webhook: https://127.0.0.1:{stack.webhook_port} (service {SERVICE}.{options.namespace}.svc)")
        print(f"controller: {'running' if stack.controller_started else 'not running'} (namespace {options.namespace})")
        print(f"health and metrics: http://127.0.0.1:{stack.health_port}/healthz, /readyz, /metrics")
        if stack.sandbox is not None:
            print("try:")
            print(f"  export KUBECONFIG={stack.kubeconfig}")
            print("  kubectl get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.count")
            print("  kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations")
            # The files are the checkout's examples/ (README's walkthrough).
            print("  kubectl apply --server-side -f examples/gpucluster.yaml   # the GPUCluster singleton")
            print("  kubectl get gpucluster,resourceslices,deviceclasses")
            print("  kubectl create -f examples/legacy-pod.yaml   # nvidia.com/gpu: 2 -> a DRA claim, scheduled")
            print("  kubectl get pods,resourceclaims; gpucluster explain pod/<name>   # why a pod is Pending")
        print("stop with Ctrl-C", flush=True)
        await stack.stop_event.wait()
    finally:
        await stack.stop()
        if stack.kubeconfig is not None and options.kubeconfig_out is not None:
            with contextlib.suppress(OSError):
                options.kubeconfig_out.unlink()
