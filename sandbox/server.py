"""``Sandbox``: the API server double, started in-process (``await start()``) or in a thread.

    sandbox = Sandbox()
    await sandbox.start()
    ...  # kubectl --kubeconfig sandbox.kubeconfig_path ..., or the Python client
    await sandbox.stop()

Extension points: ``gpucluster.sandbox.core.admission`` (mutating/validating async hooks run on every
write; the webhook admission plugins are installed there unless ``webhooks=False``),
``gpucluster.sandbox.store.subscribe(fn)`` (every committed change, synchronously) and
``gpucluster.sandbox.store.watch(...)`` (async, filtered) for in-process controllers, ``gpucluster.sandbox.faults``.
``Sandbox(simulate=SimulationOptions(...))`` also starts the simulated GPU cluster
(``gpucluster.sandbox.sim``); ``register_service`` routes webhook services to local addresses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from gpucluster.dra.gates import supported_version
from gpucluster.sandbox import kubeconfig, pki
from gpucluster.sandbox.apiserver import rbac
from gpucluster.sandbox.apiserver.auth import Authenticator
from gpucluster.sandbox.apiserver.core import ApiCore, Context
from gpucluster.sandbox.apiserver.discovery import version_info
from gpucluster.sandbox.apiserver.faults import Faults
from gpucluster.sandbox.apiserver.gc import GarbageCollector
from gpucluster.sandbox.apiserver.handlers import ApiHandlers, ServerOptions
from gpucluster.sandbox.apiserver.resources import Registry
from gpucluster.sandbox.apiserver.store import Store
from gpucluster.sandbox.apiserver.webhooks import WebhookAdmission
from gpucluster.sandbox.sim import SimulatedCluster, SimulationOptions
from gpucluster.sandbox.sim.process import ApiEndpoint

Obj = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger("sandbox")

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Sandbox:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        git_version: str = "v1.34.2",
        history_limit: int = 2000,
        bookmark_interval: float = 60.0,
        state_dir: Path | None = None,
        kubeconfig_path: Path | None = None,
        garbage_collector: bool = True,
        webhooks: bool = True,
        simulate: SimulationOptions | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self.git_version = git_version
        self.store = Store(history_limit=history_limit)
        self.registry = Registry()
        self.core = ApiCore(self.store, self.registry)
        self.core.authn = Authenticator(self.store, self.token)
        self.core.authz = rbac.Authorizer(self.store)
        rbac.register_types(self.registry)
        rbac.EscalationGuard(self.core.authz).install(self.core)
        self.rbac_aggregator = rbac.Aggregator(self.core)
        self.faults = Faults()
        self._own_state_dir = state_dir is None
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix="gpucluster-sandbox-"))
        self.kubeconfig_path = kubeconfig_path or self.state_dir / "kubeconfig"
        self.bookmark_interval = bookmark_interval
        self.gc: GarbageCollector | None = GarbageCollector(self.core) if garbage_collector else None
        self.webhooks: WebhookAdmission | None = WebhookAdmission(self.core) if webhooks else None
        if self.webhooks is not None:
            self.webhooks.install()
        version = supported_version(version_info(git_version))
        self.sim: SimulatedCluster | None = (
            SimulatedCluster(self.core, simulate, kubernetes_version=version) if simulate is not None else None
        )
        self.pki: pki.ServerPKI | None = None
        self.handlers: ApiHandlers | None = None
        self._runner: web.AppRunner | None = None
        self._socket: socket.socket | None = None

    @property
    def admission(self) -> Any:
        return self.core.admission

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    async def start(self) -> None:
        self.pki = pki.create(self.state_dir / "pki", self.host)
        if self.webhooks is not None:
            self.webhooks.client_certificate = (
                str(self.pki.webhook_client_cert_file),
                str(self.pki.webhook_client_key_file),
            )
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._socket = sock
        options = ServerOptions(
            token=self.token,
            git_version=self.git_version,
            server_address=f"{self.host}:{self.port}",
            bookmark_interval=self.bookmark_interval,
            on_restart=self._restart_endpoint,
            pod_log=self.sim.pod_log if self.sim is not None else None,
        )
        self.handlers = ApiHandlers(self.core, self.faults, options)
        namespaces = self.registry.get("", "v1", "namespaces")
        assert namespaces is not None
        for name in DEFAULT_NAMESPACES:
            if self.store.get(namespaces.key, "", name) is None:
                ctx = Context(field_manager="kube-apiserver")
                await self.core.create(namespaces, "", {"metadata": {"name": name}}, ctx)
        await rbac.seed(self.core)
        await self.rbac_aggregator.sync()
        self.rbac_aggregator.start()
        if self.gc is not None:
            self.gc.start()
        if self.sim is not None:
            await self.sim.start(ApiEndpoint(self.url, self.pki.ca.cert_pem.decode()))
        self._runner = web.AppRunner(self.handlers.app(), access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.SockSite(self._runner, sock, ssl_context=self.pki.server_context())
        await site.start()
        kubeconfig.write(self.kubeconfig_path, kubeconfig.build(self.url, self.pki.ca.cert_pem, self.token))
        log.info("sandbox api server url=%s kubeconfig=%s", self.url, self.kubeconfig_path)

    async def stop(self) -> None:
        self.store.break_watches()
        if self.sim is not None:
            await self.sim.stop()
        if self.webhooks is not None:
            await self.webhooks.close()
        await self.rbac_aggregator.stop()
        if self.gc is not None:
            await self.gc.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    async def restart(self, *, compact: bool = False) -> int:
        """Simulate an API server restart: every watch stream ends (clients must re-watch).

        With ``compact`` the event history is dropped too, so re-watching from an old
        resourceVersion gets 410 Gone and clients must relist.
        """
        closed = self.store.break_watches()
        if compact:
            self.store.compact()
        return closed

    async def _restart_endpoint(self) -> None:
        await self.restart()

    def register_service(self, namespace: str, name: str, port: int, target: str | tuple[str, int]) -> None:
        """Route webhook calls for the service ``name.namespace.svc:port`` to ``target``
        (``"127.0.0.1:9443"``): there is no cluster network, so clientConfig.service needs this."""
        if self.webhooks is None:
            raise RuntimeError("this sandbox was started with webhooks=False")
        self.webhooks.register_service(namespace, name, port, target)

    def client_config(self) -> Obj:
        """What a client needs: url, CA file, token."""
        assert self.pki is not None
        return {"url": self.url, "ca_file": str(self.pki.ca_file), "token": self.token}


class SandboxThread:
    """A ``Sandbox`` running on its own event loop in a background thread (for sync code: kubectl
    subprocess tests, the synchronous Python client)."""

    def __init__(self, **kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.sandbox = Sandbox(**kwargs)
        self._thread = threading.Thread(target=self._run, name="sandbox", daemon=True)
        self._started = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> Sandbox:
        self._thread.start()
        self.call(self.sandbox.start())
        return self.sandbox

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the sandbox's loop and wait for its result."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call(self.sandbox.stop(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if (
            not self._thread.is_alive()
        ):  # a loop still running cannot be closed: the daemon thread ends with the process
            self.loop.close()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
