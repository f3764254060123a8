"""``gpucluster audit [--kubeconfig F] [-o table|wide|json|yaml]``: workloads that still request GPUs the legacy way.

Lists (paginated) Pods, ReplicaSets, Deployments, StatefulSets, DaemonSets, Jobs, CronJobs and
Namespaces, plus DeviceClasses, ResourceSlices, ResourceClaimTemplates and ResourceClaims (the webhook's view;
skipped when ``resource.k8s.io/v1`` is not served) and MutatingWebhookConfigurations (to tell
whether our pod webhook is installed; skipped when not allowed); a kind the server does not
serve counts as empty. Custom resources that carry pod templates (:data:`gpucluster.audit.CUSTOM_KINDS`:
Kubeflow jobs and runtimes, Katib, Ray, AIBrix, KAITO, JobSet, LeaderWorkerSet, Argo, KServe, Volcano) are found through
discovery and listed too; a kind that may not be listed is named on stderr (and in ``notListed``). Then
it reports through
:func:`gpucluster.audit.audit`. Custom kinds are discovered at every served version of their group
(each kind listed once) and objects seen twice count once. Exit 0 when nothing is legacy, 1 when a
workload still requests GPUs through extended resources or a live pod relies on the webhook's
translation, 2 on error (bad kubeconfig, API server unreachable, list forbidden).

``-o json`` prints ``{"webhookInstalled": true|false|null, "workloads": [...], "notListed": [...]}``, each workload
``{"namespace", "kind", "name", "chain": [{"kind", "name"}, ...], "pods", "translatedPods", "runningPods",
"gpus": {resource: quantity per pod}, "webhook": {"action": "translate"|"warn"|"skip", "reason"},
"notes": [...]}``; ``chain`` runs from the lowest object (a pod when one runs) to the root owner.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import aiohttp

from gpucluster.audit import Finding, audit, dedupe
from gpucluster.cli import Subparsers, options
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, InputError
from gpucluster.kube.client import Kube, KubeError, KubeObject
from gpucluster.kube.paths import plural
from gpucluster.manifests import dump_yaml
from gpucluster.policy import TRANSLATION_MODES, Settings
from gpucluster.webhook.admission import hooks
from gpucluster.webhook.audit import decider

# (apiVersion, kind, required): a kind the server does not serve (404) has no objects; a list that is
# forbidden (403) is an error for a required kind and skipped for an optional one.
LISTED: tuple[tuple[str, str, bool], ...] = (
    ("v1", "Namespace", True),
    ("v1", "Pod", True),
    ("apps/v1", "ReplicaSet", True),
    ("apps/v1", "Deployment", True),
    ("apps/v1", "StatefulSet", True),
    ("apps/v1", "DaemonSet", True),
    ("batch/v1", "Job", True),
    ("batch/v1", "CronJob", True),
    ("resource.k8s.io/v1", "DeviceClass", False),
    ("resource.k8s.io/v1", "ResourceSlice", False),  # MIG profiles the nodes publish (the webhook's bound)
    ("resource.k8s.io/v1", "ResourceClaimTemplate", False),
    ("resource.k8s.io/v1", "ResourceClaim", False),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", False),
)
PAGE_SIZE = 500
POD_HOOK = hooks("mutate")[("", "Pod")].name


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="list workloads in a cluster that still request GPUs through extended resources",
        description=(
            "List the workloads of the cluster whose pods (or pod templates) still request nvidia.com/gpu or "
            "nvidia.com/mig-* extended resources, or whose live pods rely on the webhook's translation: owner chain, "
            "namespace, GPUs per pod, and what the webhook does when it creates their pods. "
            "Exit 0 nothing legacy found, 1 some found, 2 error."
        ),
    )
    options.add_kubeconfig(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", "wide", "json", "yaml"],
        default="table",
        help="table (default), wide (the owner chain by name, pods held and translated apart), json or yaml",
    )
    parser.add_argument(
        "--translation-mode",
        choices=TRANSLATION_MODES,
        default="auto",
        help="the webhook's translation mode to assume (default auto)",
    )
    parser.add_argument("--operator-namespace", default="gpu-operator", help="the webhook's operator namespace")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    collected = asyncio.run(collect(args.kubeconfig))
    installed = collected.webhook_installed
    settings = Settings(translation_mode=args.translation_mode, operator_namespace=args.operator_namespace)
    findings = audit(dedupe(collected.objects), decide=decider(settings))
    if args.output in ("json", "yaml"):
        out = {
            "webhookInstalled": installed,
            "workloads": [f.to_json() for f in findings],
            "notListed": collected.not_listed,
        }
        sys.stdout.write(json.dumps(out, indent=2) + "\n" if args.output == "json" else dump_yaml(out))
    elif findings:
        print(table(findings, wide=args.output == "wide"), end="")
    for what in collected.not_listed:
        print(f"note: could not list {what}: workloads of that kind are seen only through their pods", file=sys.stderr)
    if installed is False:
        print(
            f"note: the gpucluster pod webhook is not installed (no MutatingWebhookConfiguration has {POD_HOOK}): "
            "pods are created exactly as their manifests say",
            file=sys.stderr,
        )
    if findings:
        running = sum(f.running_pods for f in findings)
        translated = sum(f.translated_pods for f in findings)
        detail = f", {translated} translated by the webhook" if translated else ""
        print(
            f"gpucluster audit: {len(findings)} workload{'' if len(findings) == 1 else 's'} "
            f"({running} running pod{'' if running == 1 else 's'}{detail}) "
            "still request GPUs through extended resources",
            file=sys.stderr,
        )
        return EXIT_NEGATIVE
    print("gpucluster audit: no workload requests GPUs through extended resources", file=sys.stderr)
    return EXIT_OK


def table(findings: list[Finding], *, wide: bool = False) -> str:
    """kubectl's way: the default columns, and with ``wide`` the owner chain by name and the pods
    that still hold extended resources apart from those the webhook translated."""
    header: tuple[str, ...]
    if wide:
        header = (
            "NAMESPACE",
            "WORKLOAD",
            "OWNER CHAIN",
            "LEGACY PODS",
            "TRANSLATED PODS",
            "GPUS/POD",
            "WEBHOOK",
            "REASON",
        )
    else:
        header = ("NAMESPACE", "WORKLOAD", "OWNER CHAIN", "PODS", "GPUS/POD", "WEBHOOK", "REASON")
    rows: list[tuple[str, ...]] = []
    for f in findings:
        gpus = ",".join(f"{name}={qty}" for name, qty in f.gpus.items()) or "-"
        reason = "; ".join([f.reason, *f.notes])
        if wide:
            chain = " -> ".join(str(ref) for ref in f.chain) or "-"
            rows.append(
                (f.namespace or "-", f.workload, chain, str(f.pods), str(f.translated_pods), gpus, f.action, reason)
            )
        else:
            pods = str(f.running_pods) + (f" ({f.translated_pods} translated)" if f.translated_pods else "")
            rows.append((f.namespace or "-", f.workload, f.chain_kinds, pods, gpus, f.action, reason))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("   ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def _collection(api_version: str, kind: str) -> str:
    name, _ = plural(api_version, kind)
    return f"/api/{api_version}/{name}" if "/" not in api_version else f"/apis/{api_version}/{name}"


async def list_all(
    kube: Kube, api_version: str, kind: str, *, page_size: int = PAGE_SIZE, path: str | None = None
) -> list[KubeObject]:
    """Every object of a kind, across namespaces, page by page (``limit`` and ``continue``);
    ``path`` is the collection when discovery named it (custom resources)."""
    path = path or _collection(api_version, kind)
    items: list[KubeObject] = []
    token = ""
    while True:
        query = [("limit", str(page_size))] + ([("continue", token)] if token else [])
        page = await kube.get(path, query)
        for item in page.get("items") or []:
            if isinstance(item, dict):
                item.setdefault("kind", kind)  # list items arrive without kind/apiVersion
                item.setdefault("apiVersion", api_version)
                items.append(item)
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


async def _list_kind(kube: Kube, api_version: str, kind: str, required: bool) -> list[KubeObject] | None:
    try:
        return await list_all(kube, api_version, kind)
    except KubeError as exc:
        if exc.status == 404 or (not required and exc.status == 403):
            return None  # not served (a kind this cluster lacks has no objects), or not ours to read
        raise InputError(f"cannot list {plural(api_version, kind)[0]}: {exc}") from None


class Collected:
    """What the audit read from the cluster."""

    def __init__(self, objects: list[KubeObject] | None = None, webhook_installed: bool | None = None) -> None:
        self.objects = objects if objects is not None else []
        self.webhook_installed = webhook_installed  # None: not known
        self.not_listed: list[str] = []  # custom kinds not readable: "rayclusters.ray.io (403: not allowed to list)"


async def custom_collections(kube: Kube) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, collection path) of the custom kinds with pod templates the server serves
    (:data:`gpucluster.audit.CUSTOM_KINDS`), found through discovery at every served version of each
    group: the CRDs of one group serve different versions (kubeflow.org: PyTorchJob at v1, MPIJob only
    at v2beta1). Each kind is listed once: at the group's preferred version when served there, else
    at the first served version (in discovery's order) that has it."""
    from gpucluster.audit import CUSTOM_KINDS  # here, not at the top: the import block is kept minimal

    groups = await kube.get("/apis")
    found: list[tuple[str, str, str]] = []
    for group in groups.get("groups") or []:
        if not isinstance(group, dict):
            continue
        name = str(group.get("name") or "")
        kinds = CUSTOM_KINDS.get(name)
        if not kinds:
            continue
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        versions = [
            str(v["groupVersion"])
            for v in group.get("versions") or []
            if isinstance(v, dict) and isinstance(v.get("groupVersion"), str)
        ]
        if isinstance(preferred, str):
            versions = [preferred, *(v for v in versions if v != preferred)]
        chosen: dict[str, tuple[str, str, str]] = {}
        for version in versions:
            try:
                resources = await kube.get(f"/apis/{version}")
            except KubeError as exc:
                if exc.status in (403, 404):
                    continue
                raise
            for resource in resources.get("resources") or []:
                plural_name = str(resource.get("name") or "")
                kind = str(resource.get("kind") or "")
                if (
                    kind in kinds
                    and kind not in chosen
                    and "/" not in plural_name
                    and "list" in (resource.get("verbs") or [])
                ):
                    chosen[kind] = (version, kind, f"/apis/{version}/{plural_name}")
        found.extend(chosen.values())
    return found


async def _list_custom(kube: Kube, api_version: str, kind: str, path: str) -> list[KubeObject] | str:
    try:
        return await list_all(kube, api_version, kind, path=path)
    except KubeError as exc:
        if exc.status in (401, 403):
            return f"{path.rsplit('/', 1)[-1]}.{api_version.split('/')[0]} ({exc.status}: not allowed to list)"
        if exc.status == 404:
            return []
        raise InputError(f"cannot list {path}: {exc}") from None


async def collect(kubeconfig: str | None) -> Collected:
    """The objects the audit reads, whether our pod webhook is installed, and the custom kinds
    that could not be listed."""
    kube = await Kube.connect(kubeconfig)
    try:
        answers = await asyncio.gather(
            *(_list_kind(kube, av, kind, required) for av, kind, required in LISTED), return_exceptions=True
        )
        custom: list[list[KubeObject] | str] = []
        if not any(isinstance(a, BaseException) for a in answers):
            try:
                collections = await custom_collections(kube)
            except KubeError as exc:
                if exc.status not in (403, 404):
                    raise InputError(f"cannot discover the API groups: {exc}") from None
                collections = []
                custom.append(f"custom resources (discovery: {exc.status})")
            custom.extend(await asyncio.gather(*(_list_custom(kube, *c) for c in collections)))
    finally:
        await kube.close()
    lists: list[list[KubeObject] | None] = []
    for answer in answers:
        if isinstance(answer, TimeoutError | aiohttp.ClientError | OSError):
            host = getattr(kube.api.configuration, "host", "the API server")
            raise InputError(f"cannot reach {host}: {answer or type(answer).__name__}")
        if isinstance(answer, BaseException):
            raise answer
        lists.append(answer)
    out = Collected()
    for (_, kind, _), items in zip(LISTED, lists, strict=True):
        if kind == "MutatingWebhookConfiguration":
            if items is not None:
                out.webhook_installed = any(_has_pod_hook(config) for config in items)
            continue
        out.objects.extend(items or [])
    for listed in custom:
        if isinstance(listed, str):
            out.not_listed.append(listed)
        else:
            out.objects.extend(listed)
    return out


def _has_pod_hook(config: dict[str, Any]) -> bool:
    return any(isinstance(h, dict) and h.get("name") == POD_HOOK for h in config.get("webhooks") or [])
