"""Builders shared by the operand render tests."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from gpucluster.api import gpucluster as gc
from gpucluster.api.validation import validate_gpucluster
from gpucluster.controller.operands import ClusterFacts, render

Obj = dict[str, Any]

UID = "6f1d2c3b-0000-4000-8000-00000000beef"
NAMESPACE = "gpu-operator"
DRIVER_REPO = "nvcr.io/nvidia"
DRIVER_IMAGE = "k8s-dra-driver-gpu"
DRIVER_VERSION = "v25.8.0"
DRIVER_REF = f"{DRIVER_REPO}/{DRIVER_IMAGE}:{DRIVER_VERSION}"
EXPORTER_REF = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
DCGM_REF = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
VALIDATOR_REF = "nvcr.io/nvidia/gpu-operator:v26.7.0"

ENV = {"DCGM_EXPORTER_IMAGE": EXPORTER_REF, "DCGM_IMAGE": DCGM_REF, "VALIDATOR_IMAGE": VALIDATOR_REF}
FACTS = ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID, kubernetes_version="1.34.2")

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "SecurityContextConstraints",
}
WORKLOAD_KINDS = {"DaemonSet", "Deployment"}


def merge(base: Obj, patch: Obj) -> Obj:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def manifest(spec: Obj | None = None, *, with_driver_image: bool = True) -> Obj:
    base: Obj = {"apiVersion": gc.API_VERSION, "kind": gc.KIND, "metadata": {"name": "gpu-cluster"}, "spec": {}}
    if with_driver_image:
        base["spec"]["draDriver"] = {"repository": DRIVER_REPO, "image": DRIVER_IMAGE, "version": DRIVER_VERSION}
    return merge(base, {"spec": spec or {}})


def cluster(spec: Obj | None = None, *, with_driver_image: bool = True) -> gc.GPUCluster:
    result = validate_gpucluster(manifest(spec, with_driver_image=with_driver_image))
    assert result.ok and result.obj is not None, result.problems
    return result.obj


def objects(spec: Obj | None = None, facts: ClusterFacts = FACTS) -> list[Obj]:
    return render(cluster(spec), facts)


def find(objs: Iterable[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} matches"
    found: Obj = matches[0]
    return found


def names(objs: Iterable[Obj], kind: str) -> list[str]:
    return [o["metadata"]["name"] for o in objs if o["kind"] == kind]


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


def container(obj: Obj, name: str, *, init: bool = False) -> Obj:
    key = "initContainers" if init else "containers"
    matches = [c for c in pod_spec(obj).get(key, []) if c["name"] == name]
    assert len(matches) == 1, f"{key}/{name}"
    found: Obj = matches[0]
    return found


def env_of(ctr: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr.get("env", [])}


def kubelet_plugin(objs: list[Obj]) -> Obj:
    return find(objs, "DaemonSet", "nvidia-dra-driver-kubelet-plugin")
