"""Read views of the GPU Operator's other custom resources.

We neither own nor install these CRDs; the webhook and controller only read a few fields (is a
ClusterPolicy active, does an NVIDIADriver auto-upgrade). Everything else is kept as it came.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from gpucluster.api.base import ImagePullPolicy, KubeModel, ObjectMeta, StringMap

CLUSTERPOLICY_API_VERSION: Final = "nvidia.com/v1"
NVIDIADRIVER_API_VERSION: Final = "nvidia.com/v1alpha1"


class OperandStatus(KubeModel):
    """The state the GPU Operator reports for a ClusterPolicy or NVIDIADriver."""

    state: StrictStr | None = Field(default=None, description="ready, notReady, ignored or disabled.")
    namespace: StrictStr | None = None


class ClusterPolicy(KubeModel):
    """ClusterPolicy (nvidia.com/v1): the device-plugin model. Only its presence and state matter here."""

    apiVersion: Literal["nvidia.com/v1"] = CLUSTERPOLICY_API_VERSION
    kind: Literal["ClusterPolicy"] = "ClusterPolicy"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] = Field(default_factory=dict)
    status: OperandStatus | None = None


class DriverUpgradePolicy(KubeModel):
    """How the GPU Operator upgrades the driver an NVIDIADriver manages."""

    autoUpgrade: StrictBool = Field(
        default=True, description="Upgrade automatically; not supported on DRA nodes, set it to false."
    )
    maxParallelUpgrades: StrictInt | None = Field(default=None, description="Nodes upgraded in parallel.")


class NVIDIADriverSpec(KubeModel):
    """The fields of an NVIDIADriver spec that the DRA model reads or validates."""

    driverType: Literal["gpu", "vgpu", "vgpu-host-manager"] | None = Field(default=None)
    repository: StrictStr | None = None
    image: StrictStr | None = None
    version: StrictStr | None = None
    imagePullPolicy: ImagePullPolicy | None = None
    usePrecompiled: StrictBool | None = None
    kernelModuleType: Literal["auto", "open", "proprietary"] | None = None
    nodeSelector: StringMap | None = Field(default=None, description="Nodes this driver is deployed on.")
    upgradePolicy: DriverUpgradePolicy | None = None

    @property
    def auto_upgrade(self) -> bool:
        """Whether the operator would upgrade this driver automatically (the CRD defaults it on)."""
        return self.upgradePolicy is None or self.upgradePolicy.autoUpgrade


class NVIDIADriver(KubeModel):
    """NVIDIADriver (nvidia.com/v1alpha1): a driver installation the GPU Operator manages."""

    apiVersion: Literal["nvidia.com/v1alpha1"] = NVIDIADRIVER_API_VERSION
    kind: Literal["NVIDIADriver"] = "NVIDIADriver"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NVIDIADriverSpec = Field(default_factory=NVIDIADriverSpec)
    status: OperandStatus | None = None
