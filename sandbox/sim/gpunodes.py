"""Simulated NVIDIA GPU nodes: ResourceSlices and Nodes shaped like the real ones.

This module produces, as plain dicts, the ``resource.k8s.io/v1`` ResourceSlices that the
NVIDIA DRA driver's kubelet plugins publish on Kubernetes 1.34, and the core/v1 Node objects
that carry the labels NFD and GPU Feature Discovery put on GPU nodes. It is the single source
of the test fixtures under ``tests/fixtures/`` and of the simulated kubelets in the sandbox.
Everything here is a pure function of its arguments: no I/O, no clock, no randomness
(UUIDs and generated names are derived from a seed with uuid5/sha256).

The shape follows the GPU kubelet plugin of the DRA Driver for NVIDIA GPUs
(``kubernetes-sigs/dra-driver-nvidia-gpu``, formerly ``NVIDIA/k8s-dra-driver-gpu``),
release 25.12 / 0.4 (``cmd/gpu-kubelet-plugin/deviceinfo.go``, ``mig.go``, ``nvlib.go``,
``driver.go``), with the ``DynamicMIG`` feature gate off (its default), i.e. static MIG:

* driver ``gpu.nvidia.com``; one pool per node, named after the node, published as a single
  ResourceSlice (generation 1, resourceSliceCount 1); the slice is named by the API server
  from ``generateName: <node>-gpu.nvidia.com-`` and is owned by the Node;
* a full GPU is a device named ``gpu-<minor>`` with string attributes ``type`` ("gpu"),
  ``uuid``, ``productName``, ``brand``, ``architecture``, optional ``addressingMode``, the
  version attributes ``cudaComputeCapability``, ``driverVersion`` and ``cudaDriverVersion``
  (Masterminds-semver normalised: "580.82.07" is published as "580.82.7", "13.0" as
  "13.0.0"), the standard attributes ``resource.kubernetes.io/pciBusID`` and
  ``resource.kubernetes.io/pcieRoot``, and one capacity, ``memory`` (NVML total memory in
  bytes, rendered as a canonical binary-SI Quantity, e.g. ``81559Mi``);
* a GPU with MIG mode enabled is not announced itself; each MIG device on it is, named
  ``gpu-<minor>-mig-<profile without dots>-<GI profile id>-<placement start>`` (for example
  ``gpu-0-mig-1g10gb-19-0``), with the parent's attributes plus ``type`` ("mig"), its own
  ``uuid``, ``parentUUID`` and ``profile``, and the capacities ``multiprocessors``,
  ``copyEngines``, ``decoders``, ``encoders``, ``jpegEngines``, ``ofaEngines``, ``memory``
  and one ``memorySlice<i>`` (value 1) per memory slice of its placement.

Older driver releases published slightly different attributes; ``driver_release`` selects
them: "25.3" (ints ``index``/``minor`` on GPUs and ``index``/``parentIndex`` on MIG devices,
unqualified ``pcieBusID``, MIG names ``gpu-<minor>-mig-<profile id>-<start>-<size>``, no
``addressingMode``) and "25.8" (no index/minor, otherwise like 25.3).

The compute-domain kubelet plugin (``cmd/compute-domain-kubelet-plugin``) publishes, under
driver ``compute-domain.nvidia.com``, one slice per node with two devices: ``channel-0``
(``type: channel``, ``id: 0``) and ``daemon-0`` (``type: daemon``, ``id: 0``).

Hardware numbers (memory totals, MIG profile ids, sizes, engine counts and placements) are
those ``nvidia-smi`` / NVML report for the real parts; see ``GPU_MODELS``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "COMPUTE_DOMAIN_DRIVER",
    "DEFAULT_CUDA_DRIVER_VERSION",
    "DEFAULT_DRIVER_VERSION",
    "DEFAULT_KUBELET_VERSION",
    "DRIVER_RELEASES",
    "GPU_DRIVER",
    "GPU_MODELS",
    "MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE",
    "MAX_DEVICES_PER_SLICE",
    "PCIE_ROOT_ATTRIBUTE",
    "PCI_BUS_ID_ATTRIBUTE",
    "DriverRelease",
    "GpuModelSpec",
    "KubeObject",
    "MigLayout",
    "MigPlacement",
    "MigProfileSpec",
    "binary_si_quantity",
    "cluster_nodes",
    "cluster_slices",
    "compute_domain_slice",
    "gpu_uuid",
    "masterminds_semver",
    "mig_device_name",
    "mig_uuid",
    "node_name",
    "node_object",
    "node_slices",
    "node_uid",
    "plan_mig_layout",
    "slice_name",
]

KubeObject = dict[str, Any]
"""A Kubernetes object (or part of one) as plain JSON-compatible data."""

DriverRelease = Literal["25.3", "25.8", "25.12"]
"""Release line of the NVIDIA DRA driver whose published attribute set is modelled."""

DRIVER_RELEASES: tuple[DriverRelease, ...] = ("25.3", "25.8", "25.12")

GPU_DRIVER = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"

STANDARD_ATTRIBUTE_PREFIX = "resource.kubernetes.io/"
PCI_BUS_ID_ATTRIBUTE = STANDARD_ATTRIBUTE_PREFIX + "pciBusID"
PCIE_ROOT_ATTRIBUTE = STANDARD_ATTRIBUTE_PREFIX + "pcieRoot"

MAX_DEVICES_PER_SLICE = 128
"""resource.k8s.io/v1 limit on ``spec.devices`` of one ResourceSlice."""

MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE = 32
"""resource.k8s.io/v1 limit on attributes plus capacities of one device."""

DEFAULT_DRIVER_VERSION = "580.82.07"
DEFAULT_CUDA_DRIVER_VERSION = "13.0"
DEFAULT_KUBELET_VERSION = "v1.34.1"

# Fixed, deterministic timestamp used wherever an object needs one.
_EPOCH = "2025-10-01T00:00:00Z"

# Root namespace of every uuid5 this module derives.
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/gpucluster/simulate")

# Alphabet the API server uses for generateName suffixes (k8s.io/apimachinery util/rand).
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


# --------------------------------------------------------------------------- hardware tables


@dataclass(frozen=True)
class MigProfileSpec:
    """One GPU-instance profile as NVML reports it (``nvidia-smi mig -lgip``/``-lgipp``).

    ``memory_mib`` is NVML's ``memorySizeMB`` (which is in MiB); ``placements`` are the
    possible placement starts (in memory slices), each placement spanning ``memory_slices``.
    """

    name: str
    profile_id: int
    compute_slices: int
    memory_slices: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int
    placements: tuple[int, ...]
    max_instances: int


@dataclass(frozen=True)
class GpuModelSpec:
    """What a GPU model looks like to NVML, GFD and the node it sits in.

    ``pci_bus_ids``/``pcie_roots`` are a representative topology for ``gpu_count`` GPUs of a
    typical server with this part (more GPUs than listed get synthesised addresses).
    """

    key: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str
    memory_mib: int
    addressing_mode: str | None
    mig_memory_slices: int
    mig_compute_slices: int
    mig_profiles: tuple[MigProfileSpec, ...]
    pci_bus_ids: tuple[str, ...]
    pcie_roots: tuple[str, ...]
    machine: str
    node_arch: str
    node_cpu: str
    node_memory: str
    fabric_attached: bool = False

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfileSpec:
        """The profile called ``name`` (e.g. ``"1g.10gb"``); KeyError if the part lacks it."""
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.mig_profiles) or "none"
        raise KeyError(f"{self.product_name} has no MIG profile {name!r} (known: {known})")


def _p(
    name: str,
    profile_id: int,
    g: int,
    mem_slices: int,
    sm: int,
    ce: int,
    dec: int,
    enc: int,
    jpeg: int,
    ofa: int,
    mib: int,
    placements: tuple[int, ...],
    instances: int,
) -> MigProfileSpec:
    return MigProfileSpec(name, profile_id, g, mem_slices, sm, ce, dec, enc, jpeg, ofa, mib, placements, instances)


_ONE_SLICE = (0, 1, 2, 3, 4, 5, 6)
_TWO_SLICE_1G = (0, 2, 4, 6)
_TWO_SLICE_2G = (0, 2, 4)
_FOUR_SLICE_3G = (0, 4)

# H100 80GB HBM3 (SXM5), driver R535+: `nvidia-smi mig -lgip` / `-lgipp`.
_H100_MIG = (
    _p("1g.10gb", 19, 1, 1, 16, 1, 1, 0, 1, 0, 9984, _ONE_SLICE, 7),
    _p("1g.10gb+me", 20, 1, 1, 16, 1, 1, 0, 1, 1, 9984, _ONE_SLICE, 1),
    _p("1g.20gb", 15, 1, 2, 26, 1, 1, 0, 1, 0, 20096, _TWO_SLICE_1G, 4),
    _p("2g.20gb", 14, 2, 2, 32, 2, 2, 0, 2, 0, 20096, _TWO_SLICE_2G, 3),
    _p("3g.40gb", 9, 3, 4, 60, 3, 3, 0, 3, 0, 40448, _FOUR_SLICE_3G, 2),
    _p("4g.40gb", 5, 4, 4, 64, 4, 4, 0, 4, 0, 40448, (0,), 1),
    _p("7g.80gb", 0, 7, 8, 132, 8, 7, 0, 7, 1, 81152, (0,), 1),
)

# A100-SXM4-80GB: `nvidia-smi mig -lgip` / `-lgipp`.
_A100_80GB_MIG = (
    _p("1g.10gb", 19, 1, 1, 14, 1, 0, 0, 0, 0, 9728, _ONE_SLICE, 7),
    _p("1g.10gb+me", 20, 1, 1, 14, 1, 1, 0, 1, 1, 9728, _ONE_SLICE, 1),
    _p("1g.20gb", 15, 1, 2, 14, 1, 1, 0, 0, 0, 19968, _TWO_SLICE_1G, 4),
    _p("2g.20gb", 14, 2, 2, 28, 2, 1, 0, 0, 0, 19968, _TWO_SLICE_2G, 3),
    _p("3g.40gb", 9, 3, 4, 42, 3, 2, 0, 0, 0, 40192, _FOUR_SLICE_3G, 2),
    _p("4g.40gb", 5, 4, 4, 56, 4, 2, 0, 0, 0, 40192, (0,), 1),
    _p("7g.80gb", 0, 7, 8, 98, 7, 5, 0, 1, 1, 80896, (0,), 1),
)

# GB200 (production boards, driver R570+). Only the profiles whose NVML numbers are
# published are listed; the GB200 also offers 3g.93gb, 4g.93gb and 7g.186gb.
_GB200_MIG = (
    _p("1g.23gb", 19, 1, 1, 18, 2, 1, 0, 1, 0, 22528, _ONE_SLICE, 7),
    _p("1g.23gb+me", 20, 1, 1, 18, 2, 1, 0, 1, 1, 22528, _ONE_SLICE, 1),
    _p("1g.47gb", 15, 1, 2, 32, 2, 1, 0, 1, 0, 46592, _TWO_SLICE_1G, 4),
    _p("2g.47gb", 14, 2, 2, 38, 4, 2, 0, 2, 0, 46592, _TWO_SLICE_2G, 3),
)

GPU_MODELS: Mapping[str, GpuModelSpec] = {
    "H100": GpuModelSpec(
        key="H100",
        product_name="NVIDIA H100 80GB HBM3",
        brand="Nvidia",
        architecture="Hopper",
        cuda_compute_capability="9.0",
        memory_mib=81559,
        addressing_mode="HMM",
        mig_memory_slices=8,
        mig_compute_slices=7,
        mig_profiles=_H100_MIG,
        # HGX H100 8-GPU (DGX H100): one PCIe switch per GPU, one host bridge per switch.
        pci_bus_ids=(
            "0000:1b:00.0",
            "0000:43:00.0",
            "0000:52:00.0",
            "0000:61:00.0",
            "0000:9d:00.0",
            "0000:c3:00.0",
            "0000:d1:00.0",
            "0000:df:00.0",
        ),
        pcie_roots=(
            "pci0000:15",
            "pci0000:37",
            "pci0000:48",
            "pci0000:59",
            "pci0000:97",
            "pci0000:b7",
            "pci0000:c8",
            "pci0000:d9",
        ),
        machine="DGX-H100",
        node_arch="amd64",
        node_cpu="224",
        node_memory="2113276384Ki",
    ),
    "A100": GpuModelSpec(
        key="A100",
        product_name="NVIDIA A100-SXM4-80GB",
        brand="Nvidia",
        architecture="Ampere",
        cuda_compute_capability="8.0",
        memory_mib=81920,
        addressing_mode="HMM",
        mig_memory_slices=8,
        mig_compute_slices=7,
        mig_profiles=_A100_80GB_MIG,
        # DGX A100: two GPUs behind each of the four EPYC root complexes.
        pci_bus_ids=(
            "0000:07:00.0",
            "0000:0f:00.0",
            "0000:47:00.0",
            "0000:4e:00.0",
            "0000:87:00.0",
            "0000:90:00.0",
            "0000:b7:00.0",
            "0000:bd:00.0",
        ),
        pcie_roots=(
            "pci0000:00",
            "pci0000:00",
            "pci0000:40",
            "pci0000:40",
            "pci0000:80",
            "pci0000:80",
            "pci0000:c0",
            "pci0000:c0",
        ),
        machine="DGX-A100",
        node_arch="amd64",
        node_cpu="256",
        node_memory="2113647604Ki",
    ),
    "L4": GpuModelSpec(
        key="L4",
        product_name="NVIDIA L4",
        brand="Nvidia",
        architecture="Ada Lovelace",
        cuda_compute_capability="8.9",
        memory_mib=23034,
        addressing_mode="HMM",
        mig_memory_slices=0,
        mig_compute_slices=0,
        mig_profiles=(),
        # A 4x L4 cloud VM (GCE g2-standard-48): GPUs on the root bus.
        pci_bus_ids=("0000:00:03.0", "0000:00:04.0", "0000:00:05.0", "0000:00:06.0"),
        pcie_roots=("pci0000:00", "pci0000:00", "pci0000:00", "pci0000:00"),
        machine="g2-standard-48",
        node_arch="amd64",
        node_cpu="48",
        node_memory="198036872Ki",
    ),
    "GB200": GpuModelSpec(
        key="GB200",
        product_name="NVIDIA GB200",
        brand="Nvidia",
        architecture="Blackwell",
        cuda_compute_capability="10.0",
        memory_mib=189471,
        addressing_mode="ATS",
        mig_memory_slices=8,
        mig_compute_slices=7,
        mig_profiles=_GB200_MIG,
        # GB200 NVL72 compute tray: two Grace CPUs, each with two Blackwell GPUs on C2C.
        pci_bus_ids=("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"),
        pcie_roots=("pci0008:00", "pci0009:00", "pci0018:00", "pci0019:00"),
        machine="GB200-NVL",
        node_arch="arm64",
        node_cpu="144",
        node_memory="1002421540Ki",
        fabric_attached=True,
    ),
}


def _model(model: str | GpuModelSpec) -> GpuModelSpec:
    if isinstance(model, GpuModelSpec):
        return model
    try:
        return GPU_MODELS[model]
    except KeyError:
        raise ValueError(f"unknown GPU model {model!r} (known: {', '.join(GPU_MODELS)})") from None


# --------------------------------------------------------------------------- value helpers

_SEMVER_LOOSE = re.compile(
    r"^v?(?P<major>[0-9]+)(?:\.(?P<minor>[0-9]+))?(?:\.(?P<patch>[0-9]+))?"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<meta>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def masterminds_semver(version: str) -> str:
    """Normalise a version the way ``semver.MustParse(v).String()`` (Masterminds) does.

    Missing minor/patch become 0 and numeric parts lose leading zeros, so the driver's
    "580.82.07" is published as "580.82.7" and CUDA "13.0" as "13.0.0".
    """
    m = _SEMVER_LOOSE.match(version)
    if m is None:
        raise ValueError(f"invalid version {version!r}")
    out = f"{int(m['major'])}.{int(m['minor'] or 0)}.{int(m['patch'] or 0)}"
    if m["pre"]:
        out += "-" + m["pre"]
    if m["meta"]:
        out += "+" + m["meta"]
    return out


_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def binary_si_quantity(value: int) -> str:
    """Canonical string of ``resource.NewQuantity(value, resource.BinarySI)``.

    The largest power of 1024 that divides ``value`` exactly picks the suffix:
    85520809984 -> "81559Mi", 85899345920 -> "80Gi", 14 -> "14".
    """
    if value < 0:
        raise ValueError("negative quantities are not produced here")
    if value == 0:
        return "0"
    exponent = 0
    while exponent < len(_BINARY_SUFFIXES) - 1 and value % 1024 == 0:
        value //= 1024
        exponent += 1
    return f"{value}{_BINARY_SUFFIXES[exponent]}"


def _mib(mib: int) -> str:
    return binary_si_quantity(mib * 1024 * 1024)


def _uuid(*parts: object) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, "/".join(str(p) for p in parts))


def gpu_uuid(node: str, minor: int, *, seed: int = 0) -> str:
    """Deterministic NVML-style GPU UUID (``GPU-xxxxxxxx-...``) for a GPU of a node."""
    return f"GPU-{_uuid(seed, node, 'gpu', minor)}"


def mig_uuid(node: str, parent_minor: int, profile_id: int, start: int, *, seed: int = 0) -> str:
    """Deterministic MIG device UUID (``MIG-xxxxxxxx-...``, a v5 UUID like real ones)."""
    return f"MIG-{_uuid(seed, node, 'mig', parent_minor, profile_id, start)}"


def node_uid(node: str, *, seed: int = 0) -> str:
    """Deterministic ``metadata.uid`` for a simulated Node."""
    return str(_uuid(seed, node, "node-uid"))


def slice_name(node: str, driver: str, *, seed: int = 0, index: int = 0) -> str:
    """A ResourceSlice name as the API server generates it from ``<node>-<driver>-``."""
    digest = hashlib.sha256(f"{seed}/{node}/{driver}/{index}".encode()).digest()
    suffix = "".join(_NAME_SUFFIX_ALPHABET[b % len(_NAME_SUFFIX_ALPHABET)] for b in digest[:5])
    return f"{node}-{driver}-{suffix}"


def _rfc1123(name: str) -> str:
    name = re.sub(r"[^a-z0-9-.]", "-", name.lower()).strip("-")
    return name.removesuffix(".")[:253]


def mig_device_name(
    parent_minor: int,
    profile: MigProfileSpec,
    start: int,
    *,
    driver_release: DriverRelease = "25.12",
) -> str:
    """Device name the driver publishes for a MIG device.

    25.12+: ``gpu-<minor>-mig-<profile w/o dots>-<profile id>-<start>``
    (``gpu-0-mig-1g10gb-19-0``, ``gpu-0-mig-1g10gb-me-20-3``); earlier releases:
    ``gpu-<minor>-mig-<profile id>-<start>-<size>``.
    """
    if driver_release == "25.12":
        pname = _rfc1123(profile.name.replace(".", ""))
        return f"gpu-{parent_minor}-mig-{pname}-{profile.profile_id}-{start}"
    return f"gpu-{parent_minor}-mig-{profile.profile_id}-{start}-{profile.memory_slices}"


# --------------------------------------------------------------------------- MIG layouts


@dataclass(frozen=True)
class MigPlacement:
    """A created MIG device: a profile at a placement start (in memory slices)."""

    profile: MigProfileSpec
    start: int

    @property
    def memory_slice_indices(self) -> range:
        return range(self.start, self.start + self.profile.memory_slices)


MigLayout = Sequence[str | tuple[str, int]]
"""MIG devices of one GPU: profile names (placed first-fit, in order) or (name, start)."""


def plan_mig_layout(model: str | GpuModelSpec, layout: MigLayout) -> list[MigPlacement]:
    """Place the MIG devices of ``layout`` on one GPU, as ``nvidia-smi mig -cgi`` would.

    A bare profile name takes the lowest free placement of that profile; ``(name, start)``
    pins it. Raises ValueError for layouts the hardware rejects (overlapping memory slices,
    more compute slices than the GPU has, too many instances of a profile, bad start).
    """
    spec = _model(model)
    if not spec.mig_capable:
        raise ValueError(f"{spec.product_name} does not support MIG")
    used: set[int] = set()
    compute = 0
    counts: dict[str, int] = {}
    placed: list[MigPlacement] = []
    for item in layout:
        name, pinned = (item, None) if isinstance(item, str) else item
        try:
            profile = spec.mig_profile(name)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        candidates = profile.placements if pinned is None else (pinned,)
        start = None
        for candidate in candidates:
            if candidate not in profile.placements:
                raise ValueError(
                    f"MIG profile {name} cannot start at memory slice {candidate} (valid: {list(profile.placements)})"
                )
            if used.isdisjoint(range(candidate, candidate + profile.memory_slices)):
                start = candidate
                break
        if start is None:
            raise ValueError(f"no free placement for MIG profile {name} on {spec.product_name}")
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > profile.max_instances:
            raise ValueError(f"at most {profile.max_instances} instance(s) of MIG profile {name}")
        compute += profile.compute_slices
        if compute > spec.mig_compute_slices:
            raise ValueError(f"MIG layout needs more than {spec.mig_compute_slices} compute slices")
        used.update(range(start, start + profile.memory_slices))
        placed.append(MigPlacement(profile, start))
    return placed


# --------------------------------------------------------------------------- devices


def _bus(spec: GpuModelSpec, minor: int) -> tuple[str, str]:
    """(PCI bus ID, PCIe root) of GPU ``minor``; synthesised past the model's topology table."""
    if minor < len(spec.pci_bus_ids):
        return spec.pci_bus_ids[minor], spec.pcie_roots[minor]
    domain = 0x100 + minor // 32
    bus = 0x10 + (minor % 32) * 7
    return f"{domain:04x}:{bus:02x}:00.0", f"pci{domain:04x}:00"


def _attrs(values: Mapping[str, tuple[str, Any]]) -> KubeObject:
    """``{name: (type, value)}`` -> v1 DeviceAttribute map, keys sorted like Go's encoder."""
    return {name: {kind: value} for name, (kind, value) in sorted(values.items())}


def _caps(values: Mapping[str, str]) -> KubeObject:
    return {name: {"value": value} for name, value in sorted(values.items())}


@dataclass(frozen=True)
class _GpuFacts:
    node: str
    minor: int
    uuid: str
    spec: GpuModelSpec
    driver_version: str
    cuda_driver_version: str
    addressing_mode: str | None
    release: DriverRelease

    def common_attributes(self) -> dict[str, tuple[str, Any]]:
        """Attributes a full GPU and its MIG devices share."""
        bus_id, root = _bus(self.spec, self.minor)
        attrs: dict[str, tuple[str, Any]] = {
            "productName": ("string", self.spec.product_name),
            "brand": ("string", self.spec.brand),
            "architecture": ("string", self.spec.architecture),
            "cudaComputeCapability": ("version", masterminds_semver(self.spec.cuda_compute_capability)),
            "driverVersion": ("version", masterminds_semver(self.driver_version)),
            "cudaDriverVersion": ("version", masterminds_semver(self.cuda_driver_version)),
            PCIE_ROOT_ATTRIBUTE: ("string", root),
        }
        if self.release == "25.12":
            attrs[PCI_BUS_ID_ATTRIBUTE] = ("string", bus_id)
            if self.addressing_mode is not None:
                attrs["addressingMode"] = ("string", self.addressing_mode)
        else:
            attrs["pcieBusID"] = ("string", bus_id)
        return attrs


def _gpu_device(gpu: _GpuFacts) -> KubeObject:
    attrs = gpu.common_attributes()
    attrs["type"] = ("string", "gpu")
    attrs["uuid"] = ("string", gpu.uuid)
    if gpu.release == "25.3":
        attrs["minor"] = ("int", gpu.minor)
        attrs["index"] = ("int", gpu.minor)
    return {
        "name": f"gpu-{gpu.minor}",
        "attributes": _attrs(attrs),
        "capacity": _caps({"memory": _mib(gpu.spec.memory_mib)}),
    }


def _mig_device(gpu: _GpuFacts, placement: MigPlacement, index: int, *, seed: int) -> KubeObject:
    profile = placement.profile
    attrs = gpu.common_attributes()
    attrs["type"] = ("string", "mig")
    attrs["uuid"] = ("string", mig_uuid(gpu.node, gpu.minor, profile.profile_id, placement.start, seed=seed))
    attrs["parentUUID"] = ("string", gpu.uuid)
    attrs["profile"] = ("string", profile.name)
    if gpu.release == "25.3":
        attrs["index"] = ("int", index)
        attrs["parentIndex"] = ("int", gpu.minor)
    caps = {
        "multiprocessors": str(profile.multiprocessors),
        "copyEngines": str(profile.copy_engines),
        "decoders": str(profile.decoders),
        "encoders": str(profile.encoders),
        "jpegEngines": str(profile.jpeg_engines),
        "ofaEngines": str(profile.ofa_engines),
        "memory": _mib(profile.memory_mib),
    }
    for i in placement.memory_slice_indices:
        caps[f"memorySlice{i}"] = "1"
    return {
        "name": mig_device_name(gpu.minor, profile, placement.start, driver_release=gpu.release),
        "attributes": _attrs(attrs),
        "capacity": _caps(caps),
    }


def _resource_slice(
    node: str, driver: str, devices: list[KubeObject], *, seed: int, owner_uid: str | None, generation: int
) -> KubeObject:
    if len(devices) > MAX_DEVICES_PER_SLICE:
        raise ValueError(
            f"{len(devices)} devices on node {node} exceed the {MAX_DEVICES_PER_SLICE}-device "
            "limit of one ResourceSlice"
        )
    metadata: KubeObject = {
        "name": slice_name(node, driver, seed=seed),
        "generateName": f"{node}-{driver}-",
    }
    if owner_uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": owner_uid, "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }


_UNSET: Any = object()


def node_slices(
    node_name: str,
    model: str | GpuModelSpec,
    gpu_count: int,
    *,
    mig_gpus: Mapping[int, MigLayout] | None = None,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION,
    seed: int = 0,
    owner_uid: str | None = None,
    addressing_mode: str | None = _UNSET,
    driver_release: DriverRelease = "25.12",
    generation: int = 1,
) -> list[KubeObject]:
    """ResourceSlices the GPU kubelet plugin publishes for a node (one slice, one pool).

    ``mig_gpus`` maps GPU minors that have MIG mode enabled to their MIG layout (see
    ``plan_mig_layout``); such a GPU is announced only through its MIG devices (none at all
    for an empty layout). ``owner_uid`` (the Node's uid) adds the ownerReference the kubelet
    plugin sets.
    ``addressing_mode`` overrides the model's NVML addressing mode (None: not reported).
    """
    spec = _model(model)
    if gpu_count < 0:
        raise ValueError("gpu_count must not be negative")
    if driver_release not in DRIVER_RELEASES:
        raise ValueError(f"unknown driver release {driver_release!r}")
    mig_gpus = dict(mig_gpus or {})
    for minor in mig_gpus:
        if not 0 <= minor < gpu_count:
            raise ValueError(f"MIG layout given for GPU {minor}, node {node_name} has {gpu_count} GPUs")
    mode = spec.addressing_mode if addressing_mode is _UNSET else addressing_mode
    devices: list[KubeObject] = []
    for minor in range(gpu_count):
        gpu = _GpuFacts(
            node=node_name,
            minor=minor,
            uuid=gpu_uuid(node_name, minor, seed=seed),
            spec=spec,
            driver_version=driver_version,
            cuda_driver_version=cuda_driver_version,
            addressing_mode=mode,
            release=driver_release,
        )
        if minor not in mig_gpus:
            devices.append(_gpu_device(gpu))
            continue
        placements = plan_mig_layout(spec, mig_gpus[minor])
        migs = [_mig_device(gpu, p, index, seed=seed) for index, p in enumerate(placements)]
        devices.extend(sorted(migs, key=lambda d: str(d["name"])))
    return [_resource_slice(node_name, GPU_DRIVER, devices, seed=seed, owner_uid=owner_uid, generation=generation)]


def compute_domain_slice(
    node_name: str, *, seed: int = 0, owner_uid: str | None = None, generation: int = 1
) -> KubeObject:
    """The ResourceSlice the compute-domain kubelet plugin publishes for a node.

    Only IMEX channel 0 is announced per node (other channels are handed out by the
    ComputeDomain controller), plus the node's single ComputeDomain daemon device.
    """
    devices = [
        {"name": "channel-0", "attributes": _attrs({"id": ("int", 0), "type": ("string", "channel")})},
        {"name": "daemon-0", "attributes": _attrs({"id": ("int", 0), "type": ("string", "daemon")})},
    ]
    return _resource_slice(
        node_name, COMPUTE_DOMAIN_DRIVER, devices, seed=seed, owner_uid=owner_uid, generation=generation
    )


def node_name(index: int, *, prefix: str = "gpu-node") -> str:
    """Name of the ``index``-th node of ``cluster_slices``/``cluster_nodes``."""
    return f"{prefix}-{index}"


def cluster_slices(
    nodes: int,
    gpus_per_node: int,
    *,
    model: str | GpuModelSpec = "H100",
    seed: int = 0,
    node_name_prefix: str = "gpu-node",
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION,
    with_owner: bool = True,
) -> list[KubeObject]:
    """One GPU ResourceSlice per node for ``nodes`` nodes of ``gpus_per_node`` full GPUs.

    Deterministic in its arguments: the same call yields the same slices (UUIDs, names).
    Nodes are named ``<prefix>-0`` ... and match ``cluster_nodes`` with the same arguments.
    """
    if nodes < 0:
        raise ValueError("nodes must not be negative")
    spec = _model(model)
    out: list[KubeObject] = []
    for i in range(nodes):
        name = node_name(i, prefix=node_name_prefix)
        out.extend(
            node_slices(
                name,
                spec,
                gpus_per_node,
                driver_version=driver_version,
                cuda_driver_version=cuda_driver_version,
                seed=seed,
                owner_uid=node_uid(name, seed=seed) if with_owner else None,
            )
        )
    return out


# --------------------------------------------------------------------------- nodes


def _gfd_sanitise(value: str) -> str:
    """GFD's label-value sanitising: drop characters outside [A-Za-z0-9-_. ], join words by -."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", value).split())


def _gfd_labels(
    spec: GpuModelSpec,
    gpu_count: int,
    mig_gpus: Mapping[int, MigLayout],
    driver_version: str,
    cuda_driver_version: str,
    *,
    clique: str | None,
) -> dict[str, str]:
    """Labels GPU Feature Discovery (mig-strategy mixed when MIG is in use) sets."""
    drv = driver_version.split(".")
    cuda = cuda_driver_version.split(".")
    cc_major, cc_minor = spec.cuda_compute_capability.split(".")
    family = {"Ampere": "ampere", "Ada Lovelace": "ada-lovelace", "Hopper": "hopper"}.get(
        spec.architecture, spec.architecture.lower()
    )
    product = _gfd_sanitise(spec.product_name)
    labels = {
        "nvidia.com/cuda.driver-version.full": driver_version,
        "nvidia.com/cuda.driver-version.major": drv[0],
        "nvidia.com/cuda.driver-version.minor": drv[1] if len(drv) > 1 else "0",
        "nvidia.com/cuda.driver-version.revision": drv[2] if len(drv) > 2 else "0",
        "nvidia.com/cuda.driver.major": drv[0],
        "nvidia.com/cuda.driver.minor": drv[1] if len(drv) > 1 else "0",
        "nvidia.com/cuda.driver.rev": drv[2] if len(drv) > 2 else "0",
        "nvidia.com/cuda.runtime-version.full": cuda_driver_version,
        "nvidia.com/cuda.runtime-version.major": cuda[0],
        "nvidia.com/cuda.runtime-version.minor": cuda[1] if len(cuda) > 1 else "0",
        "nvidia.com/cuda.runtime.major": cuda[0],
        "nvidia.com/cuda.runtime.minor": cuda[1] if len(cuda) > 1 else "0",
        "nvidia.com/gfd.timestamp": "1759276800",
        "nvidia.com/gpu.compute.major": cc_major,
        "nvidia.com/gpu.compute.minor": cc_minor,
        "nvidia.com/gpu.count": str(gpu_count - len(mig_gpus)),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.machine": spec.machine,
        "nvidia.com/gpu.memory": str(spec.memory_mib),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if spec.mig_capable else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
    }
    labels["nvidia.com/mig.strategy"] = "mixed" if mig_gpus else "single"
    if clique is not None:
        labels["nvidia.com/gpu.clique"] = clique
    counts: dict[str, tuple[MigProfileSpec, int]] = {}
    for layout in mig_gpus.values():
        for placement in plan_mig_layout(spec, layout):
            profile = placement.profile
            counts[profile.name] = (profile, counts.get(profile.name, (profile, 0))[1] + 1)
    for name, (profile, count) in counts.items():
        # The device plugin's MIG resource names replace "+" (not valid in a label key) by ".".
        prefix = f"nvidia.com/mig-{name.replace('+', '.')}"
        labels.update(
            {
                f"{prefix}.count": str(count),
                f"{prefix}.engines.copy": str(profile.copy_engines),
                f"{prefix}.engines.decoder": str(profile.decoders),
                f"{prefix}.engines.encoder": str(profile.encoders),
                f"{prefix}.engines.jpeg": str(profile.jpeg_engines),
                f"{prefix}.engines.ofa": str(profile.ofa_engines),
                f"{prefix}.memory": str(profile.memory_mib),
                f"{prefix}.multiprocessors": str(profile.multiprocessors),
                f"{prefix}.product": f"{product}-MIG-{_gfd_sanitise(name)}",
                f"{prefix}.replicas": "1",
                f"{prefix}.sharing-strategy": "none",
                f"{prefix}.slices.ci": str(profile.compute_slices),
                f"{prefix}.slices.gi": str(profile.compute_slices),
            }
        )
    return labels


def node_object(
    name: str,
    model: str | GpuModelSpec = "H100",
    gpu_count: int = 8,
    *,
    mig_gpus: Mapping[int, MigLayout] | None = None,
    seed: int = 0,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION,
    kubelet_version: str = DEFAULT_KUBELET_VERSION,
    internal_ip: str | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> KubeObject:
    """A core/v1 Node for a GPU node, labelled as NFD and GPU Feature Discovery label it.

    ``metadata.uid`` is ``node_uid(name, seed=seed)``, the owner of the node's slices.
    Fabric-attached models (GB200) also get ``nvidia.com/gpu.clique``.
    """
    spec = _model(model)
    mig = dict(mig_gpus or {})
    clique = None
    if spec.fabric_attached:
        clique = f"{_uuid(seed, 'nvlink-domain')}.{1 + int(_uuid(seed, name, 'clique').int % 32766)}"
    labels = {
        "beta.kubernetes.io/arch": spec.node_arch,
        "beta.kubernetes.io/os": "linux",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "kubernetes.io/arch": spec.node_arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    labels.update(_gfd_labels(spec, gpu_count, mig, driver_version, cuda_driver_version, clique=clique))
    labels.update(extra_labels or {})
    digest = hashlib.sha256(f"{seed}/{name}/ip".encode()).digest()
    ip = internal_ip or f"10.{digest[0] % 256}.{digest[1] % 256}.{1 + digest[2] % 254}"
    kernel = "6.8.0-1025-nvidia" + ("-64k" if spec.node_arch == "arm64" else "")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": node_uid(name, seed=seed),
            "creationTimestamp": _EPOCH,
            "labels": dict(sorted(labels.items())),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "capacity": {
                "cpu": spec.node_cpu,
                "ephemeral-storage": "1844525588Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": spec.node_memory,
                "pods": "110",
            },
            "allocatable": {
                "cpu": spec.node_cpu,
                "ephemeral-storage": "1699909472414",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": spec.node_memory,
                "pods": "110",
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": _EPOCH,
                    "lastTransitionTime": _EPOCH,
                }
            ],
            "nodeInfo": {
                "architecture": spec.node_arch,
                "bootID": str(_uuid(seed, name, "boot")),
                "containerRuntimeVersion": "containerd://2.1.4",
                "kernelVersion": kernel,
                "kubeProxyVersion": "",
                "kubeletVersion": kubelet_version,
                "machineID": _uuid(seed, name, "machine").hex,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.3 LTS",
                "systemUUID": str(_uuid(seed, name, "system")),
            },
        },
    }


def cluster_nodes(
    nodes: int,
    gpus_per_node: int,
    *,
    model: str | GpuModelSpec = "H100",
    seed: int = 0,
    node_name_prefix: str = "gpu-node",
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION,
) -> list[KubeObject]:
    """The Nodes that ``cluster_slices`` with the same arguments publishes slices for."""
    return [
        node_object(
            node_name(i, prefix=node_name_prefix),
            model,
            gpus_per_node,
            seed=seed,
            driver_version=driver_version,
            cuda_driver_version=cuda_driver_version,
        )
        for i in range(nodes)
    ]
