"""caBundle injection into our own webhook configurations, and never into anyone else's.

A configuration is ours when its name is one of :data:`OUR_NAMES` *and* it carries the label
``gpucluster.nvidia.com/inject-ca-bundle: "true"`` (both: a same-named configuration of another
tool is left alone, and so is a labelled one we did not name). Not ``app.kubernetes.io/managed-by``:
Helm sets that label to ``Helm`` on every object it installs, whatever the chart says. The patch is computed by diffing the
original and the injected object, and starts with a ``test`` of ``metadata.resourceVersion`` so
a concurrent writer makes it fail instead of being overwritten. The bundle's generation (see
:mod:`gpucluster.certs.rotation`) is recorded on the configuration; a bundle of an older generation is never
injected over a newer one.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jsonpatch

from gpucluster.certs.rotation import BUNDLE_GENERATION

VALIDATING_KIND = "ValidatingWebhookConfiguration"
MUTATING_KIND = "MutatingWebhookConfiguration"
API_VERSION = "admissionregistration.k8s.io/v1"
CA_INJECTION_LABEL = "gpucluster.nvidia.com/inject-ca-bundle"
# The names webhook/configurations.py and the chart give our configurations.
VALIDATING_NAME = "gpucluster-validating-webhook"
MUTATING_NAME = "gpucluster-mutating-webhook"
OUR_NAMES = frozenset({VALIDATING_NAME, MUTATING_NAME})
_PLURALS = {VALIDATING_KIND: "validatingwebhookconfigurations", MUTATING_KIND: "mutatingwebhookconfigurations"}

KubeObject = dict[str, Any]
JsonPatch = list[dict[str, Any]]


def is_ours(obj: KubeObject, names: Iterable[str] = OUR_NAMES) -> bool:
    """True for a webhook configuration of ours (by name and the CA-injection label)."""
    meta = obj.get("metadata") or {}
    return (
        obj.get("kind") in _PLURALS
        and meta.get("name") in set(names)
        and (meta.get("labels") or {}).get(CA_INJECTION_LABEL) == "true"
    )


def injected_bundles(obj: KubeObject) -> list[bytes]:
    """The caBundle of every webhook of a configuration (b"" where unset or undecodable)."""
    out = []
    for webhook in obj.get("webhooks") or []:
        raw = (webhook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            out.append(base64.b64decode(raw, validate=True))
        except ValueError:
            out.append(b"")
    return out


def _generation_of(obj: KubeObject) -> int | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(BUNDLE_GENERATION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def with_ca_bundle(obj: KubeObject, bundle: bytes, generation: int | None = None) -> KubeObject | None:
    """``obj`` with ``bundle`` in every webhook's clientConfig, or None when nothing is to change
    (already injected, not ours, or ``generation`` older than the one injected)."""
    if not is_ours(obj):
        return None
    current = _generation_of(obj)
    if generation is not None and current is not None and generation < current:
        return None
    encoded = base64.b64encode(bundle).decode()
    out = copy.deepcopy(obj)
    for webhook in out.get("webhooks") or []:
        webhook.setdefault("clientConfig", {})["caBundle"] = encoded
    if generation is not None:
        out["metadata"].setdefault("annotations", {})[BUNDLE_GENERATION] = str(generation)
    return None if out == obj else out


def ca_bundle_patch(obj: KubeObject, bundle: bytes, generation: int | None = None) -> JsonPatch | None:
    """The JSON patch injecting ``bundle`` into ``obj`` (see :func:`with_ca_bundle`), or None."""
    target = with_ca_bundle(obj, bundle, generation)
    if target is None:
        return None
    ops: JsonPatch = list(jsonpatch.make_patch(obj, target))
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if version:
        ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
    return ops


# --- I/O --------------------------------------------------------------------------------------


class KubeAPI(Protocol):
    """What injection needs of :class:`gpucluster.kube.client.Kube`."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 30.0,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Injection:
    """What happened to one configuration."""

    kind: str
    name: str
    changed: bool


def collection(kind: str) -> str:
    return f"/apis/{API_VERSION}/{_PLURALS[kind]}"


def path(kind: str, name: str) -> str:
    return f"{collection(kind)}/{name}"


async def list_ours(kube: KubeAPI) -> list[KubeObject]:
    """Our webhook configurations, read by name (so RBAC can name them) and checked by label."""
    from gpucluster.kube.client import KubeError

    out: list[KubeObject] = []
    for kind, name in ((VALIDATING_KIND, VALIDATING_NAME), (MUTATING_KIND, MUTATING_NAME)):
        try:
            obj = await kube.request("GET", path(kind, name))
        except KubeError as exc:
            if exc.status == 404:
                continue
            raise
        obj = {**obj, "apiVersion": API_VERSION, "kind": kind}
        if is_ours(obj):
            out.append(obj)
    return out


async def inject(kube: KubeAPI, bundle: bytes, *, generation: int | None = None, attempts: int = 3) -> list[Injection]:
    """Inject ``bundle`` into every webhook of our configurations; retried on a concurrent write."""
    from gpucluster.kube.client import KubeError

    results: dict[tuple[str, str], Injection] = {}
    for attempt in range(attempts):
        pending = False
        for obj in await list_ours(kube):
            kind, name = obj["kind"], obj["metadata"]["name"]
            patch = ca_bundle_patch(obj, bundle, generation)
            if patch is None:
                results.setdefault((kind, name), Injection(kind, name, False))
                continue
            try:
                await kube.request("PATCH", path(kind, name), body=patch, content_type="application/json-patch+json")
            except KubeError as exc:
                # A failed ``test`` (another writer got there first) is a 409 or a 422: read again.
                if exc.status in (409, 422) and attempt + 1 < attempts:
                    pending = True
                    continue
                raise
            results[(kind, name)] = Injection(kind, name, True)
        if not pending:
            break
    return sorted(results.values(), key=lambda i: (i.kind, i.name))
