"""The resourceclaim controller (kube-controller-manager, ``pkg/controller/resourceclaim``).

For every pod entry ``spec.resourceClaims[]`` with ``resourceClaimTemplateName`` it creates a
ResourceClaim from the template, like upstream:

* ``generateName: <pod>-<podClaimName>-`` (both parts shortened in proportion when longer than 57
  characters), so the name is ``<pod>-<podClaimName>-<5 random characters>``;
* the template's ``spec.metadata`` labels and annotations plus the annotation
  ``resource.kubernetes.io/pod-claim-name: <podClaimName>``;
* an ownerReference to the pod (``controller: true``, ``blockOwnerDeletion: true``);
* the template's ``spec.spec`` as the claim's spec;

then records ``pod.status.resourceClaimStatuses`` (server-side apply of pods/status, field
manager ``ResourceClaimController``). An orphan claim (owned by the pod, with the annotation) is
adopted instead of creating a second one. Pods being deleted or done get no new claims.

A missing template is retried with a per-pod exponential backoff: 0.1 s doubling up to 5 s here
(kube-controller-manager's workqueue: 5 ms doubling up to 1000 s), and at once when the
template appears.

It also keeps ``status.reservedFor`` honest: entries for pods that are gone, replaced (other uid)
or done are removed; a claim no longer reserved by anyone loses its allocation and the
``resource.kubernetes.io/delete-protection`` finalizer the scheduler put on it (which lets the
garbage collector finish deleting the claims of deleted pods); an unreserved claim generated
for a pod that is done is deleted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from gpucluster.sandbox.apiserver.core import APPLY_PATCH
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.store import DELETED, Event
from gpucluster.sandbox.sim.base import Controller, Obj, Retry, meta

PODS = ("", "pods")
CLAIMS = ("resource.k8s.io", "resourceclaims")
TEMPLATES = ("resource.k8s.io", "resourceclaimtemplates")
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_BASE_LEN = 57


def generate_name(pod_name: str, claim_name: str) -> str:
    base = f"{pod_name}-{claim_name}-"
    if len(base) > MAX_BASE_LEN:
        total = len(base)
        base = (
            pod_name[: len(pod_name) * MAX_BASE_LEN // total]
            + "-"
            + claim_name[: len(claim_name) * MAX_BASE_LEN // total]
        )
    return base


def pod_done(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed")


def owning_pod(claim: Obj) -> tuple[str, str] | None:
    for ref in meta(claim).get("ownerReferences") or []:
        if ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod" and ref.get("controller"):
            return str(ref.get("name")), str(ref.get("uid"))
    return None


class ResourceClaimController(Controller):
    name = "resourceclaim-controller"
    username = "system:serviceaccount:kube-system:resource-claim-controller"
    field_manager = "ResourceClaimController"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (ns, template) -> pods
        self._reserving: dict[str, set[tuple[str, str]]] = {}  # pod uid -> claims reserved for it

    def initial_keys(self) -> Iterable[Hashable]:
        for claim in self.core.store.iter(CLAIMS):
            self._index_claim(claim, None)
            if (claim.get("status") or {}).get("reservedFor"):
                yield ("claim", meta(claim).get("namespace"), meta(claim).get("name"))
        for pod in self.core.store.iter(PODS):
            if self._pod_needs_claims(pod):
                yield ("pod", meta(pod).get("namespace"), meta(pod).get("name"))

    @staticmethod
    def _pod_needs_claims(pod: Obj) -> bool:
        entries = (pod.get("spec") or {}).get("resourceClaims") or []
        return any(e.get("resourceClaimTemplateName") for e in entries)

    def _index_claim(self, claim: Obj | None, old: Obj | None) -> None:
        for obj, add in ((old, False), (claim, True)):
            if obj is None:
                continue
            key = (str(meta(obj).get("namespace")), str(meta(obj).get("name")))
            for ref in (obj.get("status") or {}).get("reservedFor") or []:
                uid = str(ref.get("uid"))
                if add:
                    self._reserving.setdefault(uid, set()).add(key)
                else:
                    refs = self._reserving.get(uid)
                    if refs is not None:
                        refs.discard(key)
                        if not refs:
                            del self._reserving[uid]

    def on_event(self, event: Event) -> None:
        md = meta(event.obj)
        ns = str(md.get("namespace") or "")
        if event.resource == PODS:
            if event.type == DELETED or pod_done(event.obj):
                for claim in sorted(self._reserving.get(str(md.get("uid")), ())):
                    self.enqueue(("claim", *claim))
                if event.type == DELETED:
                    return
            if self._pod_needs_claims(event.obj):
                old = event.old
                if old is not None and (old.get("spec") or {}).get("resourceClaims") == (
                    event.obj.get("spec") or {}
                ).get("resourceClaims"):
                    before = (old.get("status") or {}).get("resourceClaimStatuses")
                    if before == (event.obj.get("status") or {}).get("resourceClaimStatuses"):
                        return
                self.enqueue(("pod", ns, md.get("name")))
        elif event.resource == TEMPLATES and event.type != DELETED:
            for pod in sorted(self._waiting.pop((ns, str(md.get("name"))), ())):
                self.enqueue(("pod", *pod))
        elif event.resource == CLAIMS:
            self._index_claim(None if event.type == DELETED else event.obj, event.old)
            if event.type == DELETED:
                owner = owning_pod(event.obj)
                if owner is not None:
                    self.enqueue(("pod", ns, owner[0]))  # recreate an accidentally deleted claim
                return
            if (event.obj.get("status") or {}).get("reservedFor") or FINALIZER in (md.get("finalizers") or []):
                self.enqueue(("claim", ns, md.get("name")))

    async def sync(self, key: Any) -> None:
        kind, ns, name = key
        if kind == "pod":
            await self._sync_pod(str(ns), str(name))
        else:
            await self._sync_claim(str(ns), str(name))

    # ------------------------------------------------------------ pods -> claims

    async def _sync_pod(self, ns: str, name: str) -> None:
        pod = self.core.store.get(PODS, ns, name)
        if pod is None or meta(pod).get("deletionTimestamp") or pod_done(pod):
            return
        uid = str(meta(pod).get("uid"))
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        new: dict[str, str] = {}
        claims_rt = self.rt("resource.k8s.io", "v1", "resourceclaims")
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            template_name = entry.get("resourceClaimTemplateName")
            pod_claim = str(entry.get("name") or "")
            if not template_name:
                continue
            recorded = statuses.get(pod_claim)
            if recorded:
                claim = self.core.store.get(CLAIMS, ns, str(recorded))
                if claim is not None and (owning_pod(claim) or ("", ""))[1] == uid:
                    continue  # already created
            found = self._find_orphan(uid, pod_claim)
            if found is None:
                template = self.core.store.get(TEMPLATES, ns, str(template_name))
                if template is None:
                    self._waiting.setdefault((ns, str(template_name)), set()).add((ns, name))
                    raise Retry(f'resource claim template "{template_name}" not found')
                tspec = template.get("spec") or {}
                tmeta = tspec.get("metadata") or {}
                claim_body: Obj = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {
                        "generateName": generate_name(name, pod_claim),
                        "namespace": ns,
                        "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_ANNOTATION: pod_claim},
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": name,
                                "uid": uid,
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": tspec.get("spec") or {},
                }
                if tmeta.get("labels"):
                    claim_body["metadata"]["labels"] = dict(tmeta["labels"])
                found = await self.core.create(claims_rt, ns, claim_body, self.context())
            new[pod_claim] = str(meta(found)["name"])
        if not new:
            return
        merged = {k: v for k, v in statuses.items() if k}
        merged.update(new)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "status": {
                "resourceClaimStatuses": [
                    {"name": k, "resourceClaimName": v} if v else {"name": k} for k, v in sorted(merged.items())
                ]
            },
        }
        pods_rt = self.rt("", "v1", "pods")
        await self.core.patch(pods_rt, ns, name, APPLY_PATCH, body, self.context(), subresource="status", force=True)

    def _find_orphan(self, pod_uid: str, pod_claim: str) -> Obj | None:
        for resource, obj in self.core.store.dependents(pod_uid):
            if resource != CLAIMS or meta(obj).get("deletionTimestamp"):
                continue
            if (meta(obj).get("annotations") or {}).get(POD_CLAIM_ANNOTATION) == pod_claim:
                return obj
        return None

    # ------------------------------------------------------------ claims: reservedFor, deallocation

    async def _sync_claim(self, ns: str, name: str) -> None:
        claim = self.core.store.get(CLAIMS, ns, name)
        if claim is None:
            return
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        valid = []
        for ref in reserved:
            if ref.get("resource") != "pods" or ref.get("apiGroup"):
                valid.append(ref)
                continue
            pod = self.core.store.get(PODS, ns, str(ref.get("name")))
            if pod is None or meta(pod).get("uid") != ref.get("uid") or pod_done(pod):
                continue
            valid.append(ref)
        rt = self.rt("resource.k8s.io", "v1", "resourceclaims")
        ctx = self.context()
        finalizers = list(meta(claim).get("finalizers") or [])
        if len(valid) < len(reserved) or (not valid and FINALIZER in finalizers and status.get("allocation")):
            new_status = {k: v for k, v in status.items() if k != "reservedFor"}
            if valid:
                new_status["reservedFor"] = valid
            elif FINALIZER in finalizers or meta(claim).get("deletionTimestamp"):
                new_status.pop("allocation", None)  # allocated by the scheduler: deallocate
            claim = await self.core.update(rt, ns, name, {**claim, "status": new_status}, ctx, subresource="status")
        if not valid and FINALIZER in finalizers and not (claim.get("status") or {}).get("allocation"):
            body = {**claim, "metadata": {**meta(claim), "finalizers": [f for f in finalizers if f != FINALIZER]}}
            claim = await self.core.update(rt, ns, name, body, ctx)
        if not valid and claim is not None and not meta(claim).get("deletionTimestamp"):
            owner = owning_pod(claim)
            if owner is not None:
                pod = self.core.store.get(PODS, ns, owner[0])
                if pod is not None and (meta(pod).get("uid") != owner[1] or pod_done(pod)):
                    try:
                        await self.core.delete(rt, ns, name, {}, ctx)
                    except ApiError as exc:
                        if exc.code != 404:
                            raise
