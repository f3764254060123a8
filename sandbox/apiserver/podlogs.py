"""``GET /api/v1/namespaces/NS/pods/NAME/log``: a container's log, as kube-apiserver proxies it from
the kubelet (``container``, ``previous``, ``tailLines``, ``limitBytes``, ``follow``; not
``timestamps`` or ``sinceSeconds``). Logs exist for process pods (``gpucluster.sandbox.sim.process``);
a simulated container that runs has an empty log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.core import ApiCore


class LogSource(Protocol):
    path: Path

    @property
    def running(self) -> Callable[[], bool]: ...


LogLookup = Callable[[str, str, str, bool], Any]
Obj = dict[str, Any]


def _container_names(pod: Obj) -> tuple[list[str], list[str]]:
    spec = pod.get("spec") or {}
    return [str(c.get("name")) for c in spec.get("containers") or []], [
        str(c.get("name")) for c in spec.get("initContainers") or []
    ]


def pick_container(pod: Obj, wanted: str) -> str:
    name = str((pod.get("metadata") or {}).get("name"))
    containers, inits = _container_names(pod)
    if not wanted:
        if len(containers) == 1:
            return containers[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        raise errors.bad_request(message)
    if wanted not in containers and wanted not in inits:
        raise errors.bad_request(f"container {wanted} is not valid for pod {name}")
    return wanted


def _not_started(pod: Obj, container: str) -> str | None:
    status = pod.get("status") or {}
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if c.get("name") == container:
            waiting = (c.get("state") or {}).get("waiting")
            if waiting is not None and not c.get("lastState"):
                return str(waiting.get("reason") or "ContainerCreating")
            return None
    return "ContainerCreating"


def _tail(data: bytes, lines: int | None, limit: int | None) -> bytes:
    if lines is not None:
        parts = data.splitlines(keepends=True)
        data = b"".join(parts[-lines:]) if lines > 0 else b""
    if limit is not None:
        data = data[:limit]
    return data


def _int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f'{name}: Invalid value: "{raw}": must be an integer') from None


async def serve(
    request: web.Request, core: ApiCore, lookup: LogLookup | None, namespace: str, name: str
) -> web.StreamResponse:
    rt = core.registry.get("", "v1", "pods")
    assert rt is not None
    pod = core.get(rt, namespace, name)
    container = pick_container(pod, request.query.get("container", ""))
    return await respond(request, pod, container, lookup)


async def respond(request: web.Request, pod: Obj, container: str, lookup: LogLookup | None) -> web.StreamResponse:
    """What the kubelet answers for one container's log (the sandbox's API server, and the real
    control plane's kubelet stand-in behind kube-apiserver's log proxy)."""
    md = pod.get("metadata") or {}
    namespace, name = str(md.get("namespace")), str(md.get("name"))
    q = request.query
    previous = q.get("previous", "").lower() in ("true", "1")
    follow = q.get("follow", "").lower() in ("true", "1")
    lines, limit = _int_param(request, "tailLines"), _int_param(request, "limitBytes")
    source = lookup(namespace, name, container, previous) if lookup is not None else None
    if source is None:
        if previous:
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        waiting = _not_started(pod, container)
        if waiting is not None:
            raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        return web.Response(body=b"", content_type="text/plain")
    data = _tail(source.path.read_bytes(), lines, limit)
    if not follow:
        return web.Response(body=data, content_type="text/plain")
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    await resp.write(data)
    offset = source.path.stat().st_size
    while True:
        alive = source.running()
        with source.path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        if chunk:
            offset += len(chunk)
            await resp.write(chunk)
        if not alive:
            break
        await asyncio.sleep(0.2)
    await resp.write_eof()
    return resp
