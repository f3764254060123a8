"""A least-privilege evaluator of the operator's RBAC, with kube-apiserver's RBAC semantics.

The chart's ClusterRole and Role (charts/gpucluster/templates/rbac.yaml, rendered by real Helm)
are broken down into :class:`Grant` atoms, one (verb, group, resource, name) each, as
``rbacv1helpers.BreakdownRule`` does; a rule whose comment says ``escalation-only`` grants rights
the operator never uses itself, only holds so that it may create operand roles granting them.

What has to be authorized is a list of :class:`Request` atoms:

- the API requests a user made, read from kube-apiserver's audit log (:func:`audited_requests`),
  plus the checks the API server makes beyond the request itself: a server-side apply that
  creates its object is authorized for ``create`` of that name as well (patch.go's
  ``createAuthorizerAttributes``), and, with OwnerReferencesPermissionEnforcement, creating an
  object whose ownerReference to the GPUCluster has ``blockOwnerDeletion`` needs ``update`` of
  ``gpuclusters/finalizers`` of that GPUCluster;
- the rules of the roles the operator creates (:func:`escalation_requests`): RBAC's escalation
  check (``ConfirmNoEscalation``) wants each of their atoms covered by the creator's own rules.

Matching is RBAC's ``RuleAllows``: verb, group and resource (``resource/subresource``) equal (the
chart has no wildcards), and a grant with a name matches only a request of that name (a request
without a name, a list or a POST create, only a grant without names). A ClusterRole's grant
(through a ClusterRoleBinding) matches in every namespace and cluster-wide; a Role's only in its
namespace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpucluster.api.gpucluster import SINGLETON_NAME
from gpucluster.controller.reconcile import OWNED
from gpucluster.kube.paths import plural

RBAC_TEMPLATE = "gpucluster/templates/rbac.yaml"
ESCALATION_MARK = re.compile(r"\bescalation-only\b", re.IGNORECASE)
_RULE_START = re.compile(r"^\s*- apiGroups:")

# What every authenticated user may do through the default ClusterRoles (system:basic-user).
DEFAULT_ALLOWED = frozenset(
    {
        ("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
        ("create", "authorization.k8s.io", "selfsubjectrulesreviews"),
        ("create", "authentication.k8s.io", "selfsubjectreviews"),
    }
)
# Plurals of the kinds the reconciler applies with an ownerReference to the GPUCluster.
OWNED_PLURALS = frozenset((api_version.rpartition("/")[0], plural(api_version, kind)[0]) for api_version, kind in OWNED)


@dataclass(frozen=True, order=True)
class Grant:
    """One right: ``verb`` on ``group``/``resource`` named ``name`` ("" = any name), cluster-wide
    (``namespace`` "", from the ClusterRole) or in ``namespace`` (from the Role)."""

    verb: str
    group: str
    resource: str
    name: str = ""
    namespace: str = ""
    escalation_only: bool = field(default=False, compare=False)
    source: str = field(default="", compare=False)

    def matches(self, request: Request) -> bool:
        return (
            self.verb == request.verb
            and self.group == request.group
            and self.resource == request.resource
            and (not self.name or self.name == request.name)
            and (not self.namespace or self.namespace == request.namespace)
        )

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


@dataclass(frozen=True, order=True)
class Request:
    """One authorization check: ``verb`` on ``group``/``resource`` (``resource/subresource``) in
    ``namespace`` ("" cluster-scoped), named ``name`` ("" when the request names none);
    ``why``: what asked for it (the request line, or the check it is implied by)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""
    why: str = field(default="", compare=False)
    escalation: bool = field(default=False, compare=False)

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


# ------------------------------------------------------------------------------ the chart's grants


def _rule_comments(text: str) -> list[str]:
    """The comment block right above each rule of one rendered Role/ClusterRole document."""
    out: list[str] = []
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped)
        elif _RULE_START.match(line):
            out.append("\n".join(pending))
            pending = []
        elif stripped:
            pending = []
    return out


def breakdown(
    rule: Mapping[str, Any], namespace: str = "", *, escalation_only: bool = False, source: str = ""
) -> list[Grant]:
    """The atoms of one PolicyRule (``BreakdownRule``), in ``namespace`` ("" cluster-wide)."""
    names = list(rule.get("resourceNames") or []) or [""]
    out = []
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                for name in names:
                    out.append(Grant(verb, group, resource, name, namespace, escalation_only, source))
    return out


def role_documents(texts: Mapping[str, str], template: str = RBAC_TEMPLATE) -> list[tuple[dict[str, Any], str]]:
    """(object, its rendered text) of every document of ``template``."""
    out = []
    for chunk in re.split(r"(?m)^---\s*$", texts[template]):
        obj = yaml.safe_load(chunk)
        if obj:
            out.append((obj, chunk))
    return out


def operator_grants(texts: Mapping[str, str], account: str, namespace: str) -> list[Grant]:
    """Every right the ServiceAccount ``namespace/account`` gets from the chart's rbac.yaml
    (``texts``: Helm's rendered templates), each marked escalation-only as its rule's comment says."""
    docs = role_documents(texts)
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    bound = {
        (obj["roleRef"]["kind"], obj["roleRef"]["name"], obj["metadata"].get("namespace", ""))
        for obj, _ in docs
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding") and subject in obj.get("subjects", [])
    }
    grants: list[Grant] = []
    for obj, text in docs:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        where = obj["metadata"].get("namespace", "")
        if (obj["kind"], obj["metadata"]["name"], where) not in bound:
            continue
        rules = obj.get("rules") or []
        comments = _rule_comments(text)
        assert len(comments) == len(rules), f"{obj['kind']} {obj['metadata']['name']}: every rule starts with apiGroups"
        for index, (rule, comment) in enumerate(zip(rules, comments, strict=True)):
            source = f"{obj['kind']} {obj['metadata']['name']} rule {index + 1}"
            marked = bool(ESCALATION_MARK.search(comment))
            grants += breakdown(rule, where, escalation_only=marked, source=source)
    return grants


# ------------------------------------------------------------------------------ what is asked for


def audited_requests(events: Iterable[Mapping[str, Any]], username: str) -> tuple[list[Request], list[str]]:
    """(resource requests with the checks they imply, non-resource request URIs) of ``username``
    in kube-apiserver audit events (each request once, whatever stages were logged)."""
    seen: set[str] = set()
    requests: list[Request] = []
    other: list[str] = []
    for event in events:
        if (event.get("user") or {}).get("username") != username:
            continue
        audit_id = str(event.get("auditID"))
        if audit_id in seen:
            continue
        seen.add(audit_id)
        verb = str(event.get("verb"))
        ref = event.get("objectRef")
        line = f"{verb} {event.get('requestURI')}"
        if not ref:
            other.append(line)
            continue
        group = str(ref.get("apiGroup") or "")
        resource = str(ref.get("resource"))
        if ref.get("subresource"):
            resource += "/" + str(ref["subresource"])
        namespace = str(ref.get("namespace") or "")
        name = str(ref.get("name") or "")
        requests.append(Request(verb, group, resource, namespace, name, line))
        code = (event.get("responseStatus") or {}).get("code")
        if verb == "patch" and code == 201:
            # A server-side apply that created the object: authorized for create of that name too.
            requests.append(Request("create", group, resource, namespace, name, f"created by {line}"))
            if (group, resource) in OWNED_PLURALS:
                # Its ownerReference to the GPUCluster blocks the owner's deletion.
                requests.append(
                    Request(
                        "update",
                        "nvidia.com",
                        "gpuclusters/finalizers",
                        "",
                        SINGLETON_NAME,
                        f"blockOwnerDeletion of the object created by {line}",
                    )
                )
    return requests, other


def escalation_requests(objects: Iterable[Mapping[str, Any]]) -> list[Request]:
    """What RBAC's escalation check asks of whoever creates these Roles and ClusterRoles: every
    atom of every rule (a Role's in its namespace)."""
    out: list[Request] = []
    for obj in objects:
        if obj.get("kind") not in ("ClusterRole", "Role"):
            continue
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "") if obj["kind"] == "Role" else ""
        why = f"escalation check of {obj['kind']} {meta.get('name')}"
        for rule in obj.get("rules") or []:
            for atom in breakdown(rule):
                out.append(Request(atom.verb, atom.group, atom.resource, namespace, atom.name, why, escalation=True))
    return out


# ------------------------------------------------------------------------------ the verdict


@dataclass
class Evaluation:
    grants: list[Grant]
    requests: list[Request]
    uncovered: list[Request]
    """Requests no grant (and no default role) allows."""
    used: dict[Grant, list[Request]]
    """Grant -> the requests it allows (escalation checks included)."""

    def unused(self, *, counting_escalation: bool = True) -> list[Grant]:
        """Grants no request needs (with ``counting_escalation=False``: that no API request needs,
        escalation checks aside)."""
        return sorted(
            g
            for g in set(self.grants)
            if not any(counting_escalation or not r.escalation for r in self.used.get(g, []))
        )

    def marked_escalation_only(self) -> list[Grant]:
        return sorted({g for g in self.grants if g.escalation_only})

    def distinct_requests(self) -> set[Request]:
        return {r for r in self.requests if not r.escalation}

    def report(self) -> str:
        lines = [f"{len(self.distinct_requests())} distinct authorization checks, {len(set(self.grants))} grants"]
        lines += [f"uncovered: {r} ({r.why})" for r in sorted(set(self.uncovered))]
        lines += [f"unused: {g} [{g.source}]" for g in self.unused(counting_escalation=False)]
        return "\n".join(lines)


def default_allowed(request: Request) -> bool:
    return (request.verb, request.group, request.resource) in DEFAULT_ALLOWED


def evaluate(grants: Sequence[Grant], requests: Sequence[Request]) -> Evaluation:
    used: dict[Grant, list[Request]] = {}
    uncovered = []
    for request in requests:
        covering = [g for g in grants if g.matches(request)]
        for grant in covering:
            used.setdefault(grant, []).append(request)
        if not covering and not default_allowed(request):
            uncovered.append(request)
    return Evaluation(list(grants), list(requests), uncovered, used)
