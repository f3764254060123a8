"""Discovery documents (/api, /apis, group versions) and /version. OpenAPI is in ``openapi``."""

from __future__ import annotations

import hashlib
from typing import Any

from gpucluster.sandbox.apiserver.resources import Registry, ResourceType

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
