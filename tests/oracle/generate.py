"""Random but valid DRA allocation cases, seeded and reproducible, for the differential tests.

A case is what kube-scheduler's allocator sees for one pod: DeviceClasses, ResourceSlices (in
API order), claims already allocated, the pod's claims to allocate, the Nodes and the feature
gates. Objects are as the API server stores them (defaults applied: ``allocationMode`` and
``count`` set, ``operator`` on tolerations), and each is valid for its version's validation:
counter sets share a slice with their devices in 1.34 and have slices of their own from 1.35,
the taint effect ``None`` exists from 1.35, list attributes from 1.36. Objects of a disabled
feature still appear (they were written while it was on), as they can in a cluster.

Each case exercises a few features drawn at random so that cases stay small enough to be
satisfiable about half of the time: ExactCount and All, firstAvailable, class and request
selectors (some that fail at run time), matchAttribute and distinctAttribute, admin access,
allocated claims, counters and partitionable devices, taints and tolerations, binding
conditions, consumable capacity with request policies, list attributes, several nodes, pools
split over slices, shared (node-selected) pools, and incomplete or invalid pools.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

from gpucluster.dra import gates as G
from gpucluster.dra.model import AllocatorInputError

Obj = dict[str, Any]

GPU, NIC = "gpu.example.com", "nic.example.com"
DRIVERS = (GPU, NIC)
SHORT = {GPU: "gpu", NIC: "nic"}
PCIE = "resource.kubernetes.io/pcieRoot"
MODELS = ("a100", "h100", "l4")
MEMORY = ("8Gi", "16Gi", "40Gi", "80Gi")
VERSIONS_SEMVER = ("1.0.0", "1.2.3", "2.0.0-rc.1", "2.1.0")
ZONES = ("zone-a", "zone-b")
FEATURES = (
    "all",
    "first-available",
    "selectors",
    "constraints",
    "admin",
    "allocated",
    "counters",
    "taints",
    "binding",
    "consumable",
    "lists",
    "nodes",
    "split-pools",
    "shared-pools",
    "broken-pools",
    "two-claims",
)


@dataclass
class Case:
    seed: int
    version: str
    gates: dict[str, bool]
    features: list[str]
    classes: list[Obj] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    allocated: list[Obj] = field(default_factory=list)
    claims: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)

    def oracle_request(self) -> Obj:
        return {
            "kind": "allocate",
            "gates": self.gates,
            "classes": self.classes,
            "slices": self.slices,
            "allocated": self.allocated,
            "claims": self.claims,
            "nodes": self.nodes,
            # Where the allocator visits pools in Go map order (before 1.36, and 1.36 stable): sample it.
            "repeat": 24,
        }

    def cluster(self) -> list[Obj]:
        """The cluster as ``explain`` reads it: one mixed list of objects."""
        return [*self.classes, *self.slices, *self.allocated, *self.nodes]

    def to_json(self) -> Obj:
        return {
            "seed": self.seed,
            "version": self.version,
            "gates": self.gates,
            "features": self.features,
            "classes": self.classes,
            "slices": self.slices,
            "allocated": self.allocated,
            "claims": self.claims,
            "nodes": self.nodes,
        }

    @staticmethod
    def from_json(data: Obj) -> Case:
        return Case(**copy.deepcopy(data))


def version_gates(version: str) -> tuple[str, ...]:
    known = G.GATES + ((G.LIST_TYPE_ATTRIBUTES,) if int(version.split(".")[1]) >= 36 else ())
    return tuple(g for g in known if g != G.FILTER_TIMEOUT)


def pick_gates(rng: random.Random, version: str) -> dict[str, bool]:
    """Each gate on or off at random, except the ones locked at ``version``; the filter
    timeout at its default (it bounds time, not the answer)."""
    out = {G.FILTER_TIMEOUT: G.resolve(version)[G.FILTER_TIMEOUT]}
    for gate in version_gates(version):
        value = rng.random() < 0.6
        try:
            G.resolve(version, {gate: value})
        except AllocatorInputError:
            value = not value  # locked to the other value
        out[gate] = value
    return out


class _Builder:
    def __init__(self, rng: random.Random, version: str, features: set[str], gates: dict[str, bool]) -> None:
        self.rng = rng
        self.gates = gates
        self.minor = int(version.split(".")[1])
        self.features = features
        self.device_names: list[tuple[str, str, str, Obj]] = []  # (driver, pool, device, device object)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    # ------------------------------------------------------------------ devices

    def attributes(self, driver: str, index: int) -> Obj:
        rng = self.rng
        attrs: Obj = {"index": {"int": index}}
        if driver == GPU:
            attrs["model"] = {"string": rng.choice(MODELS)}
            if self.chance(0.7):
                attrs["healthy"] = {"bool": self.chance(0.8)}
            if self.chance(0.6):
                attrs["driverVersion"] = {"version": rng.choice(VERSIONS_SEMVER)}
        else:
            attrs["speed"] = {"int": rng.choice((100, 200, 400))}
        if self.chance(0.5):
            attrs[PCIE] = {"string": f"pci-{rng.randint(0, 1)}"}
        if "lists" in self.features and self.minor >= 36 and self.chance(0.6):
            kind = rng.choice(("ints", "strings", "bools", "versions"))
            values: Any = {
                "ints": lambda: rng.sample(range(6), rng.randint(1, 3)),
                "strings": lambda: rng.sample(("x", "y", "z", "w"), rng.randint(1, 3)),
                "bools": lambda: [rng.choice((True, False))],
                "versions": lambda: rng.sample(VERSIONS_SEMVER, rng.randint(1, 2)),
            }[kind]()
            attrs["tags"] = {kind: values}
        return attrs

    def capacity(self, consumable: bool) -> Obj:
        rng = self.rng
        if not self.chance(0.7) and not consumable:
            return {}
        memory = rng.choice(MEMORY)
        cap: Obj = {"value": memory}
        if consumable and self.chance(0.7):
            gi = int(memory.removesuffix("Gi"))
            policy = rng.choice(("default", "range", "values"))
            if policy == "default":
                cap["requestPolicy"] = {"default": f"{max(1, gi // 4)}Gi"}
            elif policy == "range":
                step = rng.choice((1, 2, 4))
                low = step
                rp: Obj = {"default": f"{low}Gi", "validRange": {"min": f"{low}Gi"}}
                if self.chance(0.5):
                    rp["validRange"]["step"] = f"{step}Gi"
                if self.chance(0.5):
                    top = gi - (gi - low) % step
                    rp["validRange"]["max"] = f"{top}Gi"
                cap["requestPolicy"] = rp
            else:
                values = sorted({1, 2, max(1, gi // 2), gi})
                cap["requestPolicy"] = {"default": f"{values[0]}Gi", "validValues": [f"{v}Gi" for v in values]}
        out: Obj = {"memory": cap}
        if self.chance(0.3):
            out["cores"] = {"value": str(rng.choice((4, 8, 16)))}
        return out

    def device(self, driver: str, pool: str, index: int, counter_sets: list[Obj], per_device: list[str] | None) -> Obj:
        rng = self.rng
        name = f"{SHORT[driver]}-{index}"
        consumable = "consumable" in self.features and self.chance(0.6)
        dev: Obj = {"name": name, "attributes": self.attributes(driver, index)}
        capacity = self.capacity(consumable)
        if capacity:
            dev["capacity"] = capacity
        if consumable:
            dev["allowMultipleAllocations"] = True
        if counter_sets and self.chance(0.75):
            chosen = rng.choice(counter_sets)
            counters = {
                counter: {"value": rng.choice(("2Gi", "4Gi", "8Gi"))}
                for counter in chosen["counters"]
                if self.chance(0.8)
            }
            if counters:
                dev["consumesCounters"] = [{"counterSet": chosen["name"], "counters": counters}]
        if "taints" in self.features and self.chance(0.4):
            effects = ["NoSchedule", "NoExecute"] + (["None"] if self.minor >= 35 else [])
            taint: Obj = {
                "key": rng.choice(("example.com/maintenance", "example.com/degraded")),
                "effect": rng.choice(effects),
            }
            if self.chance(0.6):
                taint["value"] = rng.choice(("yes", "no"))
            dev["taints"] = [taint]
        if "binding" in self.features and self.chance(0.4):
            dev["bindingConditions"] = ["example.com/ready"]
            dev["bindingFailureConditions"] = ["example.com/failed"]
            if self.chance(0.5):
                dev["bindsToNode"] = True
        if per_device is not None:
            choice = rng.choice([*per_device, "all", "selector"])
            if choice == "all":
                dev["allNodes"] = True
            elif choice == "selector":
                dev["nodeSelector"] = _zone_selector(rng.choice(ZONES))
            else:
                dev["nodeName"] = choice
        self.device_names.append((driver, pool, name, dev))
        return dev

    # ------------------------------------------------------------------ slices

    def pool_slices(self, driver: str, pool: str, where: Obj, node_names: list[str]) -> list[Obj]:
        rng = self.rng
        split = "split-pools" in self.features and self.chance(0.6)
        counters = "counters" in self.features and self.chance(0.7)
        per_device = counters and not where.get("nodeName") and self.chance(0.4)
        counter_sets: list[Obj] = []
        if counters:
            for i in range(rng.randint(1, 2)):
                counter_sets.append(
                    {
                        "name": f"set-{i}",
                        "counters": {
                            c: {"value": rng.choice(("8Gi", "12Gi", "16Gi"))}
                            for c in ("memory", "slots")[: rng.randint(1, 2)]
                        },
                    }
                )
        count = 0
        device_groups: list[list[Obj]] = []
        for _ in range(rng.randint(2, 3) if split else 1):
            n = rng.randint(0 if split else 1, 4)
            group = [
                self.device(driver, pool, count + i, counter_sets, node_names if per_device else None) for i in range(n)
            ]
            count += n
            device_groups.append(group)
        specs: list[Obj] = []
        for group in device_groups:
            spec: Obj = {"driver": driver, "devices": group}
            if counters and self.minor == 34:
                spec["sharedCounters"] = counter_sets
            specs.append(spec)
        if counters and self.minor >= 35:
            specs.insert(rng.randint(0, len(specs)), {"driver": driver, "sharedCounters": counter_sets})
        if counters and self.minor == 34 and len(specs) > 1:
            # 1.34 validates counter references per slice: only one slice of the pool has devices
            # that consume counters; the others drop their consumption.
            for spec in specs[1:]:
                for dev in spec["devices"]:
                    dev.pop("consumesCounters", None)
                spec.pop("sharedCounters", None)
        declared = len(specs)
        if "broken-pools" in self.features and self.chance(0.3):
            declared += 1  # incomplete: a slice is still missing
        generation = 1
        out = []
        for i, spec in enumerate(specs):
            body = dict(spec)
            if per_device and body.get("devices"):
                body["perDeviceNodeSelection"] = True
            else:
                body.update(where)
            body["pool"] = {"name": pool, "generation": generation, "resourceSliceCount": declared}
            body.setdefault("devices", [])
            if not body["devices"]:
                body.pop("devices")
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{pool}-{i}", "uid": f"uid-slice-{pool}-{i}"},
                    "spec": body,
                }
            )
        if "broken-pools" in self.features and self.chance(0.25) and len(out) > 1:
            # invalid: the same device name published twice in one pool
            devices = [d for s in out for d in s["spec"].get("devices", [])]
            if len(devices) >= 2:
                devices[-1]["name"] = devices[0]["name"]
        if "broken-pools" in self.features and self.chance(0.15):
            # an older generation left behind: the allocator uses only the newest
            stale = copy.deepcopy(out[0])
            stale["metadata"]["name"] += "-old"
            stale["spec"]["pool"]["generation"] = 0
            out.append(stale)
        return out


def _zone_selector(zone: str) -> Obj:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]}


# ------------------------------------------------------------------ selectors


def _gpu_selectors(b: _Builder) -> list[str]:
    d = f'device.attributes["{GPU}"]'
    exprs = [
        f'{d}.model == "{b.rng.choice(MODELS)}"',
        f"{d}.index >= {b.rng.randint(0, 2)}",
        f'device.capacity["{GPU}"].memory.compareTo(quantity("{b.rng.choice(MEMORY)}")) >= 0',
        f'"healthy" in {d} && {d}.healthy',
        f'{d}.driverVersion.isGreaterThan(semver("1.1.0"))',  # a runtime error where it is missing
        f'has({d}.driverVersion) && {d}.driverVersion.isGreaterThan(semver("1.1.0"))',
        f'device.attributes["{PCIE}"].pcieRoot == "pci-0"',
        f'"{PCIE}" in device.attributes && device.attributes["{PCIE}"].pcieRoot == "pci-1"',
        f'{d}.model in ["a100", "h100"] || {d}.index == 0',
    ]
    if b.minor >= 36 and "lists" in b.features and b.gates.get(G.LIST_TYPE_ATTRIBUTES):
        # `includes` is declared only with the gate on (the API server refuses it otherwise)
        exprs.append(f"has({d}.tags) && {d}.tags.includes({b.rng.choice(('1', '2', chr(34) + 'x' + chr(34)))})")
    if "consumable" in b.features and b.gates.get(G.CONSUMABLE_CAPACITY):
        exprs.append("device.allowMultipleAllocations")  # declared only with the gate on
    return exprs


def _selector(b: _Builder, driver: str) -> Obj:
    if driver == GPU:
        expression = b.rng.choice(_gpu_selectors(b))
    else:
        expression = b.rng.choice(
            (f'device.attributes["{NIC}"].speed >= 200', f'device.attributes["{NIC}"].index < 2', "true")
        )
    return {"cel": {"expression": expression}}


# ------------------------------------------------------------------ claims


def _exactly(b: _Builder, name: str, *, sub: bool = False) -> Obj:
    rng = b.rng
    driver = GPU if rng.random() < 0.8 else NIC
    body: Obj = {"deviceClassName": rng.choice(("gpu", "gpu-big")) if driver == GPU else "nic"}
    if sub:
        body["name"] = name
    if "all" in b.features and rng.random() < 0.3:
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = rng.choice((1, 1, 1, 2, 2, 3))
    if "selectors" in b.features and rng.random() < 0.6:
        body["selectors"] = [_selector(b, driver) for _ in range(rng.randint(1, 2))]
    if "admin" in b.features and not sub and rng.random() < 0.4:
        body["adminAccess"] = True
    if "taints" in b.features and rng.random() < 0.5:
        tol: Obj = {"key": rng.choice(("example.com/maintenance", "example.com/degraded"))}
        if rng.random() < 0.5:
            tol["operator"] = "Exists"
        else:
            tol["operator"] = "Equal"
            tol["value"] = rng.choice(("yes", "no"))
        if rng.random() < 0.5:
            tol["effect"] = rng.choice(("NoSchedule", "NoExecute"))
        body["tolerations"] = [tol]
    if "consumable" in b.features and driver == GPU and rng.random() < 0.5:
        body["capacity"] = {"requests": {"memory": rng.choice(("1Gi", "2Gi", "3Gi", "4Gi", "8Gi"))}}
    return body


def _claim(b: _Builder, name: str) -> Obj:
    rng = b.rng
    requests: list[Obj] = []
    for i in range(rng.randint(1, 3) if rng.random() < 0.5 else 1):
        rname = f"req-{i}"
        if "first-available" in b.features and rng.random() < 0.5:
            subs = [_exactly(b, f"sub-{j}", sub=True) for j in range(rng.randint(2, 3))]
            requests.append({"name": rname, "firstAvailable": subs})
        else:
            requests.append({"name": rname, "exactly": _exactly(b, rname)})
    devices: Obj = {"requests": requests}
    if "constraints" in b.features and rng.random() < 0.7:
        constraints = []
        for _ in range(rng.randint(1, 2)):
            attribute = rng.choice((f"{GPU}/model", PCIE, f"{GPU}/index", f"{GPU}/tags"))
            kind = "distinctAttribute" if "consumable" in b.features and rng.random() < 0.4 else "matchAttribute"
            constraint: Obj = {kind: attribute}
            if len(requests) > 1 and rng.random() < 0.5:
                constraint["requests"] = [r["name"] for r in rng.sample(requests, rng.randint(1, len(requests)))]
            constraints.append(constraint)
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def _allocated(b: _Builder, index: int) -> Obj | None:
    rng = b.rng
    if not b.device_names:
        return None
    results = []
    for driver, pool, device, dev in rng.sample(b.device_names, min(len(b.device_names), rng.randint(1, 3))):
        result: Obj = {"request": "req-0", "driver": driver, "pool": pool, "device": device}
        if "admin" in b.features and rng.random() < 0.3:
            result["adminAccess"] = True
        elif dev.get("allowMultipleAllocations") and rng.random() < 0.7:
            result["shareID"] = f"00000000-0000-0000-0000-{index:06d}{len(results):06d}"
            if "capacity" in dev and "memory" in dev["capacity"]:
                result["consumedCapacity"] = {"memory": rng.choice(("1Gi", "4Gi", "8Gi"))}
        results.append(result)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"held-{index}", "namespace": "default", "uid": f"uid-held-{index}"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "req-0", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}
                ]
            }
        },
        "status": {"allocation": {"devices": {"results": results}}},
    }


def _class(name: str, driver: str, extra: str | None = None) -> Obj:
    selectors = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
    if extra:
        selectors.append({"cel": {"expression": extra}})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": selectors},
    }


def generate(seed: int, version: str) -> Case:
    rng = random.Random(f"{seed}/{version}")
    features = sorted(rng.sample(FEATURES, rng.randint(1, 4)))
    feats = set(features)
    case = Case(seed=seed, version=version, gates=pick_gates(rng, version), features=features)
    b = _Builder(rng, version, feats, case.gates)
    case.classes = [
        _class("gpu", GPU),
        _class("gpu-big", GPU, f'device.capacity["{GPU}"].memory.compareTo(quantity("40Gi")) >= 0'),
        _class("nic", NIC),
    ]
    n_nodes = rng.randint(2, 3) if "nodes" in feats else 1
    node_names = [f"node-{i}" for i in range(n_nodes)]
    case.nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"zone": ZONES[i % 2]}}}
        for i, n in enumerate(node_names)
    ]
    slices: list[Obj] = []
    for node in node_names:
        for driver in DRIVERS:
            if driver == NIC and not rng.random() < 0.4:
                continue
            slices.extend(b.pool_slices(driver, f"{node}-{SHORT[driver]}", {"nodeName": node}, node_names))
    if "shared-pools" in feats:
        where = rng.choice(({"allNodes": True}, {"nodeSelector": _zone_selector(rng.choice(ZONES))}))
        slices.extend(b.pool_slices(GPU, "shared-gpu", where, node_names))
    if rng.random() < 0.3:
        rng.shuffle(slices)
    case.slices = slices
    if "allocated" in feats or "admin" in feats:
        for i in range(rng.randint(1, 2)):
            held = _allocated(b, i)
            if held is not None:
                case.allocated.append(held)
    case.claims = [_claim(b, f"claim-{i}") for i in range(2 if "two-claims" in feats else 1)]
    return case
