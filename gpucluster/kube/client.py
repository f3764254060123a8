"""Raw-JSON access to the API server through the official ``kubernetes.aio`` client."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config
from kubernetes.aio.config import incluster_config as aio_incluster

from gpucluster.errors import InputError
from gpucluster.kube.workqueue import BucketRateLimiter

log = logging.getLogger("gpucluster.kube.client")

KubeObject = dict[str, Any]
Query = Sequence[tuple[str, str]]
SERVICEACCOUNT_DIR_ENV = "GPUCLUSTER_SERVICEACCOUNT_DIR"


class KubeError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code and ``body`` the Status object when there is one."""

    def __init__(self, status: int, body: Mapping[str, Any] | None, method: str, path: str) -> None:
        self.status = status
        self.body = dict(body or {})
        self.reason = str(self.body.get("reason", ""))
        message = self.body.get("message") or f"HTTP {status}"
        super().__init__(f"{method} {path}: {status} {self.reason}: {message}".replace(": :", ":"))


async def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> aio_client.Configuration:
    """A client configuration from ``kubeconfig``, else in-cluster, else ``$KUBECONFIG``/~/.kube/config."""
    configuration = aio_client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        # GPUCLUSTER_SERVICEACCOUNT_DIR: where the token and CA are when not at the standard path
        # (the sandbox's process pods, whose volumes live in a per-pod directory).
        sa_dir = os.environ.get(SERVICEACCOUNT_DIR_ENV)
        if sa_dir:
            aio_incluster.InClusterConfigLoader(
                token_filename=os.path.join(sa_dir, "token"), cert_filename=os.path.join(sa_dir, "ca.crt")
            ).load_and_set(configuration)
        else:
            aio_config.load_incluster_config(client_configuration=configuration)
    else:
        await aio_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
        )
    return configuration


def check_kubeconfig(path: str) -> None:
    """One clear line for a kubeconfig the client would fail on obscurely (an empty file gave
    "'NoneType' object does not support item assignment")."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"--kubeconfig {path}: cannot read it: {detail}") from None
    if data is None:
        raise InputError(f"--kubeconfig {path}: the file is empty (a kubeconfig names clusters, users and contexts)")
    if not isinstance(data, dict):
        raise InputError(f"--kubeconfig {path}: not a kubeconfig (a YAML mapping with clusters, users and contexts)")
    if not data.get("contexts") and not data.get("current-context"):
        raise InputError(f"--kubeconfig {path}: no contexts: nothing says which cluster to use")


def _proxy_once(configuration: Any) -> None:
    """The environment's proxy for the API server, decided once, as client-go's
    ``http.ProxyFromEnvironment`` does. The official client's session would otherwise ask the
    environment (and read ``~/.netrc``, which client-go never does) in a thread on every request."""
    import urllib.parse
    import urllib.request

    if configuration.proxy is None:
        host = urllib.parse.urlsplit(str(configuration.host)).hostname or ""
        proxies = urllib.request.getproxies()
        proxy = proxies.get("https") if str(configuration.host).startswith("https") else proxies.get("http")
        if proxy and not urllib.request.proxy_bypass(host):
            configuration.proxy = proxy
    configuration.client_session_kwargs = {**(configuration.client_session_kwargs or {}), "trust_env": False}


# Far above any object the API server stores (etcd's limit is 1.5 MiB): a stream that never ends
# an event is not a watch, and must not hold the process's memory.
MAX_WATCH_EVENT_BYTES = 64 * 1024 * 1024


async def _pause_reading(response: aiohttp.ClientResponse, seconds: float) -> None:
    """Leave ``response``'s connection unread for ``seconds`` (what arrives waits in the socket's and the TLS layer's buffers)."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    if transport is None or transport.is_closing():
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()


# client-go's rest.Config defaults (DefaultQPS, DefaultBurst), taken when a limit is asked for with 0.
DEFAULT_QPS = 5.0
DEFAULT_BURST = 10


class Throttle:
    """Client-side rate limiting of every request, as client-go's ``rest.Config`` ``QPS`` and ``Burst``
    (``flowcontrol.NewTokenBucketRateLimiter``): ``qps`` requests a second, ``burst`` at once; a
    request that finds the bucket empty waits for its token. ``qps`` or ``burst`` 0 take
    client-go's defaults (5 and 10); :func:`rate_limit` gives none for a negative ``qps``, as client-go."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps or DEFAULT_QPS
        self.burst = burst or DEFAULT_BURST
        self._bucket = BucketRateLimiter(self.qps, self.burst)
        self.waited = 0.0  # seconds requests spent waiting for a token, all told

    async def wait(self) -> None:
        delay = self._bucket.when(None)
        if delay > 0:
            self.waited += delay
            if delay >= 1.0:  # as client-go says it: the API server did not slow us, we did
                log.info("waiting %.1fs for a request token (client-side throttling, qps=%g burst=%d)",
                         delay, self.qps, self.burst)  # fmt: skip
            await asyncio.sleep(delay)


def rate_limit(qps: float = -1.0, burst: int = 0) -> Throttle | None:
    """The client-side limit for ``qps`` and ``burst`` (client-go's meaning: a negative ``qps`` is none)."""
    if qps < 0:
        return None
    if burst < 0:
        raise InputError(f"API burst {burst}: must not be negative")
    return Throttle(qps, burst)


@dataclass
class Kube:
    """JSON requests over a configured ``ApiClient``, throttled by ``throttle`` when there is one."""

    api: aio_client.ApiClient
    throttle: Throttle | None = None

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, context: str | None = None, *, qps: float = -1.0, burst: int = 0
    ) -> Kube:
        """A client for ``kubeconfig`` (else in-cluster, else the default kubeconfig), sending at most
        ``qps`` requests a second and ``burst`` at once (:func:`rate_limit`; by default no limit).

        A missing or unusable configuration raises :class:`InputError` with one line.
        """
        limit = rate_limit(qps, burst)
        if kubeconfig is not None and not os.path.isfile(kubeconfig):
            raise InputError(f"--kubeconfig {kubeconfig}: no such file")
        if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            # Said here: the client itself would print "Config not found" before failing.
            candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
            candidates = candidates or [os.path.expanduser("~/.kube/config")]
            if not any(os.path.isfile(p) for p in candidates):
                raise InputError(
                    f"no cluster configured: pass --kubeconfig, or set $KUBECONFIG (looked at {', '.join(candidates)})"
                )
        if kubeconfig is not None:
            check_kubeconfig(kubeconfig)
        try:
            configuration = await load_configuration(kubeconfig, context)
        except Exception as exc:  # the client raises config, YAML, OS and value errors alike
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise InputError(f"cannot load the cluster configuration: {detail}") from None
        _proxy_once(configuration)
        return cls(aio_client.ApiClient(configuration), limit)

    async def close(self) -> None:
        await self.api.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> Any:
        if self.throttle is not None:
            await self.throttle.wait()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        # The official client serializes JSON bodies itself (json.dumps), so hand it plain objects.
        payload = json.loads(body) if isinstance(body, (str, bytes)) else body
        m, url, hdrs, data, _ = await self.api.param_serialize(
            method, path, query_params=list(query), header_params=headers, body=payload, auth_settings=["BearerToken"]
        )
        return await self.api.call_api(
            m, url, header_params=hdrs, body=data, _request_timeout=timeout, _preload_content=False
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> KubeObject:
        """Send a request and return the decoded JSON body; non-2xx raises :class:`KubeError`."""
        resp = await self._send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        raw = await resp.read()
        try:
            decoded = orjson.loads(raw) if raw else {}
        except json.JSONDecodeError:  # orjson's error is one
            decoded = {"message": raw[:200].decode(errors="replace")}
        if not 200 <= resp.status < 300:
            raise KubeError(resp.status, decoded if isinstance(decoded, dict) else None, method, path)
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def get(self, path: str, query: Query = ()) -> KubeObject:
        return await self.request("GET", path, query=query)

    async def watch(
        self, path: str, query: Query, *, timeout: float | None = None, batch: float = 0.0
    ) -> AsyncIterator[KubeObject]:
        """Yield watch events ``{"type", "object"}`` until the server ends the stream.

        ``batch``: after the events that had arrived, stop reading the connection for that many
        seconds, so that the next read takes all that came meanwhile (the socket's and the TLS
        layer's buffers hold them). A wake-up per event costs more than its decoding: for node
        heartbeats, thousands a second on a large cluster, 20 ms late is worth about a third of
        the controller's CPU."""
        resp = await self._send("GET", path, query=[*query, ("watch", "true")], timeout=timeout)
        if not 200 <= resp.status < 300:
            raw = await resp.read()
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                body = None
            raise KubeError(resp.status, body, "WATCH", path)
        content = resp.response.content
        # Whatever has arrived is read at once and split into events here: one wake-up for a bunch
        # of node heartbeats rather than one per line. orjson: a third of json's time; the API
        # server's numbers are int64 or float64 (Go), which it reads exactly.
        start: list[bytes] = []  # the start of an event whose end has not arrived
        started = 0  # its bytes
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                end = chunk.rfind(b"\n")
                if end < 0:
                    start.append(chunk)
                    started += len(chunk)
                    if started > MAX_WATCH_EVENT_BYTES:
                        raise ValueError(f"watch {path}: an event of more than {MAX_WATCH_EVENT_BYTES} bytes")
                    continue
                data = b"".join((*start, chunk)) if start else chunk
                end += len(data) - len(chunk)
                start = [data[end + 1 :]] if end + 1 < len(data) else []
                started = len(data) - end - 1
                for line in data[:end].split(b"\n"):
                    if line and not line.isspace():
                        yield orjson.loads(line)
                if batch > 0:
                    await _pause_reading(resp.response, batch)
            # An event cut off by the end of the stream is left: the next watch, from the last
            # version seen, sends it again (as client-go's decoder ends a watch on a short read).
        finally:
            resp.response.release()
