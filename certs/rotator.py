"""One pass of the certificate state machine against a live cluster (the I/O around rotation).

A pass reads the Secret and our webhook configurations, asks the local webhook which CA its
serving certificate comes from (when it runs beside one) and which replicas are live (the
webhook Service's EndpointSlices), lets :func:`certs.rotation.plan` decide, writes the Secret
when it changed (optimistic concurrency: a concurrent writer makes the pass start over), injects
the bundle into our webhook configurations and writes ``ca.crt``, ``tls.crt`` and ``tls.key``
into ``cert_dir`` for the webhook's reload. Every replica runs it; they converge on one Secret.

Permissions: get/update the one Secret (create too when the chart did not create it), list
EndpointSlices in the namespace, get/patch our two webhook configurations.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509

from gpucluster.certs import files, inject, rotation
from gpucluster.certs.inject import Injection, KubeAPI
from gpucluster.kube.client import KubeError

log = logging.getLogger("gpucluster.certs")

SECRET_LABELS = {
    "app.kubernetes.io/name": "gpucluster",
    "app.kubernetes.io/component": "webhook-certificates",
    "app.kubernetes.io/managed-by": "gpucluster",
}


@dataclass(frozen=True)
class RotateOptions:
    namespace: str
    secret: str
    service: str
    cert_dir: Path | None = None
    replica: str | None = None  # this pod's name, for its serving report
    probe: tuple[str, int] | None = None  # the local webhook to ask what it serves
    observe_replicas: bool = True  # read the Service's EndpointSlices
    inject: bool = True
    extra_dns_names: Sequence[str] = ()
    policy: rotation.Policy = field(default_factory=rotation.Policy)


@dataclass(frozen=True)
class RotateResult:
    plan: rotation.Plan
    wrote_secret: bool
    injections: list[Injection]
    wrote_files: bool


def decode_data(obj: dict[str, Any] | None) -> rotation.SecretState | None:
    """A Secret object as the state machine reads it."""
    if obj is None:
        return None
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    annotations = dict((obj.get("metadata") or {}).get("annotations") or {})
    return rotation.SecretState(data, annotations)


def encode_secret(
    state: rotation.SecretState, *, namespace: str, name: str, current: dict[str, Any] | None
) -> dict[str, Any]:
    """The Secret object to write: ``current`` (kept fields, resourceVersion) with new data."""
    obj: dict[str, Any] = (
        dict(current) if current else {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls"}
    )
    meta = dict(obj.get("metadata") or {})
    meta.update(name=name, namespace=namespace)
    meta["labels"] = {**SECRET_LABELS, **(meta.get("labels") or {})}
    if state.annotations:
        meta["annotations"] = dict(state.annotations)
    else:
        meta.pop("annotations", None)
    obj["metadata"] = meta
    obj["data"] = {k: base64.b64encode(v).decode() for k, v in sorted(state.data.items())}
    obj.setdefault("apiVersion", "v1")
    obj.setdefault("kind", "Secret")
    return obj


def secret_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/secrets"
    return f"{base}/{name}" if name else base


async def read_secret(kube: KubeAPI, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.request("GET", secret_path(namespace, name))
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


async def write_secret(kube: KubeAPI, obj: dict[str, Any], *, create: bool) -> dict[str, Any]:
    meta = obj["metadata"]
    if create:
        return await kube.request("POST", secret_path(meta["namespace"]), body=obj)
    return await kube.request("PUT", secret_path(meta["namespace"], meta["name"]), body=obj)


async def live_replicas(kube: KubeAPI, namespace: str, service: str) -> list[str] | None:
    """Pods behind the Service that the API server may call (ready or serving endpoints), or None
    when they cannot be read."""
    try:
        listing = await kube.request(
            "GET",
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            query=[("labelSelector", f"kubernetes.io/service-name={service}")],
        )
    except KubeError as exc:
        level = logging.DEBUG if exc.status == 404 else logging.WARNING  # 404: not served (test clusters)
        log.log(level, "cannot list endpointslices service=%s status=%s", service, exc.status)
        return None
    names = set()
    for item in listing.get("items") or []:
        for endpoint in item.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            if conditions.get("ready") is False and conditions.get("serving") is not True:
                continue
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind", "Pod") == "Pod" and ref.get("name"):
                names.add(str(ref["name"]))
    return sorted(names)


async def probe_serving(host: str, port: int, *, timeout: float = 5.0) -> str | None:
    """The issuer id of the certificate the webhook at host:port serves, or None if unreachable."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # we only read which certificate it presents
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), timeout)
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    if not der:
        return None
    return rotation.issuer_id(x509.load_der_x509_certificate(der))


def serving_files(state: rotation.SecretState) -> dict[str, bytes]:
    """What a webhook pod may hold on disk: the bundle and the serving pair, never a CA key."""
    return {k: state.data[k] for k in rotation.SERVING_FILES if k in state.data}


async def rotate_once(
    kube: KubeAPI,
    options: RotateOptions,
    *,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    attempts: int = 3,
) -> RotateResult:
    """One pass; a concurrent write to the Secret makes it read and decide again."""
    for attempt in range(attempts):
        current = await read_secret(kube, options.namespace, options.secret)
        state = decode_data(current)
        configs = await inject.list_ours(kube) if options.inject else []
        injected = [b for c in configs for b in inject.injected_bundles(c)] if options.inject else None
        live = await live_replicas(kube, options.namespace, options.service) if options.observe_replicas else None
        annotations = dict(state.annotations) if state else {}
        if options.replica and options.probe:
            served = await probe_serving(*options.probe)
            annotations = rotation.record_report(annotations, replica=options.replica, serving=served, live=live)
        elif live is not None:
            annotations = rotation.record_report(annotations, live=live)
        observed = rotation.SecretState(state.data, annotations) if state else None
        plan = rotation.plan(
            observed,
            now=clock(),
            service=options.service,
            namespace=options.namespace,
            replicas=rotation.replica_view(annotations, live),
            injected=injected,
            extra_dns_names=options.extra_dns_names,
            policy=options.policy,
        )
        final = plan.secret or observed
        assert final is not None  # plan always writes a Secret that does not exist
        wrote = False
        if state is None or final != state:
            obj = encode_secret(final, namespace=options.namespace, name=options.secret, current=current)
            try:
                await write_secret(kube, obj, create=current is None)
            except KubeError as exc:
                if exc.status in (409, 404) and attempt + 1 < attempts:  # someone else wrote first
                    log.info("secret changed underneath, retrying secret=%s", options.secret)
                    continue
                raise
            wrote = True
            log.info(
                "certificates action=%s phase=%s reason=%r secret=%s/%s",
                plan.action, plan.phase, plan.reason, options.namespace, options.secret,
            )  # fmt: skip
        injections = await inject.inject(kube, plan.bundle, generation=plan.generation) if options.inject else []
        for injection in injections:
            if injection.changed:
                log.info("caBundle injected kind=%s name=%s", injection.kind, injection.name)
        wrote_files = False
        if options.cert_dir is not None:
            wrote_files = files.write_atomically(options.cert_dir, serving_files(final))
        return RotateResult(plan, wrote, injections, wrote_files)
    raise AssertionError("unreachable")  # the last attempt returns or raises


async def rotate_forever(
    kube: KubeAPI, options: RotateOptions, *, interval: float, stop: asyncio.Event | None = None
) -> None:
    """Run a pass every ``interval`` seconds until ``stop`` is set.

    A failed pass, or one that found fewer of our webhook configurations than it injects into,
    is retried sooner (1 s, doubling up to ``interval``): Helm creates the webhook configurations
    after the Deployment, so the first passes run before there is anything to inject into, and
    the API server cannot call the webhook until the caBundle is there.
    """
    stop = stop or asyncio.Event()
    soon = 1.0
    while not stop.is_set():
        delay = interval
        try:
            result = await rotate_once(kube, options)
            if options.inject and len(result.injections) < len(inject.OUR_NAMES):
                log.debug("webhook configurations missing, next pass in %.0fs", min(soon, interval))
                delay, soon = min(soon, interval), soon * 2
            else:
                soon = 1.0
        except Exception as exc:  # a daemon loop outlives a failed pass (API server away, 403...)
            log.error("certificate pass failed error=%s", exc)
            delay, soon = min(soon, interval), soon * 2
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
