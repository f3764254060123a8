"""API semantics between the HTTP layer and the store: create, update, patch, delete, list, watch.

Every write runs: decode checks -> system metadata -> defaults (built-in or CRD schema) ->
mutating admission -> validation -> validating admission -> commit (compare-and-swap on the
resourceVersion). Admission is an extension point: ``ApiCore.admission`` holds two lists of async
hooks, empty by default, each given an ``Attributes`` it may change (mutating) or reject by raising
``ApiError`` (both).
"""

from __future__ import annotations

import copy
import datetime as dt
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpucluster import timestamps
from gpucluster.sandbox.apiserver import apply as ssa
from gpucluster.sandbox.apiserver import builtins, crds, errors, podspec, schemas
from gpucluster.sandbox.apiserver.context import Admission as Admission
from gpucluster.sandbox.apiserver.context import AdmissionHook as AdmissionHook
from gpucluster.sandbox.apiserver.context import Attributes as Attributes
from gpucluster.sandbox.apiserver.context import Context as Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.patch import json_patch, merge_patch, strategic_merge
from gpucluster.sandbox.apiserver.resources import Registry, ResourceType
from gpucluster.sandbox.apiserver.selectors import (
    FieldSelector,
    Selector,
    go_parse_uint,
    go_quote,
    matches_fields,
    matches_labels,
    single_name,
)
from gpucluster.sandbox.apiserver.store import Store, Watcher, rv_of

if TYPE_CHECKING:
    from gpucluster.sandbox.apiserver.auth import Authenticator
    from gpucluster.sandbox.apiserver.rbac import Authorizer

Obj = dict[str, Any]
ObjList = list[Obj]
Causes = list[tuple[str, str, str]]

NAMESPACES = ("", "namespaces")
PODS = ("", "pods")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
APPLY_PATCH_CBOR = "application/apply-patch+cbor"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH)

# Built-in resources whose DELETE answers with the deleted object instead of a Status.
RETURNS_DELETED_OBJECT = {
    ("", "pods"),
    ("", "services"),
    ("resource.k8s.io", "resourceclaims"),
    ("resource.k8s.io", "resourceslices"),
    ("resource.k8s.io", "deviceclasses"),
    ("resource.k8s.io", "resourceclaimtemplates"),
}


def now_rfc3339(clock: Callable[[], dt.datetime] | None = None) -> str:
    return timestamps.rfc3339(clock() if clock else None)


class UnknownError(ApiError):
    """An error kube-apiserver has no Status for: 500 without a reason (apierrors' StatusReasonUnknown)."""

    def __init__(self, message: str) -> None:
        super().__init__(500, "", message)

    def status(self) -> Obj:
        return {k: v for k, v in super().status().items() if k != "reason"}


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str = ""
    remaining: int | None = None


class ApiCore:
    def __init__(
        self,
        store: Store | None = None,
        registry: Registry | None = None,
        *,
        clock: Callable[[], dt.datetime] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store or Store()
        self.registry = registry or Registry()
        self.admission = Admission()
        self.clock = clock
        self.rng = rng or random.Random()
        self.service_ips = builtins.ServiceIPs()
        self.default_propagation = "Background"
        # Set by Sandbox: bearer tokens -> identities; mints ServiceAccount tokens (sandbox.apiserver.auth).
        self.authn: Authenticator | None = None
        self.authz: Authorizer | None = None  # RBAC (sandbox.apiserver.rbac); None: no authorization
        # Set by a kubelet: the grace period of a pod's deletion (pods it runs), None to delete at once.
        self.pod_grace_period: Callable[[Obj, Obj], int | None] | None = None

    def now(self) -> str:
        return now_rfc3339(self.clock)

    # ------------------------------------------------------------ helpers

    def _namespace(self, rt: ResourceType, namespace: str, obj: Obj) -> str:
        md = obj.setdefault("metadata", {})
        if not rt.namespaced:
            md.pop("namespace", None)
            return ""
        body_ns = md.get("namespace") or ""
        if namespace and body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        ns = namespace or body_ns
        if not ns:
            raise errors.bad_request("an empty namespace may not be set during creation")
        md["namespace"] = ns
        return str(ns)

    def _check_namespace_exists(self, rt: ResourceType, ns: str, name: str) -> Obj | None:
        if not rt.namespaced:
            return None
        ns_obj = self.store.get(NAMESPACES, "", ns)
        if ns_obj is None:
            raise errors.not_found("", "namespaces", ns)
        if ns_obj["metadata"].get("deletionTimestamp"):
            err = errors.forbidden(
                rt.group,
                rt.plural,
                name,
                f"unable to create new content in namespace {ns} because it is being terminated",
            )
            err.details = {
                **(err.details or {}),
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {ns} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            }
            raise err
        return ns_obj

    def _check_kind(self, rt: ResourceType, obj: Obj) -> None:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if kind and kind != rt.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        if api_version and api_version != rt.api_version:
            group = api_version.rpartition("/")[0]
            if group != rt.group or self.registry.get(rt.group, api_version.rpartition("/")[2], rt.plural) is None:
                raise errors.bad_request(
                    f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
                )

    def to_version(self, rt: ResourceType, obj: Obj) -> Obj:
        """A stored object as the requested version sees it (CRDs: apiVersion only, no conversion)."""
        if obj.get("apiVersion") == rt.api_version:
            return obj
        return {**obj, "apiVersion": rt.api_version}

    def _storage_form(self, rt: ResourceType, obj: Obj) -> Obj:
        version = rt.storage_version
        obj["apiVersion"] = f"{rt.group}/{version}" if rt.group else version
        obj["kind"] = rt.kind
        return obj

    def _types(self, rt: ResourceType) -> ssa.TypeInfo:
        if rt.custom:
            return ssa.SchemaTypes(rt.schema)
        definition = schemas.definition_for(rt.group, rt.version, rt.kind)
        return ssa.DefinitionTypes(definition) if definition else ssa.BuiltinTypes()

    # ------------------------------------------------------------ reads

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return self.to_version(rt, obj)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        labels: Selector = (),
        fields: FieldSelector = (),
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
    ) -> ListResult:
        current = self.store.rv
        ns = namespace if rt.namespaced else None
        after: tuple[str, str] | None = None
        if continue_token:  # storage.ValidateListOptions: the token first, then the version
            try:
                after, token_rv = decode_continue(continue_token, ns, rt.namespaced)
            except ValueError as exc:
                raise errors.bad_request(f"invalid continue token: {exc}") from None
            if resource_version not in ("", "0"):
                raise errors.bad_request("specifying resource version is not allowed when using continue")
            if token_rv < self.store.oldest_watchable(rt.key):
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
                )
        elif resource_version:
            try:
                wanted = go_parse_uint(resource_version)
            except ValueError as exc:
                raise errors.bad_request(
                    f"invalid resource version: resourceVersion: Invalid value: {go_quote(resource_version)}: {exc}"
                ) from None
            if wanted > current:
                err = ApiError(
                    504,
                    "Timeout",
                    f"Too large resource version: {wanted}, current: {current}",
                    details={
                        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                        "retryAfterSeconds": 1,
                    },
                )
                raise err
            if resource_version_match == "Exact" and wanted != current:
                raise errors.gone(f"too old resource version: {wanted} ({current})")
        items: ObjList = []
        name_only = single_name(fields)
        if name_only is not None and not continue_token:
            candidates: Any = []
            if ns is not None:
                one = self.store.get(rt.key, ns, name_only)
                candidates = [one] if one else []
            else:
                candidates = (o for o in self.store.iter(rt.key, None) if o["metadata"]["name"] == name_only)
        else:
            candidates = self.store.iter(rt.key, ns, after=after)
        token = ""
        last: Obj | None = None
        for obj in candidates:
            if labels and not matches_labels(labels, obj):
                continue
            if fields and not matches_fields(fields, obj):
                continue
            if limit and len(items) >= limit:
                assert last is not None
                md = last["metadata"]
                token = encode_continue((md.get("namespace", ""), md["name"]), current, ns, rt.namespaced)
                break
            items.append(self.to_version(rt, obj))
            last = obj
        return ListResult(items, str(current), token)

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        resource_version: str = "",
        labels: Selector = (),
        fields: FieldSelector = (),
        send_initial_events: bool | None = None,
    ) -> Watcher:
        ns = namespace if rt.namespaced else None
        initial = resource_version in ("", "0") if send_initial_events is None else send_initial_events
        rv: int | None = None
        if resource_version not in ("", "0"):
            try:
                rv = go_parse_uint(resource_version)
            except ValueError as exc:  # the watch cache's error, passed on as an unknown one (500)
                raise UnknownError(f"resourceVersion: Invalid value: {go_quote(resource_version)}: {exc}") from None
        return self.store.watch(rt.key, ns, resource_version=rv, labels=labels, fields=fields, initial=initial)

    # ------------------------------------------------------------ create

    async def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        ctx: Context,
        *,
        managed: bool = True,
        authorize_create: bool = False,
    ) -> Obj:
        """Create ``body``; ``managed``: track managedFields (an apply brings its own);
        ``authorize_create``: the requester needs the create verb as well (a create by apply,
        authorized for patch), checked after validation as the patch handler's createValidation."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        self._check_kind(rt, body)
        obj = copy.deepcopy(body)
        obj.pop("status", None) if not rt.status_on_create else None
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        ns = self._namespace(rt, namespace, obj)
        if md.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        generated = False
        if not md.get("name"):
            if md.get("generateName"):
                md["name"] = str(md["generateName"]) + "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(5))
                generated = True
            else:
                raise errors.invalid(
                    rt.group,
                    rt.kind,
                    "",
                    [("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")],
                )
        name = str(md["name"])
        ns_obj = self._check_namespace_exists(rt, ns, name)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = self.now()
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            md.pop(key, None)
        if rt.generation:
            md["generation"] = 1
        else:
            md.pop("generation", None)
        self._storage_form(rt, obj)
        obj = self._defaults(rt, obj, None, ctx)
        if not rt.status_on_create:
            status = builtins.initial_status(rt.group, rt.plural, obj, md["creationTimestamp"])
            if status is not None:
                obj["status"] = status
        if rt.key == CRDS:
            obj["status"] = crds.crd_status(obj, self.now(), None)
        if managed:
            fields = ssa.track_update(
                None,
                obj,
                manager=ctx.manager(),
                api_version=rt.api_version,
                subresource="",
                has_status=rt.has_status,
                types=self._types(rt),
                now=self.now(),
            )
            if fields:
                obj["metadata"]["managedFields"] = fields
            else:
                obj["metadata"].pop("managedFields", None)
        attrs = Attributes(
            "CREATE",
            rt,
            "",
            ns,
            name,
            obj,
            None,
            ctx.dry_run,
            {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", **ctx.options},
            ctx.user,
            ctx.warnings,
        )
        await self.admission.mutate(attrs)
        obj = attrs.object or obj
        self._validate(rt, obj, None, ns_obj, ctx)
        if authorize_create:
            self._authorize_create(rt, ns, name, ctx)
        await self.admission.validate(attrs)
        if ctx.dry_run:
            # As the dry-run storage: a create still fails on a name that exists (409), after admission.
            for attempt in range(5):
                if self.store.get(rt.key, ns, str(obj["metadata"]["name"])) is None:
                    break
                if not generated or attempt == 4:
                    raise errors.already_exists(rt.group, rt.plural, str(obj["metadata"]["name"]))
                md = obj["metadata"]
                md["name"] = str(md["generateName"]) + "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(5))
            return self.to_version(rt, obj)
        for attempt in range(5):
            try:
                stored = self.store.create(rt.key, obj)
                break
            except ApiError:
                if not generated or attempt == 4:
                    raise
                md = obj["metadata"]
                md["name"] = str(md["generateName"]) + "".join(self.rng.choice(_SUFFIX_ALPHABET) for _ in range(5))
        self._after_write(rt, None, stored)
        return self.to_version(rt, stored)

    def _authorize_create(self, rt: ResourceType, namespace: str, name: str, ctx: Context) -> None:
        if self.authz is None:
            return
        from gpucluster.sandbox.apiserver.auth import UserInfo
        from gpucluster.sandbox.apiserver.rbac import RequestInfo

        user = UserInfo.from_obj(ctx.user)
        if not user.privileged:
            self.authz.check(
                user, RequestInfo("create", "", True, rt.group, rt.version, namespace, rt.plural, "", name)
            )

    # ------------------------------------------------------------ update

    def _defaults(self, rt: ResourceType, obj: Obj, old: Obj | None, ctx: Context | None = None) -> Obj:
        if rt.custom:
            if rt.schema:
                dropped: list[str] = []
                pruned = crds.prune(obj, rt.schema, root=True, dropped=dropped)
                if dropped and ctx is not None and ctx.field_validation == "Strict":
                    unknown = ", ".join(f'unknown field "{p}"' for p in dropped)
                    raise errors.bad_request(
                        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding error: {unknown}'
                    )
                if dropped and ctx is not None and ctx.field_validation == "Warn":
                    ctx.warnings.extend(f'unknown field "{p}"' for p in dropped)
                obj = crds.default(pruned, rt.schema)
            return obj
        # Built-ins decode into Go types: undeclared fields are dropped (400 under Strict), an
        # integer an int32 field cannot hold is a 400.
        schemas.check_int32_fields(rt.group, rt.version, rt.kind, obj)
        schemas.check_unknown_fields(
            rt.group, rt.version, rt.kind, obj, ctx.field_validation if ctx else "Ignore", ctx.warnings if ctx else None
        )
        if rt.key == CRDS:
            crds.crd_defaults(obj)
            return obj
        builtins.apply_defaults(rt.group, rt.plural, obj, self.service_ips if old is None else None)
        if rt.key == ("", "services") and old is not None:
            old_spec, new_spec = old.get("spec") or {}, obj.get("spec") or {}
            if old_spec.get("clusterIP") and not new_spec.get("clusterIP"):
                new_spec["clusterIP"] = old_spec["clusterIP"]
                new_spec["clusterIPs"] = old_spec.get("clusterIPs", [old_spec["clusterIP"]])
        return obj

    def _validate(self, rt: ResourceType, obj: Obj, old: Obj | None, ns_obj: Obj | None, ctx: Context) -> None:
        md = obj["metadata"]
        name = str(md.get("name", ""))
        causes: Causes = []
        if old is None:
            causes += builtins.name_causes(rt.group, rt.plural, name)
        causes += podspec.metadata_causes(md)
        if rt.custom and rt.schema:
            causes += crds.validate(obj, rt.schema, "", old, has_old=old is not None)
        elif rt.key == CRDS:
            causes += crds.crd_causes(obj)
            if old is not None:
                old_spec, new_spec = old.get("spec") or {}, obj.get("spec") or {}
                if old_spec.get("group") != new_spec.get("group"):
                    causes.append(
                        (
                            "FieldValueInvalid",
                            "spec.group",
                            f'Invalid value: "{new_spec.get("group")}": field is immutable',
                        )
                    )
                if old_spec.get("scope") != new_spec.get("scope"):
                    causes.append(
                        (
                            "FieldValueInvalid",
                            "spec.scope",
                            f'Invalid value: "{new_spec.get("scope")}": field is immutable',
                        )
                    )
        else:
            if rt.namespaced and ns_obj is None and md.get("namespace"):
                ns_obj = self.store.get(NAMESPACES, "", md["namespace"])
            causes += builtins.causes_for(rt.group, rt.plural, obj, old, ns_obj)
        if causes:
            raise errors.invalid(rt.group, rt.kind, name, causes)

    def _merge_update(self, rt: ResourceType, old: Obj, body: Obj, subresource: str) -> Obj:
        """The object a PUT of ``body`` (to the resource or its ``subresource``) would store."""
        if subresource == "status":
            new = {k: v for k, v in old.items() if k != "status"}
            new["metadata"] = dict(old["metadata"])
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if rv:
                new["metadata"]["resourceVersion"] = rv
            if "managedFields" in (body.get("metadata") or {}):
                new["metadata"]["managedFields"] = body["metadata"]["managedFields"]
            return new
        new = copy.deepcopy(body)
        md = new.setdefault("metadata", {})
        old_md = old["metadata"]
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
            "name",
        ):
            if key in old_md:
                md[key] = old_md[key]
            else:
                md.pop(key, None)
        if "managedFields" not in md and "managedFields" in old_md:
            md["managedFields"] = old_md["managedFields"]
        md.pop("selfLink", None)
        if rt.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        return new

    async def update(
        self, rt: ResourceType, namespace: str, name: str, body: Obj, ctx: Context, *, subresource: str = ""
    ) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request was not a JSON object")
        self._check_kind(rt, body)
        md = body.get("metadata") or {}
        # As the update handler: the namespace (EnsureObjectNamespaceMatchesRequestNamespace), then
        # the name (checkName: one is required and must be the URL's).
        if rt.namespaced and md.get("namespace") and md["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not md.get("name"):
            raise errors.bad_request(
                f"the name of the object ({name} based on URL) was undeterminable: name must be provided"
            )
        if md["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({md['name']}) does not match the name on the URL ({name})"
            )
        ns = namespace if rt.namespaced else ""
        old = self.store.get(rt.key, ns, name)
        if old is None:
            raise errors.not_found(rt.group, rt.plural, name)
        if md.get("uid") and md["uid"] != old["metadata"].get("uid"):  # a PUT's uid is a precondition
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"StorageError: invalid object, Code: 4, Key: {_storage_key(rt, ns, name)}, ResourceVersion: 0, "
                f"AdditionalErrorMsg: Precondition failed: UID in precondition: {md['uid']}, "
                f"UID in object meta: {old['metadata'].get('uid')}",
            )
        new = self._merge_update(rt, old, body, subresource)
        return await self._commit_update(rt, old, new, ctx, subresource=subresource, track=True)

    async def _commit_update(
        self, rt: ResourceType, old: Obj, new: Obj, ctx: Context, *, subresource: str, track: bool
    ) -> Obj:
        name = old["metadata"]["name"]
        ns = old["metadata"].get("namespace", "")
        wanted = new["metadata"].get("resourceVersion")
        if wanted and str(wanted) != old["metadata"].get("resourceVersion"):
            raise errors.stale(rt.group, rt.plural, name)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        self._storage_form(rt, new)
        new = self._defaults(rt, new, old, ctx)
        if rt.key == CRDS:
            new["status"] = crds.crd_status(new, self.now(), old.get("status"))
        old_final = set(old["metadata"].get("finalizers") or [])
        new_final = set(new["metadata"].get("finalizers") or [])
        if old["metadata"].get("deletionTimestamp") and new_final - old_final:
            added = sorted(new_final - old_final)
            raise errors.invalid(
                rt.group,
                rt.kind,
                name,
                [
                    (
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added}",
                    )
                ],
            )
        if rt.generation:
            gen = int(old["metadata"].get("generation") or 1)
            if builtins.strip_for_generation(new, rt.has_status) != builtins.strip_for_generation(old, rt.has_status):
                gen += 1
            new["metadata"]["generation"] = gen
        if track:
            fields = ssa.track_update(
                old,
                new,
                manager=ctx.manager(),
                api_version=rt.api_version,
                subresource=subresource,
                has_status=rt.has_status,
                types=self._types(rt),
                now=self.now(),
            )
            if fields:
                new["metadata"]["managedFields"] = fields
            else:
                new["metadata"].pop("managedFields", None)
        attrs = Attributes(
            "UPDATE",
            rt,
            subresource,
            ns,
            name,
            new,
            old,
            ctx.dry_run,
            {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", **ctx.options},
            ctx.user,
            ctx.warnings,
        )
        await self.admission.mutate(attrs)
        new = attrs.object or new
        self._validate(rt, new, old, None, ctx)
        await self.admission.validate(attrs)
        if _same(old, new):
            return self.to_version(rt, old)
        if ctx.dry_run:
            return self.to_version(rt, new)
        expected = rv_of(old)
        # As the registry: an update leaving no finalizers deletes the object, unless a graceful
        # (pod) deletion is still pending - the kubelet deletes those with grace 0.
        md_new = new["metadata"]
        if (
            md_new.get("deletionTimestamp")
            and not md_new.get("finalizers")
            and not md_new.get("deletionGracePeriodSeconds")
            and rt.key != NAMESPACES
        ):
            final = self.store.delete(rt.key, ns, name, expected_rv=expected)
            self._after_delete(rt, final)
            return self.to_version(rt, final)
        stored = self.store.update(rt.key, new, expected_rv=expected)
        self._after_write(rt, old, stored)
        return self.to_version(rt, stored)

    # ------------------------------------------------------------ patch

    def _typed_apply_body(self, rt: ResourceType, namespace: str, name: str, body: Obj) -> Obj:
        """An apply body as server-side apply types it: a list map or set item whose key repeats is
        a 500 (failed to create typed patch object); for a built-in, an IntOrString an int32 cannot
        hold is a 500 (the conversion to the Go type), any other int32 field wraps around as Go's
        conversion of an int64 does, and validation judges what it became."""
        # The body's namespace, not the URL's (empty when the body names none).
        where = f"{(body.get('metadata') or {}).get('namespace') or ''}/{name}"
        gvk = f"{rt.group}/{rt.version}, Kind={rt.kind}"
        duplicate = ssa.duplicate_entry(body, self._types(rt))
        if duplicate:
            raise ApiError(500, "", f"failed to create typed patch object ({where}; {gvk}): {duplicate}")
        if rt.custom:
            return body
        found = schemas.int32_overflows(rt.group, rt.version, rt.kind, body)
        if not found:
            return body
        for _, holder, key, int_or_string in found:
            if int_or_string:
                raise ApiError(
                    500,
                    "",
                    f"failed to convert new object ({where}; {gvk}) to proper version: unable to convert "
                    f"unstructured object to {gvk}: json: cannot unmarshal number {holder[key]} into Go value "
                    "of type int32",
                )
        body = copy.deepcopy(body)
        for _, holder, key, _ in schemas.int32_overflows(rt.group, rt.version, rt.kind, body):
            value = holder[key]
            holder[key] = (value + 2**31) % 2**32 - 2**31
        return body

    async def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch_type: str,
        body: Any,
        ctx: Context,
        *,
        subresource: str = "",
        force: bool = False,
    ) -> tuple[Obj, bool]:
        """Apply a patch; returns (object, created) — apply creates absent objects."""
        if patch_type not in PATCH_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {', '.join(PATCH_TYPES)}",
            )
        if patch_type == STRATEGIC_PATCH and rt.custom:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}",
            )
        if patch_type == APPLY_PATCH:
            if not ctx.field_manager:
                raise errors.bad_request("PATCH: fieldManager is required for apply requests")
            if not isinstance(body, dict):
                raise errors.bad_request("error decoding YAML: the apply patch must be an object")
            api_version, kind = str(body.get("apiVersion") or ""), str(body.get("kind") or "")
            if (api_version, kind) != (rt.api_version, rt.kind):  # the version-check manager
                group, _, version = api_version.rpartition("/") if api_version.count("/") < 2 else ("", "", "")
                raise errors.bad_request(f"invalid object type: {group}/{version}, Kind={kind}")
            bmd = body.get("metadata") or {}
            if isinstance(bmd, dict) and bmd.get("managedFields") is not None:
                raise errors.bad_request("metadata.managedFields must be nil")
            if bmd.get("name") and bmd["name"] != name:
                raise errors.bad_request(
                    f"the name of the object ({bmd['name']}) does not match the name on the URL ({name})"
                )
            body = self._typed_apply_body(rt, namespace, name, body)
        elif force:
            raise errors.bad_request("force may not be set for non-apply patch")
        ns = namespace if rt.namespaced else ""
        pinned = _pins_rv(patch_type, body)
        for attempt in range(10):
            old = self.store.get(rt.key, ns, name)
            if old is None:
                if patch_type != APPLY_PATCH or subresource:
                    raise errors.not_found(rt.group, rt.plural, name)
                uid = (body.get("metadata") or {}).get("uid")
                if uid:  # a uid is a precondition on an object that must exist
                    raise errors.conflict(
                        rt.group,
                        rt.plural,
                        name,
                        f"uid mismatch: the provided object specified uid {uid}, and no existing object was found",
                    )
                applied = copy.deepcopy(body)
                applied.setdefault("metadata", {})["name"] = name
                created = ssa.apply(
                    None,
                    applied,
                    manager=ctx.manager(),
                    force=force,
                    api_version=rt.api_version,
                    subresource="",
                    has_status=rt.has_status,
                    types=self._types(rt),
                    now=self.now(),
                )
                created["apiVersion"], created["kind"] = body["apiVersion"], body["kind"]
                try:
                    return await self.create(rt, namespace, created, ctx, managed=False, authorize_create=True), True
                except ApiError as exc:
                    if exc.reason == "AlreadyExists" and attempt < 9:
                        continue
                    raise
            current = self.to_version(rt, old)
            if patch_type == JSON_PATCH:
                patched = json_patch(copy.deepcopy(current), body)
            elif patch_type == MERGE_PATCH:
                patched = merge_patch(current, body)
            elif patch_type == STRATEGIC_PATCH:
                patched = strategic_merge(current, body)
            else:
                patched = ssa.apply(
                    current,
                    body,
                    manager=ctx.manager(),
                    force=force,
                    api_version=rt.api_version,
                    subresource=subresource,
                    has_status=rt.has_status,
                    types=self._types(rt),
                    now=self.now(),
                )
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            pmd = patched.setdefault("metadata", {})
            if not isinstance(pmd, dict):
                raise errors.bad_request("metadata must be an object")
            if pmd.get("uid") and pmd["uid"] != old["metadata"].get("uid"):
                # ValidateObjectMetaUpdate, run by BeforeUpdate and again by the kind's strategy
                uid = go_quote(str(pmd["uid"]))
                immutable = ("FieldValueInvalid", "metadata.uid", f"Invalid value: {uid}: field is immutable")
                raise errors.invalid(rt.group, rt.kind, name, [immutable, immutable])
            if pmd.get("name", name) != name:
                raise errors.bad_request(
                    f"the name of the object ({pmd.get('name')}) does not match the name on the URL ({name})"
                )
            pmd["name"] = name
            if rt.namespaced:
                pmd["namespace"] = ns
            if not pinned:
                pmd["resourceVersion"] = old["metadata"]["resourceVersion"]
            new = self._merge_update(rt, old, patched, subresource)
            try:
                return await self._commit_update(
                    rt, old, new, ctx, subresource=subresource, track=patch_type != APPLY_PATCH
                ), False
            except ApiError as exc:
                if exc.code == 409 and exc.message.endswith(errors.STALE) and not pinned and attempt < 9:
                    continue
                raise
        raise errors.internal("too many conflicts applying the patch")

    # ------------------------------------------------------------ delete

    async def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj, ctx: Context) -> tuple[Obj, bool]:
        """Delete or start deleting; returns (object, deleted now)."""
        ns = namespace if rt.namespaced else ""
        old = self.store.get(rt.key, ns, name)
        if old is None:
            raise errors.not_found(rt.group, rt.plural, name)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"].get("uid"):
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {old['metadata'].get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"].get("resourceVersion"):
            raise errors.conflict(
                rt.group,
                rt.plural,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {old['metadata'].get('resourceVersion')}",
            )
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        policy = policy or self.default_propagation
        if policy not in ("Orphan", "Foreground", "Background"):
            raise errors.invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                [
                    (
                        "FieldValueNotSupported",
                        "propagationPolicy",
                        f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
                    )
                ],
            )
        attrs = Attributes(
            "DELETE",
            rt,
            "",
            ns,
            name,
            None,
            old,
            ctx.dry_run,
            {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **options},
            ctx.user,
            ctx.warnings,
        )
        await self.admission.mutate(attrs)
        await self.admission.validate(attrs)
        md = old["metadata"]
        finalizers = list(md.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        grace = self.pod_grace_period(old, options) if rt.key == PODS and self.pod_grace_period else None
        if grace:
            return self._delete_gracefully(rt, old, finalizers, grace, ctx)
        final_pod_delete = grace == 0 and not finalizers  # the kubelet's delete after the pod stopped
        if md.get("deletionTimestamp") and finalizers == list(md.get("finalizers") or []) and not final_pod_delete:
            return self.to_version(rt, old), False
        if finalizers or rt.key == NAMESPACES:
            new = dict(old)
            new["metadata"] = (
                {**md, "finalizers": finalizers} if finalizers else {k: v for k, v in md.items() if k != "finalizers"}
            )
            new["metadata"].setdefault("deletionTimestamp", self.now())
            new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
            if grace == 0:  # the kubelet's final delete: removing the last finalizer then deletes it
                new["metadata"]["deletionGracePeriodSeconds"] = 0
            if rt.generation and not md.get("deletionTimestamp"):
                new["metadata"]["generation"] = int(md.get("generation") or 1) + 1
            if rt.key == NAMESPACES:
                new["status"] = {**(old.get("status") or {}), "phase": "Terminating"}
            if ctx.dry_run:
                return self.to_version(rt, new), False
            stored = self.store.update(rt.key, new, expected_rv=rv_of(old))
            return self.to_version(rt, stored), False
        if ctx.dry_run:
            return self.to_version(rt, old), True
        final = self.store.delete(rt.key, ns, name, expected_rv=rv_of(old))
        self._after_delete(rt, final)
        return self.to_version(rt, final), True

    def _delete_gracefully(
        self, rt: ResourceType, old: Obj, finalizers: Sequence[str], grace: int, ctx: Context
    ) -> tuple[Obj, bool]:
        """A graceful pod deletion: deletionTimestamp = now + grace; the kubelet stops the pod and deletes
        it with grace 0. A later delete may only shorten the period."""
        md = old["metadata"]
        pending = md.get("deletionGracePeriodSeconds")
        keep = bool(md.get("deletionTimestamp")) and pending is not None and int(pending) <= grace
        if keep and finalizers == list(md.get("finalizers") or []):
            return self.to_version(rt, old), False
        new_md = {k: v for k, v in md.items() if k != "finalizers"}
        if finalizers:
            new_md["finalizers"] = list(finalizers)
        if not keep:
            when = (self.clock() if self.clock else dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=grace)
            new_md["deletionTimestamp"] = timestamps.rfc3339(when)
            new_md["deletionGracePeriodSeconds"] = grace
        if rt.generation and not md.get("deletionTimestamp"):
            new_md["generation"] = int(md.get("generation") or 1) + 1
        new = {**old, "metadata": new_md}
        if ctx.dry_run:
            return self.to_version(rt, new), False
        stored = self.store.update(rt.key, new, expected_rv=rv_of(old))
        return self.to_version(rt, stored), False

    async def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        options: Obj,
        ctx: Context,
        *,
        labels: Selector = (),
        fields: FieldSelector = (),
    ) -> ObjList:
        out = []
        for obj in self.list(rt, namespace, labels=labels, fields=fields).items:
            md = obj["metadata"]
            try:
                deleted, _ = await self.delete(rt, md.get("namespace", ""), md["name"], options, ctx)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            out.append(deleted)
        return out

    # ------------------------------------------------------------ CRD side effects

    def _after_write(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        if rt.key == CRDS:
            self._serve_crd(new, old)

    def _after_delete(self, rt: ResourceType, final: Obj) -> None:
        if rt.key == CRDS:
            spec = final.get("spec") or {}
            key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            for obj in list(self.store.iter(key)):
                md = obj["metadata"]
                self.store.delete(key, md.get("namespace", ""), md["name"])
            self.registry.remove_group_resource(*key)
            self.store.drop_resource(key)

    def _serve_crd(self, crd: Obj, old: Obj | None) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        if old is not None:
            ospec = old.get("spec") or {}
            self.registry.remove_group_resource(ospec.get("group", ""), (ospec.get("names") or {}).get("plural", ""))
        if crd["metadata"].get("deletionTimestamp"):
            return
        self.registry.remove_group_resource(group, plural)
        for rt in crds.resource_types(crd):
            self.registry.add(rt)


# kube-apiserver's etcd prefixes that are not the resource's name (SpecialDefaultResourcePrefixes).
_ETCD_PREFIXES = {
    ("", "replicationcontrollers"): "controllers",
    ("", "endpoints"): "services/endpoints",
    ("", "nodes"): "minions",
    ("", "services"): "services/specs",
    ("networking.k8s.io", "ingresses"): "ingress",
}


def _storage_key(rt: ResourceType, namespace: str, name: str) -> str:
    """Where kube-apiserver keeps the object in etcd (its storage errors name it)."""
    prefix = f"{rt.group}/{rt.plural}" if rt.custom else _ETCD_PREFIXES.get(rt.key, rt.plural)
    return f"/registry/{prefix}/{namespace}/{name}" if namespace else f"/registry/{prefix}/{name}"


def _same(old: Obj, new: Obj) -> bool:
    """Whether an update changes nothing (managedFields timestamps aside): no new resourceVersion then."""

    def strip(o: Obj) -> Obj:
        md = {k: v for k, v in (o.get("metadata") or {}).items() if k not in ("managedFields", "resourceVersion")}
        return {**o, "metadata": md}

    if strip(old) != strip(new):
        return False
    fields_old = [{k: v for k, v in e.items() if k != "time"} for e in old["metadata"].get("managedFields") or []]
    fields_new = [{k: v for k, v in e.items() if k != "time"} for e in new["metadata"].get("managedFields") or []]
    return fields_old == fields_new


def _pins_rv(patch_type: str, body: Any) -> bool:
    if patch_type == JSON_PATCH:
        return isinstance(body, list) and any(
            isinstance(op, dict) and str(op.get("path", "")).startswith("/metadata/resourceVersion") for op in body
        )
    return isinstance(body, dict) and bool((body.get("metadata") or {}).get("resourceVersion"))


def encode_continue(after: tuple[str, str], rv: int, namespace: str | None, namespaced: bool) -> str:
    """storage.EncodeContinue: the key after the last item, relative to the listed prefix
    (``<namespace>/<name>`` across namespaces, ``<name>`` in one or for cluster-scoped kinds)."""
    import base64
    import json

    start = f"{after[0]}/{after[1]}" if namespaced and namespace is None else after[1]
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str, namespace: str | None, namespaced: bool) -> tuple[tuple[str, str], int]:
    """storage.DecodeContinue: (the key to continue after, the token's resourceVersion); ValueError
    with its message (``continue key is not valid: ...``)."""
    import base64
    import json
    import posixpath
    import re

    generic = "continue key is not valid"
    bad = re.search(r"[^A-Za-z0-9_\-\r\n]", token)
    if bad:
        raise ValueError(f"{generic}: illegal base64 data at input byte {bad.start()}")
    compact = token.replace("\r", "").replace("\n", "")
    if len(compact) % 4 == 1:
        raise ValueError(f"{generic}: illegal base64 data at input byte {len(token) - 1}")
    data = base64.urlsafe_b64decode(compact + "=" * (-len(compact) % 4))
    try:
        decoded = json.loads(data.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{generic}: {_go_json_error(data, exc)}") from None
    if not isinstance(decoded, dict):
        kind = {list: "array", str: "string", bool: "bool", type(None): "null"}.get(type(decoded), "number")
        if decoded is None:
            decoded = {}
        else:
            raise ValueError(f"{generic}: json: cannot unmarshal {kind} into Go value of type storage.continueToken")
    fields = {"v": (str, "string"), "rv": (int, "int64"), "start": (str, "string")}
    for key, (want, go_type) in fields.items():
        value = decoded.get(key)
        if value is not None and (not isinstance(value, want) or isinstance(value, bool)):
            kind = {list: "array", dict: "object", str: "string", bool: "bool"}.get(type(value), "number")
            raise ValueError(
                f"{generic}: json: cannot unmarshal {kind} into Go struct field continueToken.{key} of type {go_type}"
            )
    version, rv, start = decoded.get("v") or "", int(decoded.get("rv") or 0), decoded.get("start") or ""
    if version != "meta.k8s.io/v1":
        raise ValueError(f"{generic}: server does not recognize this encoded version {version}")
    if rv == 0:
        raise ValueError(f"{generic}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not start:
        raise ValueError(f"{generic}: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if "/" + posixpath.normpath(key).lstrip("/") != key:  # path.Clean (which turns a leading // into /)
        raise ValueError(f"{generic}: {start}")
    rest = key[1:].rstrip("\x00")
    if namespace is not None or not namespaced:
        return (namespace or "", rest), rv
    ns, _, name = rest.partition("/")
    return (ns, name), rv


def _go_json_error(data: bytes, exc: Exception) -> str:
    """encoding/json's message for the common ways a token is not JSON."""
    import json

    text = data.decode("latin-1")
    pos = len(text) - len(text.lstrip(" \t\r\n"))
    if pos < len(text) and text[pos] not in '{["-0123456789tfn':
        msg, at = "Expecting value", pos
    elif isinstance(exc, json.JSONDecodeError) and exc.pos < len(text.rstrip(" \t\r\n")):
        msg, at = exc.msg, exc.pos
    else:
        return "unexpected end of JSON input"
    char = text[at]
    quoted = "'\\''" if char == "'" else f"'{char}'" if char.isprintable() else f"'\\x{ord(char):02x}'"
    if msg == "Expecting value":
        return f"invalid character {quoted} looking for beginning of value"
    if msg.startswith("Expecting property name"):
        return f"invalid character {quoted} looking for beginning of object key string"
    if msg == "Extra data":
        return f"invalid character {quoted} after top-level value"
    return f"invalid character {quoted} after object key:value pair"
