"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler (built by :mod:`gpucluster.sandbox.controlplane.build`) and the kubelet stand-in
(:mod:`gpucluster.sandbox.controlplane.nodes`) for simulated GPU nodes.

Every component runs as a child process under its own identity (see :mod:`.pki`), logs to
``<workdir>/logs/<component>.log`` and gets ``PR_SET_PDEATHSIG``, so none outlives its parent.
:meth:`ControlPlane.stop` ends them and removes the work directory it made.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpucluster.sandbox.controlplane import build, pki
from gpucluster.sandbox.ports import free_port

ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(Exception):
    """A component did not start; the message names it and ends with its last log lines."""


@dataclass(frozen=True)
class ClusterOptions:
    version: str = build.DEFAULT_VERSION
    nodes: int = 3
    gpus_per_node: int = 8
    mix: str = "h100"
    """GPU models round-robin over the nodes, as ``gpucluster sandbox --mix``."""
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    """Gates given to kube-apiserver, kube-controller-manager and kube-scheduler alike."""
    workdir: Path | None = None
    """Where state, certificates, kubeconfigs and logs go (default: a new temporary directory,
    removed on stop)."""
    start_timeout: float = 60.0
    node_agent: bool = True
    """Start the kubelet stand-in for the simulated nodes."""
    process_pods: bool = True
    """Pods of the project's own image run as local processes on the simulated nodes."""
    image_archives: tuple[Path, ...] = ()
    """OCI image archives (``make image``) the simulated nodes hold: pods of those images run from
    their root filesystems (``gpucluster.sandbox.sim.container``) rather than from this checkout's venv."""
    admission_plugins: tuple[str, ...] = ()
    # Extra kube-controller-manager flags, e.g. ("--kube-api-qps=200", "--kube-api-burst=400").
    controller_manager_flags: tuple[str, ...] = ()
    """kube-apiserver admission plugins to enable besides NodeRestriction (and the defaults), e.g.
    ``OwnerReferencesPermissionEnforcement``."""


_PORT_ATTEMPTS = 3
_ADDRESS_IN_USE = "address already in use"


def _pdeathsig() -> None:  # in the child, between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


def gates_flag(gates: Mapping[str, bool]) -> list[str]:
    if not gates:
        return []
    return ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))]


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_pdeathsig, env=dict(env) if env is not None else None,
            )  # fmt: skip

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class ControlPlane:
    """``up()`` starts everything and returns when nodes are Ready; ``stop()`` tears it down."""

    def __init__(self, options: ClusterOptions | None = None, *, say: Callable[[str], None] | None = None) -> None:
        self.options = options or ClusterOptions()
        self.say = say or (lambda line: None)
        self._own_workdir = self.options.workdir is None
        self.workdir = self.options.workdir or Path(tempfile.mkdtemp(prefix="gpucluster-kube-"))
        self.binaries: build.Binaries | None = None
        self.components: list[Component] = []
        self.pki: pki.ControlPlanePKI | None = None
        self.apiserver_port = 0
        self.scheduler_port = 0
        self.node_names: list[str] = []
        self._admin_ssl: ssl.SSLContext | None = None

    # ------------------------------------------------------------------ addresses and files

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def version(self) -> str:
        return build.resolve_version(self.options.version)

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _audit_policy(self) -> Path:
        path = self.workdir / "audit-policy.yaml"
        # Every request's user, verb, object and answer (no bodies): what tests ask of the audit
        # log is who was refused what.
        path.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
        )
        return path

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (one JSON object a line)."""
        events = []
        try:
            lines = self.audit_log.read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
        return events

    def forbidden(self, user_prefix: str) -> list[str]:
        """Requests of users whose name starts with ``user_prefix`` that were answered 403."""
        out = []
        for event in self.audit_events():
            user = str((event.get("user") or {}).get("username") or "")
            if user.startswith(user_prefix) and (event.get("responseStatus") or {}).get("code") == 403:
                out.append(f"{user} {event.get('verb')} {event.get('requestURI')}")
        return out

    def kubeconfig(self, identity: pki.Identity = pki.ADMIN) -> Path:
        assert self.pki is not None
        return self.pki.kubeconfig(identity)

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig(pki.ADMIN)

    # ------------------------------------------------------------------ life cycle

    def up(self) -> ControlPlane:
        # A chosen port can still be taken by another listener before its component binds it
        # (parallel test workers, other programs): start again on new ports, a few times.
        fresh_etcd = not (self.workdir / "etcd").exists()
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._up()
            except ControlPlaneError as err:
                self._stop_components()
                if not (fresh_etcd and _ADDRESS_IN_USE in str(err) and attempt + 1 < _PORT_ATTEMPTS):
                    self.stop()
                    raise
                bind = next(line for line in str(err).splitlines() if _ADDRESS_IN_USE in line)
                self.say(f"a port was taken before its component bound it; starting again: {bind.strip()}")
                shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
            except BaseException:
                self.stop()
                raise
            else:
                return self
        raise AssertionError("unreachable")

    def _up(self) -> None:
        opts = self.options
        started = time.monotonic()
        binaries = build.cached(opts.version)
        if binaries is None:
            raise ControlPlaneError(
                f"the Kubernetes {self.version} control plane is not built: run `make kube` "
                f"(or `gpucluster cluster build --version {opts.version}`)"
            )
        self.binaries = binaries
        if self.pki is None:  # kept when up() starts again: its files are what clients already hold
            self.pki = pki.create(self.workdir / "pki")
        etcd_port, peer_port = free_port(), free_port()
        self.apiserver_port, self.scheduler_port = free_port(), free_port()
        logs = self.workdir / "logs"
        p = self.pki.path
        self.say(f"starting etcd on 127.0.0.1:{etcd_port}")
        etcd = self._start(
            "etcd",
            [
                str(binaries["etcd"]), "--name=default", f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true", "--log-level=warn",
            ],
            logs,
        )  # fmt: skip
        self._wait(etcd, lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"), opts.start_timeout)
        for identity in (pki.ADMIN, pki.CONTROLLER_MANAGER, pki.SCHEDULER, pki.DRA_PLUGIN):
            self.pki.write_kubeconfig(identity, self.server)
        self.say(f"starting kube-apiserver {self.version} on {self.server}")
        apiserver = self._start(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={p('apiserver.crt')}", f"--tls-private-key-file={p('apiserver.key')}",
                f"--client-ca-file={p('ca.crt')}", f"--service-cluster-ip-range={pki.SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=" + ",".join(("NodeRestriction", *opts.admission_plugins)),
                # Webhooks are called with a client certificate (pki.py), so client auth is tested end to end.
                f"--admission-control-config-file={p('admission.json')}",
                f"--service-account-issuer={ISSUER}", f"--api-audiences={ISSUER}",
                f"--service-account-key-file={p('sa.pub')}", f"--service-account-signing-key-file={p('sa.key')}",
                "--allow-privileged=true", "--profiling=false",
                # From 1.37 the endpoint reconciler refuses a loopback address; pods here reach the
                # API server at its address directly, not through the kubernetes Service.
                "--endpoint-reconciler-type=none",
                # Nodes are reached by their (loopback) InternalIP only, never by a name to resolve,
                # and their kubelet API is verified against the cluster CA.
                "--kubelet-preferred-address-types=InternalIP", f"--kubelet-certificate-authority={p('ca.crt')}",
                f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
                f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}", "--v=1",
                f"--audit-policy-file={self._audit_policy()}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-maxsize=0",
                *gates_flag(opts.feature_gates),
            ],
            logs,
        )  # fmt: skip
        self._wait(apiserver, self._apiserver_ready, opts.start_timeout)
        self.say(f"starting kube-controller-manager and kube-scheduler ({time.monotonic() - started:.1f} s)")
        kcm = self._start(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfig(pki.CONTROLLER_MANAGER)}",
                "--use-service-account-credentials=true", f"--service-account-private-key-file={p('sa.key')}",
                f"--root-ca-file={p('ca.crt')}", "--leader-elect=false", "--secure-port=0",
                "--controllers=*", "--v=1", *gates_flag(opts.feature_gates), *opts.controller_manager_flags,
            ],
            logs,
        )  # fmt: skip
        scheduler = self._start(
            "kube-scheduler",
            [
                str(binaries["kube-scheduler"]), f"--kubeconfig={self.kubeconfig(pki.SCHEDULER)}",
                "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={self.scheduler_port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}", "--v=1", *gates_flag(opts.feature_gates),
            ],
            logs,
        )  # fmt: skip
        self._wait(scheduler, lambda: _http_ok(f"https://127.0.0.1:{self.scheduler_port}/healthz"), opts.start_timeout)
        self._wait(kcm, self._default_service_account, opts.start_timeout)
        if opts.node_agent:
            self._start_nodes(logs)
        self.say(f"control plane up in {time.monotonic() - started:.1f} s")

    def _start_nodes(self, logs: Path) -> None:
        from gpucluster.sandbox.controlplane import nodes

        assert self.pki is not None
        plans = nodes.plans(self.options.nodes, self.options.gpus_per_node, self.options.mix)
        self.node_names = [plan.name for plan in plans]
        for index, name in enumerate(self.node_names):
            self.pki.write_kubeconfig(pki.node_identity(name), self.server)
            self.pki.write_kubelet_serving(name, nodes.node_address(index))
        argv = [
            sys.executable, "-m", "gpucluster.sandbox.controlplane.nodes", f"--pki-dir={self.pki.directory}",
            f"--nodes={self.options.nodes}", f"--gpus-per-node={self.options.gpus_per_node}",
            f"--mix={self.options.mix}", f"--version={self.version}", f"--pods-dir={self.workdir / 'pods'}",
        ]  # fmt: skip
        if not self.options.process_pods:
            argv.append("--no-process-pods")
        argv += [f"--image-archive={archive}" for archive in self.options.image_archives]
        self.say(f"starting the kubelet stand-in for {len(self.node_names)} nodes")
        agent = self._start("nodes", argv, logs)
        self._wait(agent, self._nodes_ready, self.options.start_timeout)

    def _start(self, name: str, argv: list[str], logs: Path) -> Component:
        component = Component(name, argv, logs / f"{name}.log")
        component.start()
        self.components.append(component)
        return component

    def _wait(self, component: Component, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not component.running():
                code = component.process.returncode if component.process else None
                raise ControlPlaneError(f"{component.name} exited ({code}):\n{component.tail()}")
            try:
                if ready():
                    return
            except Exception:  # not yet answering
                pass
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{component.name} not ready after {timeout:.0f} s:\n{component.tail()}")
            time.sleep(0.1)

    def _stop_components(self) -> None:
        for component in reversed(self.components):
            component.stop()
        self.components = []

    def stop(self) -> None:
        self._stop_components()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ readiness probes

    def admin_get(self, path: str) -> dict[str, object]:
        """GET ``path`` as the admin (blocking; for readiness checks and tests)."""
        with urllib.request.urlopen(self.server + path, context=self._admin_context(), timeout=5) as resp:
            decoded: dict[str, object] = json.loads(resp.read() or b"{}")
            return decoded

    def admin_cert(self) -> tuple[Path, Path]:
        """The admin's client certificate and key as files (what the admin kubeconfig holds inline)."""
        assert self.pki is not None
        cert, key = self.pki.path("admin-client.crt"), self.pki.path("admin-client.key")
        if not cert.exists():
            user = yaml.safe_load(self.admin_kubeconfig.read_text())["users"][0]["user"]
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            key.chmod(0o600)
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        return cert, key

    def _admin_context(self) -> ssl.SSLContext:
        # Built once: readiness checks poll with it every 100 ms.
        if self._admin_ssl is None:
            assert self.pki is not None
            ctx = ssl.create_default_context(cafile=str(self.pki.ca_file))
            ctx.load_cert_chain(*self.admin_cert())
            self._admin_ssl = ctx
        return self._admin_ssl

    def _apiserver_ready(self) -> bool:
        with urllib.request.urlopen(self.server + "/readyz", context=self._admin_context(), timeout=5) as resp:
            return bool(resp.status == 200)

    def _default_service_account(self) -> bool:
        try:
            self.admin_get("/api/v1/namespaces/default/serviceaccounts/default")
        except urllib.error.HTTPError:
            return False
        return True

    def _nodes_ready(self) -> bool:
        listed = self.admin_get("/api/v1/nodes")
        ready = set()
        for node in listed.get("items") or []:  # type: ignore[attr-defined]
            conditions = (node.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ready.add(node["metadata"]["name"])
        return ready >= set(self.node_names)


def _http_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=ctx if url.startswith("https") else None) as resp:
        return bool(resp.status == 200)


def run_until_signal(plane: ControlPlane, announce: Sequence[str]) -> None:
    """Block until SIGINT/SIGTERM, then stop ``plane``."""
    for line in announce:
        print(line, flush=True)
    stop = False

    def handler(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    try:
        while not stop:
            for c in plane.components:
                if not c.running():
                    print(f"{c.name} exited:\n{c.tail()}", file=sys.stderr, flush=True)
                    stop = True
            time.sleep(0.5)
    finally:
        plane.stop()
