"""The GPUCluster custom resource (nvidia.com/v1alpha1): the DRA model of the GPU Operator.

Fields follow the product documentation and upstream GPU Operator v26.7.0
(``api/nvidia/v1alpha1/gpucluster_types.go``). Defaults that upstream's controller fills in
(DCGM Exporter on, standalone DCGM off, health-check ports) are explicit here, so the CRD
applies them and ``gpucluster validate`` shows them.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

from gpucluster.api import images
from gpucluster.api import kubefields as kf
from gpucluster.api.base import (
    Condition,
    EnvVar,
    ImagePullPolicy,
    Int32,
    Int64,
    KubeModel,
    ObjectMeta,
    PodSecurityContext,
    Port,
    ResourceRequirements,
    Toleration,
)

GROUP = "nvidia.com"
VERSION = "v1alpha1"
API_VERSION: Final = "nvidia.com/v1alpha1"
KIND: Final = "GPUCluster"
PLURAL = "gpuclusters"
SINGLETON_NAME = "gpu-cluster"
SINGLETON_MESSAGE = "GPUCluster is a singleton, metadata.name must be 'gpu-cluster'"

GPUS_HEALTHCHECK_PORT = 51516
COMPUTE_DOMAINS_HEALTHCHECK_PORT = 51515
DCGM_HOST_PORT = 5555

# An operand image name, without registry or tag (upstream's kubebuilder pattern).
DRA_IMAGE_NAME = Annotated[StrictStr, Field(pattern=r"^[a-zA-Z0-9\-]+$")]
# Upstream's DCGM image pattern is unanchored; kept as is so that what upstream accepts, we accept.
OPERAND_IMAGE_NAME = Annotated[StrictStr, Field(pattern=r"[a-zA-Z0-9\-]+")]
# The fields an operand image is built from (gpucluster.api.images); "" is unset, as in the renderer.
IMAGE_REPOSITORY = Annotated[StrictStr, Field(max_length=images.MAX_REFERENCE, pattern=f"^$|{images.REPOSITORY}")]
IMAGE_VERSION = Annotated[StrictStr, Field(max_length=128, pattern=f"^$|{images.VERSION}")]
IMAGE_RULES = images.image_rules()


def _check_image(spec: DRADriverSpec | DCGMExporterSpec | DCGMSpec) -> None:
    problem = images.image_problem(spec.repository, spec.image, spec.version)
    if problem:
        raise kf.invalid(problem)


DURATION = Annotated[
    StrictStr,
    Field(pattern=r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"),
]


class HealthcheckSpec(KubeModel):
    """The gRPC health service of a kubelet-plugin container, checked by its startup and liveness probes."""

    enabled: StrictBool = Field(default=True, description="Serve the gRPC health service and probe it.")
    port: Port = Field(
        default=GPUS_HEALTHCHECK_PORT,
        description="Port of the gRPC health service of the gpus container.",
    )


class ComputeDomainsHealthcheckSpec(HealthcheckSpec):
    """The gRPC health service of the compute-domains container."""

    port: Port = Field(
        default=COMPUTE_DOMAINS_HEALTHCHECK_PORT,
        description="Port of the gRPC health service of the compute-domains container.",
    )


class KubeletPluginSpec(KubeModel):
    """A DRA driver kubelet-plugin container. The gpus and computeDomains blocks map onto the two
    containers of the single kubelet-plugin DaemonSet; scheduling is not configurable here."""

    env: list[EnvVar] | None = Field(default=None, description="Environment variables of the container.")
    resources: ResourceRequirements | None = Field(
        default=None, description="Resource requests and limits of the container."
    )
    healthcheck: HealthcheckSpec = Field(
        default_factory=HealthcheckSpec,
        description="The container's gRPC health service and its probes (port 51516 by default).",
    )


class ComputeDomainsKubeletPluginSpec(KubeletPluginSpec):
    """The compute-domains container of the kubelet-plugin DaemonSet."""

    healthcheck: ComputeDomainsHealthcheckSpec = Field(
        default_factory=ComputeDomainsHealthcheckSpec,
        description="The container's gRPC health service and its probes (port 51515 by default).",
    )


EXTENDED_RESOURCE_NAME = Annotated[
    StrictStr,
    Field(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
    ),
]


class GPUsSpec(KubeModel):
    """The gpu.nvidia.com capability of the DRA driver. Always deployed; there is no enabled toggle."""

    kubeletPlugin: KubeletPluginSpec = Field(
        default_factory=KubeletPluginSpec, description="The gpus container of the kubelet-plugin DaemonSet."
    )
    extendedResourceName: EXTENDED_RESOURCE_NAME | None = Field(
        default=None,
        description=(
            "Opt in to Kubernetes' native extended-resource mapping (DRAExtendedResource): set this, for example "
            "to nvidia.com/gpu, on the gpu.nvidia.com DeviceClass so that pods requesting it are allocated by "
            "the scheduler through DRA. Needs the feature gate on the API server; the admission webhook's auto "
            "mode then leaves such pods alone."
        ),
    )


class ControllerSpec(KubeModel):
    """The compute-domain controller Deployment; scheduling is not configurable here."""

    env: list[EnvVar] | None = Field(default=None, description="Environment variables of the controller.")
    resources: ResourceRequirements | None = Field(
        default=None, description="Resource requests and limits of the controller container."
    )


class ComputeDomainsSpec(KubeModel):
    """The ComputeDomains capability (Multi-Node NVLink on GB200/GB300 NVL72 systems)."""

    enabled: StrictBool = Field(
        default=True, description="Deploy the compute-domains kubelet-plugin container and the controller."
    )
    controller: ControllerSpec = Field(
        default_factory=ControllerSpec, description="The nvidia-dra-driver-controller Deployment."
    )
    kubeletPlugin: ComputeDomainsKubeletPluginSpec = Field(
        default_factory=ComputeDomainsKubeletPluginSpec,
        description="The compute-domains container of the kubelet-plugin DaemonSet.",
    )


class DRADriverSpec(KubeModel):
    """The DRA Driver for NVIDIA GPUs: a kubelet-plugin DaemonSet and, with ComputeDomains, a controller."""

    model_config = ConfigDict(json_schema_extra=kf.validations(IMAGE_RULES))

    repository: IMAGE_REPOSITORY | None = Field(default=None, description="DRA driver image repository.")
    image: Annotated[DRA_IMAGE_NAME, Field(max_length=images.MAX_REFERENCE)] | None = Field(
        default=None, description="DRA driver image name."
    )
    version: IMAGE_VERSION | None = Field(
        default=None, description="DRA driver image tag, or a digest (sha256:...) joined with '@'."
    )
    imagePullPolicy: ImagePullPolicy | None = Field(default=None, description="Image pull policy.")
    imagePullSecrets: list[StrictStr] | None = Field(default=None, description="Image pull secret names.")
    featureGates: dict[StrictStr, StrictBool] | None = Field(
        default=None,
        description="Feature gate names mapped to true or false; rendered as FEATURE_GATES on the driver containers.",
    )
    gpus: GPUsSpec = Field(default_factory=GPUsSpec, description="The gpu.nvidia.com capability.")
    computeDomains: ComputeDomainsSpec = Field(
        default_factory=ComputeDomainsSpec, description="The ComputeDomain capability."
    )

    @model_validator(mode="after")
    def _image_fields(self) -> DRADriverSpec:
        _check_image(self)
        return self


class ServiceSpec(KubeModel):
    """The Kubernetes Service of DCGM Exporter."""

    # Not ExternalName: the Service selects the exporter pods.
    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = Field(
        default=None, description="How the Service is exposed."
    )
    internalTrafficPolicy: Literal["Cluster", "Local"] | None = Field(
        default=None, description="How nodes distribute service traffic they receive on the ClusterIP."
    )


class RelabelConfig(KubeModel):
    """A Prometheus relabeling rule."""

    sourceLabels: list[Annotated[StrictStr, Field(pattern=kf.PROMETHEUS_LABEL_NAME)]] | None = Field(
        default=None, description="Source labels to select values from (Prometheus label names)."
    )
    separator: StrictStr | None = Field(default=None, description="Separator between concatenated values.")
    targetLabel: StrictStr | None = Field(default=None, description="Label the result is written to.")
    regex: StrictStr | None = Field(default=None, description="Regular expression matched against the value.")
    modulus: Annotated[StrictInt, Field(ge=0, json_schema_extra={"format": "int64"})] | None = Field(
        default=None, description="Modulus to take of the hash of the source label values."
    )
    replacement: StrictStr | None = Field(default=None, description="Replacement value for a regex replace.")
    action: (
        Literal[
            "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap",
            "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
            "keepequal", "KeepEqual", "dropequal", "DropEqual",
        ]
        | None
    ) = Field(default=None, description="Action to perform based on the regex matching.")  # fmt: skip


class ServiceMonitorSpec(KubeModel):
    """A Prometheus Operator ServiceMonitor for DCGM Exporter, created only when the CRD is served."""

    enabled: StrictBool = Field(default=False, description="Create a ServiceMonitor.")
    interval: DURATION | None = Field(default=None, description="Scrape interval, e.g. 15s.")
    scrapeTimeout: DURATION | None = Field(default=None, description="Scrape timeout, e.g. 10s.")
    honorLabels: StrictBool | None = Field(
        default=None, description="Keep the scraped labels when they clash with target labels."
    )
    additionalLabels: kf.LabelMap | None = Field(default=None, description="Extra labels on the ServiceMonitor.")
    relabelings: list[RelabelConfig] | None = Field(default=None, description="Relabeling rules for targets.")


class MetricsConfigSpec(KubeModel):
    """Custom metrics for DCGM Exporter."""

    name: StrictStr | None = Field(
        default=None, description="ConfigMap holding dcgm-metrics.csv with the metrics to collect."
    )


# Container paths of DCGM Exporter's other mounts (controller.operands.dcgm_exporter): a second
# volume mount there is refused (server-side apply: duplicate entries for key mountPath).
EXPORTER_MOUNT_PATHS = ("/var/lib/kubelet/pod-resources", "/etc/dcgm-exporter/dcgm-metrics.csv")


class HPCJobMappingSpec(KubeModel):
    """HPC job mapping for DCGM Exporter."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"!has(self.directory) || !self.directory.matches(r'{kf.BACKSTEP}')",
                    "message": "must not contain '..'",
                    "fieldPath": ".directory",
                },
                {
                    "rule": f"!has(self.directory) || !(self.directory in {list(EXPORTER_MOUNT_PATHS)!r})",
                    "message": f"must not be one of DCGM Exporter's other mount paths {', '.join(EXPORTER_MOUNT_PATHS)}",
                    "fieldPath": ".directory",
                },
            ]
        }
    )

    enabled: StrictBool | None = Field(default=None, description="Enable HPC job mapping.")
    directory: (
        Annotated[StrictStr, Field(max_length=kf.MAX_PATH, pattern=kf.ABSOLUTE_PATH_WITHOUT_BACKSTEPS)] | None
    ) = Field(
        default=None,
        description="Where the workload manager writes job mapping files: an absolute path without '..', "
        "mounted at the same path in the DCGM Exporter container.",
    )

    @model_validator(mode="after")
    def _mountable(self) -> HPCJobMappingSpec:
        if self.directory is not None and re.search(kf.BACKSTEP, self.directory):
            raise kf.invalid(f"directory: Invalid value: {json.dumps(self.directory)}: must not contain '..'")
        if self.directory in EXPORTER_MOUNT_PATHS:
            raise kf.invalid(
                f"directory: Invalid value: {json.dumps(self.directory)}: must not be one of DCGM Exporter's "
                f"other mount paths {', '.join(EXPORTER_MOUNT_PATHS)}"
            )
        return self


class DCGMExporterSpec(KubeModel):
    """NVIDIA DCGM Exporter, for GPU telemetry. Enabled by default."""

    model_config = ConfigDict(json_schema_extra=kf.validations(IMAGE_RULES))

    enabled: StrictBool = Field(default=True, description="Deploy DCGM Exporter.")
    repository: IMAGE_REPOSITORY | None = Field(default=None, description="DCGM Exporter image repository.")
    image: Annotated[OPERAND_IMAGE_NAME, Field(max_length=images.MAX_REFERENCE)] | None = Field(
        default=None, description="DCGM Exporter image name, or alone a full image reference."
    )
    version: IMAGE_VERSION | None = Field(default=None, description="DCGM Exporter image tag.")
    imagePullPolicy: ImagePullPolicy | None = Field(default=None, description="Image pull policy.")
    imagePullSecrets: list[StrictStr] | None = Field(default=None, description="Image pull secret names.")
    resources: ResourceRequirements | None = Field(default=None, description="Resource requests and limits.")
    args: list[StrictStr] | None = Field(default=None, description="Arguments of the container.")
    env: list[EnvVar] | None = Field(default=None, description="Environment variables of the container.")
    annotations: kf.AnnotationMap | None = Field(default=None, description="Annotations on the DCGM Exporter pods.")
    config: MetricsConfigSpec | None = Field(default=None, description="Custom metrics configuration.")
    service: ServiceSpec | None = Field(default=None, description="The Service exposing metrics on port 9400.")
    serviceMonitor: ServiceMonitorSpec | None = Field(default=None, description="The optional ServiceMonitor.")
    hostPID: StrictBool | None = Field(default=None, description="Share the host's PID namespace.")
    hostNetwork: StrictBool | None = Field(default=None, description="Expose metrics on the host network.")
    hpcJobMapping: HPCJobMappingSpec | None = Field(default=None, description="HPC job mapping.")
    enablePodLabels: StrictBool | None = Field(
        default=None, description="Add Kubernetes pod labels as metric labels (needs read access to pods)."
    )
    enablePodUID: StrictBool | None = Field(
        default=None, description="Add the Kubernetes pod UID as a metric label (needs read access to pods)."
    )
    podLabelAllowlistRegex: list[StrictStr] | None = Field(
        default=None, description="Regexes selecting which pod labels are included; empty means all."
    )

    @model_validator(mode="after")
    def _image_fields(self) -> DCGMExporterSpec:
        _check_image(self)
        return self


class DCGMSpec(KubeModel):
    """The standalone NVIDIA DCGM hostengine. Disabled by default; DCGM Exporter then uses its
    embedded nv-hostengine."""

    model_config = ConfigDict(
        json_schema_extra=kf.validations(
            [
                {
                    "rule": f"!has(self.hostNetwork) || !self.hostNetwork || self.hostPort == {DCGM_HOST_PORT}",
                    "message": f"must be {DCGM_HOST_PORT} when hostNetwork is true "
                    "(on the host network the host port is the hostengine's port)",
                    "fieldPath": ".hostPort",
                },
                *IMAGE_RULES,
            ]
        )
    )

    enabled: StrictBool = Field(default=False, description="Deploy the standalone DCGM hostengine.")
    repository: IMAGE_REPOSITORY | None = Field(default=None, description="DCGM image repository.")
    image: Annotated[OPERAND_IMAGE_NAME, Field(max_length=images.MAX_REFERENCE)] | None = Field(
        default=None, description="DCGM image name, or alone a full image reference."
    )
    version: IMAGE_VERSION | None = Field(default=None, description="DCGM image tag.")
    imagePullPolicy: ImagePullPolicy | None = Field(default=None, description="Image pull policy.")
    imagePullSecrets: list[StrictStr] | None = Field(default=None, description="Image pull secret names.")
    resources: ResourceRequirements | None = Field(default=None, description="Resource requests and limits.")
    args: list[StrictStr] | None = Field(default=None, description="Arguments of the container.")
    env: list[EnvVar] | None = Field(default=None, description="Environment variables of the container.")
    hostPort: Port = Field(default=DCGM_HOST_PORT, description="Host port of the DCGM hostengine.")
    hostNetwork: StrictBool | None = Field(default=None, description="Run the hostengine on the host network.")

    @model_validator(mode="after")
    def _image_fields(self) -> DCGMSpec:
        _check_image(self)
        return self

    @model_validator(mode="after")
    def _host_port_on_the_host_network(self) -> DCGMSpec:
        if self.hostNetwork and self.hostPort != DCGM_HOST_PORT:
            raise kf.invalid(
                f"hostPort: Invalid value: {self.hostPort}: must be {DCGM_HOST_PORT} when hostNetwork is true "
                "(on the host network the host port is the hostengine's port)"
            )
        return self


HostPath = Annotated[StrictStr, Field(pattern=kf.HOST_PATH)]


class HostPathsSpec(KubeModel):
    """Host paths used in host-path volumes of the operands."""

    rootFS: HostPath = Field(default="/", description="The host's root filesystem; must be chroot-able.")
    driverInstallDir: HostPath = Field(
        default="/run/nvidia/driver",
        description="Root of the driver files (libraries, configuration, executables) installed by the operator.",
    )
    kubeletRootDir: HostPath = Field(default="/var/lib/kubelet", description="The kubelet root directory.")


# kube-apiserver's DaemonSet validation takes a string only as a percentage, at most 100%, and
# refuses 0 while maxSurge is 0 (the operand DaemonSets set none); numeric strings are made
# numbers before they reach a DaemonSet (daemonset_max_unavailable).
# A numeric string is also at most 2147483647 (an int32, as the DaemonSet field holds it).
_POSITIVE_INT32 = (
    r"[1-9][0-9]{0,8}|1[0-9]{9}|20[0-9]{8}|21[0-3][0-9]{7}|214[0-6][0-9]{6}|2147[0-3][0-9]{5}|"
    r"21474[0-7][0-9]{4}|214748[0-2][0-9]{3}|2147483[0-5][0-9]{2}|21474836[0-3][0-9]|214748364[0-7]"
)
MAX_UNAVAILABLE_PATTERN = rf"^(0*({_POSITIVE_INT32})|0*([1-9][0-9]?|100)%)$"


class RollingUpdateSpec(KubeModel):
    """Rolling update of the DaemonSet pods."""

    maxUnavailable: (
        Annotated[
            Annotated[StrictInt, Field(ge=1, le=kf.MAX_INT32)]
            | Annotated[StrictStr, Field(pattern=MAX_UNAVAILABLE_PATTERN)],
            Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
        ]
        | None
    ) = Field(
        default=None,
        description="Pods that may be unavailable during the update: a positive number or a percentage up to 100%.",
    )


def daemonset_max_unavailable(value: int | str) -> int | str:
    """The int-or-string value a DaemonSet gets: a numeric string becomes a number, as the GPU
    Operator's ``intstr.Parse`` does (kube-apiserver accepts a string only as a percentage)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


class DaemonsetsSpec(KubeModel):
    """Common settings applied to every workload GPUCluster deploys."""

    labels: kf.LabelMap | None = Field(default=None, description="Labels added to every operand's pods.")
    annotations: kf.AnnotationMap | None = Field(default=None, description="Annotations added to every operand's pods.")
    priorityClassName: kf.PriorityClassName | None = Field(
        default=None, description="Priority class of the operand pods (a lowercase RFC 1123 subdomain)."
    )
    tolerations: Annotated[list[Toleration], Field(max_length=kf.MAX_LIST_ITEMS)] | None = Field(
        default=None, description="Tolerations of the operand pods."
    )
    updateStrategy: Literal["RollingUpdate", "OnDelete"] = Field(
        default="RollingUpdate", description="Update strategy of the DaemonSets."
    )
    rollingUpdate: RollingUpdateSpec | None = Field(default=None, description="Rolling update configuration.")
    podSecurityContext: PodSecurityContext | None = Field(
        default=None, description="Pod-level security context for the DaemonSet pods."
    )


NET_SYSCTL_MESSAGE = (
    "net.* sysctls may not be set in daemonsets.podSecurityContext while DCGM Exporter or DCGM runs on the "
    "host network (kube-apiserver refuses them with hostNetwork)"
)


class GPUClusterSpec(KubeModel):
    """Desired state of the DRA software stack. Unlike ClusterPolicy, it manages neither the NVIDIA
    driver nor a device plugin: the driver is pre-installed or managed by an NVIDIADriver."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!((has(self.dcgmExporter) && has(self.dcgmExporter.enabled) && self.dcgmExporter.enabled "
                    "&& has(self.dcgmExporter.hostNetwork) && self.dcgmExporter.hostNetwork) || "
                    "(has(self.dcgm) && has(self.dcgm.enabled) && self.dcgm.enabled && has(self.dcgm.hostNetwork) && "
                    "self.dcgm.hostNetwork)) || !has(self.daemonsets) || !has(self.daemonsets.podSecurityContext) || "
                    "!has(self.daemonsets.podSecurityContext.sysctls) || "
                    "!self.daemonsets.podSecurityContext.sysctls.exists(s, s.name.startsWith('net.') || "
                    "s.name.startsWith('net/'))",
                    "message": NET_SYSCTL_MESSAGE,
                    "fieldPath": ".daemonsets.podSecurityContext.sysctls",
                }
            ]
        }
    )

    draDriver: DRADriverSpec = Field(default_factory=DRADriverSpec, description="The NVIDIA DRA driver stack.")
    dcgmExporter: DCGMExporterSpec = Field(
        default_factory=DCGMExporterSpec, description="DCGM Exporter (enabled by default)."
    )
    dcgm: DCGMSpec = Field(default_factory=DCGMSpec, description="Standalone DCGM hostengine (disabled by default).")
    hostPaths: HostPathsSpec = Field(default_factory=HostPathsSpec, description="Host paths used by the operands.")
    daemonsets: DaemonsetsSpec = Field(
        default_factory=DaemonsetsSpec, description="Common settings of every deployed workload."
    )

    @model_validator(mode="after")
    def _no_net_sysctls_on_the_host_network(self) -> GPUClusterSpec:
        host_network = (self.dcgmExporter.enabled and bool(self.dcgmExporter.hostNetwork)) or (
            self.dcgm.enabled and bool(self.dcgm.hostNetwork)
        )
        context = self.daemonsets.podSecurityContext
        sysctls = (context.sysctls if context else None) or []
        net = [s.name for s in sysctls if s.name.startswith(("net.", "net/"))]
        if host_network and net:
            raise kf.invalid(
                f"daemonsets.podSecurityContext.sysctls: Invalid value: {json.dumps(net[0])}: {NET_SYSCTL_MESSAGE}"
            )
        return self


class ProductCount(KubeModel):
    """How many devices of one product the cluster publishes."""

    productName: StrictStr = Field(description="The productName attribute, e.g. NVIDIA H100 80GB HBM3.")
    count: Int32 = Field(description="Number of devices.")


class GPUInventory(KubeModel):
    """What the DRA driver publishes in ResourceSlices, summed over the cluster."""

    nodes: Int32 | None = Field(default=None, description="GPU nodes publishing ResourceSlices.")
    gpus: Int32 | None = Field(default=None, description="Full GPU devices (type gpu).")
    migDevices: Int32 | None = Field(default=None, description="MIG devices (type mig).")
    allocated: Int32 | None = Field(default=None, description="gpu.nvidia.com devices allocated to claims.")
    products: list[ProductCount] | None = Field(default=None, description="Devices per product name.")


class GPUClusterStatus(KubeModel):
    """Observed state of the GPUCluster."""

    state: Literal["ready", "notReady", "disabled"] | None = Field(
        default=None, description="ready when every operand is ready, notReady otherwise, disabled when ignored."
    )
    namespace: StrictStr | None = Field(default=None, description="Namespace of the operator and its operands.")
    observedGeneration: Int64 | None = Field(default=None, description="The generation last reconciled.")
    conditions: list[Condition] | None = Field(default=None, description="Ready and Error conditions.")
    inventory: GPUInventory | None = Field(default=None, description="GPU devices published by the DRA driver.")


class GPUCluster(KubeModel):
    """GPUCluster configures the GPU Operator's DRA model. A cluster-scoped singleton named gpu-cluster."""

    apiVersion: Literal["nvidia.com/v1alpha1"] = Field(
        default=API_VERSION, description="APIVersion defines the versioned schema of this representation."
    )
    kind: Literal["GPUCluster"] = Field(default=KIND, description="Kind is the REST resource this object represents.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: GPUClusterSpec = Field(default_factory=GPUClusterSpec, description="Desired state of the DRA stack.")
    status: GPUClusterStatus | None = Field(default=None, description="Observed state of the DRA stack.")
