"""GPUCluster models: defaults, strict types, field paths, unknown-field round trips."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpucluster.api import GPUCluster, NVIDIADriver, validate_gpucluster
from gpucluster.api.views import ClusterPolicy


def minimal(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
        "spec": spec,
    }


def test_defaults_match_the_documented_behaviour() -> None:
    spec = GPUCluster.model_validate(minimal()).to_dict()["spec"]
    dra = spec["draDriver"]
    assert dra["gpus"]["kubeletPlugin"]["healthcheck"] == {"enabled": True, "port": 51516}
    assert dra["computeDomains"]["enabled"] is True
    assert dra["computeDomains"]["kubeletPlugin"]["healthcheck"] == {"enabled": True, "port": 51515}
    assert spec["dcgmExporter"]["enabled"] is True  # on by default
    assert spec["dcgm"] == {"enabled": False, "hostPort": 5555}  # off by default
    assert spec["hostPaths"] == {
        "rootFS": "/",
        "driverInstallDir": "/run/nvidia/driver",
        "kubeletRootDir": "/var/lib/kubelet",
    }
    assert spec["daemonsets"] == {"updateStrategy": "RollingUpdate"}
    assert "repository" not in dra  # image resolution falls back to the operator's env, not a default


def test_every_documented_field_is_accepted() -> None:
    obj = minimal(
        draDriver={
            "repository": "nvcr.io/nvidia",
            "image": "k8s-dra-driver-gpu",
            "version": "v25.8.0",
            "imagePullPolicy": "IfNotPresent",
            "imagePullSecrets": ["ngc"],
            "featureGates": {"MPSSupport": True, "TimeSlicingSettings": False},
            "gpus": {
                "kubeletPlugin": {
                    "env": [{"name": "LOG_LEVEL", "value": "4"}],
                    "resources": {"limits": {"cpu": 2, "memory": "256Mi"}, "requests": {"cpu": 1}},
                    "healthcheck": {"enabled": False, "port": 6000},
                }
            },
            "computeDomains": {
                "enabled": False,
                "controller": {"env": [{"name": "X"}], "resources": {"requests": {"memory": "1Gi"}}},
                "kubeletPlugin": {"healthcheck": {"port": 6001}},
            },
        },
        dcgmExporter={
            "enabled": False,
            "repository": "nvcr.io/nvidia/k8s",
            "image": "dcgm-exporter",
            "version": "4.2.3-4.1.3-ubuntu22.04",
            "env": [{"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcp-metrics-included.csv"}],
            "resources": {"limits": {"memory": "1Gi"}},
            "service": {"type": "ClusterIP", "internalTrafficPolicy": "Local"},
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "honorLabels": False,
                "additionalLabels": {"release": "prometheus"},
            },
            "config": {"name": "custom-metrics"},
        },
        dcgm={"enabled": True, "image": "dcgm", "hostPort": 5556, "env": [], "resources": {}},
        hostPaths={"rootFS": "/host", "driverInstallDir": "/opt/nvidia", "kubeletRootDir": "/var/lib/k0s/kubelet"},
        daemonsets={
            "labels": {"team": "ml"},
            "annotations": {"a": "b"},
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "updateStrategy": "OnDelete",
            "rollingUpdate": {"maxUnavailable": "25%"},
        },
    )
    result = validate_gpucluster(obj)
    assert result.problems == []
    assert result.warnings == []
    out = result.obj.to_dict() if result.obj else {}
    assert out["spec"]["draDriver"]["featureGates"] == {"MPSSupport": True, "TimeSlicingSettings": False}
    assert out["spec"]["dcgm"]["hostPort"] == 5556
    assert out["spec"]["draDriver"]["computeDomains"]["kubeletPlugin"]["healthcheck"] == {"enabled": True, "port": 6001}


@pytest.mark.parametrize(
    ("spec", "path", "fragment"),
    [
        ({"draDriver": {"gpus": {"kubeletPlugin": {"healthcheck": {"port": 70000}}}}},
         "spec.draDriver.gpus.kubeletPlugin.healthcheck.port", "less than or equal to 65535"),
        ({"draDriver": {"computeDomains": {"kubeletPlugin": {"healthcheck": {"port": 0}}}}},
         "spec.draDriver.computeDomains.kubeletPlugin.healthcheck.port", "greater than or equal to 1"),
        ({"draDriver": {"imagePullPolicy": "Sometimes"}},
         "spec.draDriver.imagePullPolicy", 'supported values: "Always", "IfNotPresent", "Never"'),
        ({"draDriver": {"featureGates": {"MPSSupport": "true"}}},
         "spec.draDriver.featureGates.MPSSupport", "must be of type boolean"),
        ({"draDriver": {"featureGates": {"MPSSupport": 1}}},
         "spec.draDriver.featureGates.MPSSupport", "must be of type boolean"),
        ({"draDriver": {"image": "nvcr.io/nvidia/dra:1"}}, "spec.draDriver.image", "must match the pattern"),
        ({"dcgmExporter": {"enabled": "yes"}}, "spec.dcgmExporter.enabled", "must be of type boolean"),
        ({"dcgmExporter": {"serviceMonitor": {"interval": "15 seconds"}}},
         "spec.dcgmExporter.serviceMonitor.interval", "must match the pattern"),
        ({"dcgm": {"hostPort": "5555"}}, "spec.dcgm.hostPort", "must be of type integer"),
        ({"daemonsets": {"updateStrategy": "Recreate"}}, "spec.daemonsets.updateStrategy", "Unsupported value"),
        ({"daemonsets": {"tolerations": [{"operator": "Maybe"}]}},
         "spec.daemonsets.tolerations[0].operator", "Unsupported value"),
        ({"draDriver": {"gpus": {"kubeletPlugin": {"env": [{"value": "x"}]}}}},
         "spec.draDriver.gpus.kubeletPlugin.env[0].name", "Required value"),
        ({"draDriver": {"gpus": {"kubeletPlugin": {"resources": {"limits": {"cpu": "lots"}}}}}},
         "spec.draDriver.gpus.kubeletPlugin.resources.limits.cpu", "must be a non-negative quantity"),
        ({"draDriver": {"gpus": {"kubeletPlugin": {"resources": {"limits": {"cpu": 0.5}}}}}},
         "spec.draDriver.gpus.kubeletPlugin.resources.limits.cpu", "must be integer or string"),
        ({"hostPaths": {"rootFS": 1}}, "spec.hostPaths.rootFS", "must be of type string"),
        ({"draDriver": []}, "spec.draDriver", "must be of type object"),
        # kube-apiserver refuses these in a DaemonSet whose maxSurge is 0 (ValidateRollingUpdateDaemonSet).
        ({"daemonsets": {"rollingUpdate": {"maxUnavailable": 0}}},
         "spec.daemonsets.rollingUpdate.maxUnavailable", "greater than or equal to 1"),
        ({"daemonsets": {"rollingUpdate": {"maxUnavailable": "0"}}},
         "spec.daemonsets.rollingUpdate.maxUnavailable", "a positive number or a percentage from 1% to 100%"),
        ({"daemonsets": {"rollingUpdate": {"maxUnavailable": "0%"}}},
         "spec.daemonsets.rollingUpdate.maxUnavailable", "a positive number or a percentage from 1% to 100%"),
        ({"daemonsets": {"rollingUpdate": {"maxUnavailable": "101%"}}},
         "spec.daemonsets.rollingUpdate.maxUnavailable", "a positive number or a percentage from 1% to 100%"),
    ],
)  # fmt: skip
def test_invalid_fields_are_reported_with_their_path(spec: dict[str, Any], path: str, fragment: str) -> None:
    result = validate_gpucluster(minimal(**spec))
    assert not result.ok
    messages = {p.path: p.message for p in result.problems}
    assert path in messages, messages
    assert fragment in messages[path]


def test_all_problems_are_reported_at_once() -> None:
    result = validate_gpucluster(
        minimal(draDriver={"imagePullPolicy": "x", "gpus": {"kubeletPlugin": {"healthcheck": {"port": -1}}}})
    )
    assert {p.path for p in result.problems} == {
        "spec.draDriver.imagePullPolicy",
        "spec.draDriver.gpus.kubeletPlugin.healthcheck.port",
    }


@pytest.mark.parametrize("name", ["my-cluster", None])
def test_singleton_name_is_enforced(name: str | None) -> None:
    obj = minimal()
    obj["metadata"] = {} if name is None else {"name": name}
    result = validate_gpucluster(obj)
    assert [p.path for p in result.problems] == ["metadata.name"]
    assert "GPUCluster is a singleton, metadata.name must be 'gpu-cluster'" in result.problems[0].message


def test_wrong_kind_or_version_is_refused() -> None:
    obj = minimal()
    obj["apiVersion"] = "nvidia.com/v1"
    result = validate_gpucluster(obj)
    assert not result.ok
    assert "expected apiVersion nvidia.com/v1alpha1 kind GPUCluster" in result.problems[0].message
    assert not validate_gpucluster(["not", "an", "object"]).ok


def test_unknown_fields_survive_a_round_trip_and_are_warned_about() -> None:
    obj = minimal(draDriver={"futureKnob": {"x": 1}}, somethingNew=[1, 2])
    obj["metadata"]["creationTimestamp"] = "2026-11-30T00:00:00Z"
    obj["metadata"]["resourceVersion"] = "42"
    obj["status"] = {"state": "ready", "extra": "kept"}
    original = copy.deepcopy(obj)
    result = validate_gpucluster(obj)
    assert result.ok
    assert obj == original  # the input is not modified
    out = result.obj.to_dict() if result.obj else {}
    assert out["spec"]["draDriver"]["futureKnob"] == {"x": 1}
    assert out["spec"]["somethingNew"] == [1, 2]
    assert out["metadata"]["creationTimestamp"] == "2026-11-30T00:00:00Z"
    assert out["status"]["extra"] == "kept"
    assert sorted(result.warnings) == [
        'unknown field "spec.draDriver.futureKnob"',
        'unknown field "spec.somethingNew"',
        'unknown field "status.extra"',
    ]


def test_defaulting_is_idempotent() -> None:
    once = GPUCluster.model_validate(minimal(dcgm={"enabled": True})).to_dict()
    twice = GPUCluster.model_validate(once).to_dict()
    assert once == twice


def test_status_conditions_follow_metav1_condition() -> None:
    obj = minimal()
    obj["status"] = {
        "state": "notReady",
        "namespace": "gpu-operator",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "OperandsNotReady",
                "message": "nvidia-dra-driver-kubelet-plugin: 1/2 pods ready",
                "lastTransitionTime": "2026-11-30T04:00:00Z",
                "observedGeneration": 3,
            }
        ],
        "inventory": {"nodes": 2, "gpus": 16, "products": [{"productName": "NVIDIA H100 80GB HBM3", "count": 16}]},
    }
    assert validate_gpucluster(obj).ok
    obj["status"]["conditions"][0]["status"] = "Maybe"
    obj["status"]["conditions"][0]["reason"] = "not camel case!"
    obj["status"]["state"] = "broken"
    paths = {p.path for p in validate_gpucluster(obj).problems}
    assert paths == {"status.conditions[0].status", "status.conditions[0].reason", "status.state"}


def test_nvidiadriver_view_reads_auto_upgrade() -> None:
    base = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "default"}}
    assert NVIDIADriver.model_validate({**base, "spec": {"driverType": "gpu"}}).spec.auto_upgrade is True
    off = NVIDIADriver.model_validate({**base, "spec": {"upgradePolicy": {"autoUpgrade": False}, "extra": 1}})
    assert off.spec.auto_upgrade is False
    assert off.to_dict()["spec"]["extra"] == 1


def test_clusterpolicy_view_keeps_its_spec() -> None:
    cp = ClusterPolicy.model_validate(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {"devicePlugin": {"enabled": True}},
            "status": {"state": "ready"},
        }
    )
    assert cp.status is not None and cp.status.state == "ready"
    assert cp.to_dict()["spec"] == {"devicePlugin": {"enabled": True}}
