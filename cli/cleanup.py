"""``gpucluster cleanup``: take a release's GPUCluster down without stranding GPU workloads.

The chart's pre-delete hook runs it before Helm removes the operator. Removing the DRA driver's
kubelet plugin while pods still hold claims it prepared leaves the kubelet unable to unprepare
them: those pods hang in Terminating when deleted, and their devices are never freed
(kubernetes/kubernetes#129402). So:

* while pods hold claims of the NVIDIA drivers (other than the operands' own, which the
  GPUCluster's finalizer drains), it refuses, naming them, and changes nothing;
* with ``--force`` it deletes the GPUCluster (its finalizer deletes the DeviceClasses first, so
  nothing new is allocated, and keeps the kubelet plugin until no claim is held), then deletes
  those pods and waits until the GPUCluster is gone: every claim was unprepared while the plugin
  ran, and the finalizer then deleted the claim templates the operator created;
* then it deletes the release's NVIDIADriver.

Only objects carrying the release's instance label are deleted (``--selector``): a GPUCluster an
admin created is never touched.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from gpucluster.cli import Subparsers, options
from gpucluster.clusterstate import metadata
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, InputError

GPUCLUSTERS = "/apis/nvidia.com/v1alpha1/gpuclusters"
NVIDIADRIVERS = "/apis/nvidia.com/v1alpha1/nvidiadrivers"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
OPERAND_LABEL = "app.kubernetes.io/managed-by=gpucluster"
PROGRESS_EVERY = 15.0
T = TypeVar("T")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "cleanup",
        help="delete a release's GPUCluster and NVIDIADriver, refusing while GPU workloads run",
        description=(
            "Delete the GPUClusters matching --selector and wait until their finalizer has drained the operands, "
            "then the NVIDIADrivers matching --driver-selector. While pods hold ResourceClaims allocated by the "
            "NVIDIA DRA drivers (other than the operands' own), refuse and name them (exit 1), unless --force: "
            "then delete those pods while the kubelet plugin still runs, so that every claim is released first. "
            "The chart's pre-delete hook runs it."
        ),
    )
    parser.add_argument("--selector", metavar="LABELS", help="label selector of the GPUClusters")
    parser.add_argument("--driver-selector", metavar="LABELS", help="label selector of the NVIDIADrivers to delete")
    parser.add_argument(
        "--namespace",
        required=True,
        metavar="NS",
        help="the operator's namespace (its operand pods are drained by the finalizer)",
    )
    parser.add_argument("--force", action="store_true", help="delete the pods that hold GPU claims instead of refusing")
    parser.add_argument("--release", metavar="NAME", help="the Helm release, named in the instructions printed")
    parser.add_argument("--revision", type=int, metavar="N", help="the release's revision, for the instructions")
    parser.add_argument(
        "--leader-lease",
        metavar="OPERATOR_PODS",
        help="instead: once no pod matches this selector in --namespace, delete the operator's leader-election Lease "
        "(the chart's post-delete hook)",
    )
    parser.add_argument(
        "--timeout", type=options.finite, default=240.0, help="seconds to wait for the drain (default 240)"
    )
    options.add_kubeconfig(parser)
    parser.set_defaults(func=run)


def workload_holders(claims: Sequence[Mapping[str, Any]], operand_pods: set[str], namespace: str) -> list[Any]:
    """The (pod, claim) reservations of NVIDIA-driver claims that are not the operands' own."""
    from gpucluster.controller.holders import claim_holders

    return [h for h in claim_holders(claims) if not (h.namespace == namespace and h.pod in operand_pods)]


def refusal(holders: list[Any], args: argparse.Namespace) -> str:
    from gpucluster.controller.holders import describe, pod_count

    release = args.release or "<release>"
    namespace = f"--namespace {args.namespace}"
    text = (
        f"refusing to remove the NVIDIA DRA driver: {pod_count(holders)} pod(s) hold ResourceClaims it allocated: "
        f"{describe(holders)}.\nWithout its kubelet plugin the kubelet cannot release their devices, and they "
        "would hang in Terminating when deleted. Nothing was changed.\nEither delete or drain these pods first "
        f"(and stop what recreates them), then run helm uninstall {release} {namespace} again; or let the "
        "uninstall delete them, in an order that releases every claim before the driver goes:\n"
    )
    if args.revision:
        # Helm marks the release "uninstalling" before its pre-delete hook runs, and helm upgrade then
        # finds no deployed release: a rollback to the same revision deploys it again, unchanged.
        text += f"  helm rollback {release} {args.revision} {namespace}\n"
    return text + (
        f"  helm upgrade {release} <chart> {namespace} --reuse-values --set cleanup.force=true\n"
        f"  helm uninstall {release} {namespace}"
    )


async def _list(kube: Any, path: str, selector: str | None = None) -> list[dict[str, Any]]:
    query = [("labelSelector", selector)] if selector else []
    found = await kube.get(path, query=query)
    return [item for item in found.get("items") or [] if isinstance(item, dict)]


async def _delete(kube: Any, path: str, uid: str) -> None:
    from gpucluster.kube.client import KubeError

    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    try:
        await kube.request("DELETE", path, body=body)
    except KubeError as exc:
        if exc.status not in (404, 409):  # gone, or another object of that name now: not ours to delete
            raise


async def _holders(kube: Any, namespace: str) -> list[Any]:
    pods = await _list(kube, f"/api/v1/namespaces/{namespace}/pods", OPERAND_LABEL)
    return workload_holders(await _list(kube, CLAIMS), {str(metadata(p).get("name")) for p in pods}, namespace)


async def _cleanup(args: argparse.Namespace) -> int:
    from gpucluster.kube.client import Kube

    kube = await Kube.connect(args.kubeconfig)
    try:
        clusters = await _list(kube, GPUCLUSTERS, args.selector)
        if clusters:
            holders = await _holders(kube, args.namespace)
            if holders and not args.force:
                print(refusal(holders, args), file=sys.stderr, flush=True)
                return EXIT_NEGATIVE
            if not await _drain(kube, clusters, args):
                return EXIT_NEGATIVE
        else:
            print(f"no GPUCluster matches {args.selector}: nothing to drain", flush=True)
        if args.driver_selector:
            for driver in await _list(kube, NVIDIADRIVERS, args.driver_selector):
                name = str(metadata(driver).get("name"))
                await _delete(kube, f"{NVIDIADRIVERS}/{name}", str(metadata(driver).get("uid")))
                print(f"nvidiadriver.nvidia.com/{name} deleted", flush=True)
        return EXIT_OK
    finally:
        await kube.close()


async def _drain(kube: Any, clusters: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """Delete the GPUClusters and wait until they are gone (deleting the workload pods when forced)."""
    for cluster in clusters:
        name = str(metadata(cluster).get("name"))
        await _delete(kube, f"{GPUCLUSTERS}/{name}", str(metadata(cluster).get("uid")))
        print(f"gpucluster.nvidia.com/{name} deleted; waiting for its operands to drain", flush=True)
    uids = {str(metadata(c).get("uid")) for c in clusters}
    deadline = time.monotonic() + args.timeout
    next_report = time.monotonic() + PROGRESS_EVERY
    evicted: set[str] = set()
    message = ""
    while True:
        try:
            listed = await _list(kube, GPUCLUSTERS, args.selector)
            remaining = [c for c in listed if str(metadata(c).get("uid")) in uids]
            if not remaining:
                print("the GPUCluster is gone: every claim of the NVIDIA drivers was released", flush=True)
                return True
            message = str((remaining[0].get("status") or {}).get("message") or "")
            if args.force:
                for holder in await _holders(kube, args.namespace):
                    if holder.uid in evicted:
                        continue
                    await _delete(kube, f"/api/v1/namespaces/{holder.namespace}/pods/{holder.pod}", holder.uid)
                    evicted.add(holder.uid)
                    print(f"pod/{holder.pod} -n {holder.namespace} deleted (holds claim {holder.claim})", flush=True)
        except Exception as exc:  # the hook runs once (backoffLimit 0): ride out a transient API failure
            if not transient(exc):
                raise
            print(f"the API server failed ({exc}); retrying", file=sys.stderr, flush=True)
        now = time.monotonic()
        if now > deadline:
            print(
                f"timed out after {args.timeout:g}s: the GPUCluster is still being deleted: {message}\n"
                "The operator keeps draining; run the uninstall again once the pods named have ended.",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            return False
        if now >= next_report:
            print(f"still draining: {message}", flush=True)
            next_report = now + PROGRESS_EVERY
        await asyncio.sleep(1.0)


async def _lease(args: argparse.Namespace) -> int:
    """After the uninstall: the operator's Lease, once its pods are gone (they could renew it)."""
    from gpucluster.controller.leader import LEASE_NAME
    from gpucluster.kube.client import Kube, KubeError

    kube = await Kube.connect(args.kubeconfig)
    try:
        deadline = time.monotonic() + args.timeout
        while pods := await _list(kube, f"/api/v1/namespaces/{args.namespace}/pods", args.leader_lease):
            if time.monotonic() > deadline:
                names = ", ".join(str(metadata(p).get("name")) for p in pods)
                print(
                    f"timed out after {args.timeout:g}s waiting for the operator's pods to end: {names}",
                    file=sys.stderr,
                )
                return EXIT_NEGATIVE
            await asyncio.sleep(1.0)
        path = f"/apis/coordination.k8s.io/v1/namespaces/{args.namespace}/leases/{LEASE_NAME}"
        try:
            await kube.request("DELETE", path)
        except KubeError as exc:
            if exc.status != 404:
                raise
            print(f"lease/{LEASE_NAME} -n {args.namespace} already gone", flush=True)
        else:
            print(f"lease/{LEASE_NAME} -n {args.namespace} deleted", flush=True)
        return EXIT_OK
    finally:
        await kube.close()


def transient(exc: BaseException) -> bool:
    """Whether a failure may pass if tried again: the API server unreachable, overloaded or failing."""
    import aiohttp

    from gpucluster.kube.client import KubeError

    if isinstance(exc, KubeError):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | OSError | TimeoutError)


def against_cluster(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; a refusal or an unreachable API server ends it in one line (exit 2), not a traceback."""
    import aiohttp

    from gpucluster.kube.client import KubeError

    try:
        return asyncio.run(work)
    except KubeError as exc:
        raise InputError(f"the API server refused: {exc}") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise InputError(f"the API server is unreachable: {exc}") from None


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise InputError(f"--timeout must be positive, not {args.timeout:g}")
    if args.leader_lease:
        return against_cluster(_lease(args))
    if not args.selector:
        raise InputError("--selector is required (or --leader-lease)")
    return against_cluster(_cleanup(args))
