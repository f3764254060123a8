"""The resource types the sandbox serves: built-in kinds and, at run time, custom resources."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass
class ResourceType:
    """One REST resource (group, version, plural) and how the server treats it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    generation: bool = False
    """metadata.generation is set on create and bumped on spec changes."""
    status_on_create: bool = True
    """Whether ``status`` given on create is kept (False: cleared, as for most types with /status)."""
    list_kind: str = ""
    # CRD-specific:
    schema: Obj | None = None
    printer_columns: list[Obj] = field(default_factory=list)
    custom: bool = False
    storage_version: str = ""
    """The version objects are stored in (CRDs with several versions); equals ``version`` for built-ins."""
    validators: list[Callable[[Obj, Obj | None], list[tuple[str, str, str]]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.list_kind:
            self.list_kind = self.kind + "List"
        if not self.storage_version:
            self.storage_version = self.version

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: every version of one group/plural shares the same objects."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _workload(group: str, plural: str, kind: str, cats: tuple[str, ...], short: tuple[str, ...] = ()) -> ResourceType:
    """A namespaced v1 workload kind: generation, a status subresource written by its controller."""
    return _rt(
        group, "v1", plural, kind, True, short=short, cats=cats, sub=("status",), gen=True, status_on_create=False
    )


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    *,
    short: tuple[str, ...] = (),
    cats: tuple[str, ...] = (),
    sub: tuple[str, ...] = (),
    gen: bool = False,
    status_on_create: bool = True,
    verbs: tuple[str, ...] = ALL_VERBS,
) -> ResourceType:
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced,
        short_names=short,
        categories=cats,
        subresources=sub,
        generation=gen,
        status_on_create=status_on_create,
        verbs=verbs,
    )


def builtin_types() -> list[ResourceType]:
    """The built-in kinds, as kube-apiserver 1.34 registers them (subset this project touches)."""
    all_ = ("all",)
    no_collection = tuple(v for v in ALL_VERBS if v != "deletecollection")
    return [
        _rt(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            short=("ns",),
            sub=("status", "finalize"),
            status_on_create=False,
            verbs=no_collection,
        ),
        _rt("", "v1", "nodes", "Node", False, short=("no",), sub=("status",)),
        _rt(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            short=("po",),
            cats=all_,
            sub=("status", "log"),
            gen=True,
            status_on_create=False,
        ),
        _rt(
            "",
            "v1",
            "services",
            "Service",
            True,
            short=("svc",),
            cats=all_,
            sub=("status",),
            status_on_create=False,
            verbs=ALL_VERBS,
        ),
        _rt("", "v1", "serviceaccounts", "ServiceAccount", True, short=("sa",)),
        _rt("", "v1", "configmaps", "ConfigMap", True, short=("cm",)),
        _rt("", "v1", "secrets", "Secret", True),
        _rt("", "v1", "events", "Event", True, short=("ev",)),
        _workload("apps", "daemonsets", "DaemonSet", all_, short=("ds",)),
        _workload("apps", "deployments", "Deployment", all_, short=("deploy",)),
        _workload("batch", "jobs", "Job", all_),
        _workload("batch", "cronjobs", "CronJob", all_, short=("cj",)),
        _rt(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            short=("pdb",),
            sub=("status",),
            gen=True,
            status_on_create=False,
        ),
        _rt("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        _rt("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        _rt("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        _rt("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        _rt(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
            cats=("api-extensions",),
            gen=True,
        ),
        _rt(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            False,
            cats=("api-extensions",),
            gen=True,
        ),
        _rt(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            False,
            cats=("api-extensions",),
            sub=("status",),
            gen=True,
            status_on_create=False,
        ),
        _rt(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            False,
            cats=("api-extensions",),
            gen=True,
        ),
        _rt(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short=("crd", "crds"),
            cats=("api-extensions",),
            sub=("status",),
            gen=True,
            status_on_create=False,
        ),
        _rt("coordination.k8s.io", "v1", "leases", "Lease", True),
        _rt("events.k8s.io", "v1", "events", "Event", True, short=("ev",)),
        _rt("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False, gen=True),
        _rt("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, gen=True),
        _rt("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, sub=("status",), status_on_create=False),
        _rt("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    ]


# Groups in the order kube-apiserver lists them in /apis (roughly its priority order).
GROUP_ORDER = [
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "resource.k8s.io",
]


class Registry:
    """Resource types by group/version/plural, by kind and by short name; changes as CRDs come and go."""

    def __init__(self, types: list[ResourceType] | None = None) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._by_gvk: dict[tuple[str, str, str], ResourceType] = {}
        self.generation = 0
        for rt in types if types is not None else builtin_types():
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._by_gvr[(rt.group, rt.version, rt.plural)] = rt
        self._by_gvk[(rt.group, rt.version, rt.kind)] = rt
        self.generation += 1

    def remove_group_resource(self, group: str, plural: str) -> list[ResourceType]:
        gone = [rt for rt in self._by_gvr.values() if rt.group == group and rt.plural == plural]
        for rt in gone:
            self._by_gvr.pop((rt.group, rt.version, rt.plural), None)
            self._by_gvk.pop((rt.group, rt.version, rt.kind), None)
        self.generation += 1
        return gone

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        return self._by_gvk.get((group, version, kind))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._by_gvr.values()))

    def groups(self) -> list[tuple[str, list[str]]]:
        """(group, versions) for every group but the core one, in kube-apiserver's order."""
        found: dict[str, list[str]] = {}
        for rt in self._by_gvr.values():
            if rt.group and rt.version not in found.setdefault(rt.group, []):
                found[rt.group].append(rt.version)
        order = {g: i for i, g in enumerate(GROUP_ORDER)}
        names = sorted(found, key=lambda g: (order.get(g, len(order)), g))
        return [(g, sorted(found[g], key=version_priority)) for g in names]

    def resources(self, group: str, version: str) -> list[ResourceType]:
        return sorted(
            (rt for rt in self._by_gvr.values() if rt.group == group and rt.version == version),
            key=lambda rt: rt.plural,
        )


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first; others last, alphabetical."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0, version)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, version)
