"""The shared ResourceSlice/Node fixtures and the generator behind them.

(a) every fixture document is a valid Kubernetes 1.34 object (strict OpenAPI schema, plus the
    resource.k8s.io/v1 rules the schema cannot express: names, value types, limits);
(b) the committed YAML is exactly what the generator renders;
(c) the generator's shapes (device names, attribute types, MIG parent references, determinism);
(d) the hardware values are the real ones.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

import kubernetes_validate
import pytest

from gpucluster.sandbox.sim import gpunodes as simulate
from tests.fixtures import FIXTURES_DIR, fixture_path, load_fixture, regenerate

KUBERNETES_VERSION = "1.34"

SLICE_FIXTURES = ["h100-node", "a100-mig-node", "l4-node", "gb200-node"]

# semver.org 2.0.0, the grammar resource.k8s.io/v1 validates version attributes against.
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Integer quantities in canonical binary-SI form (what NewQuantity(n, BinarySI) prints).
BINARY_QUANTITY = re.compile(r"^(0|[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei)?$")
PCI_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_NAME = re.compile(r"^gpu-(\d+)-mig-([a-z0-9-]+)-(\d+)-(\d+)$")
SLICE_NAME_SUFFIX = re.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5}$")

ATTRIBUTE_TYPES = {"string", "int", "bool", "version"}
BINARY_FACTORS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity_value(q: str) -> int:
    m = BINARY_QUANTITY.match(q)
    assert m, f"{q!r} is not a canonical integer quantity"
    return int(m.group(1)) * BINARY_FACTORS[m.group(2) or ""]


def all_fixture_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = [(name, doc) for name in SLICE_FIXTURES for doc in load_fixture(name)]
    docs += [("nodes", doc) for doc in load_fixture("nodes")]
    return docs


def check_qualified_name(name: str) -> None:
    """resource.k8s.io/v1 QualifiedName: optional DNS-subdomain domain, C identifier <= 32."""
    domain, _, ident = name.rpartition("/")
    if domain:
        assert len(domain) <= 63 and DNS_SUBDOMAIN.match(domain), name
    assert len(ident) <= 32 and C_IDENTIFIER.match(ident), name


def check_slice(obj: dict[str, Any]) -> None:
    """The resource.k8s.io/v1 ResourceSlice rules the OpenAPI schema does not carry."""
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    assert obj["kind"] == "ResourceSlice"
    spec = obj["spec"]
    node = spec["nodeName"]
    assert spec["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    assert isinstance(spec["pool"]["generation"], int)
    meta = obj["metadata"]
    assert meta["generateName"] == f"{node}-{spec['driver']}-"
    assert meta["name"].startswith(meta["generateName"])
    assert SLICE_NAME_SUFFIX.match(meta["name"][len(meta["generateName"]) :])
    assert len(meta["name"]) <= 253 and DNS_SUBDOMAIN.match(meta["name"])
    devices = spec["devices"]
    assert 0 < len(devices) <= simulate.MAX_DEVICES_PER_SLICE
    names = [d["name"] for d in devices]
    assert len(set(names)) == len(names), "device names must be unique in a pool"
    for device in devices:
        assert set(device) <= {"name", "attributes", "capacity"}
        assert len(device["name"]) <= 63 and DNS_LABEL.match(device["name"]), device["name"]
        attributes = device.get("attributes", {})
        capacity = device.get("capacity", {})
        assert len(attributes) + len(capacity) <= simulate.MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE
        for name, value in attributes.items():
            check_qualified_name(name)
            assert len(value) == 1 and set(value) <= ATTRIBUTE_TYPES, (name, value)
            ((kind, v),) = value.items()
            if kind in ("string", "version"):
                assert isinstance(v, str) and len(v) <= 64, (name, v)
            if kind == "version":
                assert SEMVER.match(v), (name, v)
            if kind == "int":
                assert isinstance(v, int) and not isinstance(v, bool), (name, v)
            if kind == "bool":
                assert isinstance(v, bool), (name, v)
        for name, value in capacity.items():
            check_qualified_name(name)
            assert set(value) == {"value"}
            quantity_value(value["value"])


def attr(device: dict[str, Any], name: str) -> Any:
    ((_, value),) = device["attributes"][name].items()
    return value


def cap(device: dict[str, Any], name: str) -> int:
    return quantity_value(device["capacity"][name]["value"])


def devices_of(name: str, driver: str = simulate.GPU_DRIVER) -> list[dict[str, Any]]:
    (slice_,) = [d for d in load_fixture(name) if d["spec"]["driver"] == driver]
    devices: list[dict[str, Any]] = slice_["spec"]["devices"]
    return devices


# --------------------------------------------------------------------------- (a) validity


@pytest.mark.parametrize(
    ("fixture", "doc"),
    all_fixture_documents(),
    ids=lambda v: v if isinstance(v, str) else v["metadata"]["name"],
)
def test_fixture_documents_validate_strictly(fixture: str, doc: dict[str, Any]) -> None:
    assert kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True) == KUBERNETES_VERSION
    if doc["kind"] == "ResourceSlice":
        check_slice(doc)


def test_strict_validation_catches_unknown_fields() -> None:
    (doc, *_) = load_fixture("l4-node")
    doc["spec"]["devices"][0]["basic"] = {}  # the v1beta1 shape, not v1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("release", simulate.DRIVER_RELEASES)
def test_every_driver_release_shape_validates(release: simulate.DriverRelease) -> None:
    docs = simulate.node_slices(
        "n", "A100", 3, mig_gpus={0: ["1g.10gb+me", "3g.40gb"]}, driver_release=release
    ) + simulate.cluster_slices(2, 4, model="GB200")
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        check_slice(doc)


def test_nodes_validate_and_own_their_slices() -> None:
    nodes = {n["metadata"]["name"]: n for n in load_fixture("nodes")}
    assert set(nodes) == {n.name for n in regenerate.FIXTURE_NODES}
    for name in SLICE_FIXTURES:
        for doc in load_fixture(name):
            node = nodes[doc["spec"]["nodeName"]]
            (owner,) = doc["metadata"]["ownerReferences"]
            assert owner == {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node["metadata"]["name"],
                "uid": node["metadata"]["uid"],
                "controller": True,
            }


# --------------------------------------------------------------------------- (b) no drift


@pytest.mark.parametrize("rel", sorted(regenerate.rendered()))
def test_committed_fixture_is_generated(rel: str) -> None:
    path = FIXTURES_DIR / rel
    assert path.is_file(), f"missing {rel}: run `.venv/bin/python -m tests.fixtures.regenerate`"
    assert path.read_text(encoding="utf-8") == regenerate.rendered()[rel], (
        f"tests/fixtures/{rel} drifted from sandbox.sim.gpunodes: run `.venv/bin/python -m tests.fixtures.regenerate`"
    )
    assert load_fixture(rel) == regenerate.fixture_documents()[rel]


def test_regenerate_check_mode_reports_nothing_stale(capsys: pytest.CaptureFixture[str]) -> None:
    assert regenerate.main(["--check"]) == 0
    assert capsys.readouterr().err == ""


def test_load_fixture_names() -> None:
    assert fixture_path("nodes") == FIXTURES_DIR / "nodes.yaml"
    assert fixture_path("l4-node") == FIXTURES_DIR / "resourceslices" / "l4-node.yaml"
    assert load_fixture("resourceslices/l4-node.yaml") == load_fixture("l4-node")
    with pytest.raises(FileNotFoundError, match="h100-node"):
        load_fixture("no-such-node")


def test_gb200_fixture_has_gpu_and_compute_domain_slices() -> None:
    docs = load_fixture("gb200-node")
    assert [d["spec"]["driver"] for d in docs] == [simulate.GPU_DRIVER, simulate.COMPUTE_DOMAIN_DRIVER]
    assert [d["spec"]["pool"]["name"] for d in docs] == ["gb200-node", "gb200-node"]
    cd = devices_of("gb200-node", simulate.COMPUTE_DOMAIN_DRIVER)
    assert cd == [
        {"name": "channel-0", "attributes": {"id": {"int": 0}, "type": {"string": "channel"}}},
        {"name": "daemon-0", "attributes": {"id": {"int": 0}, "type": {"string": "daemon"}}},
    ]


# --------------------------------------------------------------------------- (c) shapes

GPU_ATTRIBUTES = {
    "type",
    "uuid",
    "productName",
    "brand",
    "architecture",
    "addressingMode",
    "cudaComputeCapability",
    "driverVersion",
    "cudaDriverVersion",
    simulate.PCI_BUS_ID_ATTRIBUTE,
    simulate.PCIE_ROOT_ATTRIBUTE,
}
MIG_ATTRIBUTES = GPU_ATTRIBUTES | {"parentUUID", "profile"}
MIG_ENGINE_CAPACITIES = {"multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"}


@pytest.mark.parametrize("fixture", SLICE_FIXTURES)
def test_device_attribute_names_and_types(fixture: str) -> None:
    for device in devices_of(fixture):
        kinds = {name: next(iter(v)) for name, v in device["attributes"].items()}
        if attr(device, "type") == "gpu":
            assert set(kinds) == GPU_ATTRIBUTES
            assert re.fullmatch(r"gpu-\d+", device["name"])
            assert set(device["capacity"]) == {"memory"}
            assert GPU_UUID.match(attr(device, "uuid"))
        else:
            assert attr(device, "type") == "mig"
            assert set(kinds) == MIG_ATTRIBUTES
            assert MIG_UUID.match(attr(device, "uuid"))
            slices = {c for c in device["capacity"] if c.startswith("memorySlice")}
            assert set(device["capacity"]) == MIG_ENGINE_CAPACITIES | {"memory"} | slices
        for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
            assert kinds[name] == "version"
        for name in GPU_ATTRIBUTES - {"cudaComputeCapability", "driverVersion", "cudaDriverVersion"}:
            assert kinds[name] == "string"
        assert attr(device, "driverVersion") == "580.82.7"  # Masterminds form of 580.82.07
        assert attr(device, "cudaDriverVersion") == "13.0.0"
        assert PCI_BDF.match(attr(device, simulate.PCI_BUS_ID_ATTRIBUTE))
        assert PCIE_ROOT.match(attr(device, simulate.PCIE_ROOT_ATTRIBUTE))
        assert cap(device, "memory") > 0


def test_mig_devices_reference_their_parent() -> None:
    node = "a100-mig-node"
    devices = devices_of(node)
    migs = [d for d in devices if attr(d, "type") == "mig"]
    full = {d["name"]: d for d in devices if attr(d, "type") == "gpu"}
    assert len(migs) == 3 + 7
    # MIG-enabled GPUs are announced only through their MIG devices.
    assert sorted(full) == [f"gpu-{i}" for i in range(2, 8)]
    by_parent: dict[str, list[dict[str, Any]]] = {}
    for mig in migs:
        m = MIG_NAME.match(mig["name"])
        assert m, mig["name"]
        minor = int(m.group(1))
        assert attr(mig, "parentUUID") == simulate.gpu_uuid(node, minor)
        assert attr(mig, "parentUUID") not in {attr(d, "uuid") for d in full.values()}
        assert attr(mig, "uuid") != attr(mig, "parentUUID")
        by_parent.setdefault(attr(mig, "parentUUID"), []).append(mig)
    for siblings in by_parent.values():
        # Same physical GPU: same PCI address and root, disjoint memory slices, memory fits.
        assert len({attr(m, simulate.PCI_BUS_ID_ATTRIBUTE) for m in siblings}) == 1
        assert len({attr(m, simulate.PCIE_ROOT_ATTRIBUTE) for m in siblings}) == 1
        used = Counter(c for m in siblings for c in m["capacity"] if c.startswith("memorySlice"))
        assert all(n == 1 for n in used.values()), used
        assert set(used) <= {f"memorySlice{i}" for i in range(8)}
        assert sum(cap(m, "memory") for m in siblings) <= 80 * 2**30
        assert sum(cap(m, "multiprocessors") for m in siblings) <= 98
    bus_ids = [attr(d, simulate.PCI_BUS_ID_ATTRIBUTE) for d in devices]
    assert len(set(bus_ids)) == 8


def test_mig_device_names_encode_profile_id_and_placement() -> None:
    names = [d["name"] for d in devices_of("a100-mig-node") if attr(d, "type") == "mig"]
    assert names == [
        "gpu-0-mig-1g10gb-19-6",
        "gpu-0-mig-2g20gb-14-4",
        "gpu-0-mig-3g40gb-9-0",
        *[f"gpu-1-mig-1g10gb-19-{i}" for i in range(7)],
    ]
    for device in devices_of("a100-mig-node"):
        m = MIG_NAME.match(device["name"])
        if not m:
            continue
        profile = simulate.GPU_MODELS["A100"].mig_profile(attr(device, "profile"))
        start = int(m.group(4))
        assert int(m.group(3)) == profile.profile_id
        assert {c for c in device["capacity"] if c.startswith("memorySlice")} == {
            f"memorySlice{i}" for i in range(start, start + profile.memory_slices)
        }
        assert all(cap(device, f"memorySlice{i}") == 1 for i in range(start, start + profile.memory_slices))


def test_legacy_driver_releases() -> None:
    (old,) = simulate.node_slices("n", "A100", 2, mig_gpus={1: ["2g.20gb", "1g.10gb+me"]}, driver_release="25.3")
    gpu, mig_2g, mig_me = old["spec"]["devices"]
    assert gpu["name"] == "gpu-0"
    assert gpu["attributes"]["index"] == {"int": 0} and gpu["attributes"]["minor"] == {"int": 0}
    assert "pcieBusID" in gpu["attributes"] and simulate.PCI_BUS_ID_ATTRIBUTE not in gpu["attributes"]
    assert "addressingMode" not in gpu["attributes"]
    assert [mig_2g["name"], mig_me["name"]] == ["gpu-1-mig-14-0-2", "gpu-1-mig-20-2-1"]
    assert mig_2g["attributes"]["parentIndex"] == {"int": 1}
    assert mig_2g["attributes"]["index"] == {"int": 0} and mig_me["attributes"]["index"] == {"int": 1}
    (mid,) = simulate.node_slices("n", "A100", 1, driver_release="25.8")
    assert {"index", "minor", "addressingMode"}.isdisjoint(mid["spec"]["devices"][0]["attributes"])
    (new,) = simulate.node_slices("n", "A100", 2, mig_gpus={1: ["1g.10gb+me"]})
    assert new["spec"]["devices"][1]["name"] == "gpu-1-mig-1g10gb-me-20-0"


def test_cluster_slices_shape_and_determinism() -> None:
    slices = simulate.cluster_slices(5, 8)
    assert len(slices) == 5
    assert [s["spec"]["nodeName"] for s in slices] == [f"gpu-node-{i}" for i in range(5)]
    assert all(len(s["spec"]["devices"]) == 8 for s in slices)
    assert slices == simulate.cluster_slices(5, 8)
    assert len({s["metadata"]["name"] for s in slices}) == 5
    uuids = [attr(d, "uuid") for s in slices for d in s["spec"]["devices"]]
    assert len(set(uuids)) == 40
    other = simulate.cluster_slices(5, 8, seed=1)
    assert {attr(d, "uuid") for s in other for d in s["spec"]["devices"]}.isdisjoint(uuids)
    nodes = simulate.cluster_nodes(5, 8)
    assert [n["metadata"]["uid"] for n in nodes] == [s["metadata"]["ownerReferences"][0]["uid"] for s in slices]
    for n in nodes:
        kubernetes_validate.validate(n, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("model", sorted(simulate.GPU_MODELS))
def test_cluster_slices_up_to_the_device_limit(model: str) -> None:
    (big,) = simulate.cluster_slices(1, simulate.MAX_DEVICES_PER_SLICE, model=model)
    check_slice(big)
    kubernetes_validate.validate(big, KUBERNETES_VERSION, strict=True)
    bus_ids = [attr(d, simulate.PCI_BUS_ID_ATTRIBUTE) for d in big["spec"]["devices"]]
    assert len(set(bus_ids)) == simulate.MAX_DEVICES_PER_SLICE
    with pytest.raises(ValueError, match="128"):
        simulate.cluster_slices(1, simulate.MAX_DEVICES_PER_SLICE + 1, model=model)


def test_cluster_of_zero() -> None:
    assert simulate.cluster_slices(0, 8) == []
    assert simulate.cluster_nodes(0, 8) == []


def test_mig_layout_rules() -> None:
    plan = simulate.plan_mig_layout("H100", ["3g.40gb", "3g.40gb"])
    assert [(p.profile.name, p.start) for p in plan] == [("3g.40gb", 0), ("3g.40gb", 4)]
    plan = simulate.plan_mig_layout("A100", [("1g.10gb", 5), "2g.20gb", "1g.20gb"])
    assert [(p.profile.name, p.start) for p in plan] == [("1g.10gb", 5), ("2g.20gb", 0), ("1g.20gb", 2)]
    with pytest.raises(ValueError, match="no free placement"):
        simulate.plan_mig_layout("A100", ["7g.80gb", "1g.10gb"])
    with pytest.raises(ValueError, match="at most 1"):
        simulate.plan_mig_layout("A100", ["1g.10gb+me", "1g.10gb+me"])
    small = dataclasses.replace(simulate.GPU_MODELS["A100"], mig_compute_slices=3)
    with pytest.raises(ValueError, match="compute slices"):
        simulate.plan_mig_layout(small, ["3g.40gb", "1g.10gb"])
    with pytest.raises(ValueError, match="cannot start"):
        simulate.plan_mig_layout("A100", [("2g.20gb", 1)])
    with pytest.raises(ValueError, match="no MIG profile"):
        simulate.plan_mig_layout("A100", ["1g.5gb"])
    with pytest.raises(ValueError, match="does not support MIG"):
        simulate.node_slices("n", "L4", 1, mig_gpus={0: ["1g.10gb"]})
    with pytest.raises(ValueError, match="has 2 GPUs"):
        simulate.node_slices("n", "A100", 2, mig_gpus={2: ["1g.10gb"]})
    with pytest.raises(ValueError, match="unknown GPU model"):
        simulate.node_slices("n", "V100", 1)


def test_mig_enabled_gpu_without_mig_devices_is_not_announced() -> None:
    (doc,) = simulate.node_slices("n", "H100", 2, mig_gpus={0: []})
    assert [d["name"] for d in doc["spec"]["devices"]] == ["gpu-1"]


def test_value_helpers() -> None:
    assert simulate.masterminds_semver("535.161.08") == "535.161.8"
    assert simulate.masterminds_semver("580.82.07") == "580.82.7"
    assert simulate.masterminds_semver("13.0") == "13.0.0"
    assert simulate.masterminds_semver("9") == "9.0.0"
    assert simulate.masterminds_semver("v1.2.3-rc.1+build.5") == "1.2.3-rc.1+build.5"
    with pytest.raises(ValueError):
        simulate.masterminds_semver("not-a-version")
    assert simulate.binary_si_quantity(81559 * 2**20) == "81559Mi"
    assert simulate.binary_si_quantity(81920 * 2**20) == "80Gi"
    assert simulate.binary_si_quantity(14) == "14"
    assert simulate.binary_si_quantity(1536) == "1536"
    assert simulate.binary_si_quantity(2048) == "2Ki"
    assert simulate.binary_si_quantity(0) == "0"
    assert simulate.slice_name("n", "gpu.nvidia.com") == simulate.slice_name("n", "gpu.nvidia.com")
    assert simulate.slice_name("n", "gpu.nvidia.com") != simulate.slice_name("n", "gpu.nvidia.com", seed=1)


def test_node_labels_for_every_mig_profile_are_valid() -> None:
    layout = {0: ["1g.10gb+me", "1g.20gb"], 1: ["7g.80gb"]}
    node = simulate.node_object("n", "H100", 2, mig_gpus=layout)
    kubernetes_validate.validate(node, KUBERNETES_VERSION, strict=True)
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/mig-1g.10gb.me.count"] == "1"
    assert labels["nvidia.com/mig-7g.80gb.memory"] == "81152"
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        assert len(name) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", name), key
        assert not prefix or DNS_SUBDOMAIN.match(prefix), key
        assert len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", value), value


def test_node_objects_carry_nfd_and_gfd_labels() -> None:
    nodes = {n["metadata"]["name"]: n for n in load_fixture("nodes")}
    for name, node in nodes.items():
        labels = node["metadata"]["labels"]
        assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["kubernetes.io/hostname"] == name
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.34.")
        assert all(isinstance(v, str) for v in labels.values())
    assert nodes["h100-node"]["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert nodes["h100-node"]["metadata"]["labels"]["nvidia.com/gpu.family"] == "hopper"
    assert nodes["l4-node"]["metadata"]["labels"]["nvidia.com/gpu.family"] == "ada-lovelace"
    assert nodes["l4-node"]["metadata"]["labels"]["nvidia.com/mig.capable"] == "false"
    a100 = nodes["a100-mig-node"]["metadata"]["labels"]
    assert a100["nvidia.com/mig.strategy"] == "mixed"
    assert a100["nvidia.com/gpu.count"] == "6"
    assert a100["nvidia.com/mig-1g.10gb.count"] == "8"
    assert a100["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    gb200 = nodes["gb200-node"]
    assert gb200["status"]["nodeInfo"]["architecture"] == "arm64"
    assert re.fullmatch(r"[0-9a-f-]{36}\.\d+", gb200["metadata"]["labels"]["nvidia.com/gpu.clique"])


# --------------------------------------------------------------------------- (d) real values


def test_h100_values() -> None:
    devices = devices_of("h100-node")
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    for d in devices:
        assert attr(d, "productName") == "NVIDIA H100 80GB HBM3"
        assert attr(d, "architecture") == "Hopper"
        assert attr(d, "brand") == "Nvidia"
        assert attr(d, "cudaComputeCapability") == "9.0.0"
        assert d["capacity"]["memory"] == {"value": "81559Mi"}  # 85520809984 bytes, as NVML reports
    assert len({attr(d, "uuid") for d in devices}) == 8


def test_a100_values_and_mig_profiles() -> None:
    spec = simulate.GPU_MODELS["A100"]
    assert {p.name for p in spec.mig_profiles} == {
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    }
    assert {p.name: p.profile_id for p in spec.mig_profiles} == {
        "1g.10gb": 19,
        "1g.10gb+me": 20,
        "1g.20gb": 15,
        "2g.20gb": 14,
        "3g.40gb": 9,
        "4g.40gb": 5,
        "7g.80gb": 0,
    }
    devices = {d["name"]: d for d in devices_of("a100-mig-node")}
    assert devices["gpu-2"]["capacity"]["memory"] == {"value": "80Gi"}  # 81920 MiB
    assert attr(devices["gpu-2"], "productName") == "NVIDIA A100-SXM4-80GB"
    assert attr(devices["gpu-2"], "cudaComputeCapability") == "8.0.0"
    one_g = devices["gpu-1-mig-1g10gb-19-0"]
    assert attr(one_g, "profile") == "1g.10gb"
    assert {k: v["value"] for k, v in one_g["capacity"].items()} == {
        "copyEngines": "1",
        "decoders": "0",
        "encoders": "0",
        "jpegEngines": "0",
        "memory": "9728Mi",
        "memorySlice0": "1",
        "multiprocessors": "14",
        "ofaEngines": "0",
    }
    three_g = devices["gpu-0-mig-3g40gb-9-0"]
    assert cap(three_g, "multiprocessors") == 42
    assert three_g["capacity"]["memory"] == {"value": "40192Mi"}
    assert sorted(c for c in three_g["capacity"] if c.startswith("memorySlice")) == [
        f"memorySlice{i}" for i in range(4)
    ]


def test_l4_and_gb200_values() -> None:
    l4 = devices_of("l4-node")
    assert len(l4) == 4
    assert {attr(d, "architecture") for d in l4} == {"Ada Lovelace"}
    assert {d["capacity"]["memory"]["value"] for d in l4} == {"23034Mi"}
    assert {attr(d, "cudaComputeCapability") for d in l4} == {"8.9.0"}
    gb200 = devices_of("gb200-node")
    assert len(gb200) == 4
    assert {attr(d, "productName") for d in gb200} == {"NVIDIA GB200"}
    assert {attr(d, "architecture") for d in gb200} == {"Blackwell"}
    assert {attr(d, "addressingMode") for d in gb200} == {"ATS"}
    assert {attr(d, "cudaComputeCapability") for d in gb200} == {"10.0.0"}
    assert {d["capacity"]["memory"]["value"] for d in gb200} == {"189471Mi"}
