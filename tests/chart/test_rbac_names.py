"""The operator's write rights on cluster-scoped objects name exactly what the controller writes.

What the controller writes is computed, not listed: controller/plan.py's decisions on every
combination of the GPUCluster's operand toggles, for a fresh cluster (every object applied:
created by server-side apply, so create and patch of that name), for a switch of one toggle from
any combination (what it prunes: delete), for the GPUCluster's deletion (what it deletes first)
and for a cluster where an admin handed every object over (it takes them over; setting an
ownerReference on an existing object needs delete on it under OwnerReferencesPermissionEnforcement).
The chart's rules (tests/chart/rights.py breaks them into atoms, Kubernetes RBAC semantics) must
grant those verbs on those names, and nothing on these kinds without names; the same for our
webhook configurations, whatever the release name, namespace or fullnameOverride.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from gpucluster.api import gpucluster as gc
from gpucluster.api.validation import validate_gpucluster
from gpucluster.certs.inject import MUTATING_NAME, VALIDATING_NAME
from gpucluster.clusterstate import ADMIN_ACCESS_LABEL
from gpucluster.controller.operands import ClusterFacts, render_operands
from gpucluster.controller.plan import FINALIZER, Apply, Delete, Observed, Prerequisites, key_of, plan
from gpucluster.kube.paths import plural
from tests.chart import helm
from tests.chart.helm import DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED, SERVICE_MONITOR_API, Recipe
from tests.chart.rights import Grant, escalation_requests, evaluate, operator_grants

UID = "6f1d2c3b-0000-4000-8000-00000000beef"
ENV = {
    "DRA_DRIVER_IMAGE": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
    "DCGM_EXPORTER_IMAGE": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
    "DCGM_IMAGE": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
    "VALIDATOR_IMAGE": "nvcr.io/nvidia/gpu-operator:v26.7.0",
}
# Every switch of the GPUCluster spec that adds or removes operand objects (a path to a boolean);
# with the ServiceMonitor API served or not, that is every combination of operand objects.
TOGGLES: tuple[tuple[str, ...], ...] = (
    ("draDriver", "computeDomains", "enabled"),
    ("draDriver", "featureGates", "MPSSupport"),
    ("dcgmExporter", "enabled"),
    ("dcgmExporter", "serviceMonitor", "enabled"),
    ("dcgm", "enabled"),
)
# Switches that change what an operand role grants, not which objects exist.
RULE_TOGGLES: tuple[tuple[str, ...], ...] = (("dcgmExporter", "enablePodLabels"),)
# Kinds whose writes must be granted by name only: the cluster-scoped operand kinds and our
# webhook configurations.
NAMED_ONLY = {
    ("resource.k8s.io", "deviceclasses"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
}
READ = {"get", "list", "watch"}


@dataclass(frozen=True)
class Release:
    recipe: Recipe
    name: str = helm.RELEASE
    namespace: str = helm.NAMESPACE
    flags: tuple[str, ...] = ()

    @property
    def fullname(self) -> str:
        for flag in self.flags:
            if flag.startswith("fullnameOverride="):
                return flag.partition("=")[2]
        return self.name if "gpucluster" in self.name else f"{self.name}-gpucluster"

    def texts(self) -> dict[str, str]:
        values = self.recipe.set_flags + self.flags
        return helm.render_text(
            values, api_versions=self.recipe.api_versions, namespace=self.namespace, release=self.name
        )

    def grants(self) -> list[Grant]:
        return operator_grants(self.texts(), self.fullname, self.namespace)


RELEASES = [
    Release(DOCS_PREINSTALLED),
    Release(DOCS_OPERATOR_MANAGED),
    Release(DOCS_PREINSTALLED, "gpus", "nvidia-gpu"),
    Release(DOCS_OPERATOR_MANAGED, "gpus", "nvidia-gpu", ("fullnameOverride=nv-operator",)),
    Release(DOCS_PREINSTALLED.with_flags(api_versions=SERVICE_MONITOR_API), "gpucluster", "gpu"),
]
RELEASE_IDS = [f"{r.recipe.name}-{r.name}-{r.namespace}-{r.fullname}" for r in RELEASES]


# ------------------------------------------------------------------------------ what the controller writes


def _gpucluster(on: tuple[bool, ...], toggles: tuple[tuple[str, ...], ...] = TOGGLES, **meta: Any) -> dict[str, Any]:
    """The GPUCluster with each of ``toggles`` set as ``on`` says."""
    spec: dict[str, Any] = {}
    for (*parents, leaf), enabled in zip(toggles, on, strict=True):
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = enabled
    obj = {
        "apiVersion": gc.API_VERSION,
        "kind": gc.KIND,
        "metadata": {"name": gc.SINGLETON_NAME, "uid": UID, "generation": 1, "finalizers": [FINALIZER], **meta},
        "spec": spec,
    }
    assert validate_gpucluster(obj).ok, obj
    return obj


def _observed(namespace: str, cluster: dict[str, Any], service_monitor: bool, **kwargs: Any) -> Observed:
    return Observed(
        clusters=[cluster],
        namespace=namespace,
        env=ENV,
        prerequisites=Prerequisites(version="v1.34.2", service_monitor=service_monitor),
        namespace_labels={ADMIN_ACCESS_LABEL: "true"},
        **kwargs,
    )


class _Absent(dict[Any, Any]):
    """Every live copy looked up and absent."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: Any) -> None:
        return None


@dataclass(frozen=True)
class Writes:
    """(group, resource) -> names the controller applies, and names it deletes."""

    applied: dict[tuple[str, str], frozenset[str]]
    deleted: dict[tuple[str, str], frozenset[str]]


def _resource(obj: dict[str, Any]) -> tuple[tuple[str, str], bool]:
    name, namespaced = plural(obj["apiVersion"], obj["kind"])
    return (obj["apiVersion"].rpartition("/")[0], name), namespaced


@cache
def controller_writes(namespace: str) -> Writes:
    """What controller/plan.py writes to cluster-scoped objects, over every toggle combination."""
    applied: dict[tuple[str, str], set[str]] = {}
    deleted: dict[tuple[str, str], set[str]] = {}

    def record(into: dict[tuple[str, str], set[str]], obj: dict[str, Any]) -> None:
        resource, namespaced = _resource(obj)
        if not namespaced:
            into.setdefault(resource, set()).add(obj["metadata"]["name"])

    installed: dict[tuple[tuple[bool, ...], bool], dict[Any, dict[str, Any]]] = {}
    combos = list(itertools.product((False, True), repeat=len(TOGGLES)))
    for on, monitor in itertools.product(combos, (False, True)):
        fresh = plan(_observed(namespace, _gpucluster(on), monitor, looked_up=_Absent()))
        cache_: dict[Any, dict[str, Any]] = {}
        applies = [w for w in fresh.writes if isinstance(w, Apply)]
        assert applies
        for write in applies:
            record(applied, write.obj)
            live = copy.deepcopy(write.obj)
            live["metadata"]["resourceVersion"] = "1"
            cache_[key_of(live)] = live
        installed[(on, monitor)] = cache_
        # An admin handed every cluster-scoped object over (labelled, no ownerReference).
        handed = {}
        for key, obj in cache_.items():
            if not key[1]:
                meta = {k: v for k, v in obj["metadata"].items() if k not in ("ownerReferences", "annotations")}
                handed[key] = {**obj, "metadata": meta}
        taken = plan(_observed(namespace, _gpucluster(on), monitor, looked_up={**{k: None for k in cache_}, **handed}))
        for took in taken.writes:
            if isinstance(took, Apply) and key_of(took.obj) in handed:
                record(deleted, took.obj)
        # The GPUCluster's deletion.
        deleting = _gpucluster(on, deletionTimestamp="2026-01-01T00:00:00Z")
        for step in plan(_observed(namespace, deleting, monitor, owned=list(cache_.values()))).writes:
            if isinstance(step, Delete):
                record(deleted, step.obj)
    # Pruning: one toggle switched from any combination.
    for (on, monitor), cache_ in installed.items():
        for index in range(len(TOGGLES) + 1):
            other = list(on)
            other_monitor = monitor
            if index < len(TOGGLES):
                other[index] = not other[index]
            else:
                other_monitor = not monitor
            observed = _observed(
                namespace,
                _gpucluster(tuple(other)),
                other_monitor,
                cached=cache_,
                owned=list(cache_.values()),
                looked_up=_Absent(),
            )
            for pruned in plan(observed).writes:
                if isinstance(pruned, Delete):
                    record(deleted, pruned.obj)
    return Writes(
        {k: frozenset(v) for k, v in applied.items()},
        {k: frozenset(v) for k, v in deleted.items()},
    )


def _named(grants: list[Grant], resource: tuple[str, str], verb: str) -> set[str]:
    return {g.name for g in grants if (g.group, g.resource) == resource and g.verb == verb and not g.namespace}


# ------------------------------------------------------------------------------ the tests


def test_the_computation_sees_every_kind_of_write() -> None:
    """The plan-driven computation finds creates, prunes and deletions (it would pass vacuously otherwise)."""
    writes = controller_writes(helm.NAMESPACE)
    assert writes.applied[("resource.k8s.io", "deviceclasses")] >= {
        "gpu.nvidia.com",
        "compute-domain-daemon.nvidia.com",
    }
    assert "nvidia-dcgm-exporter" in writes.applied[("rbac.authorization.k8s.io", "clusterroles")]
    deleted = writes.deleted[("rbac.authorization.k8s.io", "clusterroles")]
    assert {"nvidia-dra-driver-controller", "nvidia-dcgm-exporter"} <= deleted
    assert set(writes.applied) == {
        ("resource.k8s.io", "deviceclasses"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    }, "a new cluster-scoped kind: grant its writes by name in rbac.yaml and list it in NAMED_ONLY"
    # Cluster-scoped names do not depend on the operator namespace (the other tests use these).
    assert controller_writes("nvidia-gpu") == writes


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
def test_no_write_on_cluster_scoped_operand_kinds_or_webhook_configurations_without_names(release: Release) -> None:
    loose = [
        f"{g} [{g.source}]"
        for g in release.grants()
        if (g.group, g.resource) in NAMED_ONLY and g.verb not in READ and not g.name
    ]
    assert not loose, loose
    # Reads of webhook configurations are by name too: the operator lists none.
    for resource in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert not [g for g in release.grants() if g.resource == resource and not g.name]


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
def test_write_names_are_what_the_controller_writes(release: Release) -> None:
    grants = release.grants()
    writes = controller_writes(helm.NAMESPACE)  # the same for any namespace (checked above)
    for resource in sorted(NAMED_ONLY):
        if resource[1].endswith("webhookconfigurations"):
            continue
        applied = writes.applied.get(resource, frozenset())
        assert _named(grants, resource, "create") == applied, resource
        assert _named(grants, resource, "patch") == applied, resource
        assert _named(grants, resource, "delete") == writes.deleted.get(resource, frozenset()), resource
        assert not _named(grants, resource, "update"), f"{resource}: the controller never updates, it applies"
        verbs = {g.verb for g in grants if (g.group, g.resource) == resource}
        assert verbs == READ | {"create", "patch", "delete"}, (resource, verbs)
        # Reads stay unnamed: the controller's informers list and watch the kind.
        assert {g.name for g in grants if (g.group, g.resource) == resource and g.verb in READ} == {""}


@pytest.mark.parametrize("release", RELEASES, ids=RELEASE_IDS)
def test_webhook_configuration_rights_name_exactly_our_configurations(release: Release) -> None:
    objs = [
        m
        for m in helm.render(
            release.recipe.set_flags + release.flags,
            api_versions=release.recipe.api_versions,
            namespace=release.namespace,
            release=release.name,
        )
        if m.kind.endswith("WebhookConfiguration")
    ]
    configured = {(m.kind.lower() + "s", m.name) for m in objs}
    assert configured == {
        ("validatingwebhookconfigurations", VALIDATING_NAME),
        ("mutatingwebhookconfigurations", MUTATING_NAME),
    }, "the chart's names are the ones certs/inject.py injects into"
    granted = {(g.resource, g.verb, g.name) for g in release.grants() if g.resource.endswith("webhookconfigurations")}
    assert granted == {(resource, verb, name) for resource, name in configured for verb in ("get", "patch")}


def test_webhook_configurations_get_no_rights_unless_the_operator_injects_their_ca() -> None:
    for flags in (("webhook.enabled=false",), ("webhook.certificates.mode=cert-manager",)):
        release = Release(DOCS_PREINSTALLED, flags=flags)
        api_versions = DOCS_PREINSTALLED.api_versions + helm.CERT_MANAGER_API
        texts = helm.render_text(DOCS_PREINSTALLED.set_flags + flags, api_versions=api_versions)
        grants = operator_grants(texts, release.fullname, release.namespace)
        assert not [g for g in grants if g.resource.endswith("webhookconfigurations")], flags


def test_gpucluster_writes_name_the_singleton() -> None:
    grants = Release(DOCS_PREINSTALLED).grants()
    named = {(g.resource, g.verb): g.name for g in grants if g.group == "nvidia.com" and g.verb not in READ}
    assert named == {
        ("gpuclusters", "patch"): gc.SINGLETON_NAME,  # its finalizer
        ("gpuclusters/finalizers", "update"): gc.SINGLETON_NAME,  # blockOwnerDeletion of its operands
        ("gpuclusters/status", "patch"): "",  # any GPUCluster: others are reported disabled
    }


def _operand_roles() -> Iterator[dict[str, Any]]:
    """Every Role and ClusterRole the operands render, over every toggle combination."""
    toggles = TOGGLES + RULE_TOGGLES
    for on, monitor in itertools.product(itertools.product((False, True), repeat=len(toggles)), (False, True)):
        result = validate_gpucluster(_gpucluster(on, toggles))
        assert result.obj is not None
        facts = ClusterFacts(namespace=helm.NAMESPACE, env=ENV, owner_uid=UID, service_monitor_crd=monitor)
        for operand in render_operands(result.obj, facts):
            yield from (o for o in operand.objects if o["kind"] in ("Role", "ClusterRole"))


def test_escalation_only_rights_are_exactly_what_operand_roles_need_beyond_the_operators_use() -> None:
    """RBAC's escalation check: the operator holds every right its operands' roles grant (else the
    API server refuses them); a rule marked escalation-only is needed by some operand role."""
    grants = Release(DOCS_PREINSTALLED).grants()
    evaluation = evaluate(grants, escalation_requests(_operand_roles()))
    assert not evaluation.uncovered, sorted({str(r) + " (" + r.why + ")" for r in evaluation.uncovered})
    needless = [f"{g} [{g.source}]" for g in evaluation.marked_escalation_only() if g not in evaluation.used]
    assert not needless, needless
    assert evaluation.marked_escalation_only(), "rbac.yaml marks its escalation-only rules"


def test_no_right_is_granted_twice() -> None:
    grants = Release(DOCS_PREINSTALLED.with_flags("operator.strandedPods.delete=true")).grants()
    seen: dict[Grant, str] = {}
    twice = []
    for grant in grants:
        if grant in seen:
            twice.append(f"{grant}: {seen[grant]} and {grant.source}")
        seen.setdefault(grant, grant.source)
    assert not twice, twice
