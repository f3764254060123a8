"""/openapi/v2 and /openapi/v3 as kube-apiserver serves them, for every served built-in and CRD.

What clients do with them:
- kubectl and Helm check server-side field validation by looking, in the group-version's v3
  document, for the PATCH operation of the kind (``x-kubernetes-group-version-kind``) and its
  ``fieldValidation`` parameter; when found they skip client-side validation and send
  ``fieldValidation=Strict``. Otherwise (and always for ``v1 List``) they validate client-side
  against ``/openapi/v2``, which client-go fetches *only* as protobuf (``openapi.proto_v2``).
- ``kubectl explain`` walks the v3 schemas (v2 with ``--output plaintext-openapiv2``).

Built-in schemas come from ``schemas.definitions()`` (2020-12 form) converted here: ``$ref`` to
``#/definitions/`` (v2) or ``#/components/schemas/`` (v3, wrapped in ``allOf`` when the reference
has siblings, as kube-openapi does), ``[T, "null"]`` types to ``T``, IntOrString to
``type: string, format: int-or-string`` (v2) / ``oneOf`` integer|string (v3), Quantity to
``type: string`` (v2) / ``oneOf`` string|number (v3). CRD schemas are their ``openAPIV3Schema``
with ``metadata`` pointing at ObjectMeta; for v2 they lose what Swagger 2.0 cannot say
(``nullable`` types, ``oneOf``/``anyOf``/``not``, int-or-string types), as the CRD v2 publisher does.
Documents are built lazily, one per group-version, and rebuilt when the registry changes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpucluster.sandbox.apiserver import schemas
from gpucluster.sandbox.apiserver.resources import Registry, ResourceType

Obj = dict[str, Any]

INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
DELETE_OPTIONS = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
PATCH = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
WATCH_EVENT = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
# Bumped when this module's output changes, so cached documents are refetched.
DOCUMENT_REVISION = 1
ALWAYS = [DELETE_OPTIONS, STATUS, PATCH, WATCH_EVENT, LIST_META, OBJECT_META]

JSON_TYPES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
WATCH_TYPES = [*JSON_TYPES, "application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"]
PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
]

_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this from "
    "the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_METADATA_DOC = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


# ---------------------------------------------------------------- schema conversion


def _ref(name: str, v3: bool) -> str:
    return f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"


def convert(schema: Any, v3: bool) -> Any:
    """One 2020-12 built-in schema in Swagger 2.0 (``v3=False``) or OpenAPI 3.0 form."""
    if isinstance(schema, list):
        return [convert(s, v3) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: Obj = {}
    for key, value in schema.items():
        if key == "$ref":
            continue
        if key == "type" and isinstance(value, list):
            kept = [t for t in value if t != "null"]
            if kept:
                out["type"] = kept[0]
        elif key in ("properties", "patternProperties"):
            out[key] = {k: convert(v, v3) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "oneOf", "anyOf", "allOf"):
            out[key] = convert(value, v3)
        else:
            out[key] = value
    if "$ref" in schema:
        target = {"$ref": _ref(schemas.ref_name(schema["$ref"]), v3)}
        if not out:
            return target
        if v3:
            return {"allOf": [target], **out}
        return {**target, **out}
    return out


def _builtin_definition(name: str, raw: Obj, v3: bool) -> Obj:
    if name == INT_OR_STRING:
        base: Obj = {"format": "int-or-string"}
        return {**base, "oneOf": [{"type": "integer"}, {"type": "string"}]} if v3 else {**base, "type": "string"}
    if name == QUANTITY:
        return {"oneOf": [{"type": "string"}, {"type": "number"}]} if v3 else {"type": "string"}
    out: Obj = convert(raw, v3)
    props = out.get("properties")
    if raw.get("x-kubernetes-group-version-kind") and isinstance(props, dict):
        # kubernetes-validate pins apiVersion/kind with an enum; kube-apiserver's schemas do not.
        for key in ("apiVersion", "kind"):
            if isinstance(props.get(key), dict):
                props[key] = {k: v for k, v in props[key].items() if k != "enum"}
    return out


def _crd_v2(schema: Any) -> Any:
    """What Swagger 2.0 can carry of a structural schema (the CRD v2 publisher's rules)."""
    if isinstance(schema, list):
        return [_crd_v2(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: Obj = {}
    for key, value in schema.items():
        if key in ("oneOf", "anyOf", "allOf", "not", "nullable", "x-kubernetes-validations"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {k: _crd_v2(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _crd_v2(value)
        else:
            out[key] = value
    if schema.get("nullable") or schema.get("x-kubernetes-int-or-string"):
        for key in ("type", "items", "properties", "additionalProperties"):
            out.pop(key, None)
    return out


def schema_name(rt: ResourceType) -> str:
    """kube-openapi's definition name for a custom resource: reversed group, version, kind."""
    found = schemas.definition_for(rt.group, rt.version, rt.kind) if not rt.custom else None
    if found:
        return found
    group = ".".join(reversed(rt.group.split(".")))
    return f"{group}.{rt.version}.{rt.kind}"


def _list_name(rt: ResourceType) -> str:
    name = schema_name(rt)
    return name + "List"


def _crd_definitions(rt: ResourceType, v3: bool) -> dict[str, Obj]:
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    body: Obj = json.loads(json.dumps(rt.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}))
    if not v3:
        body = _crd_v2(body)
    props = body.setdefault("properties", {}) if body.get("type", "object") == "object" else {}
    if isinstance(props, dict):
        props["apiVersion"] = {"description": _API_VERSION_DOC, "type": "string"}
        props["kind"] = {"description": _KIND_DOC, "type": "string"}
        meta_ref = {"$ref": _ref(OBJECT_META, v3)}
        props["metadata"] = {"allOf": [meta_ref], "description": _METADATA_DOC} if v3 else meta_ref
    body.setdefault("type", "object")
    body["x-kubernetes-group-version-kind"] = [gvk]
    item_ref = {"$ref": _ref(schema_name(rt), v3)}
    list_meta = {"$ref": _ref(LIST_META, v3)}
    list_doc: Obj = {
        "description": f"{rt.kind}List is a list of {rt.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
            "items": {"description": f"List of {rt.plural.lower()}.", "type": "array", "items": item_ref},
            "kind": {"description": _KIND_DOC, "type": "string"},
            "metadata": {"allOf": [list_meta], "description": "ListMeta"} if v3 else list_meta,
        },
        "x-kubernetes-group-version-kind": [{**gvk, "kind": rt.list_kind}],
    }
    return {schema_name(rt): body, _list_name(rt): list_doc}


# ---------------------------------------------------------------- paths


def _camel(group: str) -> str:
    if not group:
        return "Core"
    group = group.removesuffix(".k8s.io")
    return "".join(p[:1].upper() + p[1:] for p in group.replace("-", ".").split("."))


def _param(name: str, where: str, kind: str, description: str, *, required: bool = False) -> Obj:
    return {"name": name, "in": where, "type": kind, "description": description, "required": required}


_PRETTY = _param("pretty", "query", "string", "If 'true', then the output is pretty printed.")
_DRY_RUN = _param(
    "dryRun", "query", "string", "When present, indicates that modifications should not be persisted (All)."
)
_FIELD_MANAGER = _param(
    "fieldManager", "query", "string", "A name associated with the actor or entity that is making these changes."
)
_FIELD_VALIDATION = _param(
    "fieldValidation",
    "query",
    "string",
    "How the server handles objects with unknown or duplicate fields: Ignore, Warn (the default) or Strict.",
)
_FORCE = _param("force", "query", "boolean", "Force an apply request to take conflicting fields (apply patches only).")
_DELETE_PARAMS = [
    _DRY_RUN,
    _param("gracePeriodSeconds", "query", "integer", "The duration in seconds before the object should be deleted."),
    _param(
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        "query",
        "boolean",
        "If set, delete an object whose stored data cannot be read (unsafe).",
    ),
    _param("orphanDependents", "query", "boolean", "Deprecated: use propagationPolicy."),
    _param("propagationPolicy", "query", "string", "Garbage collection: Orphan, Background or Foreground."),
]
_LIST_PARAMS = [
    _param("allowWatchBookmarks", "query", "boolean", "Request watch events of type BOOKMARK."),
    _param("continue", "query", "string", "The continue token of a previous chunked list."),
    _param("fieldSelector", "query", "string", "A selector on the objects' fields."),
    _param("labelSelector", "query", "string", "A selector on the objects' labels."),
    _param("limit", "query", "integer", "The maximum number of objects to return (chunking)."),
    _param("resourceVersion", "query", "string", "Which version of the collection to serve."),
    _param("resourceVersionMatch", "query", "string", "How resourceVersion applies: Exact or NotOlderThan."),
    _param("sendInitialEvents", "query", "boolean", "Start a watch with the current objects as ADDED events."),
    _param("timeoutSeconds", "query", "integer", "Timeout of the list/watch call."),
    _param("watch", "query", "boolean", "Watch for changes instead of listing."),
]


def _operations(rt: ResourceType) -> list[tuple[str, str, Obj]]:
    """(path, method, neutral operation) of one resource: the kube-apiserver REST routes."""
    gv = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    ns_path = "/namespaces/{namespace}" if rt.namespaced else ""
    ns_word = "Namespaced" if rt.namespaced else ""
    op_gv = f"{_camel(rt.group)}{rt.version[:1].upper()}{rt.version[1:]}"
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    tag = f"{rt.group.removesuffix('.k8s.io').replace('.', '_') or 'core'}_{rt.version}"
    item, items = schema_name(rt), _list_name(rt)
    ns = (
        [
            _param(
                "namespace",
                "path",
                "string",
                "object name and auth scope, such as for teams and projects",
                required=True,
            )
        ]
        if rt.namespaced
        else []
    )
    name = [_param("name", "path", "string", f"name of the {rt.kind}", required=True)]
    verbs = set(rt.verbs)
    patch_types = [t for t in PATCH_TYPES if not (rt.custom and "strategic" in t)]

    def op(verb: str, action: str, *, body: str | None = None, params: list[Obj] | None = None, **kw: Any) -> Obj:
        kind = kw.pop("suffix", "")
        return {
            "operationId": f"{verb}{op_gv}{kw.pop('word', ns_word)}{rt.kind}{kind}",
            "action": action,
            "gvk": gvk,
            "tag": tag,
            "body": body,
            "params": params or [],
            "responses": kw.pop("responses", {"200": item}),
            "consumes": kw.pop("consumes", ["*/*"]),
            "produces": kw.pop("produces", JSON_TYPES),
            "description": kw.pop("description", f"{action} {rt.kind}"),
        }

    out: list[tuple[str, str, Obj]] = []
    collection = f"{gv}{ns_path}/{rt.plural}"
    shared = {"params": [*ns, _PRETTY]}
    member = {"params": [*name, *ns, _PRETTY]}
    if "list" in verbs:
        out.append(
            (collection, "get", op("list", "list", params=_LIST_PARAMS, responses={"200": items}, produces=WATCH_TYPES))
        )
    if "create" in verbs:
        create_params = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
        out.append(
            (
                collection,
                "post",
                op(
                    "create", "post", body=item, params=create_params, responses={"200": item, "201": item, "202": item}
                ),
            )
        )
    if "deletecollection" in verbs:
        dc_params = [p for p in _LIST_PARAMS if p["name"] not in ("watch", "allowWatchBookmarks")] + _DELETE_PARAMS
        out.append(
            (
                collection,
                "delete",
                op(
                    "deletecollection",
                    "deletecollection",
                    body=DELETE_OPTIONS,
                    params=dc_params,
                    responses={"200": STATUS},
                    suffix="",
                    word=ns_word,
                ),
            )
        )
    out.append((collection, "parameters", shared))
    item_path = f"{collection}/{{name}}"
    if "get" in verbs:
        out.append((item_path, "get", op("read", "get")))

    def replace(path: str, suffix: str = "") -> tuple[str, str, Obj]:
        params = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
        return (path, "put", op("replace", "put", body=item, params=params, suffix=suffix, responses=written))

    def patch(path: str, suffix: str = "") -> tuple[str, str, Obj]:
        params = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE]
        operation = op(
            "patch", "patch", body=PATCH, params=params, suffix=suffix, responses=written, consumes=patch_types
        )
        return (path, "patch", operation)

    written = {"200": item, "201": item}
    if "update" in verbs:
        out.append(replace(item_path))
    if "patch" in verbs:
        out.append(patch(item_path))
    if "delete" in verbs:
        out.append(
            (
                item_path,
                "delete",
                op(
                    "delete",
                    "delete",
                    body=DELETE_OPTIONS,
                    params=_DELETE_PARAMS,
                    responses={"200": STATUS, "202": STATUS},
                ),
            )
        )
    out.append((item_path, "parameters", member))
    for sub in rt.subresources:
        if sub not in ("status", "scale"):
            continue
        sub_path = f"{item_path}/{sub}"
        suffix = sub.capitalize()
        out.append((sub_path, "get", op("read", "get", suffix=suffix)))
        out += [replace(sub_path, suffix), patch(sub_path, suffix)]
        out.append((sub_path, "parameters", member))
    if "watch" in verbs:
        watch_base = f"{gv}/watch{ns_path}/{rt.plural}"
        out.append(
            (
                watch_base,
                "get",
                op(
                    "watch",
                    "watchlist",
                    params=_LIST_PARAMS,
                    responses={"200": WATCH_EVENT},
                    produces=WATCH_TYPES,
                    suffix="List",
                ),
            )
        )
        out.append((watch_base, "parameters", shared))
        out.append(
            (
                f"{watch_base}/{{name}}",
                "get",
                op("watch", "watch", params=_LIST_PARAMS, responses={"200": WATCH_EVENT}, produces=WATCH_TYPES),
            )
        )
        out.append((f"{watch_base}/{{name}}", "parameters", member))
    if rt.namespaced and "list" in verbs:
        all_ns = f"{gv}/{rt.plural}"
        out.append(
            (
                all_ns,
                "get",
                op(
                    "list",
                    "list",
                    params=_LIST_PARAMS,
                    responses={"200": items},
                    produces=WATCH_TYPES,
                    word="",
                    suffix="ForAllNamespaces",
                ),
            )
        )
        out.append((all_ns, "parameters", {"params": [_PRETTY]}))
    return out


def _v2_param(p: Obj) -> Obj:
    out = {k: v for k, v in p.items() if k != "required" or v}
    if p["in"] == "query":
        out["uniqueItems"] = True
    return out


def _v3_param(p: Obj) -> Obj:
    out: Obj = {
        "name": p["name"],
        "in": p["in"],
        "description": p["description"],
        "schema": {"type": p["type"], "uniqueItems": True},
    }
    if p.get("required"):
        out["required"] = True
    return out


def _render_v2(operation: Obj) -> Obj:
    params = [_v2_param(p) for p in operation["params"]]
    if operation["body"]:
        params.insert(
            0, {"name": "body", "in": "body", "required": True, "schema": {"$ref": _ref(operation["body"], False)}}
        )
    responses: Obj = {
        code: {"description": "OK", "schema": {"$ref": _ref(ref, False)}}
        for code, ref in operation["responses"].items()
    }
    responses["401"] = {"description": "Unauthorized"}
    out: Obj = {
        "description": operation["description"],
        "consumes": operation["consumes"],
        "produces": operation["produces"],
        "schemes": ["https"],
        "tags": [operation["tag"]],
        "operationId": operation["operationId"],
        "responses": responses,
        "x-kubernetes-action": operation["action"],
        "x-kubernetes-group-version-kind": operation["gvk"],
    }
    if params:
        out["parameters"] = params
    return out


def _render_v3(operation: Obj) -> Obj:
    content = {
        code: {
            "description": "OK",
            "content": {t: {"schema": {"$ref": _ref(ref, True)}} for t in operation["produces"]},
        }
        for code, ref in operation["responses"].items()
    }
    content["401"] = {"description": "Unauthorized"}
    out: Obj = {
        "tags": [operation["tag"]],
        "description": operation["description"],
        "operationId": operation["operationId"],
        "responses": content,
        "x-kubernetes-action": operation["action"],
        "x-kubernetes-group-version-kind": operation["gvk"],
    }
    if operation["params"]:
        out["parameters"] = [_v3_param(p) for p in operation["params"]]
    if operation["body"]:
        types = operation["consumes"] if operation["consumes"] != ["*/*"] else ["*/*"]
        out["requestBody"] = {
            "content": {t: {"schema": {"$ref": _ref(operation["body"], True)}} for t in types},
            "required": True,
        }
    return out


def _paths(types: list[ResourceType], v3: bool) -> Obj:
    paths: Obj = {}
    for rt in types:
        for path, method, operation in _operations(rt):
            entry = paths.setdefault(path, {})
            if method == "parameters":
                entry["parameters"] = [_v3_param(p) if v3 else _v2_param(p) for p in operation["params"]]
            else:
                entry[method] = _render_v3(operation) if v3 else _render_v2(operation)
    return paths


# ---------------------------------------------------------------- documents


def _definitions(types: list[ResourceType], v3: bool) -> dict[str, Obj]:
    raw = schemas.definitions()
    builtin_names = [n for rt in types if not rt.custom for n in (schema_name(rt), _list_name(rt)) if n in raw]
    custom: dict[str, Obj] = {}
    for rt in types:
        if rt.custom:
            custom.update(_crd_definitions(rt, v3))
    names = schemas.closure([*ALWAYS, *builtin_names])
    out = {n: _builtin_definition(n, raw[n], v3) for n in sorted(names)}
    out.update(custom)
    return out


def v2_document(registry: Registry, git_version: str) -> Obj:
    types = list(registry)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": _paths(types, v3=False),
        "definitions": _definitions(types, v3=False),
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
            }
        },
        "security": [{"BearerToken": []}],
    }


def v3_document(registry: Registry, group: str, version: str, git_version: str) -> Obj:
    types = registry.resources(group, version)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": _paths(types, v3=True),
        "components": {
            "schemas": _definitions(types, v3=True),
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
    }


def gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _digest(body: bytes) -> str:
    return hashlib.sha512(body).hexdigest()[:128].upper()


class OpenAPI:
    """The documents, each built on first request and kept until the registry changes (a CRD comes or goes)."""

    def __init__(self, registry: Registry, git_version: str) -> None:
        self.registry = registry
        self.git_version = git_version
        self._generation = -1
        self._v3: dict[str, tuple[str, bytes]] = {}
        self._v2: dict[str, tuple[str, bytes]] = {}

    def _fresh(self) -> None:
        if self._generation != self.registry.generation:
            self._v3, self._v2 = {}, {}
            self._generation = self.registry.generation

    def _group_versions(self) -> list[str]:
        gvs = [gv_path("", "v1")] if self.registry.resources("", "v1") else []
        return gvs + [gv_path(g, v) for g, vs in self.registry.groups() for v in vs]

    def _v3_doc(self, path: str) -> tuple[str, bytes] | None:
        if path not in self._v3:
            parts = path.split("/")
            if parts[0] == "api" and len(parts) == 2:
                group, version = "", parts[1]
            elif parts[0] == "apis" and len(parts) == 3:
                group, version = parts[1], parts[2]
            else:
                return None
            if not self.registry.resources(group, version):
                return None
            doc = v3_document(self.registry, group, version, self.git_version)
            body = json.dumps(doc, separators=(",", ":")).encode()
            self._v3[path] = (_digest(body), body)
        return self._v3[path]

    def _fingerprint(self, path: str) -> str:
        """A hash of everything a group-version document is made of, without building it.

        Clients cache documents by URL across runs (kubectl's ~/.kube/cache), so the hash must
        change whenever the content would, as kube-apiserver's content hash does.
        """
        parts = path.split("/")
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        facts = [
            [rt.kind, rt.plural, rt.namespaced, rt.custom, sorted(rt.verbs), list(rt.subresources), rt.schema]
            for rt in self.registry.resources(group, version)
        ]
        raw = json.dumps([DOCUMENT_REVISION, self.git_version, path, facts], sort_keys=True, default=str).encode()
        return _digest(raw)

    def root(self) -> Obj:
        """The v3 discovery document: one URL per group-version, with its content hash."""
        self._fresh()
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={self._fingerprint(path)}"}
                for path in self._group_versions()
            }
        }

    def document(self, path: str) -> tuple[str, bytes] | None:
        self._fresh()
        return self._v3_doc(path.strip("/"))

    def v2(self, protobuf: bool) -> tuple[str, bytes]:
        """(etag, body) of /openapi/v2 as JSON or as gnostic protobuf."""
        self._fresh()
        key = "pb" if protobuf else "json"
        if key not in self._v2:
            if "json" not in self._v2:
                body = json.dumps(v2_document(self.registry, self.git_version), separators=(",", ":")).encode()
                self._v2["json"] = (_digest(body), body)
                self._v2["doc"] = ("", body)
            if protobuf:
                from gpucluster.sandbox.apiserver import openapi_proto

                body = openapi_proto.encode_document(json.loads(self._v2["doc"][1]))
                self._v2["pb"] = (_digest(body), body)
        return self._v2[key]
