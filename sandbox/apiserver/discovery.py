"""Discovery documents (/api, /apis, group versions), /version and a minimal OpenAPI v3.

The OpenAPI v3 documents carry, per resource, the paths and the PATCH operation with its
``fieldValidation`` parameter and ``x-kubernetes-group-version-kind`` (what kubectl checks to
use server-side field validation), and for custom resources their structural schema. Built-in
kinds have no schema: kubectl falls back to its compiled-in types for strategic merge patches.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sandbox.apiserver.resources import Registry, ResourceType

Obj = dict[str, Any]

SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"], "finalize": ["update"]}


def version_info(git_version: str) -> Obj:
    core = git_version.lstrip("v").split("-", 1)[0].split("+", 1)[0]
    parts = [*core.split("."), "0", "0"][:3]
    return {
        "major": parts[0],
        "minor": parts[1],
        "emulationMajor": parts[0],
        "emulationMinor": parts[1],
        "minCompatibilityMajor": parts[0],
        "minCompatibilityMinor": str(max(0, int(parts[1]) - 1)) if parts[1].isdigit() else parts[1],
        "gitVersion": git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-11-11T00:00:00Z",
        "goVersion": "go1.24.9",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _storage_hash(rt: ResourceType) -> str:
    raw = hashlib.sha256(f"{rt.group}/{rt.storage_version}/{rt.kind}".encode()).digest()
    import base64

    return base64.b64encode(raw[:8]).decode()


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    types = registry.resources(group, version)
    if not types:
        return None
    resources: list[Obj] = []
    for rt in types:
        entry: Obj = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": sorted(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        entry["storageVersionHash"] = _storage_hash(rt)
        resources.append(entry)
        for sub in rt.subresources:
            sub_entry: Obj = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": "Scale" if sub == "scale" else rt.kind,
                "verbs": SUBRESOURCE_VERBS.get(sub, ["get"]),
            }
            if sub == "scale":
                sub_entry["group"] = "autoscaling"
                sub_entry["version"] = "v1"
            resources.append(sub_entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def _group(name: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list(registry: Registry) -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, vs) for g, vs in registry.groups()]}


def api_group(registry: Registry, name: str) -> Obj | None:
    for g, vs in registry.groups():
        if g == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(g, vs)}
    return None


# ---------------------------------------------------------------- OpenAPI v3


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(rt: ResourceType) -> str:
    group = ".".join(reversed(rt.group.split("."))) if rt.group else "io.k8s.api.core"
    return f"{group}.{rt.version}.{rt.kind}"


def _gv_document(registry: Registry, group: str, version: str, git_version: str) -> Obj:
    paths: Obj = {}
    schemas: Obj = {}
    query = [
        {"name": "dryRun", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
    ]
    for rt in registry.resources(group, version):
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
        base = f"/{_gv_path(group, version)}/" + ("namespaces/{namespace}/" if rt.namespaced else "")
        ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        paths[f"{base}{rt.plural}"] = {
            "get": {
                "operationId": f"list{rt.kind}",
                "x-kubernetes-action": "list",
                "x-kubernetes-group-version-kind": gvk,
                "responses": ok,
            },
            "post": {
                "operationId": f"create{rt.kind}",
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": query,
                "responses": ok,
            },
        }
        item: Obj = {
            "get": {
                "operationId": f"read{rt.kind}",
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk,
                "responses": ok,
            },
            "put": {
                "operationId": f"replace{rt.kind}",
                "x-kubernetes-action": "put",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": query,
                "responses": ok,
            },
            "patch": {
                "operationId": f"patch{rt.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    *query,
                    {"name": "force", "in": "query", "schema": {"type": "boolean"}, "uniqueItems": True},
                ],
                "responses": ok,
            },
            "delete": {
                "operationId": f"delete{rt.kind}",
                "x-kubernetes-action": "delete",
                "x-kubernetes-group-version-kind": gvk,
                "responses": ok,
            },
        }
        paths[f"{base}{rt.plural}/{{name}}"] = item
        if rt.schema:
            schema = json.loads(json.dumps(rt.schema))
            schema["x-kubernetes-group-version-kind"] = [gvk]
            schemas[_schema_name(rt)] = schema
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": git_version},
        "paths": paths,
        "components": {"schemas": schemas},
    }


class OpenAPI:
    """OpenAPI v3 documents, rebuilt when the registry changes (a CRD is installed or removed)."""

    def __init__(self, registry: Registry, git_version: str) -> None:
        self.registry = registry
        self.git_version = git_version
        self._generation = -1
        self._docs: dict[str, tuple[str, bytes]] = {}

    def _refresh(self) -> None:
        if self._generation == self.registry.generation:
            return
        docs: dict[str, tuple[str, bytes]] = {}
        versions = [("", "v1")] + [(g, v) for g, vs in self.registry.groups() for v in vs]
        for group, version in versions:
            body = json.dumps(
                _gv_document(self.registry, group, version, self.git_version), separators=(",", ":")
            ).encode()
            docs[_gv_path(group, version)] = (hashlib.sha512(body).hexdigest()[:64].upper(), body)
        self._docs = docs
        self._generation = self.registry.generation

    def root(self) -> Obj:
        self._refresh()
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
                for path, (digest, _) in self._docs.items()
            }
        }

    def document(self, path: str) -> tuple[str, bytes] | None:
        self._refresh()
        return self._docs.get(path.strip("/"))
