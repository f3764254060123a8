"""RBAC authorization as kube-apiserver's ``--authorization-mode=RBAC`` does it.

- ``request_info``: what a request asks (verb, API group, resource/subresource, namespace, name, or a
  non-resource path), parsed the way k8s.io/apiserver's RequestInfoFactory does: a GET without a name
  is list/watch, and a ``fieldSelector=metadata.name=X`` makes X the name (so ``resourceNames`` apply).
- ``Authorizer``: the rules of ClusterRoleBindings (everywhere) and RoleBindings (their namespace)
  whose subjects match the user; bindings are indexed by subject and the rules per user and
  namespace are cached until any RBAC object changes (the store's event bus), so a check is a dict
  lookup and a short scan. Members of ``system:masters`` never get here (the caller skips them).
- Escalation prevention (``EscalationGuard``, first mutating admission hook, where kube-apiserver's
  RBAC storage checks it before admission): a Role/ClusterRole may only grant what its author holds
  unless it holds ``escalate``; a binding only to a role whose rights its author holds unless it holds
  ``bind`` on that role; ``aggregationRule`` needs full authority.
- ``impersonate``: the impersonation filter (``Impersonate-*`` headers, each part authorized with the
  ``impersonate`` verb) between authentication and authorization.
- ``bootstrap_objects``/``seed`` (in ``rbac_bootstrap``): the default ClusterRoles and bindings clients rely on; ``Aggregator`` fills
  aggregated ClusterRoles (admin/edit/view) from the roles their selectors match.
- ``review``: SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview,
  SelfSubjectRulesReview, SelfSubjectReview, TokenReview and TokenRequest, answered in-process.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import logging
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpucluster.sandbox.apiserver import errors, protobuf
from gpucluster.sandbox.apiserver.auth import AUTHENTICATED, SA_PREFIX, Authenticator, UserInfo
from gpucluster.sandbox.apiserver.builtins import DNS1123_LABEL
from gpucluster.sandbox.apiserver.context import Context, Semantics
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.rbac_bootstrap import bootstrap_objects, seed
from gpucluster.sandbox.apiserver.resources import Registry, ResourceType
from gpucluster.sandbox.apiserver.selectors import go_bool, subdomain_errors
from gpucluster.sandbox.apiserver.store import Event, Store

if TYPE_CHECKING:
    from gpucluster.sandbox.apiserver.context import Attributes

Obj = dict[str, Any]
log = logging.getLogger("sandbox.rbac")
__all__ = [
    "Aggregator",
    "Authorizer",
    "EscalationGuard",
    "ImpersonationError",
    "bootstrap_objects",
    "impersonate",
    "request_info",
    "review",
    "seed",
]

GROUP = "rbac.authorization.k8s.io"
ROLES = (GROUP, "roles")
CLUSTER_ROLES = (GROUP, "clusterroles")
ROLE_BINDINGS = (GROUP, "rolebindings")
CLUSTER_ROLE_BINDINGS = (GROUP, "clusterrolebindings")
RBAC_KEYS = frozenset((ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS))
NAMESPACE_SUBRESOURCES = frozenset(("status", "finalize"))
FULL_AUTHORITY: list[Obj] = [
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
]


# ---------------------------------------------------------------- request attributes


@dataclass(frozen=True)
class RequestInfo:
    """authorizer.Attributes without the user."""

    verb: str
    path: str = ""
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def _valid_name_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def field_selector_name(selector: str) -> str:
    """The name a field selector requires exactly (``metadata.name=X`` among its terms), or ""."""
    for term in selector.split(","):
        term = term.strip()
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and not key.endswith("!") and key.strip() == "metadata.name":
                return value.strip()
    return ""


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """kube-apiserver's RequestInfoFactory.NewRequestInfo, for the URL forms the sandbox serves."""
    non_resource = RequestInfo(verb=method.lower(), path=path)
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    group = ""
    rest = parts[1:]
    if parts[0] == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, ""
    )
    if rest[0] == "watch" and len(rest) > 1:  # the deprecated /watch/ prefix
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        # ListOptions.Watch decodes as a Go query bool: any value but "0"/"false" (even "") is a watch.
        verb = "watch" if "watch" in query and go_bool(query["watch"]) else "list"
        selected = field_selector_name(query.get("fieldSelector", ""))
        if selected and _valid_name_segment(selected):
            name = selected
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb, path, True, group, version, namespace, resource, subresource, name)


def forbidden_message(user: str, info: RequestInfo) -> str:
    """responsewriters.forbiddenMessage."""
    if not info.resource_request:
        return f'User "{user}" cannot {info.verb} path "{info.path}"'
    resource = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    if info.namespace:
        return f'User "{user}" cannot {info.verb} resource "{resource}" in API group "{info.api_group}" in the namespace "{info.namespace}"'
    return (
        f'User "{user}" cannot {info.verb} resource "{resource}" in API group "{info.api_group}" at the cluster scope'
    )


# ---------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """One PolicyRule, with where it came from (for SubjectAccessReview reasons)."""

    verbs: frozenset[str]
    groups: frozenset[str]
    resources: tuple[str, ...]
    names: frozenset[str]
    urls: tuple[str, ...]
    source: str = ""

    @staticmethod
    def of(rule: Obj, source: str = "") -> Rule:
        return Rule(
            frozenset(_strings(rule.get("verbs"))),
            frozenset(_strings(rule.get("apiGroups"))),
            tuple(_strings(rule.get("resources"))),
            frozenset(_strings(rule.get("resourceNames"))),
            tuple(_strings(rule.get("nonResourceURLs"))),
            source,
        )

    def allows(self, info: RequestInfo) -> bool:
        """rbac.RuleAllows."""
        if not ("*" in self.verbs or info.verb in self.verbs):
            return False
        if not info.resource_request:
            return any(_url_matches(u, info.path) for u in self.urls)
        if not ("*" in self.groups or info.api_group in self.groups):
            return False
        combined = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
        if not _resource_matches(self.resources, combined, info.subresource):
            return False
        return not self.names or info.name in self.names

    def to_obj(self) -> Obj:
        out: Obj = {"verbs": sorted(self.verbs)}
        if self.groups:
            out["apiGroups"] = sorted(self.groups)
        if self.resources:
            out["resources"] = list(self.resources)
        if self.names:
            out["resourceNames"] = sorted(self.names)
        if self.urls:
            out["nonResourceURLs"] = list(self.urls)
        return out


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url in ("*", path):
        return True
    return rule_url.endswith("*") and path.startswith(rule_url.rstrip("*"))


def _resource_matches(resources: Iterable[str], combined: str, subresource: str) -> bool:
    for r in resources:
        if r in ("*", combined):
            return True
        if subresource and r == f"*/{subresource}":
            return True
    return False


# ---------------------------------------------------------------- subjects and sources


def _describe_subject(subject: Obj, binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _subject_key(subject: Obj, binding_namespace: str) -> tuple[str, ...] | None:
    kind, name = str(subject.get("kind", "")), str(subject.get("name", ""))
    if kind == "User":
        return ("User", name)
    if kind == "Group":
        return ("Group", name)
    if kind == "ServiceAccount":
        ns = str(subject.get("namespace") or binding_namespace)
        return ("User", f"{SA_PREFIX}{ns}:{name}") if ns else None
    return None


def _user_keys(user: UserInfo) -> list[tuple[str, ...]]:
    return [("User", user.username), *(("Group", g) for g in user.groups)]


@dataclass
class _Binding:
    kind: str  # RoleBinding | ClusterRoleBinding
    namespace: str
    name: str
    role_kind: str
    role_name: str
    subject: Obj

    def describe(self) -> str:
        if self.kind == "RoleBinding":
            return f'RoleBinding "{self.name}/{self.namespace}" of {self.role_kind} "{self.role_name}" to {_describe_subject(self.subject, self.namespace)}'
        return f'ClusterRoleBinding "{self.name}" of {self.role_kind} "{self.role_name}" to {_describe_subject(self.subject, "")}'


@dataclass
class RuleSet:
    rules: list[Rule]
    errors: list[str]


class Authorizer:
    """RBAC over the store's Roles, ClusterRoles and their bindings (``core.authz``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: dict[tuple[str, ...], list[_Binding]] | None = None
        self._cache: dict[tuple[str, tuple[str, ...], str], RuleSet] = {}
        self._unsubscribe = store.subscribe(self._on_event)
        # The last refusals (user, message), newest last: what an audit log's 403s would show.
        self.denials: collections.deque[tuple[str, str]] = collections.deque(maxlen=1000)

    def close(self) -> None:
        self._unsubscribe()

    def _on_event(self, event: Event) -> None:
        if event.resource in RBAC_KEYS:
            self._index = None
            self._cache.clear()

    def _bindings(self) -> dict[tuple[str, ...], list[_Binding]]:
        if self._index is None:
            index: dict[tuple[str, ...], list[_Binding]] = {}
            for key, kind in ((CLUSTER_ROLE_BINDINGS, "ClusterRoleBinding"), (ROLE_BINDINGS, "RoleBinding")):
                for obj in self.store.iter(key):
                    md = obj["metadata"]
                    ns = str(md.get("namespace") or "") if kind == "RoleBinding" else ""
                    ref = obj.get("roleRef") or {}
                    for subject in obj.get("subjects") or []:
                        if not isinstance(subject, dict):
                            continue
                        skey = _subject_key(subject, ns)
                        if skey is None:
                            continue
                        index.setdefault(skey, []).append(
                            _Binding(kind, ns, md["name"], str(ref.get("kind", "")), str(ref.get("name", "")), subject)
                        )
            self._index = index
        return self._index

    def role_rules(self, kind: str, name: str, namespace: str) -> tuple[list[Obj], str]:
        """The rules a roleRef names, or an error like the RBAC listers' NotFound."""
        if kind == "ClusterRole":
            obj = self.store.get(CLUSTER_ROLES, "", name)
            if obj is None:
                return [], f'clusterrole.rbac.authorization.k8s.io "{name}" not found'
        elif kind == "Role":
            obj = self.store.get(ROLES, namespace, name)
            if obj is None:
                return [], f'role.rbac.authorization.k8s.io "{name}" not found'
        else:
            return [], f"unsupported role reference kind: {kind!r}"
        return [r for r in obj.get("rules") or [] if isinstance(r, dict)], ""

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        """Every rule that applies to ``user`` in ``namespace`` ("" = cluster-wide only)."""
        cache_key = (user.username, user.groups, namespace)
        found = self._cache.get(cache_key)
        if found is not None:
            return found
        index = self._bindings()
        bindings: list[_Binding] = []
        seen: set[int] = set()
        for key in _user_keys(user):
            for b in index.get(key, ()):
                if id(b) in seen or (b.kind == "RoleBinding" and b.namespace != namespace):
                    continue
                seen.add(id(b))
                bindings.append(b)
        # kube-apiserver visits ClusterRoleBindings first, then the namespace's RoleBindings
        bindings.sort(key=lambda b: b.kind != "ClusterRoleBinding")
        rules: list[Rule] = []
        errs: list[str] = []
        for b in bindings:
            raw, err = self.role_rules(b.role_kind, b.role_name, b.namespace)
            if err:
                errs.append(err)
                continue
            source = b.describe()
            rules.extend(Rule.of(r, source) for r in raw)
        result = RuleSet(rules, errs)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[cache_key] = result
        return result

    def authorize(self, user: UserInfo, info: RequestInfo) -> tuple[bool, str]:
        """(allowed, reason) as the RBAC authorizer answers."""
        if user.privileged:
            return True, ""
        ruleset = self.rules_for(user, info.namespace)
        for rule in ruleset.rules:
            if rule.allows(info):
                return True, f"RBAC: allowed by {rule.source}"
        reason = ""
        if ruleset.errors:
            errs = ruleset.errors
            reason = "RBAC: " + (errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
        return False, reason

    def check(self, user: UserInfo, info: RequestInfo) -> None:
        """Raise kube-apiserver's 403 unless ``user`` may do ``info``."""
        allowed, reason = self.authorize(user, info)
        if allowed:
            return
        message = forbidden_message(user.username, info)
        if reason:
            message = f"{message}: {reason}"
        self.denials.append((user.username, message))
        log.info("forbidden user=%s %s", user.username, message)
        if not info.resource_request:
            raise errors.forbidden("", "", "", message)
        raise errors.forbidden(info.api_group, info.resource, info.name, message)


# ---------------------------------------------------------------- impersonation

IMPERSONATE_USER = "impersonate-user"
IMPERSONATE_GROUP = "impersonate-group"
IMPERSONATE_UID = "impersonate-uid"
IMPERSONATE_EXTRA = "impersonate-extra-"
ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"


class ImpersonationError(Exception):
    """Impersonation headers kube-apiserver cannot act on (groups, extras or a uid without a user):
    it answers 500 in plain text, not with a Status."""

    def text(self, request_uri: str) -> str:
        """responsewriters.InternalError's body."""
        message = f'Internal Server Error: "{request_uri}": {self}'
        return message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") + "\n"


@dataclass(frozen=True)
class Impersonation:
    """One thing a request asks to act as (a v1.ObjectReference of buildImpersonationRequests)."""

    kind: str  # ServiceAccount | User | Group | UserExtra | UID
    name: str
    namespace: str = ""
    api_version: str = ""
    field_path: str = ""  # the extra's key

    def go(self) -> str:
        """Go's %v of the ObjectReference (Kind Namespace Name UID APIVersion ResourceVersion FieldPath)."""
        return "{" + " ".join((self.kind, self.namespace, self.name, "", self.api_version, "", self.field_path)) + "}"

    def attributes(self) -> RequestInfo:
        """What the requestor must be allowed: ``impersonate`` on users, groups, serviceaccounts,
        userextras/<key> or uids."""
        group, _, version = self.api_version.rpartition("/")
        resource, subresource = {
            "ServiceAccount": ("serviceaccounts", ""),
            "User": ("users", ""),
            "Group": ("groups", ""),
            "UserExtra": ("userextras", self.field_path),
            "UID": ("uids", ""),
        }[self.kind]
        return RequestInfo(
            "impersonate",
            resource_request=True,
            api_group=group,
            api_version=version,
            namespace=self.namespace,
            resource=resource,
            subresource=subresource,
            name=self.name,
        )


def _split_service_account(username: str) -> tuple[str, str] | None:
    """serviceaccount.SplitUsername: (namespace, name) of a valid ServiceAccount user name."""
    if not username.startswith(SA_PREFIX):
        return None
    parts = username[len(SA_PREFIX) :].split(":")
    if len(parts) != 2:
        return None
    namespace, name = parts
    if len(namespace) > 63 or not DNS1123_LABEL.match(namespace) or subdomain_errors(name):
        return None
    return namespace, name


def _unescape_extra_key(encoded: str) -> str:
    """unescapeExtraKey: %-decoded, or as sent when it does not decode."""
    try:
        return urllib.parse.unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        return encoded


def impersonation_requests(headers: Iterable[tuple[str, str]]) -> list[Impersonation]:
    """buildImpersonationRequests: the user (a ServiceAccount when its name says so), each group,
    each extra value and the uid the ``Impersonate-*`` headers ask for; raises ImpersonationError
    for groups, extras or a uid without a user."""
    user = uid = ""
    groups: list[str] = []
    extras: dict[str, list[str]] = {}
    for key, value in headers:
        lower = key.lower()
        if lower == IMPERSONATE_USER:
            user = user or value
        elif lower == IMPERSONATE_GROUP:
            groups.append(value)
        elif lower == IMPERSONATE_UID:
            uid = uid or value
        elif lower.startswith(IMPERSONATE_EXTRA):
            extras.setdefault(_unescape_extra_key(lower[len(IMPERSONATE_EXTRA) :]), []).append(value)
    out: list[Impersonation] = []
    if user:
        account = _split_service_account(user)
        out.append(Impersonation("ServiceAccount", account[1], account[0]) if account else Impersonation("User", user))
    out += [Impersonation("Group", g) for g in groups]
    for extra_key, values in extras.items():
        out += [
            Impersonation("UserExtra", v, api_version="authentication.k8s.io/v1", field_path=extra_key) for v in values
        ]
    if uid:
        out.append(Impersonation("UID", uid, api_version="authentication.k8s.io/v1"))
    if (groups or extras or uid) and not user:
        raise ImpersonationError(f"requested [{' '.join(i.go() for i in out)}] without impersonating a user")
    return out


def impersonate(authz: Authorizer, requestor: UserInfo, headers: Iterable[tuple[str, str]]) -> UserInfo:
    """The impersonation filter: ``requestor`` when no ``Impersonate-*`` header is sent, else the user
    those headers describe, provided ``requestor`` may ``impersonate`` each part (403 otherwise).
    Without Impersonate-Group a ServiceAccount gets its groups; every named user but
    system:anonymous is in system:authenticated (unless a group says system:unauthenticated)."""
    headers = list(headers)
    requests = impersonation_requests(headers)
    if not requests:
        return requestor
    groups_given = any(k.lower() == IMPERSONATE_GROUP for k, _ in headers)
    username, uid = "", ""
    groups: list[str] = []
    extra: dict[str, tuple[str, ...]] = {}
    for wanted in requests:
        authz.check(requestor, wanted.attributes())
        if wanted.kind == "ServiceAccount":
            username = f"{SA_PREFIX}{wanted.namespace}:{wanted.name}"
            if not groups_given:
                groups = ["system:serviceaccounts", f"system:serviceaccounts:{wanted.namespace}"]
        elif wanted.kind == "User":
            username = wanted.name
        elif wanted.kind == "Group":
            groups.append(wanted.name)
        elif wanted.kind == "UserExtra":
            extra[wanted.field_path] = (*extra.get(wanted.field_path, ()), wanted.name)
        else:
            uid = wanted.name
    if username != ANONYMOUS:
        if not any(g in (AUTHENTICATED, UNAUTHENTICATED) for g in groups):
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    log.info("%s is impersonating %s%s", requestor.username, username, groups)
    return UserInfo(username, tuple(groups), uid, extra)


# ---------------------------------------------------------------- escalation checks (pure)


def breakdown(rule: Obj) -> list[Obj]:
    """validation.BreakdownRule: one verb x group x resource (x name) per rule; URLs x verbs."""
    out: list[Obj] = []
    verbs, names = _strings(rule.get("verbs")), _strings(rule.get("resourceNames"))
    for group in _strings(rule.get("apiGroups")):
        for resource in _strings(rule.get("resources")):
            for verb in verbs:
                if names:
                    out.extend(
                        {"apiGroups": [group], "resources": [resource], "verbs": [verb], "resourceNames": [n]}
                        for n in names
                    )
                else:
                    out.append({"apiGroups": [group], "resources": [resource], "verbs": [verb]})
    for url in _strings(rule.get("nonResourceURLs")):
        out.extend({"nonResourceURLs": [url], "verbs": [verb]} for verb in verbs)
    return out


def _resource_covers_all(owned: tuple[str, ...], wanted: list[str]) -> bool:
    if "*" in owned:
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or f"*/{path.split('/', 1)[1]}" not in owned:
            return False
    return True


def _urls_cover_all(owned: tuple[str, ...], wanted: list[str]) -> bool:
    return all(any(_url_matches(o, w) for o in owned) for w in wanted)


def rule_covers(owner: Rule, sub: Obj) -> bool:
    """validation.ruleCovers."""
    verbs, groups = _strings(sub.get("verbs")), _strings(sub.get("apiGroups"))
    names = _strings(sub.get("resourceNames"))
    return (
        ("*" in owner.verbs or all(v in owner.verbs for v in verbs))
        and ("*" in owner.groups or all(g in owner.groups for g in groups))
        and _resource_covers_all(owner.resources, _strings(sub.get("resources")))
        and _urls_cover_all(owner.urls, _strings(sub.get("nonResourceURLs")))
        and (not owner.names or (bool(names) and all(n in owner.names for n in names)))
    )


def missing_rules(owner: list[Rule], rules: list[Obj]) -> list[Obj]:
    """validation.Covers: the broken-down rules of ``rules`` no owner rule covers."""
    missing: list[Obj] = []
    for rule in rules:
        for sub in breakdown(rule):
            if not any(rule_covers(o, sub) for o in owner):
                missing.append(sub)
    return missing


def compact(rules: list[Obj]) -> list[Obj]:
    """validation.CompactRules: simple rules of one group/resource/name merge their verbs."""
    out: list[Obj] = []
    simple: dict[tuple[str, str, str | None], Obj] = {}
    for rule in rules:
        names = rule.get("resourceNames") or []
        is_simple = (
            len(names) <= 1
            and not rule.get("nonResourceURLs")
            and len(rule.get("apiGroups") or []) == 1
            and len(rule.get("resources") or []) == 1
        )
        if not is_simple:
            out.append(rule)
            continue
        key = (rule["apiGroups"][0], rule["resources"][0], names[0] if names else None)
        if key in simple:
            verbs = simple[key]["verbs"]
            verbs.extend(v for v in rule.get("verbs") or [] if v not in verbs)
        else:
            simple[key] = copy.deepcopy(rule)
    out.extend(simple.values())
    return out


def _go_quoted(values: list[str]) -> str:
    """Go's %q of a []string: ["a" "b"]."""
    import json

    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def compact_string(rule: Obj) -> str:
    """rbacv1helpers.CompactString."""
    parts = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ):
        if rule.get(key):
            parts.append(f"{label}:{_go_quoted(list(rule[key]))}")
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: UserInfo, owner: RuleSet, rules: list[Obj]) -> str:
    """validation.ConfirmNoEscalation's error, or "" when ``owner`` covers ``rules``."""
    missing = missing_rules(owner.rules, rules)
    if not missing:
        return ""
    described = sorted({compact_string(r) for r in compact(missing)})
    msg = (
        f'user "{user.username}" (groups={_go_quoted(list(user.groups))}) is attempting to grant RBAC permissions '
        "not currently held:\n" + "\n".join(described)
    )
    if owner.errors:
        msg += "; resolution errors: [" + ", ".join(owner.errors) + "]"
    return msg


def _only_gc_fields_changed(old: Obj | None, new: Obj) -> bool:
    """rbacregistry.IsOnlyMutatingGCFields: owner references and finalizers only."""
    if old is None:
        return False
    ignore = ("ownerReferences", "finalizers", "managedFields", "resourceVersion", "generation")

    def strip(o: Obj) -> Obj:
        return {
            **o,
            "metadata": {k: v for k, v in (o.get("metadata") or {}).items() if k not in ignore},
        }

    return strip(old) == strip(new)


class EscalationGuard:
    """Refuses Role/ClusterRole/binding writes that grant rights their author lacks."""

    def __init__(self, authz: Authorizer) -> None:
        self.authz = authz

    def install(self, core: Semantics) -> None:
        core.admission.mutating.insert(0, self)

    async def __call__(self, attrs: Attributes) -> None:
        key = attrs.resource.key
        if key not in RBAC_KEYS or attrs.operation not in ("CREATE", "UPDATE") or attrs.object is None:
            return
        user = UserInfo.from_obj(attrs.user or {})
        if user.privileged or _only_gc_fields_changed(attrs.old_object, attrs.object):
            return
        obj = attrs.object
        name = str((obj.get("metadata") or {}).get("name") or attrs.name)
        namespace = attrs.namespace if key in (ROLES, ROLE_BINDINGS) else ""
        if key in (ROLES, CLUSTER_ROLES):
            self._check_role(user, attrs, key[1], namespace, name)
        else:
            self._check_binding(user, obj, key[1], namespace, name)

    def _check_role(self, user: UserInfo, attrs: Attributes, plural: str, namespace: str, name: str) -> None:
        obj = attrs.object or {}
        escalate = RequestInfo(
            "escalate",
            resource_request=True,
            api_group=GROUP,
            api_version="*",
            namespace=namespace,
            resource=plural,
            name=name if attrs.operation == "UPDATE" else "",
        )
        if self.authz.authorize(user, escalate)[0]:
            return
        owner = self.authz.rules_for(user, namespace)
        rules = [r for r in obj.get("rules") or [] if isinstance(r, dict)]
        message = escalation_message(user, owner, rules)
        if message:
            raise errors.forbidden(GROUP, plural, name, message)
        aggregated = obj.get("aggregationRule") or (attrs.old_object or {}).get("aggregationRule")
        if plural == "clusterroles" and aggregated and escalation_message(user, owner, FULL_AUTHORITY):
            raise errors.forbidden(GROUP, plural, name, "must have cluster-admin privileges to use the aggregationRule")

    def _check_binding(self, user: UserInfo, obj: Obj, plural: str, namespace: str, name: str) -> None:
        ref = obj.get("roleRef") or {}
        kind, role = str(ref.get("kind", "")), str(ref.get("name", ""))
        if kind in ("Role", "ClusterRole"):
            bind = RequestInfo(
                "bind",
                resource_request=True,
                api_group=str(ref.get("apiGroup") or GROUP),
                namespace=namespace,
                resource="roles" if kind == "Role" else "clusterroles",
                name=role,
            )
            if self.authz.authorize(user, bind)[0]:
                return
        rules, err = self.authz.role_rules(kind, role, namespace)
        if err:
            raise errors.forbidden(GROUP, plural, name, err)
        message = escalation_message(user, self.authz.rules_for(user, namespace), rules)
        if message:
            raise errors.forbidden(GROUP, plural, name, message)


# ---------------------------------------------------------------- aggregated ClusterRoles


def _selector_matches(selector: Obj, labels: Mapping[str, str]) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def aggregated_rules(role: Obj, roles: Iterable[Obj]) -> list[Obj]:
    """The rules of the ClusterRoles ``role``'s aggregationRule selects, by name, without repeats."""
    selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
    out: list[Obj] = []
    own = role["metadata"]["name"]
    for other in sorted(roles, key=lambda o: str(o["metadata"]["name"])):
        if other["metadata"]["name"] == own:
            continue
        labels = other["metadata"].get("labels") or {}
        if not any(_selector_matches(s, labels) for s in selectors if isinstance(s, dict)):
            continue
        for rule in other.get("rules") or []:
            if rule not in out:
                out.append(rule)
    return out


class Aggregator:
    """The clusterrole-aggregation controller: keeps aggregated ClusterRoles' ``rules`` current."""

    def __init__(self, core: Semantics) -> None:
        self.core = core
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe = core.store.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.resource == CLUSTER_ROLES:
            self._wake.set()

    async def sync(self) -> None:
        rt = self.core.registry.get(GROUP, "v1", "clusterroles")
        if rt is None:
            return
        # aggregated roles may feed each other (view -> edit -> admin): repeat until nothing changes
        for _ in range(5):
            changed = False
            for role in list(self.core.store.iter(CLUSTER_ROLES)):
                if not role.get("aggregationRule"):
                    continue
                rules = aggregated_rules(role, self.core.store.iter(CLUSTER_ROLES))
                if rules == (role.get("rules") or []):
                    continue
                body = {**role, "rules": rules}
                with contextlib.suppress(ApiError):
                    ctx = Context(field_manager="clusterrole-aggregation-controller")
                    await self.core.update(rt, "", role["metadata"]["name"], body, ctx)
                    changed = True
            if not changed:
                return

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.sync()
            except Exception:  # a controller keeps going; the next change retries
                log.exception("clusterrole aggregation failed")

    async def stop(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


# ---------------------------------------------------------------- the authentication/authorization APIs


REVIEW_RESOURCES = {
    ("authentication.k8s.io", "selfsubjectreviews"): "SelfSubjectReview",
    ("authentication.k8s.io", "tokenreviews"): "TokenReview",
    ("authorization.k8s.io", "selfsubjectaccessreviews"): "SelfSubjectAccessReview",
    ("authorization.k8s.io", "subjectaccessreviews"): "SubjectAccessReview",
    ("authorization.k8s.io", "localsubjectaccessreviews"): "LocalSubjectAccessReview",
    ("authorization.k8s.io", "selfsubjectrulesreviews"): "SelfSubjectRulesReview",
}


# Protobuf field numbers of the review kinds (k8s.io/api authentication/v1 and authorization/v1
# generated.proto): kubectl's typed clients post these as protobuf.
_PROTOBUF_SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "TokenRequest": {1: ("metadata", "ObjectMeta"), 2: ("spec", "TokenRequestSpec")},
    "TokenRequestSpec": {
        1: ("audiences", "strings"),
        3: ("boundObjectRef", "BoundObjectReference"),
        4: ("expirationSeconds", "int64"),
    },
    "BoundObjectReference": {
        1: ("kind", "string"),
        2: ("apiVersion", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
    },
    "TokenReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "TokenReviewSpec")},
    "TokenReviewSpec": {1: ("token", "string"), 2: ("audiences", "strings")},
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta")},
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes"),
        2: ("nonResourceAttributes", "NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: ("namespace", "string"),
        2: ("verb", "string"),
        3: ("group", "string"),
        4: ("version", "string"),
        5: ("resource", "string"),
        6: ("subresource", "string"),
        7: ("name", "string"),
    },
    "NonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
    "SubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SubjectAccessReviewSpec")},
    "LocalSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SubjectAccessReviewSpec")},
    "SubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes"),
        2: ("nonResourceAttributes", "NonResourceAttributes"),
        3: ("user", "string"),
        4: ("groups", "strings"),
        6: ("uid", "string"),
    },
    "SelfSubjectRulesReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "SelfSubjectRulesReviewSpec")},
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "string")},
}


def register_protobuf() -> None:
    """Teach ``protobuf.decode`` the review kinds (what ``kubectl create token``/``auth`` send)."""
    for name, schema in _PROTOBUF_SCHEMAS.items():
        protobuf.SCHEMAS.setdefault(name, schema)
    for group, kind in [("authentication.k8s.io", "TokenRequest"), *((g, k) for (g, _), k in REVIEW_RESOURCES.items())]:
        protobuf.KINDS.add((f"{group}/v1", kind))


def may_be_review(path: str) -> bool:
    """A cheap pre-check on the path, so the admin's other requests skip ``request_info``."""
    return path.startswith(("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/")) or path.endswith("/token")


def register_types(registry: Registry) -> None:
    """Serve the review kinds in discovery (create only), as kube-apiserver lists them; decode
    them from protobuf."""
    register_protobuf()
    for (group, plural), kind in REVIEW_RESOURCES.items():
        if registry.get(group, "v1", plural) is None:
            namespaced = plural == "localsubjectaccessreviews"
            registry.add(ResourceType(group, "v1", plural, kind, namespaced, verbs=("create",)))


def is_review(info: RequestInfo) -> bool:
    """Whether ``review`` answers this request (the token subresource or a review kind)."""
    if not info.resource_request:
        return False
    if info.api_group == "" and info.resource == "serviceaccounts" and info.subresource == "token":
        return True
    return (info.api_group, info.resource) in REVIEW_RESOURCES and info.api_version == "v1" and not info.name


def _attributes_info(spec: Obj, namespace: str = "") -> RequestInfo:
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if bool(res) == bool(non) or not isinstance(res or non, dict):
        raise errors.invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "",
            [
                (
                    "FieldValueInvalid",
                    "spec.resourceAttributes",
                    "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            ],
        )
    if non:
        return RequestInfo(str(non.get("verb") or ""), path=str(non.get("path") or ""))
    assert isinstance(res, dict)
    return RequestInfo(
        str(res.get("verb") or ""),
        resource_request=True,
        api_group=str(res.get("group") or ""),
        api_version=str(res.get("version") or ""),
        namespace=namespace or str(res.get("namespace") or ""),
        resource=str(res.get("resource") or ""),
        subresource=str(res.get("subresource") or ""),
        name=str(res.get("name") or ""),
    )


def _access_status(authz: Authorizer, user: UserInfo, info: RequestInfo) -> Obj:
    allowed, reason = authz.authorize(user, info)
    status: Obj = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return status


def _rules_review(authz: Authorizer, user: UserInfo, namespace: str) -> Obj:
    """SelfSubjectRulesReview: the rules that apply in ``namespace``, as ``kubectl auth can-i --list`` shows."""
    if user.privileged:
        resource_rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        non_resource_rules = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        return {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}
    ruleset = authz.rules_for(user, namespace)
    resource_rules, non_resource_rules = [], []
    for rule in ruleset.rules:
        obj = rule.to_obj()
        if rule.urls:
            non_resource_rules.append({"verbs": obj["verbs"], "nonResourceURLs": obj["nonResourceURLs"]})
        if rule.resources:
            resource_rules.append({k: v for k, v in obj.items() if k != "nonResourceURLs"})
    out: Obj = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}
    if ruleset.errors:
        out["incomplete"] = True
        out["evaluationError"] = ", ".join(ruleset.errors)
    return out


def review(authn: Authenticator, authz: Authorizer, user: UserInfo, info: RequestInfo, body: Any) -> Obj:
    """Answer a request ``is_review`` accepts (already authorized): the object to send with 201."""
    if info.verb != "create":
        raise errors.method_not_allowed()
    if info.resource == "serviceaccounts":
        return authn.token_request(info.namespace, info.name, body)
    kind = REVIEW_RESOURCES[(info.api_group, info.resource)]
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request was not a JSON object")
    if body.get("kind") and body["kind"] != kind:
        raise errors.bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind ({kind})")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("spec must be an object")
    out: Obj = {
        "kind": kind,
        "apiVersion": f"{info.api_group}/v1",
        "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None},
    }
    if kind == "SelfSubjectReview":
        out["status"] = {"userInfo": user.to_obj()}
        return out
    out["spec"] = spec
    if kind == "TokenReview":
        found = authn.authenticate(str(spec.get("token") or ""))
        if found is None or found is authn.admin:
            out["status"] = {"authenticated": False, "user": {}, "error": "invalid bearer token"}
        else:
            out["status"] = {
                "authenticated": True,
                "user": found.to_obj(),
                "audiences": list(spec.get("audiences") or []),
            }
        return out
    if kind == "SelfSubjectRulesReview":
        out["status"] = _rules_review(authz, user, str(spec.get("namespace") or ""))
        return out
    if kind == "SelfSubjectAccessReview":
        out["status"] = _access_status(authz, user, _attributes_info(spec))
        return out
    if kind == "LocalSubjectAccessReview":
        res = spec.get("resourceAttributes") or {}
        if res.get("namespace") and res["namespace"] != info.namespace:
            raise errors.bad_request(f"spec.resourceAttributes.namespace must match namespace: {info.namespace}")
    subject = UserInfo.from_obj({**spec, "username": spec.get("user") or ""})
    if not subject.username and not subject.groups:
        raise errors.invalid(
            "authorization.k8s.io",
            kind,
            "",
            [("FieldValueRequired", "spec.user", "Required value: at least one of user or group must be specified")],
        )
    target = _attributes_info(spec, info.namespace if kind == "LocalSubjectAccessReview" else "")
    out["status"] = _access_status(authz, subject, target)
    return out
