"""The Job controller (kube-controller-manager's ``pkg/controller/job``) and the TTL-after-finished
controller, for batch/v1 Jobs in NonIndexed completion mode.

A Job keeps ``min(parallelism, completions - succeeded)`` active pods (work-queue Jobs without
``completions``: ``parallelism`` until one succeeds), named ``<job>-<5 random>`` from its
template, owned by it (``controller``, ``blockOwnerDeletion``) with the template's labels (the
API server's defaulting adds ``batch.kubernetes.io/job-name``/``controller-uid``). Status from the
pods: ``active``, ``ready``, ``terminating``, ``succeeded``, ``failed`` (with ``OnFailure``,
container restarts count as failures, as upstream), ``startTime``. As in 1.34: on success
``SuccessCriteriaMet`` then, once no pod runs any more, ``Complete`` with ``completionTime``;
past ``backoffLimit`` or ``activeDeadlineSeconds`` ``FailureTarget`` (``BackoffLimitExceeded``/
``DeadlineExceeded``), the active pods are deleted, then ``Failed``. A failed pod is replaced after
a back-off (``backoff_base`` doubling per failure, capped at ``backoff_max``). ``suspend`` deletes
the active pods and sets ``Suspended``. A finished Job with ``ttlSecondsAfterFinished`` is deleted
(propagation Background) that long after it finished. Not modelled: Indexed mode, pod failure and
success policies, the ``job-tracking`` finalizer (pods deleted by others before they were counted
are not counted), ``podReplacementPolicy``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Iterable
from typing import Any

from gpucluster import timestamps
from gpucluster.kube.predicates import pod_ready
from gpucluster.sandbox.apiserver.core import ApiCore
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.store import DELETED, Event
from gpucluster.sandbox.sim.base import Controller, Obj, meta

JOBS = ("batch", "jobs")
PODS = ("", "pods")


def _ts(value: Any) -> dt.datetime | None:
    try:
        return timestamps.parse(str(value))
    except ValueError:
        return None


def _int(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _controller_uid(obj: Obj) -> str | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job":
            return str(ref.get("uid"))
    return None


def _condition(status: Obj, kind: str) -> Obj | None:
    return next(
        (c for c in status.get("conditions") or [] if c.get("type") == kind and c.get("status") == "True"), None
    )


def finished(job: Obj) -> Obj | None:
    """The Complete or Failed condition of a finished Job."""
    status = job.get("status") or {}
    return _condition(status, "Complete") or _condition(status, "Failed")


class JobController(Controller):
    name = "job-controller"
    username = "system:serviceaccount:kube-system:job-controller"
    field_manager = "kube-controller-manager"

    def __init__(self, core: ApiCore, *, backoff_base: float = 10.0, backoff_max: float = 360.0) -> None:
        super().__init__(core)
        self.pod_backoff_base = backoff_base
        self.pod_backoff_max = backoff_max
        self._pods: dict[str, set[tuple[str, str]]] = {}  # job uid -> its pods
        self._uid_of: dict[tuple[str, str], str] = {}
        self._last_failure: dict[str, dt.datetime] = {}

    def initial_keys(self) -> Iterable[Hashable]:
        for pod in self.core.store.iter(PODS):
            self._index(pod, present=True)
        return [(meta(j).get("namespace"), meta(j).get("name")) for j in self.core.store.iter(JOBS)]

    def _index(self, pod: Obj, *, present: bool) -> str | None:
        key = (str(meta(pod).get("namespace")), str(meta(pod).get("name")))
        old = self._uid_of.pop(key, None)
        if old is not None:
            self._pods.get(old, set()).discard(key)
        uid = _controller_uid(pod) if present else None
        if uid is not None:
            self._uid_of[key] = uid
            self._pods.setdefault(uid, set()).add(key)
        return uid or old

    def on_event(self, event: Event) -> None:
        if event.resource == JOBS:
            if event.type == DELETED:
                self._pods.pop(str(meta(event.obj).get("uid")), None)
                return
            self.enqueue((meta(event.obj).get("namespace"), meta(event.obj).get("name")))
        elif event.resource == PODS:
            uid = self._index(event.obj, present=event.type != DELETED)
            if uid is None:
                return
            owner = next(
                (r.get("name") for r in meta(event.obj).get("ownerReferences") or [] if r.get("uid") == uid), None
            )
            if owner:
                self.enqueue((meta(event.obj).get("namespace"), owner))

    def _now(self) -> dt.datetime:
        return self.core.clock() if self.core.clock else dt.datetime.now(dt.UTC)

    async def sync(self, key: Any) -> None:
        ns, name = str(key[0]), str(key[1])
        job = self.core.store.get(JOBS, ns, name)
        if job is None or meta(job).get("deletionTimestamp"):
            return
        uid = str(meta(job).get("uid"))
        spec, status = job.get("spec") or {}, dict(job.get("status") or {})
        pods = [p for k in sorted(self._pods.get(uid, ())) if (p := self.core.store.get(PODS, *k)) is not None]
        now = self._now()
        stamp = timestamps.rfc3339(now)
        done = finished(job)
        if done is not None:
            await self._expire(job, done, now)
            return
        terminal = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
        deleting = [p for p in pods if meta(p).get("deletionTimestamp") and p not in terminal]
        active = [p for p in pods if p not in terminal and p not in deleting]
        succeeded = max(
            int(status.get("succeeded") or 0), sum(1 for p in terminal if p["status"]["phase"] == "Succeeded")
        )
        failed_pods = [p for p in terminal if p["status"]["phase"] == "Failed"]
        failed = max(int(status.get("failed") or 0), len(failed_pods))
        restarts = 0
        if (spec.get("template") or {}).get("spec", {}).get("restartPolicy") == "OnFailure":
            restarts = sum(
                int(c.get("restartCount") or 0)
                for p in active
                for c in (p.get("status") or {}).get("containerStatuses") or []
            )
        completions = spec.get("completions")
        parallelism = _int(spec.get("parallelism"), 1)
        backoff_limit = _int(spec.get("backoffLimit"), 6)
        conditions: list[Obj] = list(status.get("conditions") or [])
        suspended = bool(spec.get("suspend"))

        def add(kind: str, reason: str, message: str) -> None:
            if any(c.get("type") == kind and c.get("status") == "True" for c in conditions):
                return
            conditions[:] = [c for c in conditions if c.get("type") != kind]
            conditions.append(
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
            )

        if not suspended and not status.get("startTime"):
            status["startTime"] = stamp
        start = _ts(status.get("startTime"))
        deadline = spec.get("activeDeadlineSeconds")
        success = _condition(status, "SuccessCriteriaMet") is not None or (
            succeeded >= int(completions) if completions is not None else succeeded > 0 and not active
        )
        failure = _condition(status, "FailureTarget")
        if success:
            add("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
        elif failure is None and failed + restarts > backoff_limit:
            add("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif failure is None and deadline is not None and start is not None and not suspended:
            left = start + dt.timedelta(seconds=int(deadline)) - now
            if left.total_seconds() <= 0:
                add("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline")
            else:
                self.enqueue_after(key, left.total_seconds())
        failure = next((c for c in conditions if c.get("type") == "FailureTarget" and c.get("status") == "True"), None)
        rt_pods = self.rt("", "v1", "pods")
        ctx = self.context()
        if success or failure is not None or suspended:
            for p in active:
                await self._delete_pod(rt_pods, p, ctx)
            if suspended and not success and failure is None:
                add("Suspended", "JobSuspended", "Job suspended")
            deleting += active
            active = []
        else:
            conditions[:] = [c for c in conditions if c.get("type") != "Suspended"]
            if completions is None:
                wanted = 0 if succeeded > 0 else parallelism
            else:
                wanted = min(parallelism, max(int(completions) - succeeded, 0))
            if len(active) < wanted:
                delay = self._pod_backoff(uid, len(failed_pods), failed_pods, now)
                if delay > 0:
                    self.enqueue_after(key, delay)
                else:
                    for _ in range(wanted - len(active)):
                        active.append(await self._create_pod(job, ctx))
            elif len(active) > wanted:
                surplus = sorted(active, key=lambda p: (pod_ready(p), str(meta(p).get("creationTimestamp"))))
                for p in surplus[: len(active) - wanted]:
                    await self._delete_pod(rt_pods, p, ctx)
                    active.remove(p)
                    deleting.append(p)
        if not deleting and not active:
            if success:
                add("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
                status["completionTime"] = status.get("completionTime") or stamp
            elif failure is not None:
                add("Failed", str(failure.get("reason")), str(failure.get("message")))
        status.update(
            active=len(active),
            ready=sum(1 for p in active if pod_ready(p)),
            terminating=len(deleting),
            succeeded=succeeded,
            failed=failed,
            uncountedTerminatedPods={},
        )
        for field in ("active", "succeeded", "failed", "terminating"):
            if not status[field]:
                status.pop(field)
        if conditions:
            status["conditions"] = conditions
        if status != (job.get("status") or {}):
            rt = self.rt("batch", "v1", "jobs")
            job = await self.core.update(rt, ns, name, {**job, "status": status}, ctx, subresource="status")
        done = finished(job)
        if done is not None:
            await self._expire(job, done, now)

    def _pod_backoff(self, uid: str, failures: int, failed_pods: list[Obj], now: dt.datetime) -> float:
        """Seconds until a replacement for a failed pod may be created (kube's pod-failure back-off)."""
        if failures == 0:
            return 0.0
        last = max(
            (
                _ts(meta(p).get("deletionTimestamp") or (p.get("status") or {}).get("startTime")) or now
                for p in failed_pods
            ),
            default=now,
        )
        seen = self._last_failure.get(uid)
        if seen is None or seen < last:
            self._last_failure[uid] = seen = now
        delay = min(self.pod_backoff_base * 2 ** (failures - 1), self.pod_backoff_max)
        return max((seen + dt.timedelta(seconds=delay) - now).total_seconds(), 0.0)

    async def _create_pod(self, job: Obj, ctx: Any) -> Obj:
        md = meta(job)
        template = (job.get("spec") or {}).get("template") or {}
        tmd = template.get("metadata") or {}
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{md['name']}-",
                "namespace": md["namespace"],
                "labels": dict(tmd.get("labels") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": md["name"],
                        "uid": md["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": dict(template.get("spec") or {}),
        }
        if tmd.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmd["annotations"])
        rt = self.rt("", "v1", "pods")
        created = await self.core.create(rt, str(md["namespace"]), pod, ctx, managed=False)
        self._index(created, present=True)
        return created

    async def _delete_pod(self, rt: Any, pod: Obj, ctx: Any) -> None:
        md = meta(pod)
        try:
            await self.core.delete(
                rt, str(md["namespace"]), str(md["name"]), {"preconditions": {"uid": md.get("uid")}}, ctx
            )
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    async def _expire(self, job: Obj, done: Obj, now: dt.datetime) -> None:
        """The TTL-after-finished controller."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        md = meta(job)
        when = _ts((job.get("status") or {}).get("completionTime") or done.get("lastTransitionTime")) or now
        left = (when + dt.timedelta(seconds=int(ttl)) - now).total_seconds()
        if left > 0:
            self.enqueue_after((md.get("namespace"), md.get("name")), left)
            return
        rt = self.rt("batch", "v1", "jobs")
        try:
            await self.core.delete(
                rt,
                str(md["namespace"]),
                str(md["name"]),
                {"propagationPolicy": "Background", "preconditions": {"uid": md.get("uid")}},
                self.context(),
            )
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
