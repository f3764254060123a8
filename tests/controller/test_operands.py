"""Pure render of the GPUCluster operands: controller/operands."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpucluster.api.validation import validate_gpucluster
from gpucluster.controller.operands import (
    STATE_LABEL,
    STATES,
    ClusterFacts,
    RenderError,
    render,
    render_dcgm,
    render_dcgm_exporter,
    render_operands,
)
from gpucluster.controller.operands.common import resolve_image
from gpucluster.errors import InputError
from gpucluster.manifests import dump_yaml_stream
from tests.controller.helpers import (
    CLUSTER_SCOPED,
    DCGM_REF,
    DRIVER_REF,
    DRIVER_REPO,
    ENV,
    EXPORTER_REF,
    FACTS,
    NAMESPACE,
    UID,
    VALIDATOR_REF,
    WORKLOAD_KINDS,
    Obj,
    cluster,
    container,
    env_of,
    find,
    kubelet_plugin,
    manifest,
    names,
    objects,
    pod_spec,
)

GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
VFIO_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"
CD_CLASSES = ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"]

FULL_SPEC: Obj = {
    "draDriver": {
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": ["ngc-secret", "other"],
        "featureGates": {"PassthroughSupport": True, "MPSSupport": True, "AdminAccess": False},
        "gpus": {
            "kubeletPlugin": {
                "env": [{"name": "LOG_VERBOSITY", "value": "6"}, {"name": "GPUS_EXTRA", "value": "1"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "healthcheck": {"port": 52000},
            }
        },
        "computeDomains": {
            "controller": {"env": [{"name": "CD_EXTRA", "value": "1"}], "resources": {"limits": {"cpu": 1}}},
            "kubeletPlugin": {"resources": {"requests": {"cpu": "200m"}}},
        },
    },
    "dcgm": {
        "enabled": True,
        "args": ["-n"],
        "env": [{"name": "DCGM_X", "value": "y"}],
        "resources": {"limits": {"memory": "1Gi"}},
        "imagePullSecrets": ["dcgm-secret"],
    },
    "dcgmExporter": {
        "args": ["-f", "/etc/dcgm-exporter/dcgm-metrics.csv"],
        "env": [{"name": "DCGM_EXPORTER_INTERVAL", "value": "10000"}],
        "annotations": {"prometheus.io/port": "9400"},
        "config": {"name": "custom-metrics"},
        "service": {"type": "NodePort", "internalTrafficPolicy": "Local"},
        "serviceMonitor": {
            "enabled": True,
            "interval": "15s",
            "scrapeTimeout": "10s",
            "honorLabels": True,
            "additionalLabels": {"release": "prometheus"},
            "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
        },
        "hostPID": True,
        "hostNetwork": True,
        "hpcJobMapping": {"enabled": True},
        "enablePodLabels": True,
        "enablePodUID": True,
        "podLabelAllowlistRegex": ["^app$", "^team$"],
    },
    "hostPaths": {"rootFS": "/host-root", "driverInstallDir": "/opt/nvidia/driver", "kubeletRootDir": "/data/kubelet"},
    "daemonsets": {
        "labels": {"team": "gpu", "app": "hijack"},
        "annotations": {"example.com/owner": "gpu-team"},
        "priorityClassName": "gpu-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "updateStrategy": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%"},
        "podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
    },
}

CONFIGS: dict[str, Obj] = {
    "default": {},
    "compute-domains-off": {"draDriver": {"computeDomains": {"enabled": False}}},
    "dcgm-on": {"dcgm": {"enabled": True}},
    "exporter-off": {"dcgmExporter": {"enabled": False}},
    "healthchecks-off": {
        "draDriver": {
            "gpus": {"kubeletPlugin": {"healthcheck": {"enabled": False}}},
            "computeDomains": {"kubeletPlugin": {"healthcheck": {"enabled": False}}},
        }
    },
    "on-delete": {"daemonsets": {"updateStrategy": "OnDelete"}},
    "full": FULL_SPEC,
}


def rendered(config: str, facts: ClusterFacts = FACTS) -> list[Obj]:
    return objects(CONFIGS[config], facts)


def kinds_and_names(objs: list[Obj]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objs]


# --- every object is a valid Kubernetes 1.34 object ------------------------------------------


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("openshift", [False, True])
def test_every_object_validates_against_kubernetes_1_34_strict(config: str, openshift: bool) -> None:
    facts = ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID, service_monitor_crd=True, openshift=openshift)
    objs = rendered(config, facts)
    assert objs
    for obj in objs:
        if obj["apiVersion"] in ("monitoring.coreos.com/v1", "security.openshift.io/v1"):
            continue  # CRD kinds: no built-in schema
        kubernetes_validate.validate(obj, "1.34", strict=True)


# --- the default GPUCluster ------------------------------------------------------------------


def test_default_cr_renders_the_documented_stack_in_apply_order() -> None:
    objs = objects()
    assert kinds_and_names(objs) == [
        ("ServiceAccount", "nvidia-dra-driver-kubeletplugin"),
        ("ClusterRole", "nvidia-dra-driver-kubeletplugin"),
        ("ClusterRoleBinding", "nvidia-dra-driver-kubeletplugin"),
        ("Role", "nvidia-dra-driver-kubeletplugin"),
        ("RoleBinding", "nvidia-dra-driver-kubeletplugin"),
        ("ServiceAccount", "nvidia-dra-driver-controller"),
        ("ClusterRole", "nvidia-dra-driver-controller"),
        ("ClusterRoleBinding", "nvidia-dra-driver-controller"),
        ("Role", "nvidia-dra-driver-controller"),
        ("RoleBinding", "nvidia-dra-driver-controller"),
        ("ServiceAccount", "compute-domain-daemon-service-account"),
        ("ClusterRole", "compute-domain-daemon"),
        ("ClusterRoleBinding", "compute-domain-daemon"),
        ("DeviceClass", "gpu.nvidia.com"),
        ("DeviceClass", "mig.nvidia.com"),
        ("DeviceClass", "vfio.gpu.nvidia.com"),
        ("DeviceClass", "compute-domain-daemon.nvidia.com"),
        ("DeviceClass", "compute-domain-default-channel.nvidia.com"),
        ("ValidatingAdmissionPolicy", "resourceslices-policy-nvidia-dra-driver"),
        ("ValidatingAdmissionPolicyBinding", "resourceslices-policy-nvidia-dra-driver"),
        ("DaemonSet", "nvidia-dra-driver-kubelet-plugin"),
        ("Deployment", "nvidia-dra-driver-controller"),
        ("ServiceAccount", "nvidia-dcgm-exporter"),
        ("Role", "nvidia-dcgm-exporter"),
        ("RoleBinding", "nvidia-dcgm-exporter"),
        ("ClusterRole", "nvidia-dcgm-exporter"),
        ("ClusterRoleBinding", "nvidia-dcgm-exporter"),
        ("ResourceClaimTemplate", "nvidia-dcgm-exporter-admin"),
        ("Service", "nvidia-dcgm-exporter"),
        ("DaemonSet", "nvidia-dcgm-exporter"),
        ("ServiceAccount", "nvidia-dra-validator"),
        ("ResourceClaimTemplate", "nvidia-dra-validator-gpu"),
        ("DaemonSet", "nvidia-dra-validator"),
    ]


def test_render_operands_lists_every_state_in_order_with_disabled_ones_empty() -> None:
    operands = render_operands(cluster(), FACTS)
    assert [o.state for o in operands] == list(STATES)
    assert [o.enabled for o in operands] == [True, False, True, True]
    assert [obj for o in operands for obj in o.objects] == render(cluster(), FACTS)
    for operand in operands:
        assert all(obj["metadata"]["labels"][STATE_LABEL] == operand.state for obj in operand.objects)


def test_device_classes_have_the_exact_selectors() -> None:
    objs = objects()
    selectors = {
        o["metadata"]["name"]: [s["cel"]["expression"] for s in o["spec"]["selectors"]]
        for o in objs
        if o["kind"] == "DeviceClass"
    }
    assert selectors["gpu.nvidia.com"] == [GPU_SELECTOR]
    assert selectors["mig.nvidia.com"] == [MIG_SELECTOR]
    assert selectors["vfio.gpu.nvidia.com"] == [VFIO_SELECTOR]
    assert selectors["compute-domain-daemon.nvidia.com"] == [
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    ]
    assert selectors["compute-domain-default-channel.nvidia.com"] == [
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0"
    ]
    for obj in objs:
        if obj["kind"] == "DeviceClass":
            assert obj["apiVersion"] == "resource.k8s.io/v1"
            assert set(obj["spec"]) == {"selectors"}


def test_kubelet_plugin_daemonset_shape() -> None:
    ds = kubelet_plugin(objects())
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dra-driver": "true"}
    assert spec["serviceAccountName"] == "nvidia-dra-driver-kubeletplugin"
    assert spec["priorityClassName"] == "system-node-critical"
    assert [c["name"] for c in spec["initContainers"]] == ["dra-driver-validator"]
    assert [c["name"] for c in spec["containers"]] == ["gpus", "compute-domains"]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    gpus = container(ds, "gpus")
    assert gpus["image"] == DRIVER_REF
    assert gpus["securityContext"] == {"privileged": True}
    assert gpus["command"] == ["bash", "-c"]
    assert "exec gpu-kubelet-plugin" in gpus["args"][0]
    assert "exec compute-domain-kubelet-plugin" in container(ds, "compute-domains")["args"][0]
    env = env_of(gpus)
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins"
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins_registry"
    assert env["HEALTHCHECK_PORT"] == "51516"
    assert env["IMAGE_NAME"] == DRIVER_REF
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "FEATURE_GATES" not in env  # no gates configured
    assert env_of(container(ds, "compute-domains"))["HEALTHCHECK_PORT"] == "51515"
    # The plugins read the driver root from the init container's file, never from the pod spec.
    for ctr in spec["containers"]:
        assert "NVIDIA_DRIVER_ROOT" not in env_of(ctr)
        assert '. "$DRIVER_READY_FILE"' in ctr["args"][0]


@pytest.mark.parametrize(("given", "applied"), [("1", 1), (2, 2), ("007", 7), ("25%", "25%"), ("100%", "100%")])
def test_rolling_update_numeric_strings_become_numbers(given: int | str, applied: int | str) -> None:
    # kube-apiserver takes a string maxUnavailable only as a percentage; the chart's default is "1".
    objs = objects({"daemonsets": {"rollingUpdate": {"maxUnavailable": given}}})
    daemonsets = [o for o in objs if o["kind"] == "DaemonSet"]
    assert daemonsets
    for ds in daemonsets:
        assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": applied}, ds["metadata"]["name"]


def test_healthcheck_probes_are_grpc_on_the_configured_ports() -> None:
    ds = kubelet_plugin(objects({"draDriver": {"gpus": {"kubeletPlugin": {"healthcheck": {"port": 52000}}}}}))
    gpus = container(ds, "gpus")
    for probe in ("startupProbe", "livenessProbe"):
        assert gpus[probe]["grpc"] == {"port": 52000, "service": "liveness"}
    assert env_of(gpus)["HEALTHCHECK_PORT"] == "52000"
    cd = container(ds, "compute-domains")
    assert cd["startupProbe"]["grpc"] == {"port": 51515, "service": "liveness"}
    assert cd["livenessProbe"]["grpc"]["port"] == 51515


def test_disabled_healthchecks_drop_the_probes() -> None:
    ds = kubelet_plugin(rendered("healthchecks-off"))
    for ctr in pod_spec(ds)["containers"]:
        assert "startupProbe" not in ctr and "livenessProbe" not in ctr
        assert env_of(ctr)["HEALTHCHECK_PORT"] == "-1"


def test_driver_validator_init_container_probes_host_then_operator_driver() -> None:
    ds = kubelet_plugin(objects())
    init = container(ds, "dra-driver-validator", init=True)
    env = env_of(init)
    assert env["HOST_DRIVER_ROOT"] == "/"
    assert env["HOST_DRIVER_ROOT_CTR_PATH"] == "/host"
    assert env["OPERATOR_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert env["OPERATOR_DRIVER_ROOT_CTR_PATH"] == "/driver-root"
    assert env["OPERATOR_DRIVER_READY_FILE"] == "/run/nvidia/validations/.driver-ctr-ready"
    assert env["DRIVER_READY_FILE"] == "/run/nvidia/dra-driver/driver-ready"
    script = init["args"][0]
    assert script.index('driver_works "$HOST_DRIVER_ROOT_CTR_PATH"') < script.index(
        'driver_works "$OPERATOR_DRIVER_ROOT_CTR_PATH"'
    )
    assert init["securityContext"] == {"privileged": True, "runAsUser": 0}
    mounts = {m["name"]: m for m in init["volumeMounts"]}
    assert mounts["host-root"]["mountPath"] == "/host" and mounts["host-root"]["readOnly"]
    assert mounts["driver-install-dir"]["mountPath"] == "/driver-root"
    assert mounts["driver-ready"]["mountPath"] == "/run/nvidia/dra-driver"
    # The plugin containers see the same file, read-only.
    for ctr in pod_spec(ds)["containers"]:
        ready = next(m for m in ctr["volumeMounts"] if m["name"] == "driver-ready")
        assert ready == {"name": "driver-ready", "mountPath": "/run/nvidia/dra-driver", "readOnly": True}
        assert env_of(ctr)["DRIVER_READY_FILE"] == "/run/nvidia/dra-driver/driver-ready"
    volumes = {v["name"]: v for v in pod_spec(ds)["volumes"]}
    assert volumes["driver-ready"] == {"name": "driver-ready", "emptyDir": {}}
    assert volumes["host-root"]["hostPath"] == {"path": "/"}
    assert volumes["driver-install-dir"]["hostPath"] == {"path": "/run/nvidia/driver", "type": "DirectoryOrCreate"}


def test_resourceslices_policy_confines_the_plugin_to_its_node() -> None:
    objs = objects(facts=ClusterFacts(namespace="gpu-ops", env=ENV, owner_uid=UID))
    policy = find(objs, "ValidatingAdmissionPolicy", "resourceslices-policy-nvidia-dra-driver")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rules,) = spec["matchConstraints"]["resourceRules"]
    assert rules["resources"] == ["resourceslices"] and rules["apiGroups"] == ["resource.k8s.io"]
    assert set(rules["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:gpu-ops:nvidia-dra-driver-kubeletplugin'"
    )
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["userNodeName"]
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "variables.objectNodeName == variables.userNodeName" in checks
    assert "variables.oldObjectNodeName == variables.userNodeName" in checks
    assert "allNodes" not in checks and "nodeSelector" not in checks
    binding = find(objs, "ValidatingAdmissionPolicyBinding", "resourceslices-policy-nvidia-dra-driver")
    assert binding["spec"] == {"policyName": "resourceslices-policy-nvidia-dra-driver", "validationActions": ["Deny"]}


def test_kubelet_plugin_rbac_is_least_privilege() -> None:
    objs = objects({"draDriver": {"computeDomains": {"enabled": False}}})
    role = find(objs, "ClusterRole", "nvidia-dra-driver-kubeletplugin")
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources == {"resourceclaims", "resourceslices", "nodes", "pods"}
    claims = next(r for r in role["rules"] if r["resources"] == ["resourceclaims"])
    assert claims["verbs"] == ["get", "list", "watch"]
    binding = find(objs, "ClusterRoleBinding", "nvidia-dra-driver-kubeletplugin")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "nvidia-dra-driver-kubeletplugin", "namespace": NAMESPACE}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "nvidia-dra-driver-kubeletplugin",
    }
    assert "nvidia-dra-driver-kubeletplugin-mps" not in names(objs, "Role")
    with_cd = find(objects(), "ClusterRole", "nvidia-dra-driver-kubeletplugin")
    assert any(r["resources"] == ["computedomains"] for r in with_cd["rules"])


def test_mps_support_adds_the_deployments_role() -> None:
    objs = objects({"draDriver": {"featureGates": {"MPSSupport": True}}})
    role = find(objs, "Role", "nvidia-dra-driver-kubeletplugin-mps")
    assert role["rules"][0]["resources"] == ["deployments"]
    binding = find(objs, "RoleBinding", "nvidia-dra-driver-kubeletplugin-mps")
    assert binding["roleRef"]["name"] == "nvidia-dra-driver-kubeletplugin-mps"
    off = objects({"draDriver": {"featureGates": {"MPSSupport": False}}})
    assert "nvidia-dra-driver-kubeletplugin-mps" not in names(off, "Role")


def test_controller_deployment_with_compute_domains() -> None:
    objs = objects()
    deployment = find(objs, "Deployment", "nvidia-dra-driver-controller")
    spec = pod_spec(deployment)
    assert deployment["spec"]["replicas"] == 1
    assert spec["serviceAccountName"] == "nvidia-dra-driver-controller"
    (ctr,) = spec["containers"]
    assert ctr["name"] == "compute-domain" and ctr["image"] == DRIVER_REF
    assert env_of(ctr)["LEADER_ELECTION_LEASE_LOCK_NAMESPACE"] == NAMESPACE
    keys = [t["key"] for t in spec["tolerations"]]
    assert keys == ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master", "CriticalAddonsOnly"]
    assert "updateStrategy" not in deployment["spec"]


# --- ComputeDomains off ----------------------------------------------------------------------


def test_compute_domains_off_drops_controller_classes_and_container() -> None:
    objs = rendered("compute-domains-off")
    assert "Deployment" not in {o["kind"] for o in objs}
    assert names(objs, "DeviceClass") == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    for name in ("nvidia-dra-driver-controller", "compute-domain-daemon-service-account"):
        assert name not in names(objs, "ServiceAccount")
    assert names(objs, "ClusterRole") == ["nvidia-dra-driver-kubeletplugin", "nvidia-dcgm-exporter"]
    assert "nvidia-dra-driver-kubeletplugin" not in names(objs, "Role")
    ds = kubelet_plugin(objs)
    assert [c["name"] for c in pod_spec(ds)["containers"]] == ["gpus"]
    with_cd = objects()
    assert all(name in names(with_cd, "DeviceClass") for name in CD_CLASSES)


# --- DCGM ------------------------------------------------------------------------------------


def test_dcgm_is_off_by_default_and_the_exporter_runs_embedded() -> None:
    objs = objects()
    assert not any(o["metadata"]["labels"][STATE_LABEL] == "state-dcgm" for o in objs)
    exporter = find(objs, "DaemonSet", "nvidia-dcgm-exporter")
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env_of(container(exporter, "nvidia-dcgm-exporter"))
    assert render_dcgm(cluster(), ClusterFacts()) == []  # no image needed when disabled


def test_dcgm_on_renders_the_hostengine_and_points_the_exporter_at_it() -> None:
    objs = rendered("dcgm-on")
    assert kinds_and_names([o for o in objs if o["metadata"]["labels"][STATE_LABEL] == "state-dcgm"]) == [
        ("ServiceAccount", "nvidia-dcgm"),
        ("Role", "nvidia-dcgm"),
        ("RoleBinding", "nvidia-dcgm"),
        ("ResourceClaimTemplate", "nvidia-dcgm-admin"),
        ("Service", "nvidia-dcgm"),
        ("DaemonSet", "nvidia-dcgm"),
    ]
    ds = find(objs, "DaemonSet", "nvidia-dcgm")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dcgm": "true"}
    assert spec["resourceClaims"] == [{"name": "admin-gpus", "resourceClaimTemplateName": "nvidia-dcgm-admin"}]
    ctr = container(ds, "nvidia-dcgm-ctr")
    assert ctr["image"] == DCGM_REF
    assert ctr["ports"] == [{"name": "dcgm", "containerPort": 5555, "hostPort": 5555, "protocol": "TCP"}]
    assert ctr["resources"] == {"claims": [{"name": "admin-gpus"}]}
    service = find(objs, "Service", "nvidia-dcgm")
    assert service["spec"]["ports"][0]["port"] == 5555
    assert service["spec"]["selector"] == {"app": "nvidia-dcgm"}
    assert pod_spec(ds)  # selector label is on the pods
    assert ds["spec"]["template"]["metadata"]["labels"]["app"] == "nvidia-dcgm"
    template = find(objs, "ResourceClaimTemplate", "nvidia-dcgm-admin")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True}
    exporter = container(find(objs, "DaemonSet", "nvidia-dcgm-exporter"), "nvidia-dcgm-exporter")
    assert env_of(exporter)["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"


def test_dcgm_host_port_and_host_network() -> None:
    ctr = container(
        find(objects({"dcgm": {"enabled": True, "hostPort": 6000}}), "DaemonSet", "nvidia-dcgm"), "nvidia-dcgm-ctr"
    )
    assert ctr["ports"][0]["hostPort"] == 6000 and ctr["ports"][0]["containerPort"] == 5555
    refused = validate_gpucluster(manifest({"dcgm": {"enabled": True, "hostPort": 6000, "hostNetwork": True}}))
    assert [(p.path, p.message) for p in refused.problems] == [
        (
            "spec.dcgm",
            "hostPort: Invalid value: 6000: must be 5555 when hostNetwork is true "
            "(on the host network the host port is the hostengine's port)",
        )
    ]
    # The renderer refuses it too, should a model skip validation.
    model = cluster({"dcgm": {"enabled": True, "hostPort": 6000}})
    model.spec.dcgm.hostNetwork = True
    with pytest.raises(RenderError, match=r"^spec\.dcgm\.hostPort: "):
        render(model, FACTS)
    ds = find(objects({"dcgm": {"enabled": True, "hostNetwork": True}}), "DaemonSet", "nvidia-dcgm")
    assert pod_spec(ds)["hostNetwork"] is True and pod_spec(ds)["dnsPolicy"] == "ClusterFirstWithHostNet"


# --- DCGM Exporter ---------------------------------------------------------------------------


def test_exporter_defaults() -> None:
    objs = objects()
    ds = find(objs, "DaemonSet", "nvidia-dcgm-exporter")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}
    assert spec["resourceClaims"] == [{"name": "admin-gpus", "resourceClaimTemplateName": "nvidia-dcgm-exporter-admin"}]
    ctr = container(ds, "nvidia-dcgm-exporter")
    assert ctr["image"] == EXPORTER_REF
    assert ctr["resources"] == {"claims": [{"name": "admin-gpus"}]}
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    env = env_of(ctr)
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert env["KUBERNETES_ENABLE_DRA"] == "true"
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcp-metrics-included.csv"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pod-gpu-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources"}
    template = find(objs, "ResourceClaimTemplate", "nvidia-dcgm-exporter-admin")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request == {
        "name": "admin-gpus",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True},
    }
    service = find(objs, "Service", "nvidia-dcgm-exporter")
    assert service["spec"]["type"] == "ClusterIP"
    assert "internalTrafficPolicy" not in service["spec"]
    assert service["spec"]["ports"] == [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}]
    assert service["spec"]["selector"] == {"app": "nvidia-dcgm-exporter"}
    assert ds["spec"]["template"]["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"


def test_exporter_reads_pods_only_for_pod_labels_or_uid() -> None:
    def pod_rules(spec: Obj) -> list[Obj]:
        role = find(objects(spec), "ClusterRole", "nvidia-dcgm-exporter")
        return [r for r in role["rules"] if "pods" in r["resources"]]

    assert pod_rules({}) == []
    assert pod_rules({"dcgmExporter": {"enablePodLabels": True}})[0]["verbs"] == ["get", "list", "watch"]
    assert pod_rules({"dcgmExporter": {"enablePodUID": True}})
    role = find(objects(), "ClusterRole", "nvidia-dcgm-exporter")
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["get", "list", "watch"]}
    ]


def test_exporter_full_spec() -> None:
    objs = objects(FULL_SPEC, ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID, service_monitor_crd=True))
    ds = find(objs, "DaemonSet", "nvidia-dcgm-exporter")
    spec = pod_spec(ds)
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    ctr = container(ds, "nvidia-dcgm-exporter")
    env = env_of(ctr)
    assert env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert env["DCGM_HPC_JOB_MAPPING_DIR"] == "/var/lib/dcgm-exporter/job-mapping"
    assert env["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert env["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"] == "true"
    assert env["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"] == "^app$,^team$"
    assert env["DCGM_EXPORTER_INTERVAL"] == "10000"
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"
    assert ctr["args"] == ["-f", "/etc/dcgm-exporter/dcgm-metrics.csv"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["metrics-config"]["configMap"]["name"] == "custom-metrics"
    assert volumes["pod-gpu-resources"]["hostPath"]["path"] == "/data/kubelet/pod-resources"
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"example.com/owner": "gpu-team", "prometheus.io/port": "9400"}
    service = find(objs, "Service", "nvidia-dcgm-exporter")
    assert service["spec"]["type"] == "NodePort" and service["spec"]["internalTrafficPolicy"] == "Local"


def test_exporter_external_name_service_is_refused() -> None:
    refused = validate_gpucluster(manifest({"dcgmExporter": {"service": {"type": "ExternalName"}}}))
    assert [(p.path, p.message) for p in refused.problems] == [
        (
            "spec.dcgmExporter.service.type",
            'Unsupported value: "ExternalName": supported values: "ClusterIP", "NodePort", "LoadBalancer"',
        )
    ]
    model = cluster({"dcgmExporter": {"service": {"type": "NodePort"}}})
    assert model.spec.dcgmExporter.service is not None
    model.spec.dcgmExporter.service.type = "ExternalName"  # type: ignore[assignment]
    with pytest.raises(RenderError, match=r"^spec\.dcgmExporter\.service\.type: "):
        render(model, FACTS)


def test_exporter_disabled_renders_nothing_and_needs_no_image() -> None:
    objs = rendered("exporter-off")
    assert not any(o["metadata"]["labels"][STATE_LABEL] == "state-dcgm-exporter" for o in objs)
    assert render_dcgm_exporter(cluster({"dcgmExporter": {"enabled": False}}), ClusterFacts()) == []


@pytest.mark.parametrize(("enabled", "crd", "expected"), [(True, True, 1), (True, False, 0), (False, True, 0)])
def test_service_monitor_needs_the_request_and_the_crd(enabled: bool, crd: bool, expected: int) -> None:
    spec = {"dcgmExporter": {"serviceMonitor": {"enabled": enabled, "additionalLabels": {"release": "prom"}}}}
    objs = objects(spec, ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID, service_monitor_crd=crd))
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == expected
    if monitors:
        (monitor,) = monitors
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["namespace"] == NAMESPACE
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert monitor["spec"]["selector"] == {"matchLabels": {"app": "nvidia-dcgm-exporter"}}
        assert monitor["spec"]["endpoints"][0]["port"] == "gpu-metrics"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        # Applied after the Service it selects and before the DaemonSet.
        order = [o["kind"] for o in objs if o["metadata"]["labels"][STATE_LABEL] == "state-dcgm-exporter"]
        assert order.index("Service") < order.index("ServiceMonitor") < order.index("DaemonSet")


def test_service_monitor_endpoint_settings() -> None:
    objs = objects(FULL_SPEC, ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID, service_monitor_crd=True))
    (endpoint,) = find(objs, "ServiceMonitor", "nvidia-dcgm-exporter")["spec"]["endpoints"]
    assert endpoint == {
        "port": "gpu-metrics",
        "path": "/metrics",
        "honorLabels": True,
        "interval": "15s",
        "scrapeTimeout": "10s",
        "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}],
    }


# --- DRA validator ---------------------------------------------------------------------------


def test_validator_is_ready_only_after_nvidia_smi_on_an_allocated_gpu() -> None:
    objs = objects()
    template = find(objs, "ResourceClaimTemplate", "nvidia-dra-validator-gpu")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
        "adminAccess": True,
    }
    ds = find(objs, "DaemonSet", "nvidia-dra-validator")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dra-validator": "true"}
    assert spec["resourceClaims"] == [
        {"name": request["name"], "resourceClaimTemplateName": "nvidia-dra-validator-gpu"}
    ]
    assert spec["automountServiceAccountToken"] is False
    ctr = container(ds, "nvidia-dra-validator")
    assert ctr["image"] == VALIDATOR_REF
    assert ctr["resources"] == {"claims": [{"name": request["name"]}]}
    script = ctr["command"][-1]
    validated = env_of(ctr)["VALIDATED_FILE"]
    assert ctr["readinessProbe"]["exec"]["command"] == ["cat", validated]
    run = script.index("gpus=$(nvidia-smi -L)")
    assert script.index('rm -f "$VALIDATED_FILE"') < run < script.index('touch "$VALIDATED_FILE"')


def test_validator_image_falls_back_to_the_driver_image() -> None:
    facts = ClusterFacts(env={"DCGM_EXPORTER_IMAGE": EXPORTER_REF})
    ds = find(render(cluster(), facts), "DaemonSet", "nvidia-dra-validator")
    assert container(ds, "nvidia-dra-validator")["image"] == DRIVER_REF


# --- host paths ------------------------------------------------------------------------------


def test_custom_host_paths() -> None:
    objs = objects(
        {
            "hostPaths": {
                "rootFS": "/host-root/",
                "driverInstallDir": "/opt/nvidia/driver",
                "kubeletRootDir": "/data/kubelet/",
            }
        }
    )
    ds = kubelet_plugin(objs)
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod_spec(ds)["volumes"] if "hostPath" in v}
    assert volumes["plugins"] == "/data/kubelet/plugins"
    assert volumes["plugins-registry"] == "/data/kubelet/plugins_registry"
    assert volumes["host-root"] == "/host-root"
    assert volumes["driver-install-dir"] == "/opt/nvidia/driver"
    for ctr in pod_spec(ds)["containers"]:
        env = env_of(ctr)
        assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/data/kubelet/plugins"
        assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/data/kubelet/plugins_registry"
        mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
        assert mounts["plugins"] == "/data/kubelet/plugins"
        assert mounts["plugins-registry"] == "/data/kubelet/plugins_registry"
    init_env = env_of(container(ds, "dra-driver-validator", init=True))
    assert init_env["HOST_DRIVER_ROOT"] == "/host-root"
    assert init_env["OPERATOR_DRIVER_ROOT"] == "/opt/nvidia/driver"
    exporter = find(objs, "DaemonSet", "nvidia-dcgm-exporter")
    pod_resources = next(v for v in pod_spec(exporter)["volumes"] if v["name"] == "pod-gpu-resources")
    assert pod_resources["hostPath"]["path"] == "/data/kubelet/pod-resources"


@pytest.mark.parametrize(
    ("field", "value"),
    [("rootFS", "host"), ("driverInstallDir", "run/nvidia/driver"), ("kubeletRootDir", "/var/lib/my kubelet")],
)
def test_bad_host_paths_name_the_field(field: str, value: str) -> None:
    refused = validate_gpucluster(manifest({"hostPaths": {field: value}}))
    assert [(p.path, p.message) for p in refused.problems] == [
        (
            f"spec.hostPaths.{field}",
            f"Invalid value: {json.dumps(value)}: must be a plain absolute path "
            "(letters, digits and . _ - + @ : = , ~; no spaces or quotes)",
        )
    ]
    model = cluster()
    setattr(model.spec.hostPaths, field, value)
    with pytest.raises(RenderError, match=rf"^spec\.hostPaths\.{field}: Invalid value"):
        render(model, FACTS)


# --- daemonsets.* ----------------------------------------------------------------------------


def test_daemonsets_settings_apply_to_every_workload() -> None:
    objs = objects(FULL_SPEC, ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID))
    workloads = [o for o in objs if o["kind"] in WORKLOAD_KINDS]
    assert sorted(names(workloads, "DaemonSet")) == [
        "nvidia-dcgm",
        "nvidia-dcgm-exporter",
        "nvidia-dra-driver-kubelet-plugin",
        "nvidia-dra-validator",
    ]
    assert names(workloads, "Deployment") == ["nvidia-dra-driver-controller"]
    for workload in workloads:
        name = workload["metadata"]["name"]
        spec = pod_spec(workload)
        template = workload["spec"]["template"]["metadata"]
        assert spec["priorityClassName"] == "gpu-critical", name
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"], name
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}, name
        for labels in (workload["metadata"]["labels"], template["labels"]):
            assert labels["team"] == "gpu", name
            # Our selector label wins over a user label of the same key.
            assert labels["app"] == name, name
        assert workload["spec"]["selector"] == {"matchLabels": {"app": name}}
        assert workload["metadata"]["annotations"] == {"example.com/owner": "gpu-team"}, name
        assert template["annotations"]["example.com/owner"] == "gpu-team", name
        if workload["kind"] == "DaemonSet":
            assert workload["spec"]["updateStrategy"] == {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%"},
            }, name


def test_update_strategy_defaults_and_on_delete() -> None:
    strategies = {o["metadata"]["name"]: o["spec"]["updateStrategy"] for o in objects() if o["kind"] == "DaemonSet"}
    assert strategies == {
        "nvidia-dra-driver-kubelet-plugin": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
        "nvidia-dcgm-exporter": {"type": "RollingUpdate"},
        "nvidia-dra-validator": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
    }
    for obj in rendered("on-delete"):
        if obj["kind"] == "DaemonSet":
            assert obj["spec"]["updateStrategy"] == {"type": "OnDelete"}
    numeric = objects({"daemonsets": {"rollingUpdate": {"maxUnavailable": 2}}})
    assert kubelet_plugin(numeric)["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 2}


# --- feature gates, env, images --------------------------------------------------------------


def test_feature_gates_are_sorted_on_every_driver_container() -> None:
    objs = objects({"draDriver": {"featureGates": {"TimeSlicingSettings": True, "MPSSupport": False, "A": True}}})
    expected = "A=true,MPSSupport=false,TimeSlicingSettings=true"
    ds = kubelet_plugin(objs)
    for ctr in pod_spec(ds)["containers"]:
        assert env_of(ctr)["FEATURE_GATES"] == expected
    controller = pod_spec(find(objs, "Deployment", "nvidia-dra-driver-controller"))["containers"][0]
    assert env_of(controller)["FEATURE_GATES"] == expected


def test_passthrough_support_mounts_host_kernel_interfaces() -> None:
    ds = kubelet_plugin(objects({"draDriver": {"featureGates": {"PassthroughSupport": True}}}))
    mounts = {m["name"]: m["mountPath"] for m in container(ds, "gpus")["volumeMounts"]}
    assert (mounts["lib-modules"], mounts["sysfs"], mounts["procfs"]) == ("/lib/modules", "/sys", "/proc")
    assert "sysfs" not in {m["name"] for m in container(ds, "compute-domains")["volumeMounts"]}
    assert "sysfs" not in {v["name"] for v in pod_spec(kubelet_plugin(objects()))["volumes"]}


def test_user_env_overrides_in_place_and_appends() -> None:
    ds = kubelet_plugin(objects(FULL_SPEC))
    env = container(ds, "gpus")["env"]
    env_names = [e["name"] for e in env]
    assert len(env_names) == len(set(env_names))
    assert env_of(container(ds, "gpus"))["LOG_VERBOSITY"] == "6"
    assert env_names.index("LOG_VERBOSITY") < env_names.index("HEALTHCHECK_PORT")
    assert env_names[-1] == "GPUS_EXTRA"
    assert container(ds, "gpus")["resources"] == {
        "limits": {"memory": "256Mi"},
        "requests": {"cpu": "100m", "memory": "128Mi"},
    }


def test_image_pull_settings() -> None:
    objs = objects(FULL_SPEC)
    ds = kubelet_plugin(objs)
    assert pod_spec(ds)["imagePullSecrets"] == [{"name": "ngc-secret"}, {"name": "other"}]
    for ctr in [*pod_spec(ds)["initContainers"], *pod_spec(ds)["containers"]]:
        assert ctr["imagePullPolicy"] == "IfNotPresent"
    assert pod_spec(find(objs, "DaemonSet", "nvidia-dcgm"))["imagePullSecrets"] == [{"name": "dcgm-secret"}]
    assert pod_spec(find(objs, "DaemonSet", "nvidia-dra-validator"))["imagePullSecrets"][0] == {"name": "ngc-secret"}


def test_image_digest_is_joined_with_at() -> None:
    digest = "sha256:" + "ab" * 32
    ds = kubelet_plugin(objects({"draDriver": {"version": digest}}))
    assert container(ds, "gpus")["image"] == f"{DRIVER_REPO}/k8s-dra-driver-gpu@{digest}"
    assert container(ds, "dra-driver-validator", init=True)["image"] == f"{DRIVER_REPO}/k8s-dra-driver-gpu@{digest}"


def test_image_from_operator_env_when_the_cr_has_none() -> None:
    facts = ClusterFacts(env={**ENV, "DRA_DRIVER_IMAGE": "registry.example.com/dra/driver:v1"})
    ds = kubelet_plugin(render(cluster(with_driver_image=False), facts))
    assert container(ds, "gpus")["image"] == "registry.example.com/dra/driver:v1"
    # The CR wins over the environment.
    assert container(kubelet_plugin(render(cluster(), facts)), "gpus")["image"] == DRIVER_REF


def test_missing_image_names_the_field() -> None:
    with pytest.raises(RenderError) as info:
        render(cluster(with_driver_image=False), ClusterFacts(env=ENV))
    message = str(info.value)
    assert message.startswith("spec.draDriver.version: Required value")
    assert "spec.draDriver.repository" in message and "DRA_DRIVER_IMAGE" in message
    assert isinstance(info.value, InputError)
    with pytest.raises(RenderError, match=r"^spec\.dcgmExporter\.version: .*DCGM_EXPORTER_IMAGE"):
        render(cluster(), ClusterFacts(env={"VALIDATOR_IMAGE": VALIDATOR_REF}))
    with pytest.raises(RenderError, match=r"^spec\.dcgm\.version: .*DCGM_IMAGE"):
        render(cluster({"dcgm": {"enabled": True}}), ClusterFacts(env={"DCGM_EXPORTER_IMAGE": EXPORTER_REF}))


@pytest.mark.parametrize(
    ("draDriver", "path", "model_path"),
    [
        ({"repository": "nvcr.io/nvidia", "image": "k8s-dra-driver-gpu"}, "spec.draDriver.version", "spec.draDriver"),
        ({"repository": "nvcr.io/nvidia", "version": "v1"}, "spec.draDriver.image", "spec.draDriver"),
        ({"image": "k8s-dra-driver-gpu", "version": "v1"}, "spec.draDriver.repository", "spec.draDriver"),
        ({"repository": "nvcr.io/nvidia/", "image": "x", "version": "v1"}, "spec.draDriver.repository", None),
        ({"repository": "nvcr.io/NVIDIA", "image": "x", "version": "v1"}, "spec.draDriver.repository", None),
        (
            {"repository": "nvcr.io/nvidia", "image": "K8s-Driver", "version": "v1"},
            "spec.draDriver.image",
            "spec.draDriver",
        ),
        ({"repository": "nvcr.io/nvidia", "image": "x", "version": "v1:latest"}, "spec.draDriver.version", None),
        ({"repository": "nvcr.io/nvidia", "image": "x", "version": "sha256:abc"}, "spec.draDriver.version", None),
        ({"repository": "nvcr.io/nvidia", "image": "x", "version": "-v1"}, "spec.draDriver.version", None),
    ],
)
def test_bad_images_name_the_field(draDriver: Obj, path: str, model_path: str | None) -> None:
    """The model (webhook, CRD) refuses them, naming the field; the renderer too, should a model
    skip validation."""
    refused = validate_gpucluster(manifest({"draDriver": draDriver}, with_driver_image=False))
    problems = {p.path: p.message for p in refused.problems}
    assert list(problems) == [model_path or path]
    if model_path:
        assert problems[model_path].startswith(path.rsplit(".", 1)[1] + ": ")
    spec = dict(draDriver)
    with pytest.raises(RenderError) as info:
        resolve_image(
            "spec.draDriver", "the DRA driver", spec.get("repository"), spec.get("image"), spec.get("version"), "X", {}
        )
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")


def test_resolve_image_variants() -> None:
    env = {"X_IMAGE": "reg.example.com:5000/a/b:1.0@sha256:" + "0" * 64}
    assert resolve_image("spec.x", "x", None, None, None, "X_IMAGE", env) == env["X_IMAGE"]
    assert resolve_image("spec.x", "x", None, "nvcr.io/nvidia/dcgm@sha256:" + "1" * 64, None, "X", {}).endswith(
        "1" * 64
    )
    assert resolve_image("spec.x", "x", "localhost:5000", "img", "v1.2_3", "X", {}) == "localhost:5000/img:v1.2_3"
    with pytest.raises(RenderError, match="X_IMAGE"):
        resolve_image("spec.x", "x", None, None, None, "X_IMAGE", {"X_IMAGE": "Bad Image"})
    # Tags are ASCII, as distribution/reference (and the model's pattern) take them.
    with pytest.raises(RenderError, match=r"^spec\.x\.version: "):
        resolve_image("spec.x", "x", "nvcr.io/nvidia", "img", "v\u00e9", "X", {})


# --- metadata on everything ------------------------------------------------------------------


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_owner_references_labels_and_namespaces_on_everything(config: str) -> None:
    facts = ClusterFacts(namespace="nvidia-gpu", env=ENV, owner_uid=UID, service_monitor_crd=True, openshift=True)
    objs = rendered(config, facts)
    for obj in objs:
        meta = obj["metadata"]
        where = f"{obj['kind']}/{meta['name']}"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "nvidia.com/v1alpha1",
                "kind": "GPUCluster",
                "name": "gpu-cluster",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ], where
        labels = meta["labels"]
        assert labels[STATE_LABEL] in STATES, where
        assert labels["app.kubernetes.io/managed-by"] == "gpucluster", where
        assert labels["app.kubernetes.io/part-of"] == "gpucluster", where
        assert labels["app.kubernetes.io/name"], where
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, where
        else:
            assert meta["namespace"] == "nvidia-gpu", where
        if obj["kind"] in WORKLOAD_KINDS:
            pod_labels = obj["spec"]["template"]["metadata"]["labels"]
            assert pod_labels[STATE_LABEL] == labels[STATE_LABEL], where
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "nvidia-gpu", where


def test_state_labels_per_operand() -> None:
    objs = rendered("dcgm-on")
    state_of = {(o["kind"], o["metadata"]["name"]): o["metadata"]["labels"][STATE_LABEL] for o in objs}
    assert state_of[("DeviceClass", "gpu.nvidia.com")] == "state-dra-driver"
    assert state_of[("DaemonSet", "nvidia-dcgm")] == "state-dcgm"
    assert state_of[("Service", "nvidia-dcgm-exporter")] == "state-dcgm-exporter"
    assert state_of[("DaemonSet", "nvidia-dra-validator")] == "state-dra-validation"


def test_owner_uid_comes_from_facts_or_the_object_or_nowhere() -> None:
    facts = ClusterFacts(env=ENV)
    assert all("ownerReferences" not in o["metadata"] for o in render(cluster(), facts))
    with_uid = cluster({})
    with_uid.metadata.uid = "from-object"
    refs = {o["metadata"]["ownerReferences"][0]["uid"] for o in render(with_uid, facts)}
    assert refs == {"from-object"}
    refs = {o["metadata"]["ownerReferences"][0]["uid"] for o in render(with_uid, FACTS)}
    assert refs == {UID}


def test_openshift_adds_security_context_constraints() -> None:
    facts = ClusterFacts(namespace=NAMESPACE, env=ENV, owner_uid=UID, openshift=True)
    objs = objects({"dcgm": {"enabled": True}}, facts)
    sccs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "SecurityContextConstraints"}
    assert sorted(sccs) == ["nvidia-dcgm", "nvidia-dcgm-exporter", "nvidia-dra-driver", "nvidia-dra-validator"]
    assert sccs["nvidia-dra-driver"]["users"] == [
        f"system:serviceaccount:{NAMESPACE}:nvidia-dra-driver-kubeletplugin",
        f"system:serviceaccount:{NAMESPACE}:compute-domain-daemon-service-account",
    ]
    assert not any(o["kind"] == "SecurityContextConstraints" for o in objects())


# --- determinism -----------------------------------------------------------------------------


def test_output_is_deterministic_and_anchor_free() -> None:
    first = dump_yaml_stream(objects(FULL_SPEC))
    second = dump_yaml_stream(objects(FULL_SPEC))
    assert first == second
    assert "&id" not in first and "*id" not in first


def test_key_order_of_user_maps_does_not_change_the_output() -> None:
    a = {
        "draDriver": {"featureGates": {"B": True, "A": False}},
        "daemonsets": {"labels": {"x": "1", "a": "2"}, "annotations": {"z": "1", "b": "2"}},
        "dcgmExporter": {"resources": {"limits": {"memory": "1Gi", "cpu": "1"}}},
    }
    b = {
        "draDriver": {"featureGates": {"A": False, "B": True}},
        "daemonsets": {"labels": {"a": "2", "x": "1"}, "annotations": {"b": "2", "z": "1"}},
        "dcgmExporter": {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
    }
    assert dump_yaml_stream(objects(a)) == dump_yaml_stream(objects(b))


def test_objects_share_no_structure() -> None:
    objs = objects(FULL_SPEC)
    seen: dict[int, str] = {}

    def walk(value: Any, where: str) -> None:
        if isinstance(value, (dict, list)):
            assert id(value) not in seen, f"{where} shares {seen.get(id(value))}"
            seen[id(value)] = where
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                walk(item, f"{where}.{key}")

    for i, obj in enumerate(objs):
        walk(obj, f"[{i}]")
    # Mutating one render does not leak into the next.
    kubelet_plugin(objs)["spec"]["template"]["spec"]["nodeSelector"]["x"] = "y"
    assert "x" not in pod_spec(kubelet_plugin(objects(FULL_SPEC)))["nodeSelector"]


def test_yaml_stream_round_trips() -> None:
    objs = objects(FULL_SPEC)
    assert list(yaml.safe_load_all(dump_yaml_stream(objs))) == objs
