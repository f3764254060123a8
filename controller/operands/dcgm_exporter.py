"""state-dcgm-exporter: NVIDIA DCGM Exporter, GPU telemetry on port 9400 (on by default).

It reaches every GPU of its node through an adminAccess DRA claim (``allocationMode: All``),
resolves DRA-allocated devices to pods through ResourceSlices, and uses the standalone DCGM
hostengine when ``spec.dcgm`` is enabled.
"""

from __future__ import annotations

from gpucluster.api import gpucluster as gc
from gpucluster.controller.operands.common import (
    DCGM_EXPORTER_IMAGE_ENV,
    READ,
    STATE_DCGM_EXPORTER,
    ClusterFacts,
    Ctx,
    Obj,
    RenderError,
    admin_claim_template,
    detached,
    env_field,
    env_value,
    host_paths,
    merge_env,
    prune,
    resolve_image,
    resources,
    rule,
    sorted_map,
)
from gpucluster.controller.operands.dcgm import REMOTE_HOSTENGINE, dcgm_enabled

APP = "nvidia-dcgm-exporter"
NAME = "nvidia-dcgm-exporter"
CLAIM_TEMPLATE = "nvidia-dcgm-exporter-admin"
CLAIM = "admin-gpus"
PORT = 9400
PORT_NAME = "gpu-metrics"
NODE_SELECTOR = {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}
DEFAULT_COLLECTORS = "/etc/dcgm-exporter/dcp-metrics-included.csv"
CUSTOM_COLLECTORS = "/etc/dcgm-exporter/dcgm-metrics.csv"
DEFAULT_JOB_MAPPING_DIR = "/var/lib/dcgm-exporter/job-mapping"
POD_RESOURCES_CTR_PATH = "/var/lib/kubelet/pod-resources"


def render_dcgm_exporter(cluster: gc.GPUCluster, facts: ClusterFacts) -> list[Obj]:
    """Objects of DCGM Exporter in apply order; none when it is disabled."""
    spec = cluster.spec.dcgmExporter
    if not spec.enabled:
        return []
    ctx = Ctx(cluster, facts, STATE_DCGM_EXPORTER, APP)
    image = resolve_image(
        "spec.dcgmExporter",
        "DCGM Exporter",
        spec.repository,
        spec.image,
        spec.version,
        DCGM_EXPORTER_IMAGE_ENV,
        facts.env,
    )
    objs: list[Obj] = [ctx.service_account(NAME)]
    objs += _rbac(ctx)
    objs.append(admin_claim_template(ctx, CLAIM_TEMPLATE, CLAIM, all_devices=True))
    objs += ctx.dcgm_scc(NAME, "Privileged and host access for NVIDIA DCGM Exporter.", host_pid=True)
    objs.append(_service(ctx))
    monitor = spec.serviceMonitor
    if monitor is not None and monitor.enabled and facts.service_monitor_crd:
        objs.append(_service_monitor(ctx, monitor))
    objs.append(_daemonset(ctx, image))
    return detached(objs)


def _reads_pods(spec: gc.DCGMExporterSpec) -> bool:
    return bool(spec.enablePodLabels or spec.enablePodUID)


def _rbac(ctx: Ctx) -> list[Obj]:
    spec = ctx.cluster.spec.dcgmExporter
    # ResourceSlices map the (pool, device) names the kubelet reports for DRA devices to GPUs;
    # pods are read only to add their labels or UID to the metrics.
    cluster_rules = [rule(["resource.k8s.io"], ["resourceslices"], READ)]
    if _reads_pods(spec):
        cluster_rules.insert(0, rule([""], ["pods"], READ))
    # The metrics ConfigMap is mounted as a volume: no ConfigMap read access is needed.
    namespaced_rules = [rule(["resource.k8s.io"], ["resourceclaims"], READ)]
    return [
        ctx.role(NAME, namespaced_rules),
        ctx.binding("RoleBinding", NAME, NAME, NAME),
        ctx.cluster_role(NAME, cluster_rules),
        ctx.binding("ClusterRoleBinding", NAME, NAME, NAME),
    ]


def _service(ctx: Ctx) -> Obj:
    service = ctx.cluster.spec.dcgmExporter.service
    kind: str = (service.type if service else None) or "ClusterIP"  # ExternalName only unvalidated
    if kind == "ExternalName":
        raise RenderError(
            "spec.dcgmExporter.service.type",
            'Unsupported value: "ExternalName": the Service selects the exporter pods; '
            "use ClusterIP, NodePort or LoadBalancer",
        )
    spec: Obj = {"type": kind}
    if service is not None and service.internalTrafficPolicy:
        spec["internalTrafficPolicy"] = service.internalTrafficPolicy
    spec["selector"] = {"app": NAME}
    spec["ports"] = [{"name": PORT_NAME, "port": PORT, "targetPort": PORT, "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ctx.meta(NAME, extra_labels={"app": NAME}, annotations={"prometheus.io/scrape": "true"}),
        "spec": spec,
    }


def _service_monitor(ctx: Ctx, monitor: gc.ServiceMonitorSpec) -> Obj:
    endpoint: Obj = {"port": PORT_NAME, "path": "/metrics", "honorLabels": bool(monitor.honorLabels)}
    if monitor.interval:
        endpoint["interval"] = monitor.interval
    if monitor.scrapeTimeout:
        endpoint["scrapeTimeout"] = monitor.scrapeTimeout
    if monitor.relabelings:
        endpoint["relabelings"] = [r.to_dict() for r in monitor.relabelings]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": ctx.meta(NAME, extra_labels=sorted_map(monitor.additionalLabels, {"app": NAME})),
        "spec": {
            "jobLabel": "app",
            "namespaceSelector": {"matchNames": [ctx.namespace]},
            "selector": {"matchLabels": {"app": NAME}},
            "endpoints": [endpoint],
        },
    }


def _daemonset(ctx: Ctx, image: str) -> Obj:
    spec = ctx.cluster.spec.dcgmExporter
    paths = host_paths(ctx.cluster)
    metrics_config = spec.config.name if spec.config and spec.config.name else None
    job_mapping_dir: str | None = None
    if spec.hpcJobMapping is not None and spec.hpcJobMapping.enabled:
        job_mapping_dir = spec.hpcJobMapping.directory or DEFAULT_JOB_MAPPING_DIR
        if not job_mapping_dir.startswith("/"):
            raise RenderError(
                "spec.dcgmExporter.hpcJobMapping.directory",
                f'Invalid value: "{job_mapping_dir}": must be an absolute path',
            )

    env = [
        env_field("NODE_NAME", "spec.nodeName"),
        env_value("DCGM_EXPORTER_LISTEN", f":{PORT}"),
        env_value("DCGM_EXPORTER_KUBERNETES", "true"),
        env_value("DCGM_EXPORTER_COLLECTORS", CUSTOM_COLLECTORS if metrics_config else DEFAULT_COLLECTORS),
        # DRA devices come as (pool, device) from the kubelet; ResourceSlices map them to GPUs.
        env_value("KUBERNETES_ENABLE_DRA", "true"),
    ]
    if dcgm_enabled(ctx.cluster):
        env.append(env_value("DCGM_REMOTE_HOSTENGINE_INFO", REMOTE_HOSTENGINE))
    if job_mapping_dir:
        env.append(env_value("DCGM_HPC_JOB_MAPPING_DIR", job_mapping_dir))
    if spec.enablePodLabels:
        env.append(env_value("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"))
    if spec.enablePodUID:
        env.append(env_value("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", "true"))
    if spec.podLabelAllowlistRegex:
        env.append(
            env_value("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", ",".join(spec.podLabelAllowlistRegex))
        )

    mounts: list[Obj] = [{"name": "pod-gpu-resources", "mountPath": POD_RESOURCES_CTR_PATH, "readOnly": True}]
    volumes: list[Obj] = [{"name": "pod-gpu-resources", "hostPath": {"path": paths.kubelet_pod_resources}}]
    if metrics_config:
        mounts.append(
            {"name": "metrics-config", "mountPath": CUSTOM_COLLECTORS, "subPath": "dcgm-metrics.csv", "readOnly": True}
        )
        volumes.append(
            {
                "name": "metrics-config",
                "configMap": {
                    "name": metrics_config,
                    "items": [{"key": "dcgm-metrics.csv", "path": "dcgm-metrics.csv"}],
                },
            }
        )
    if job_mapping_dir:
        mounts.append({"name": "hpc-job-mapping", "mountPath": job_mapping_dir, "readOnly": True})
        volumes.append({"name": "hpc-job-mapping", "hostPath": {"path": job_mapping_dir, "type": "DirectoryOrCreate"}})

    health = {"httpGet": {"path": "/health", "port": PORT}, "initialDelaySeconds": 45}
    container = prune(
        {
            "name": NAME,
            "image": image,
            "imagePullPolicy": spec.imagePullPolicy,
            "args": list(spec.args) if spec.args else None,
            "env": merge_env(env, spec.env),
            "ports": [{"name": "metrics", "containerPort": PORT, "protocol": "TCP"}],
            "livenessProbe": {**health, "periodSeconds": 5},
            "readinessProbe": health,
            "resources": resources(spec.resources, [CLAIM]),
            "securityContext": {"privileged": True},
            "volumeMounts": mounts,
        }
    )
    pod = ctx.pod_spec(
        service_account=NAME,
        automount_token=True,
        node_selector=NODE_SELECTOR,
        image_pull_secrets=spec.imagePullSecrets,
        host_network=bool(spec.hostNetwork),
        host_pid=bool(spec.hostPID),
        resource_claims=[{"name": CLAIM, "resourceClaimTemplateName": CLAIM_TEMPLATE}],
        containers=[container],
        volumes=volumes,
    )
    return ctx.daemonset(NAME, pod, component="exporter", pod_annotations=spec.annotations)
