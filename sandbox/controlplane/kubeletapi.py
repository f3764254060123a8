"""The kubelet API of a simulated node, for what kube-apiserver proxies to a kubelet: container
logs (``kubectl logs``). Served over TLS on the node's InternalIP with a serving certificate of the
cluster CA; only clients with a certificate of that CA (kube-apiserver's kubelet client) are let in.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gpucluster.sandbox.apiserver import errors, podlogs

Obj = dict[str, Any]
PodLookup = Callable[[str, str], "Obj | None"]


def app(pods: PodLookup, logs: podlogs.LogLookup | None) -> web.Application:
    async def container_logs(request: web.Request) -> web.StreamResponse:
        namespace, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        pod = pods(namespace, name)
        if pod is None:
            return web.Response(status=404, text=f'pod "{name}" not found on this node\n')
        try:
            return await podlogs.respond(request, pod, container, logs)
        except errors.ApiError as exc:  # kube-apiserver passes a kubelet's error text on to the client
            return web.Response(status=exc.code, text=exc.message)

    application = web.Application()
    application.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    return application


def server_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(cafile=str(client_ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


async def serve(application: web.Application, host: str, ctx: ssl.SSLContext) -> tuple[web.AppRunner, int]:
    """Listen on ``host`` at a free port; returns the runner and the port."""
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, 0, ssl_context=ctx)
    await site.start()
    server = site._server
    assert server is not None
    port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
    return runner, port
