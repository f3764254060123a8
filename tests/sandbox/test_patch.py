"""Strategic merge patch and JSON merge patch details."""

from __future__ import annotations

from gpucluster.sandbox.apiserver.apply import BuiltinTypes, flatten, from_fields_v1, to_fields_v1
from gpucluster.sandbox.apiserver.patch import merge_patch, strategic_merge


def test_merge_patch_null_deletes_and_lists_replace() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert merge_patch(target, {"a": {"b": None}, "l": [3]}) == {"a": {"c": 2}, "l": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2]}


def test_strategic_merge_by_keys_and_directives() -> None:
    pod = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [
                {"name": "one", "image": "i:1", "ports": [{"containerPort": 80, "name": "http"}], "args": ["x"]},
                {"name": "two", "image": "i:2"},
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "tolerations": [{"key": "k"}],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "two"}, {"name": "one"}],
            "containers": [{"name": "one", "ports": [{"containerPort": 443}], "args": ["y"]}],
            "volumes": [{"name": "v", "$patch": "delete"}],
            "tolerations": [{"key": "other"}],
        },
    }
    out = strategic_merge(pod, patch)
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert [c["name"] for c in out["spec"]["containers"]] == ["two", "one"]
    one = out["spec"]["containers"][1]
    assert [p["containerPort"] for p in one["ports"]] == [80, 443]
    assert one["args"] == ["y"] and one["image"] == "i:1"
    assert out["spec"]["volumes"] == []
    assert out["spec"]["tolerations"] == [{"key": "other"}]
    replaced = strategic_merge(pod, {"spec": {"$patch": "replace", "containers": [{"name": "z", "image": "z"}]}})
    assert replaced["spec"] == {"containers": [{"name": "z", "image": "z"}]}
    retained = strategic_merge(
        {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}},
        {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}},
    )
    assert retained == {"strategy": {"type": "Recreate"}}
    service = {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}
    assert strategic_merge(service, {"spec": {"ports": [{"port": 80, "name": "http"}]}})["spec"]["ports"] == [
        {"port": 80, "targetPort": 8080, "name": "http"}
    ]
    deleted = strategic_merge(
        {"metadata": {"finalizers": ["a", "b"]}}, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}
    )
    assert deleted["metadata"]["finalizers"] == ["b"]


def test_field_sets_round_trip() -> None:
    obj = {
        "metadata": {"name": "x", "labels": {"a": "b"}, "finalizers": ["f"]},
        "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "E", "value": "1"}]}]},
    }
    paths = set(flatten(obj, BuiltinTypes()))
    assert ("f:metadata", "f:finalizers", 'v:"f"') in paths
    assert ("f:spec", "f:containers", 'k:{"name":"c"}', "f:env", 'k:{"name":"E"}', "f:value") in paths
    assert from_fields_v1(to_fields_v1(paths)) == paths
