"""state-dra-driver: the DRA Driver for NVIDIA GPUs.

A kubelet-plugin DaemonSet (init container ``dra-driver-validator``, container ``gpus`` always,
``compute-domains`` with ComputeDomains), its RBAC, the NVIDIA DeviceClasses, a
ValidatingAdmissionPolicy that confines the plugin to its own node's ResourceSlices and, with
ComputeDomains, the compute-domain controller Deployment and its RBAC.
"""

from __future__ import annotations

from gpucluster.api import gpucluster as gc
from gpucluster.api.base import ResourceRequirements
from gpucluster.controller.operands.common import (
    DEVICE_CLASS_GPU,
    DRA_DRIVER_IMAGE_ENV,
    READ,
    RESOURCE_API_VERSION,
    STATE_DRA_DRIVER,
    ClusterFacts,
    Ctx,
    HostPaths,
    Obj,
    detached,
    env_field,
    env_value,
    feature_gates_value,
    host_paths,
    merge_env,
    prune,
    resolve_image,
    resources,
    rule,
)

APP = "nvidia-dra-driver"
KUBELET_PLUGIN = "nvidia-dra-driver-kubelet-plugin"
KUBELET_PLUGIN_SA = "nvidia-dra-driver-kubeletplugin"
CONTROLLER = "nvidia-dra-driver-controller"
COMPUTE_DOMAIN_DAEMON_SA = "compute-domain-daemon-service-account"
COMPUTE_DOMAIN_DAEMON_ROLE = "compute-domain-daemon"
RESOURCESLICES_POLICY = "resourceslices-policy-nvidia-dra-driver"
NODE_SELECTOR = {"nvidia.com/gpu.deploy.dra-driver": "true"}

# DeviceClass name -> CEL selector.
GPU_DEVICE_CLASSES = {
    DEVICE_CLASS_GPU: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    "vfio.gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'",
}
COMPUTE_DOMAIN_DEVICE_CLASSES = {
    "compute-domain-daemon.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    ),
    "compute-domain-default-channel.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0"
    ),
}

# Where things are inside the kubelet-plugin pod.
HOST_ROOT_CTR_PATH = "/host"
DRIVER_ROOT_CTR_PATH = "/driver-root"
CDI_ROOT = "/var/run/cdi"
# The host directory where GPU Operator components leave readiness markers; the NVIDIADriver
# driver container creates .driver-ctr-ready there once its driver is loaded.
VALIDATIONS_DIR = "/run/nvidia/validations"
OPERATOR_DRIVER_READY_FILE = f"{VALIDATIONS_DIR}/.driver-ctr-ready"
# Pod-private directory (emptyDir) holding the init container's verdict for the plugins.
DRIVER_READY_DIR = "/run/nvidia/dra-driver"
DRIVER_READY_FILE = f"{DRIVER_READY_DIR}/driver-ready"
RETRY_INTERVAL_SECONDS = "5"

# The dra-driver-validator init container. Inputs come from its environment (see _validator_env);
# its one output is DRIVER_READY_FILE, a shell-sourceable file:
#   IS_HOST_DRIVER=true|false
#   NVIDIA_DRIVER_ROOT=<driver root on the host>       (the plugin's --nvidia-driver-root)
#   DRIVER_ROOT_CTR_PATH=<where that root is mounted>   (the plugin's --container-driver-root)
DRIVER_VALIDATOR_SCRIPT = """\
# Wait until an NVIDIA driver is ready on this node and record which one the plugin should use.
# First choice: a driver pre-installed on the host (nvidia-smi works chrooted into the host root).
# Second: a driver installed by the GPU Operator (NVIDIADriver): its driver container has left
# its readiness marker and nvidia-smi works chrooted into the driver install directory.
# 'nvidia-smi --version' initialises no GPU, so GPUs bound to vfio-pci do not fail the check.
set -u
driver_works() {
  chroot "$1" nvidia-smi --version >/dev/null 2>&1
}
use_driver() {
  printf 'IS_HOST_DRIVER=%s\\nNVIDIA_DRIVER_ROOT=%s\\nDRIVER_ROOT_CTR_PATH=%s\\n' "$1" "$2" "$3" \\
    >"$DRIVER_READY_FILE.tmp" && mv -f "$DRIVER_READY_FILE.tmp" "$DRIVER_READY_FILE" || exit 1
  echo "dra-driver-validator: NVIDIA driver ready at $2 (host driver: $1)"
  exit 0
}
rm -f "$DRIVER_READY_FILE"
while true; do
  if driver_works "$HOST_DRIVER_ROOT_CTR_PATH"; then
    use_driver true "$HOST_DRIVER_ROOT" "$HOST_DRIVER_ROOT_CTR_PATH"
  fi
  if [ -e "$OPERATOR_DRIVER_READY_FILE" ] && driver_works "$OPERATOR_DRIVER_ROOT_CTR_PATH"; then
    use_driver false "$OPERATOR_DRIVER_ROOT" "$OPERATOR_DRIVER_ROOT_CTR_PATH"
  fi
  echo "dra-driver-validator: no ready NVIDIA driver on the host ($HOST_DRIVER_ROOT) or in" \\
    "$OPERATOR_DRIVER_ROOT yet; checking again in ${RETRY_INTERVAL_SECONDS}s"
  sleep "$RETRY_INTERVAL_SECONDS"
done
"""


def _plugin_script(binary: str) -> str:
    return f"""\
# Export the driver root the dra-driver-validator init container chose
# (NVIDIA_DRIVER_ROOT, DRIVER_ROOT_CTR_PATH).
set -a
. "$DRIVER_READY_FILE"
set +a
# With MASK_NVIDIA_DRIVER_PARAMS=true, present a copy of the driver parameters with
# ModifyDeviceFiles off, so that the plugin does not recreate device nodes (e.g. under nvkind).
if [ "${{MASK_NVIDIA_DRIVER_PARAMS:-}}" = "true" ]; then
  cp /proc/driver/nvidia/params /root/gpu-params
  sed -i 's/^ModifyDeviceFiles: 1$/ModifyDeviceFiles: 0/' /root/gpu-params
  mount --bind /root/gpu-params /proc/driver/nvidia/params
fi
exec {binary} -v "$LOG_VERBOSITY"
"""


def render_dra_driver(cluster: gc.GPUCluster, facts: ClusterFacts) -> list[Obj]:
    """Objects of the DRA driver, in apply order. Always enabled: the gpus capability has no toggle."""
    ctx = Ctx(cluster, facts, STATE_DRA_DRIVER, APP)
    spec = cluster.spec.draDriver
    image = driver_image(cluster, facts)
    paths = host_paths(cluster)
    cd = spec.computeDomains.enabled
    gates = spec.featureGates or {}

    objs: list[Obj] = [ctx.service_account(KUBELET_PLUGIN_SA, "kubelet-plugin")]
    objs += _kubelet_plugin_rbac(ctx, compute_domains=cd, mps=gates.get("MPSSupport", False))
    if cd:
        objs += _controller_rbac(ctx)
        objs += _compute_domain_daemon_rbac(ctx)
    classes = dict(GPU_DEVICE_CLASSES)
    if cd:
        classes.update(COMPUTE_DOMAIN_DEVICE_CLASSES)
    objs += [_device_class(ctx, name, expression) for name, expression in classes.items()]
    if spec.gpus.extendedResourceName:
        gpu_class = next(o for o in objs if o["kind"] == "DeviceClass" and o["metadata"]["name"] == "gpu.nvidia.com")
        gpu_class["spec"]["extendedResourceName"] = spec.gpus.extendedResourceName
    objs += _resourceslices_policy(ctx)
    if facts.openshift:
        service_accounts = [KUBELET_PLUGIN_SA] + ([COMPUTE_DOMAIN_DAEMON_SA] if cd else [])
        objs.append(
            ctx.scc(
                APP,
                service_accounts,
                description="Privileged and host access for the NVIDIA DRA driver kubelet plugin "
                "and ComputeDomain daemons.",
                host_network=True,
                host_pid=False,
                host_ports=True,
            )
        )
    objs.append(_kubelet_plugin(ctx, image, paths))
    if cd:
        objs.append(_controller(ctx, image))
    return detached(objs)


def driver_image(cluster: gc.GPUCluster, facts: ClusterFacts) -> str:
    spec = cluster.spec.draDriver
    return resolve_image(
        "spec.draDriver",
        "the DRA driver",
        spec.repository,
        spec.image,
        spec.version,
        DRA_DRIVER_IMAGE_ENV,
        facts.env,
    )


# --- RBAC ------------------------------------------------------------------------------------


def _kubelet_plugin_rbac(ctx: Ctx, *, compute_domains: bool, mps: bool) -> list[Obj]:
    rules = [
        rule(["resource.k8s.io"], ["resourceclaims"], READ),
        rule(["resource.k8s.io"], ["resourceslices"], [*READ, "create", "update", "delete"]),
        rule([""], ["nodes"], [*READ, "update", "patch"]),
        rule([""], ["pods"], READ),
    ]
    if compute_domains:
        rules.insert(0, rule(["resource.nvidia.com"], ["computedomains"], READ))
    component = "kubelet-plugin"
    objs = [
        ctx.cluster_role(KUBELET_PLUGIN_SA, rules, component),
        ctx.binding("ClusterRoleBinding", KUBELET_PLUGIN_SA, KUBELET_PLUGIN_SA, KUBELET_PLUGIN_SA, component),
    ]
    if compute_domains:
        cliques = [rule(["resource.nvidia.com"], ["computedomaincliques"], ["get"])]
        objs += [
            ctx.role(KUBELET_PLUGIN_SA, cliques, component),
            ctx.binding("RoleBinding", KUBELET_PLUGIN_SA, KUBELET_PLUGIN_SA, KUBELET_PLUGIN_SA, component),
        ]
    if mps:
        # With MPSSupport the gpus plugin runs an MPS control daemon Deployment per shared GPU.
        name = f"{KUBELET_PLUGIN_SA}-mps"
        deployments = [rule(["apps"], ["deployments"], [*READ, "create", "update", "patch", "delete"])]
        objs += [
            ctx.role(name, deployments, component),
            ctx.binding("RoleBinding", name, name, KUBELET_PLUGIN_SA, component),
        ]
    return objs


def _controller_rbac(ctx: Ctx) -> list[Obj]:
    component = "controller"
    cluster_rules = [
        rule(["resource.nvidia.com"], ["computedomains"], [*READ, "update"]),
        rule(["resource.nvidia.com"], ["computedomains/status"], ["update"]),
        rule(["resource.k8s.io"], ["resourceclaimtemplates"], [*READ, "create", "update", "delete"]),
        rule([""], ["nodes"], [*READ, "update"]),
        rule([""], ["pods"], READ),
    ]
    namespaced_rules = [
        # Its leader-election Lease lives in the operator namespace (LEADER_ELECTION_LEASE_LOCK_NAMESPACE).
        rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
        rule(["apps"], ["daemonsets"], [*READ, "create", "update", "patch", "delete"]),
        rule(["resource.nvidia.com"], ["computedomaincliques"], [*READ, "update"]),
    ]
    return [
        ctx.service_account(CONTROLLER, component),
        ctx.cluster_role(CONTROLLER, cluster_rules, component),
        ctx.binding("ClusterRoleBinding", CONTROLLER, CONTROLLER, CONTROLLER, component),
        ctx.role(CONTROLLER, namespaced_rules, component),
        ctx.binding("RoleBinding", CONTROLLER, CONTROLLER, CONTROLLER, component),
    ]


def _compute_domain_daemon_rbac(ctx: Ctx) -> list[Obj]:
    """The identity of the per-ComputeDomain IMEX daemons the controller launches."""
    component = "compute-domain-daemon"
    rules = [
        rule(["resource.nvidia.com"], ["computedomains", "computedomains/status"], [*READ, "update", "patch"]),
        rule(["resource.nvidia.com"], ["computedomaincliques"], [*READ, "create", "update", "patch"]),
        rule([""], ["pods"], [*READ, "patch"]),
    ]
    return [
        ctx.service_account(COMPUTE_DOMAIN_DAEMON_SA, component),
        ctx.cluster_role(COMPUTE_DOMAIN_DAEMON_ROLE, rules, component),
        ctx.binding(
            "ClusterRoleBinding",
            COMPUTE_DOMAIN_DAEMON_ROLE,
            COMPUTE_DOMAIN_DAEMON_ROLE,
            COMPUTE_DOMAIN_DAEMON_SA,
            component,
        ),
    ]


# --- DeviceClasses and the ResourceSlice policy ----------------------------------------------


def _device_class(ctx: Ctx, name: str, expression: str) -> Obj:
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": ctx.meta(name, namespaced=False, component="device-class"),
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _resourceslices_policy(ctx: Ctx) -> list[Obj]:
    """Confine the kubelet plugin's service account to the ResourceSlices of the node its pod
    runs on: the node name comes from the service account token (ServiceAccountTokenPodNodeInfo,
    on by default since 1.32). An update must keep the slice on that node; cluster-wide and
    node-selector slices are refused."""
    user = f"system:serviceaccount:{ctx.namespace}:{KUBELET_PLUGIN_SA}"
    subject = "(request.operation == 'DELETE' ? oldObject : object)"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": ctx.meta(RESOURCESLICES_POLICY, namespaced=False, component="kubelet-plugin"),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["v1", "v1beta1", "v1beta2"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["resourceslices"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "isKubeletPlugin", "expression": f"request.userInfo.username == '{user}'"},
            ],
            "variables": [
                {
                    "name": "userNodeName",
                    "expression": "request.userInfo.extra[?'authentication.kubernetes.io/node-name'][0].orValue('')",
                },
                {"name": "objectNodeName", "expression": f"{subject}.spec.?nodeName.orValue('')"},
                {
                    "name": "oldObjectNodeName",
                    "expression": (
                        "request.operation == 'UPDATE' ? oldObject.spec.?nodeName.orValue('') "
                        ": variables.objectNodeName"
                    ),
                },
            ],
            "validations": [
                {
                    "expression": "variables.userNodeName != ''",
                    "message": "no node is associated with this user: the DRA kubelet plugin must run in a pod "
                    "on a node with ServiceAccountTokenPodNodeInfo enabled",
                },
                {
                    "expression": (
                        "variables.objectNodeName == variables.userNodeName && "
                        "variables.oldObjectNodeName == variables.userNodeName"
                    ),
                    "messageExpression": (
                        "'the DRA kubelet plugin on node ' + variables.userNodeName + "
                        "' may only write ResourceSlices of that node'"
                    ),
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": ctx.meta(RESOURCESLICES_POLICY, namespaced=False, component="kubelet-plugin"),
        "spec": {"policyName": RESOURCESLICES_POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]


# --- the kubelet plugin ----------------------------------------------------------------------


def _healthcheck_port(hc: gc.HealthcheckSpec) -> int | None:
    return hc.port if hc.enabled else None


def _grpc_probes(port: int | None, liveness_period: int) -> Obj:
    if port is None:
        return {}
    grpc = {"port": port, "service": "liveness"}
    return {
        "startupProbe": {"grpc": grpc, "failureThreshold": 600, "periodSeconds": 1, "timeoutSeconds": 10},
        "livenessProbe": {
            "grpc": grpc,
            "failureThreshold": 3,
            "periodSeconds": liveness_period,
            "timeoutSeconds": 10,
        },
    }


def _common_plugin_env(ctx: Ctx, paths: HostPaths, image: str, http_endpoint: str) -> list[Obj]:
    return [
        env_field("NODE_NAME", "spec.nodeName"),
        env_field("NAMESPACE", "metadata.namespace"),
        env_value("IMAGE_NAME", image),
        env_value("LOG_VERBOSITY", "4"),
        env_value("HTTP_ENDPOINT", http_endpoint),
        env_value("METRICS_PATH", "/metrics"),
        env_value("MASK_NVIDIA_DRIVER_PARAMS", ""),
        env_value("NVIDIA_VISIBLE_DEVICES", "void"),
        env_value("NVIDIA_MIG_CONFIG_DEVICES", "all"),
        env_value("CDI_ROOT", CDI_ROOT),
        env_value("DRIVER_READY_FILE", DRIVER_READY_FILE),
        env_value("KUBELET_REGISTRAR_DIRECTORY_PATH", paths.kubelet_plugins_registry),
        env_value("KUBELET_PLUGINS_DIRECTORY_PATH", paths.kubelet_plugins),
    ]


def _plugin_mounts(paths: HostPaths) -> list[Obj]:
    return [
        {"name": "plugins-registry", "mountPath": paths.kubelet_plugins_registry},
        {"name": "plugins", "mountPath": paths.kubelet_plugins, "mountPropagation": "Bidirectional"},
        {"name": "cdi", "mountPath": CDI_ROOT},
        {"name": "driver-ready", "mountPath": DRIVER_READY_DIR, "readOnly": True},
        {
            "name": "host-root",
            "mountPath": HOST_ROOT_CTR_PATH,
            "mountPropagation": "HostToContainer",
            "readOnly": True,
        },
        {"name": "driver-install-dir", "mountPath": DRIVER_ROOT_CTR_PATH, "mountPropagation": "HostToContainer"},
    ]


def _validator_env(paths: HostPaths) -> list[Obj]:
    return [
        env_value("HOST_DRIVER_ROOT", paths.root_fs),
        env_value("HOST_DRIVER_ROOT_CTR_PATH", HOST_ROOT_CTR_PATH),
        env_value("OPERATOR_DRIVER_ROOT", paths.driver_install_dir),
        env_value("OPERATOR_DRIVER_ROOT_CTR_PATH", DRIVER_ROOT_CTR_PATH),
        env_value("OPERATOR_DRIVER_READY_FILE", OPERATOR_DRIVER_READY_FILE),
        env_value("DRIVER_READY_FILE", DRIVER_READY_FILE),
        env_value("RETRY_INTERVAL_SECONDS", RETRY_INTERVAL_SECONDS),
        env_value("NVIDIA_VISIBLE_DEVICES", "void"),
    ]


def _kubelet_plugin(ctx: Ctx, image: str, paths: HostPaths) -> Obj:
    spec = ctx.cluster.spec.draDriver
    gates = feature_gates_value(spec.featureGates)
    passthrough = bool((spec.featureGates or {}).get("PassthroughSupport", False))
    pull_policy = spec.imagePullPolicy

    init = prune(
        {
            "name": "dra-driver-validator",
            "image": image,
            "imagePullPolicy": pull_policy,
            "command": ["bash", "-c"],
            "args": [DRIVER_VALIDATOR_SCRIPT],
            "env": _validator_env(paths),
            # As much as the gpus container, so that quotas requiring limits admit the pod.
            "resources": resources(spec.gpus.kubeletPlugin.resources),
            # Root and privileged: it chroots into the host and the driver root to run nvidia-smi.
            "securityContext": {"privileged": True, "runAsUser": 0},
            "volumeMounts": [
                {
                    "name": "host-root",
                    "mountPath": HOST_ROOT_CTR_PATH,
                    "mountPropagation": "HostToContainer",
                    "readOnly": True,
                },
                {
                    "name": "driver-install-dir",
                    "mountPath": DRIVER_ROOT_CTR_PATH,
                    "mountPropagation": "HostToContainer",
                    "readOnly": True,
                },
                {"name": "validations", "mountPath": VALIDATIONS_DIR, "readOnly": True},
                {"name": "driver-ready", "mountPath": DRIVER_READY_DIR},
            ],
        }
    )

    gpus_port = _healthcheck_port(spec.gpus.kubeletPlugin.healthcheck)
    gpus_env = [
        *_common_plugin_env(ctx, paths, image, ":8080"),
        env_value("HOST_ROOT", HOST_ROOT_CTR_PATH),
        env_value("HEALTHCHECK_PORT", str(gpus_port if gpus_port is not None else -1)),
    ]
    if gates:
        gpus_env.append(env_value("FEATURE_GATES", gates))
    gpus_mounts = _plugin_mounts(paths)
    if passthrough:
        # vfio-pci passthrough: the plugin rebinds GPUs and inspects the kernel modules.
        gpus_mounts += [
            {
                "name": "lib-modules",
                "mountPath": "/lib/modules",
                "mountPropagation": "HostToContainer",
                "readOnly": True,
            },
            {"name": "sysfs", "mountPath": "/sys", "mountPropagation": "Bidirectional"},
            {"name": "procfs", "mountPath": "/proc", "mountPropagation": "Bidirectional"},
        ]
    containers = [
        _plugin_container(
            "gpus",
            image,
            pull_policy,
            "gpu-kubelet-plugin",
            merge_env(gpus_env, spec.gpus.kubeletPlugin.env),
            spec.gpus.kubeletPlugin.resources,
            gpus_port,
            30,
            gpus_mounts,
        )
    ]
    if spec.computeDomains.enabled:
        cd_plugin = spec.computeDomains.kubeletPlugin
        cd_port = _healthcheck_port(cd_plugin.healthcheck)
        cd_env = [
            *_common_plugin_env(ctx, paths, image, ":8081"),
            env_value("HEALTHCHECK_PORT", str(cd_port if cd_port is not None else -1)),
            env_value("GPU_CLIQUE_LABEL_ENABLED", "true"),
        ]
        if gates:
            cd_env.append(env_value("FEATURE_GATES", gates))
        containers.append(
            _plugin_container(
                "compute-domains",
                image,
                pull_policy,
                "compute-domain-kubelet-plugin",
                merge_env(cd_env, cd_plugin.env),
                cd_plugin.resources,
                cd_port,
                10,
                _plugin_mounts(paths),
            )
        )

    volumes: list[Obj] = [
        {"name": "plugins-registry", "hostPath": {"path": paths.kubelet_plugins_registry}},
        {"name": "plugins", "hostPath": {"path": paths.kubelet_plugins}},
        {"name": "cdi", "hostPath": {"path": CDI_ROOT, "type": "DirectoryOrCreate"}},
        {"name": "host-root", "hostPath": {"path": paths.root_fs}},
        {"name": "driver-install-dir", "hostPath": {"path": paths.driver_install_dir, "type": "DirectoryOrCreate"}},
        {"name": "validations", "hostPath": {"path": VALIDATIONS_DIR, "type": "DirectoryOrCreate"}},
        {"name": "driver-ready", "emptyDir": {}},
    ]
    if passthrough:
        volumes += [
            {"name": "lib-modules", "hostPath": {"path": "/lib/modules", "type": "Directory"}},
            {"name": "sysfs", "hostPath": {"path": "/sys", "type": "Directory"}},
            {"name": "procfs", "hostPath": {"path": "/proc", "type": "Directory"}},
        ]

    pod = ctx.pod_spec(
        service_account=KUBELET_PLUGIN_SA,
        node_selector=NODE_SELECTOR,
        image_pull_secrets=spec.imagePullSecrets,
        init_containers=[init],
        containers=containers,
        volumes=volumes,
    )
    # Upstream rolls the plugin out on every node at once unless told otherwise.
    return ctx.daemonset(KUBELET_PLUGIN, pod, component="kubelet-plugin", default_max_unavailable="100%")


def _plugin_container(
    name: str,
    image: str,
    pull_policy: str | None,
    binary: str,
    env: list[Obj],
    requirements: ResourceRequirements | None,
    port: int | None,
    liveness_period: int,
    mounts: list[Obj],
) -> Obj:
    return prune(
        {
            "name": name,
            "image": image,
            "imagePullPolicy": pull_policy,
            "command": ["bash", "-c"],
            "args": [_plugin_script(binary)],
            "env": env,
            "resources": resources(requirements),
            "securityContext": {"privileged": True},
            **_grpc_probes(port, liveness_period),
            "volumeMounts": mounts,
        }
    )


# --- the compute-domain controller -----------------------------------------------------------


def _controller(ctx: Ctx, image: str) -> Obj:
    spec = ctx.cluster.spec.draDriver
    controller = spec.computeDomains.controller
    env = [
        env_field("POD_NAME", "metadata.name"),
        env_field("NAMESPACE", "metadata.namespace"),
        env_value("IMAGE_NAME", image),
        env_value("LOG_VERBOSITY", "4"),
        env_value("LOG_VERBOSITY_CD_DAEMON", "4"),
        env_value("HTTP_ENDPOINT", ":8080"),
        env_value("METRICS_PATH", "/metrics"),
        env_value("PPROF_PATH", ""),
        env_value("NVIDIA_VISIBLE_DEVICES", "void"),
        env_value("LEADER_ELECTION_ENABLED", "false"),
        env_value("LEADER_ELECTION_LEASE_LOCK_NAME", CONTROLLER),
        env_value("LEADER_ELECTION_LEASE_LOCK_NAMESPACE", ctx.namespace),
        env_value("LEADER_ELECTION_LEASE_DURATION", "15s"),
        env_value("LEADER_ELECTION_RENEW_DEADLINE", "10s"),
        env_value("LEADER_ELECTION_RETRY_PERIOD", "2s"),
    ]
    gates = feature_gates_value(spec.featureGates)
    if gates:
        env.append(env_value("FEATURE_GATES", gates))
    container = prune(
        {
            "name": "compute-domain",
            "image": image,
            "imagePullPolicy": spec.imagePullPolicy,
            "command": ["compute-domain-controller", "-v", "$(LOG_VERBOSITY)"],
            "env": merge_env(env, controller.env),
            "resources": resources(controller.resources),
        }
    )
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]
                    },
                }
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": CONTROLLER}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        },
    }
    control_plane = [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
    ]
    pod = ctx.pod_spec(
        service_account=CONTROLLER,
        image_pull_secrets=spec.imagePullSecrets,
        affinity=affinity,
        base_tolerations=control_plane,
        containers=[container],
    )
    return ctx.deployment(CONTROLLER, pod, component="controller")
