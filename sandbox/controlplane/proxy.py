"""The kubelet stand-in's kube-proxy: each Service's ClusterIP ports, forwarded to ready pods.

The real control plane's Service range is in the loopback block (``pki.SERVICE_CIDR``), so a
ClusterIP is an address this machine already answers on. For every ClusterIP Service with a
selector, the proxy listens on ``clusterIP:port`` (TCP) and forwards each connection to one ready
pod the selector picks, at the resolved targetPort, as kube-proxy's userspace mode once did.
kube-apiserver reaches a webhook's Service that way, by its ClusterIP, as it does on a cluster
without ``--enable-aggregator-routing``.

Pods come from the node runners (the pods bound to the simulated nodes), not from EndpointSlices:
process pods have loopback addresses, which EndpointSlice validation refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gpucluster.clusterstate import metadata as meta
from gpucluster.kube.predicates import pod_ready
from gpucluster.sandbox.controlplane.pki import SERVICE_CIDR
from gpucluster.sandbox.sim.endpoints import resolve_target_port, selects

Obj = dict[str, Any]
log = logging.getLogger("sandbox.controlplane.proxy")
SERVICE_NET = ipaddress.ip_network(SERVICE_CIDR)


def _loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def backends(service: Obj, port: Obj, pods: Iterable[Obj]) -> list[tuple[str, int]]:
    """Where a connection to ``service``'s ``port`` may go: (pod IP, target port) of each ready pod."""
    namespace = meta(service).get("namespace")
    out = []
    for pod in pods:
        if meta(pod).get("namespace") != namespace or meta(pod).get("deletionTimestamp"):
            continue
        if not selects(service, pod) or not pod_ready(pod) or not (pod.get("status") or {}).get("podIP"):
            continue
        target = resolve_target_port(port, pod)
        ip = str(pod["status"]["podIP"])
        # Only process pods listen, on loopback; a simulated pod's address is nobody's, never dialled.
        if target and _loopback(ip):
            out.append((ip, target))
    return sorted(out)


def listeners(service: Obj) -> list[tuple[str, int, Obj]]:
    """(ClusterIP, port, port spec) for each TCP port of a ClusterIP Service with a selector."""
    spec = service.get("spec") or {}
    ip = spec.get("clusterIP")
    if not ip or ip == "None" or not spec.get("selector"):
        return []
    try:
        if ipaddress.ip_address(ip) not in SERVICE_NET:
            return []
    except ValueError:
        return []
    return [(str(ip), int(p["port"]), p) for p in spec.get("ports") or [] if (p.get("protocol") or "TCP") == "TCP"]


class ServiceProxy:
    def __init__(self, pods: Callable[[], Iterable[Obj]]) -> None:
        self.pods = pods
        self.services: dict[tuple[str, str], Obj] = {}
        self._servers: dict[tuple[str, int], tuple[asyncio.Server, tuple[str, str], Obj]] = {}
        self._turn = itertools.count()

    def on_service(self, kind: str, service: Obj) -> None:
        key = (str(meta(service).get("namespace")), str(meta(service).get("name")))
        if kind == "DELETED":
            self.services.pop(key, None)
        else:
            self.services[key] = service
        asyncio.get_running_loop().create_task(self.sync())

    def on_list(self, services: Iterable[Obj]) -> None:
        self.services = {(str(meta(s).get("namespace")), str(meta(s).get("name"))): s for s in services}
        asyncio.get_running_loop().create_task(self.sync())

    async def sync(self) -> None:
        wanted: dict[tuple[str, int], tuple[tuple[str, str], Obj]] = {}
        for key, service in self.services.items():
            for ip, port, spec in listeners(service):
                wanted[(ip, port)] = (key, spec)
        for address in list(self._servers):
            server, key, spec = self._servers[address]
            if wanted.get(address) != (key, spec):
                server.close()
                del self._servers[address]
        for address, (key, spec) in wanted.items():
            if address in self._servers:
                continue
            try:
                server = await asyncio.start_server(self._handler(key, spec), address[0], address[1])
            except OSError as exc:
                log.warning("cannot listen service=%s/%s address=%s:%s error=%s", *key, *address, exc)
                continue
            self._servers[address] = (server, key, spec)
            log.info("proxying service=%s/%s address=%s:%s", *key, *address)

    def _handler(self, key: tuple[str, str], port: Obj) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            service = self.services.get(key)
            targets = backends(service, port, self.pods()) if service is not None else []
            if not targets:
                writer.close()  # kube-proxy rejects connections to a Service without endpoints
                return
            host, target = targets[next(self._turn) % len(targets)]
            try:
                up_reader, up_writer = await asyncio.open_connection(host, target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

        return handle

    async def close(self) -> None:
        for server, _, _ in self._servers.values():
            server.close()
        self._servers = {}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
