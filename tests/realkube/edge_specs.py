"""Hostile and edge GPUCluster specs the CRD schema might admit, with what must happen to each.

Every value here reaches an operand object (a DaemonSet, the compute-domain controller's
Deployment, the exporter's Service or ServiceMonitor). Either kube-apiserver accepts every
operand the controller renders from it (``refused_by`` empty), or the GPUCluster is refused
before anything is rendered: by the CRD (``crd``: the field path and a fragment of the message
kube-apiserver answers), and by the model that the webhook and ``gpucluster validate`` run
(``model``: its field path and message fragment). Where the CRD cannot say it (no quantity
arithmetic on hugepage sizes), ``crd`` is None and the webhook alone refuses.

The expectations were read off the real kube-apiserver (1.34.4 and 1.37.2); the tests in
tests/test_kube_fields.py (model, and our CRD as the sandbox evaluates it) and
tests/realkube/test_operands_accepted.py (the real API server) hold both to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class EdgeSpec:
    id: str
    spec: Obj
    crd: tuple[str, str] | None = None
    """(field path, message fragment) of kube-apiserver's refusal of the GPUCluster."""
    model: tuple[str, str] | None = None
    """(field path, message fragment) of the model's refusal (webhook, gpucluster validate)."""

    @property
    def accepted(self) -> bool:
        return self.crd is None and self.model is None


def _ds(**settings: Any) -> Obj:
    return {"daemonsets": settings}


def _psc(**context: Any) -> Obj:
    return _ds(podSecurityContext=context)


def _plugin(**container: Any) -> Obj:
    return {"draDriver": {"gpus": {"kubeletPlugin": container}}}


def _exporter(**spec: Any) -> Obj:
    return {"dcgmExporter": spec}


def _dcgm(**spec: Any) -> Obj:
    return {"dcgm": {"enabled": True, **spec}}


def refused(case: str, spec: Obj, path: str, crd: str, model: str, model_path: str | None = None) -> EdgeSpec:
    """Refused by the CRD (message fragment ``crd`` at ``path``) and by the model (``model``)."""
    return EdgeSpec(case, spec, crd=(path, crd), model=(model_path or path, model))


def accepted(case: str, spec: Obj) -> EdgeSpec:
    return EdgeSpec(case, spec)


TOLERATIONS = "spec.daemonsets.tolerations[0]"
PSC = "spec.daemonsets.podSecurityContext"
PLUGIN = "spec.draDriver.gpus.kubeletPlugin"
QUALIFIED = "must be a qualified name"

EDGE_SPECS = [
    # daemonsets.rollingUpdate.maxUnavailable: an int32, a positive number or a percentage to 100%
    accepted("max-unavailable-100-percent", _ds(rollingUpdate={"maxUnavailable": "100%"})),
    accepted("max-unavailable-leading-zero-percent", _ds(rollingUpdate={"maxUnavailable": "0100%"})),
    accepted("max-unavailable-leading-zero-number", _ds(rollingUpdate={"maxUnavailable": "007"})),
    accepted("max-unavailable-int32", _ds(rollingUpdate={"maxUnavailable": 2147483647})),
    accepted("max-unavailable-int32-string", _ds(rollingUpdate={"maxUnavailable": "2147483647"})),
    accepted("on-delete", _ds(updateStrategy="OnDelete", rollingUpdate={"maxUnavailable": 2})),
    refused(
        "max-unavailable-over-int32",
        _ds(rollingUpdate={"maxUnavailable": 2147483648}),
        "spec.daemonsets.rollingUpdate.maxUnavailable",
        "should be less than or equal to 2147483647",
        "must be less than or equal to 2147483647",
    ),
    refused(
        "max-unavailable-over-int32-string",
        _ds(rollingUpdate={"maxUnavailable": "3000000000"}),
        "spec.daemonsets.rollingUpdate.maxUnavailable",
        "should match",
        "a positive number or a percentage from 1% to 100%",
    ),
    # daemonsets.tolerations (validateTolerations)
    accepted(
        "toleration-equal", _ds(tolerations=[{"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"}])
    ),
    accepted("toleration-everything", _ds(tolerations=[{"operator": "Exists"}])),
    accepted(
        "toleration-seconds-no-execute",
        _ds(tolerations=[{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -5}]),
    ),
    accepted("toleration-qualified-key", _ds(tolerations=[{"key": "example.com/gpu-pool", "operator": "Exists"}])),
    refused(
        "toleration-exists-with-value",
        _ds(tolerations=[{"key": "a", "operator": "Exists", "value": "x"}]),
        f"{TOLERATIONS}.value",
        "value must be empty when operator is Exists",
        'value: Invalid value: "x": value must be empty when operator is Exists',
        TOLERATIONS,
    ),
    refused(
        "toleration-lt",
        _ds(tolerations=[{"key": "a", "operator": "Lt", "value": "5"}]),
        f"{TOLERATIONS}.operator",
        'Unsupported value: "Lt": supported values: "Exists", "Equal"',
        'Unsupported value: "Lt": supported values: "Exists", "Equal"',
    ),
    refused(
        "toleration-gt",
        _ds(tolerations=[{"key": "a", "operator": "Gt", "value": "5"}]),
        f"{TOLERATIONS}.operator",
        'Unsupported value: "Gt"',
        'Unsupported value: "Gt"',
    ),
    refused(
        "toleration-seconds-no-schedule",
        _ds(tolerations=[{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]),
        f"{TOLERATIONS}.effect",
        "effect must be NoExecute when tolerationSeconds is set",
        "effect: effect must be NoExecute when tolerationSeconds is set",
        TOLERATIONS,
    ),
    refused(
        "toleration-key-with-space",
        _ds(tolerations=[{"key": "bad key", "operator": "Exists"}]),
        f"{TOLERATIONS}.key",
        f"key {QUALIFIED}",
        f'key: Invalid value: "bad key": {QUALIFIED}',
        TOLERATIONS,
    ),
    refused(
        "toleration-key-prefix-too-long",
        _ds(tolerations=[{"key": "a" * 254 + "/b", "operator": "Exists"}]),
        f"{TOLERATIONS}.key",
        f"key {QUALIFIED}",
        QUALIFIED,
        TOLERATIONS,
    ),
    refused(
        "toleration-no-key-equal",
        _ds(tolerations=[{"operator": "Equal", "value": "x"}]),
        f"{TOLERATIONS}.operator",
        "operator must be Exists when key is empty",
        "operator must be Exists when key is empty",
        TOLERATIONS,
    ),
    refused(
        "toleration-value-not-a-label-value",
        _ds(tolerations=[{"key": "a", "value": "bad value!"}]),
        f"{TOLERATIONS}.value",
        "should match",
        "a label value must be empty or at most 63 alphanumerics",
    ),
    # daemonsets.priorityClassName: a DNS subdomain
    accepted("priority-class", _ds(priorityClassName="high-priority.example.com")),
    refused(
        "priority-class-uppercase",
        _ds(priorityClassName="Bad_Name"),
        "spec.daemonsets.priorityClassName",
        "should match",
        "must be a lowercase RFC 1123 subdomain",
    ),
    # daemonsets.labels and annotations, the exporter's pod annotations, the ServiceMonitor's labels
    accepted("labels", _ds(labels={"example.com/team": "gpu", "app": "other", "empty": "", "v": "v" * 63})),
    accepted("annotations", _ds(annotations={"Example.COM/Note": "any value: at all", "plain": ""})),
    refused(
        "label-key-with-space",
        _ds(labels={"bad key": "v"}),
        "spec.daemonsets.labels",
        f"label keys {QUALIFIED}",
        f'Invalid value: "bad key": label keys {QUALIFIED}',
    ),
    refused(
        "label-value-with-space",
        _ds(labels={"k": "bad value"}),
        "spec.daemonsets.labels.k",
        "should match",
        "a label value must be empty or at most 63",
    ),
    refused(
        "label-value-too-long",
        _ds(labels={"k": "v" * 64}),
        "spec.daemonsets.labels.k",
        "Too long: may not be more than 63",
        "Too long: may not be more than 63",
    ),
    refused(
        "label-name-too-long",
        _ds(labels={"n" * 64: "v"}),
        "spec.daemonsets.labels",
        f"label keys {QUALIFIED}",
        f"label keys {QUALIFIED}",
    ),
    refused(
        "annotation-key-with-space",
        _ds(annotations={"bad key": "v"}),
        "spec.daemonsets.annotations",
        f"annotation keys {QUALIFIED}",
        f'Invalid value: "bad key": annotation keys {QUALIFIED}',
    ),
    refused(
        "exporter-annotation-key",
        _exporter(annotations={"a/b/c": "v"}),
        "spec.dcgmExporter.annotations",
        f"annotation keys {QUALIFIED}",
        f"annotation keys {QUALIFIED}",
    ),
    refused(
        "service-monitor-label-key",
        _exporter(serviceMonitor={"enabled": True, "additionalLabels": {"bad key": "v"}}),
        "spec.dcgmExporter.serviceMonitor.additionalLabels",
        f"label keys {QUALIFIED}",
        f"label keys {QUALIFIED}",
    ),
    # daemonsets.podSecurityContext
    accepted(
        "pod-security-context",
        _psc(
            runAsUser=0,
            runAsGroup=2147483647,
            fsGroup=0,
            supplementalGroups=[0, 1000],
            supplementalGroupsPolicy="Strict",
            fsGroupChangePolicy="Always",
            seLinuxChangePolicy="Recursive",
            seLinuxOptions={"level": "s0:c123,c456", "type": "any type!"},
            seccompProfile={"type": "Localhost", "localhostProfile": "profiles/audit.json"},
            sysctls=[{"name": "kernel.shm_rmid_forced", "value": ""}, {"name": "net.ipv4.ip_forward", "value": "1"}],
        ),
    ),
    accepted("seccomp-empty-profile", _psc(seccompProfile={"type": "Localhost", "localhostProfile": ""})),
    accepted("apparmor-localhost", _psc(appArmorProfile={"type": "Localhost", "localhostProfile": "k8s-gpu"})),
    accepted(
        "net-sysctl-exporter-off",
        {
            **_psc(sysctls=[{"name": "net.ipv4.ip_forward", "value": "1"}]),
            **_exporter(enabled=False, hostNetwork=True),
        },
    ),
    refused(
        "run-as-user-negative",
        _psc(runAsUser=-1),
        f"{PSC}.runAsUser",
        "should be greater than or equal to 0",
        "must be greater than or equal to 0",
    ),
    refused(
        "run-as-user-over-int32",
        _psc(runAsUser=2147483648),
        f"{PSC}.runAsUser",
        "should be less than or equal to 2147483647",
        "must be less than or equal to 2147483647",
    ),
    refused(
        "run-as-group-negative",
        _psc(runAsGroup=-1),
        f"{PSC}.runAsGroup",
        "should be greater than or equal to 0",
        "must be greater than or equal to 0",
    ),
    refused(
        "fs-group-negative",
        _psc(fsGroup=-1),
        f"{PSC}.fsGroup",
        "should be greater than or equal to 0",
        "must be greater than or equal to 0",
    ),
    refused(
        "supplemental-group-negative",
        _psc(supplementalGroups=[-1]),
        f"{PSC}.supplementalGroups[0]",
        "should be greater than or equal to 0",
        "must be greater than or equal to 0",
    ),
    refused(
        "seccomp-localhost-without-profile",
        _psc(seccompProfile={"type": "Localhost"}),
        f"{PSC}.seccompProfile.localhostProfile",
        "Required value: must be set when seccomp type is Localhost",
        "localhostProfile: Required value: must be set when seccomp type is Localhost",
        f"{PSC}.seccompProfile",
    ),
    refused(
        "seccomp-profile-without-localhost",
        _psc(seccompProfile={"type": "RuntimeDefault", "localhostProfile": "x"}),
        f"{PSC}.seccompProfile.localhostProfile",
        "can only be set when seccomp type is Localhost",
        "can only be set when seccomp type is Localhost",
        f"{PSC}.seccompProfile",
    ),
    refused(
        "seccomp-absolute-profile",
        _psc(seccompProfile={"type": "Localhost", "localhostProfile": "/abs"}),
        f"{PSC}.seccompProfile.localhostProfile",
        "should match",
        "must be a relative path without '..'",
    ),
    refused(
        "seccomp-backstep-profile",
        _psc(seccompProfile={"type": "Localhost", "localhostProfile": "a/../b"}),
        f"{PSC}.seccompProfile.localhostProfile",
        "must not contain '..'",
        "must not contain '..'",
        f"{PSC}.seccompProfile",
    ),
    refused(
        "apparmor-localhost-without-profile",
        _psc(appArmorProfile={"type": "Localhost"}),
        f"{PSC}.appArmorProfile.localhostProfile",
        "Required value: must be set when AppArmor type is Localhost",
        "must be set when AppArmor type is Localhost",
        f"{PSC}.appArmorProfile",
    ),
    refused(
        "apparmor-empty-profile",
        _psc(appArmorProfile={"type": "Localhost", "localhostProfile": ""}),
        f"{PSC}.appArmorProfile.localhostProfile",
        "should match",
        "must be non-empty and not padded with whitespace",
    ),
    refused(
        "apparmor-padded-profile",
        _psc(appArmorProfile={"type": "Localhost", "localhostProfile": " x "}),
        f"{PSC}.appArmorProfile.localhostProfile",
        "should match",
        "must be non-empty and not padded with whitespace",
    ),
    refused(
        "apparmor-profile-without-localhost",
        _psc(appArmorProfile={"type": "RuntimeDefault", "localhostProfile": "x"}),
        f"{PSC}.appArmorProfile.localhostProfile",
        "can only be set when AppArmor type is Localhost",
        "can only be set when AppArmor type is Localhost",
        f"{PSC}.appArmorProfile",
    ),
    refused(
        "selinux-change-policy-unknown",
        _psc(seLinuxChangePolicy="Sometimes"),
        f"{PSC}.seLinuxChangePolicy",
        'Unsupported value: "Sometimes": supported values: "Recursive"',
        'Unsupported value: "Sometimes"',
    ),
    # 1.37 takes MountOption; 1.34, the oldest the operator supports, refuses it (SELinuxMount off).
    refused(
        "selinux-change-policy-mount-option",
        _psc(seLinuxChangePolicy="MountOption"),
        f"{PSC}.seLinuxChangePolicy",
        'Unsupported value: "MountOption": supported values: "Recursive"',
        'Unsupported value: "MountOption"',
    ),
    refused(
        "sysctl-name",
        _psc(sysctls=[{"name": "bad name", "value": "1"}]),
        f"{PSC}.sysctls[0].name",
        "should match",
        "must be a sysctl name",
    ),
    refused(
        "sysctl-twice",
        _psc(
            sysctls=[{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "kernel.shm_rmid_forced", "value": "0"}]
        ),
        f"{PSC}.sysctls[1]",
        'Duplicate value: {"name":"kernel.shm_rmid_forced"}',
        'Duplicate value: "kernel.shm_rmid_forced"',
        f"{PSC}.sysctls",
    ),
    refused(
        "net-sysctl-with-exporter-host-network",
        {**_psc(sysctls=[{"name": "net.ipv4.ip_forward", "value": "1"}]), **_exporter(hostNetwork=True)},
        f"{PSC}.sysctls",
        "net.* sysctls may not be set",
        'Invalid value: "net.ipv4.ip_forward": net.* sysctls may not be set',
        "spec",
    ),
    refused(
        "net-sysctl-slashes-with-dcgm-host-network",
        {**_psc(sysctls=[{"name": "net/ipv4/ip_forward", "value": "1"}]), **_dcgm(hostNetwork=True)},
        f"{PSC}.sysctls",
        "net.* sysctls may not be set",
        "net.* sysctls may not be set",
        "spec",
    ),
    # env of the containers: printable ASCII names but '='
    accepted("env-relaxed-name", _plugin(env=[{"name": "1-a.b c", "value": "x"}, {"name": "NODE_NAME", "value": "x"}])),
    refused(
        "env-empty-name",
        _plugin(env=[{"name": ""}]),
        f"{PLUGIN}.env[0].name",
        "should match",
        "printable ASCII characters other than '='",
    ),
    refused(
        "env-name-with-equals",
        _plugin(env=[{"name": "A=B", "value": "x"}]),
        f"{PLUGIN}.env[0].name",
        "should match",
        "printable ASCII characters other than '='",
    ),
    refused(
        "dcgm-env-name-with-tab",
        _dcgm(env=[{"name": "A\tB", "value": "x"}]),
        "spec.dcgm.env[0].name",
        "should match",
        "printable ASCII characters other than '='",
    ),
    # resources of the containers (ValidateResourceRequirements)
    accepted(
        "resources",
        _plugin(
            resources={
                "limits": {
                    "cpu": "1",
                    "memory": "1Gi",
                    "nvidia.com/gpu": 1,
                    "kubernetes.io/x": "1.5",
                    "hugepages-2Mi": "4Mi",
                },
                "requests": {"cpu": "500m", "memory": 1073741824, "nvidia.com/gpu": "1", "hugepages-2Mi": "4Mi"},
            }
        ),
    ),
    accepted("resources-extended-with-suffix", _exporter(resources={"limits": {"example.com/foo": "1k"}})),
    refused(
        "resources-negative",
        _plugin(resources={"limits": {"cpu": "-1"}}),
        f"{PLUGIN}.resources.limits.cpu",
        "should match",
        "must be a non-negative quantity",
    ),
    refused(
        "resources-negative-number",
        _plugin(resources={"limits": {"cpu": -1}}),
        f"{PLUGIN}.resources.limits.cpu",
        "should be greater than or equal to 0",
        "must be greater than or equal to 0",
    ),
    refused(
        "resources-request-over-limit",
        _plugin(resources={"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}),
        f"{PLUGIN}.resources.requests",
        "a request must be less than or equal to its limit",
        'requests: Invalid value: "2": must be less than or equal to cpu limit of 1',
        f"{PLUGIN}.resources",
    ),
    refused(
        "resources-extended-request-without-limit",
        _plugin(resources={"requests": {"example.com/foo": "1"}}),
        f"{PLUGIN}.resources.limits",
        "Limit must be set for non overcommitable resources",
        "Limit must be set for non overcommitable resources",
        f"{PLUGIN}.resources",
    ),
    refused(
        "resources-extended-request-below-limit",
        {
            "draDriver": {
                "computeDomains": {
                    "controller": {"resources": {"limits": {"example.com/foo": 2}, "requests": {"example.com/foo": 1}}}
                }
            }
        },
        "spec.draDriver.computeDomains.controller.resources.requests",
        "equal to it for hugepages and extended resources",
        "must be equal to example.com/foo limit of 2",
        "spec.draDriver.computeDomains.controller.resources",
    ),
    refused(
        "resources-extended-fraction",
        _plugin(resources={"limits": {"example.com/foo": "500m"}}),
        f"{PLUGIN}.resources.limits",
        "must be an integer for extended resources",
        "must be an integer",
        f"{PLUGIN}.resources",
    ),
    refused(
        "resources-no-domain",
        _plugin(resources={"limits": {"foo": "1"}}),
        f"{PLUGIN}.resources.limits",
        "resource names must be cpu, memory, ephemeral-storage, hugepages-<size> or a qualified name",
        'Invalid value: "foo": resource names must be',
    ),
    refused(
        "resources-name-with-space",
        _exporter(resources={"requests": {"bad name": "1"}}),
        "spec.dcgmExporter.resources.requests",
        "resource names must be",
        "resource names must be",
    ),
    refused(
        "resources-requests-prefix",
        _exporter(resources={"limits": {"requests.example.com/foo": "1"}}),
        "spec.dcgmExporter.resources.limits",
        "resource names must be",
        "resource names must be",
    ),
    refused(
        "resources-hugepages-alone",
        _plugin(resources={"limits": {"hugepages-2Mi": "2Mi"}}),
        f"{PLUGIN}.resources",
        "Forbidden: HugePages require cpu or memory",
        "Forbidden: HugePages require cpu or memory",
    ),
    # The CRD has no arithmetic on the page size in the resource name: the webhook alone refuses.
    EdgeSpec(
        "resources-hugepages-partial-page",
        _plugin(resources={"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}),
        model=(f"{PLUGIN}.resources", "is not positive integer multiple of hugepages-2Mi"),
    ),
    # The exporter's Service, hostNetwork, metrics ConfigMap and HPC job mapping
    accepted("service-node-port", _exporter(service={"type": "NodePort"})),
    accepted(
        "service-load-balancer-local", _exporter(service={"type": "LoadBalancer", "internalTrafficPolicy": "Local"})
    ),
    accepted("exporter-host-network-and-pid", _exporter(hostNetwork=True, hostPID=True)),
    accepted("exporter-config-any-name", _exporter(config={"name": "Custom_Metrics"})),
    accepted(
        "exporter-hpc-job-mapping", _exporter(hpcJobMapping={"enabled": True, "directory": "/var/run/slurm:jobs"})
    ),
    refused(
        "service-external-name",
        _exporter(service={"type": "ExternalName"}),
        "spec.dcgmExporter.service.type",
        'Unsupported value: "ExternalName"',
        'Unsupported value: "ExternalName": supported values: "ClusterIP", "NodePort", "LoadBalancer"',
    ),
    refused(
        "hpc-job-mapping-relative",
        _exporter(hpcJobMapping={"enabled": True, "directory": "jobs"}),
        "spec.dcgmExporter.hpcJobMapping.directory",
        "should match",
        "must be an absolute path without '..'",
    ),
    refused(
        "hpc-job-mapping-backstep",
        _exporter(hpcJobMapping={"enabled": True, "directory": "/a/../b"}),
        "spec.dcgmExporter.hpcJobMapping.directory",
        "must not contain '..'",
        "must not contain '..'",
        "spec.dcgmExporter.hpcJobMapping",
    ),
    refused(
        "hpc-job-mapping-on-pod-resources",
        _exporter(hpcJobMapping={"enabled": True, "directory": "/var/lib/kubelet/pod-resources"}),
        "spec.dcgmExporter.hpcJobMapping.directory",
        "must not be one of DCGM Exporter's other mount paths",
        "must not be one of DCGM Exporter's other mount paths",
        "spec.dcgmExporter.hpcJobMapping",
    ),
    refused(
        "service-monitor-source-label",
        _exporter(serviceMonitor={"enabled": True, "relabelings": [{"sourceLabels": ["bad-label"], "action": "keep"}]}),
        "spec.dcgmExporter.serviceMonitor.relabelings[0].sourceLabels[0]",
        "should match",
        "must be a Prometheus label name",
    ),
    accepted(
        "service-monitor",
        _exporter(
            serviceMonitor={
                "enabled": True,
                "interval": "0",
                "scrapeTimeout": "1m30s",
                "honorLabels": True,
                "additionalLabels": {"release": "prometheus"},
                "relabelings": [
                    {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
                ],
            }
        ),
    ),
    # DCGM
    accepted("dcgm-host-network", _dcgm(hostNetwork=True)),
    accepted("dcgm-host-port-1", _dcgm(hostPort=1, args=["--log-level", "ERROR"], resources={"limits": {"cpu": "1"}})),
    refused(
        "dcgm-host-network-other-port",
        _dcgm(hostNetwork=True, hostPort=5556),
        "spec.dcgm.hostPort",
        "must be 5555 when hostNetwork is true",
        "hostPort: Invalid value: 5556: must be 5555 when hostNetwork is true",
        "spec.dcgm",
    ),
    # host paths, health checks, pull secrets and the rest of the DRA driver
    accepted(
        "host-paths", {"hostPaths": {"rootFS": "/", "kubeletRootDir": "/", "driverInstallDir": "/run/nvidia/driver/"}}
    ),
    refused(
        "host-path-relative",
        {"hostPaths": {"rootFS": "host"}},
        "spec.hostPaths.rootFS",
        "should match",
        "must be a plain absolute path",
    ),
    refused(
        "host-path-with-space",
        {"hostPaths": {"kubeletRootDir": "/var/lib/my kubelet"}},
        "spec.hostPaths.kubeletRootDir",
        "should match",
        "must be a plain absolute path",
    ),
    accepted(
        "health-checks",
        {
            "draDriver": {
                "gpus": {"kubeletPlugin": {"healthcheck": {"port": 1}}},
                "computeDomains": {"kubeletPlugin": {"healthcheck": {"port": 1}}},
            }
        },
    ),
    accepted("health-check-off", _plugin(healthcheck={"enabled": False})),
    accepted(
        "image-pull-secrets",
        {"draDriver": {"imagePullSecrets": ["", "Bad_Name", "a", "a"]}, **_exporter(imagePullSecrets=["b"])},
    ),
    accepted("feature-gates", {"draDriver": {"featureGates": {"MPSSupport": True, "PassthroughSupport": True}}}),
    accepted("extended-resource-name", {"draDriver": {"gpus": {"extendedResourceName": "nvidia.com/gpu"}}}),
    accepted("compute-domains-off", {"draDriver": {"computeDomains": {"enabled": False}}}),
    accepted("image-pull-policy", {"draDriver": {"imagePullPolicy": "Always"}}),
    # operand images: what the renderer can build an image from (gpucluster.api.images)
    accepted("image-version-only", {"draDriver": {"version": "v0.5.0"}}),
    accepted(
        "image-digest", {"draDriver": {"repository": "localhost:5000", "image": "dra", "version": "sha256:" + "a" * 64}}
    ),
    accepted(
        "image-full-reference", _dcgm(repository="", image="registry.example.com:5000/nvidia/dcgm:4.4.1", version="")
    ),
    refused(
        "image-uppercase",
        {"draDriver": {"repository": "nvcr.io/nvidia", "image": "DRA", "version": "v1"}},
        "spec.draDriver.image",
        "must be a lowercase image name",
        'image: Invalid value: "DRA": must be a lowercase image name',
        "spec.draDriver",
    ),
    refused(
        "image-version-with-space",
        {"draDriver": {"repository": "nvcr.io/nvidia", "image": "dra", "version": "v1 2"}},
        "spec.draDriver.version",
        "should match",
        "must be an image tag",
    ),
    refused(
        "image-repository-trailing-slash",
        _exporter(repository="nvcr.io/nvidia/", image="dcgm-exporter", version="4"),
        "spec.dcgmExporter.repository",
        "should match",
        "must be a registry and repository such as nvcr.io/nvidia",
    ),
    refused(
        "image-repository-without-version",
        _exporter(repository="nvcr.io/nvidia/k8s", image="dcgm-exporter", version=""),
        "spec.dcgmExporter.version",
        "Required value: repository, image and version must all be set",
        "version: Required value: repository, image and version must all be set",
        "spec.dcgmExporter",
    ),
    refused(
        "image-and-version-without-repository",
        _dcgm(repository="", image="dcgm", version="4.4.1"),
        "spec.dcgm.repository",
        "repository, image and version must all be set",
        "repository: Required value: repository, image and version must all be set",
        "spec.dcgm",
    ),
    refused(
        "image-alone-not-a-reference",
        _dcgm(repository="", image="Registry/DCGM", version=""),
        "spec.dcgm.image",
        "must be a full image reference",
        "must be a full image reference",
        "spec.dcgm",
    ),
    # Not a GPUCluster field: the CRD prunes it (and the model warns about it)
    accepted("unknown-node-selector", {"nodeSelector": {"a": "b"}}),
    accepted(
        "env-value-from-is-pruned",
        _plugin(env=[{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
    ),
]

ACCEPTED = [s for s in EDGE_SPECS if s.accepted]
REFUSED_BY_CRD = [s for s in EDGE_SPECS if s.crd is not None]
REFUSED_BY_WEBHOOK_ONLY = [s for s in EDGE_SPECS if s.crd is None and s.model is not None]
