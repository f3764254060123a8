"""``gpucluster explain`` against the real kube-scheduler: a seeded differential tier.

For each Kubernetes version (1.34 and 1.37, skipped with one line where that version's control
plane is not built, failed under CI=true) a seeded generator makes ``LAYOUTS`` node layouts (GPU
models, MIG layouts and GPU counts through the control plane's ``mix``, some devices held by
pods of allocated claims) and, on each, ``CASES_PER_LAYOUT`` pods with random ResourceClaims:
device counts, CEL selectors on attributes and capacities, ``matchAttribute`` (and, where the
version has it, ``distinctAttribute``) constraints, ``firstAvailable`` subrequests,
``allocationMode: All``, admin access (also to the devices other pods hold), claims from
templates, two claims in one pod, a pod's ``nodeSelector`` or required node affinity.

Every case is judged by kube-scheduler. The pod is created with a scheduling gate, so the
scheduler leaves it alone while ``gpucluster explain pod/NAME -o json`` reads the same cluster
state; then the gate is removed and the scheduler either binds the pod or reports
FailedScheduling. Explain agrees when it says the pod fits exactly when the scheduler binds it,
the scheduler's node is among the nodes explain says fit, and, when the scheduler refuses the
pod, explain says why (``errors``, or every node's reasons; an error of the scheduler, such as a
CEL runtime error, is one of explain's ``errors`` word for word). Each case's pod and claims are
deleted before the next, so every case starts from the layout's own state.

``GPUCLUSTER_EXPLAIN_SEED`` changes the seed; ``GPUCLUSTER_EXPLAIN_CASE=SEED/VERSION/Ln/Cm,...``
runs only those cases (their layouts are set up all the same). A disagreement is reported with its
seed, the layout, what holds devices, the case's objects and both answers. Where both bind the
pod to the same node but pick other devices there the summary counts it apart: not a
disagreement (explain answers where the pod fits, not with which devices), but a sign that the
two searches try devices in different orders.
``GPUCLUSTER_EXPLAIN_VERBOSE=1`` prints every case's verdict.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpucluster.api import gpucluster as gc
from gpucluster.api.validation import validate_gpucluster
from gpucluster.controller.operands import ClusterFacts, render
from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane
from tests.e2e.backends import require_kube
from tests.realkube.api import Api
from tests.realkube.conftest import kube_client

Obj = dict[str, Any]

VERSIONS = ("1.34", "1.37")
LAYOUTS = 4
CASES_PER_LAYOUT = 15
SEED = int(os.environ.get("GPUCLUSTER_EXPLAIN_SEED", "20260801"))
ONLY = {seed for seed in os.environ.get("GPUCLUSTER_EXPLAIN_CASE", "").split(",") if seed}
VERBOSE = os.environ.get("GPUCLUSTER_EXPLAIN_VERBOSE", "") not in ("", "0")

GPUCLUSTER = str(Path(sys.executable).parent / "gpucluster")
DRA = "/apis/resource.k8s.io/v1"
HOLD = "example.com/hold"
IMAGE = "registry.example/app:1"
PLUGIN = "nvidia-dra-driver-kubelet-plugin"
PLUGIN_NS = "nvidia-dra-driver"
CASES_NS = "cases"
ADMIN_NS = "cases-admin"
OCCUPANTS_NS = "occupants"
ADMIN_LABEL = {"resource.kubernetes.io/admin-access": "true"}
VERDICT_TIMEOUT = 30.0
ADMIN_MARK = " (adminAccess)"
REFUSED = ("Unschedulable", "SchedulerError")  # PodScheduled=False reasons of kube-scheduler
PLUGIN_ERROR = re.compile(r'^running "DynamicResources" (?:pre)?filter plugin: (.*)$', re.IGNORECASE | re.DOTALL)

MODELS = ("h100", "h100-mig", "a100", "a100-mig", "l4", "gb200", "gb200-mig")
D = 'device.attributes["gpu.nvidia.com"]'
C = 'device.capacity["gpu.nvidia.com"]'
ABSENT_PRODUCT = "NVIDIA B200"


# --------------------------------------------------------------------------- the generator


@dataclass(frozen=True)
class Device:
    node: str
    name: str
    type: str  # "gpu" or "mig"
    attributes: dict[str, str]  # plain values (strings and versions), by unqualified name
    capacity: dict[str, str]

    @property
    def uuid(self) -> str:
        return self.attributes["uuid"]


@dataclass(frozen=True)
class Layout:
    seed: str
    mix: str
    nodes: int
    occupied: int  # how many devices pods hold before the cases
    admin_occupants: tuple[bool, ...]


@dataclass
class Case:
    seed: str
    namespace: str
    objects: list[Obj]  # ResourceClaims and ResourceClaimTemplates, in creation order
    pod: Obj

    @property
    def claims(self) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == "ResourceClaim"]

    @property
    def templates(self) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == "ResourceClaimTemplate"]


def generate_layout(seed: str) -> Layout:
    rng = random.Random(seed)
    nodes = rng.randint(2, 3)
    entries = [f"{rng.choice(MODELS)}:{rng.randint(1, 4)}" for _ in range(nodes)]
    occupied = rng.choice((0, 1, 2, 2, 3, 4))
    return Layout(seed, ",".join(entries), nodes, occupied, tuple(rng.random() < 0.25 for _ in range(occupied)))


def choose_occupied(layout: Layout, inventory: list[Device]) -> list[Device]:
    rng = random.Random(layout.seed + "/occupants")
    return rng.sample(inventory, min(layout.occupied, len(inventory)))


class CaseGenerator:
    """One case from its seed, the layout's devices and the Kubernetes version (pure)."""

    def __init__(self, seed: str, inventory: list[Device], held: list[Device], version: str) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.inventory = inventory
        self.held = held
        self.minor = int(version.split(".")[1])
        self.admin = False

    def values(self, kind: str, name: str) -> list[str]:
        return sorted({d.attributes[name] for d in self.inventory if d.type == kind and name in d.attributes})

    def gpu_selector(self) -> str:
        rng = self.rng
        products = [*self.values("gpu", "productName")] * 3 + [ABSENT_PRODUCT]
        roots = self.values("gpu", "resource.kubernetes.io/pcieRoot") or ["pci0000:00"]
        kinds: list[tuple[float, Callable[[], str]]] = [
            (3, lambda: f'{D}.productName == "{rng.choice(products)}"'),
            (
                3,
                lambda: (
                    f'{C}.memory.compareTo(quantity("{rng.choice(["16Gi", "24Gi", "40Gi", "80Gi", "185Gi"])}")) >= 0'
                ),
            ),
            (1, lambda: f'{C}.memory.isLessThan(quantity("{rng.choice(["24Gi", "80Gi", "100Gi"])}"))'),
            (
                1,
                lambda: (
                    f"{D}.architecture in {json.dumps(rng.sample(['Hopper', 'Ampere', 'Ada Lovelace', 'Blackwell'], 2))}"
                ),
            ),
            (
                1,
                lambda: f'{D}.cudaComputeCapability.isGreaterThan(semver("{rng.choice(["8.0.0", "8.6.0", "9.0.0"])}"))',
            ),
            (1, lambda: f'device.attributes["resource.kubernetes.io"].pcieRoot == "{rng.choice(roots)}"'),
            (1, lambda: f'{D}.addressingMode == "{rng.choice(["ATS", "HMM"])}"'),
            (0.5, lambda: f"!has({D}.profile)"),
            # Full GPUs have no profile: a CEL runtime error wherever a full GPU is tried.
            (0.25, lambda: f'{D}.profile == "1g.10gb"'),
            *self.held_selectors(),
        ]
        return self.pick(kinds)

    def mig_selector(self) -> str:
        rng = self.rng
        profiles = [*self.values("mig", "profile")] * 3 + ["7g.80gb"]
        products = [*self.values("mig", "productName")] * 3 + [ABSENT_PRODUCT]
        parents = self.values("mig", "parentUUID") or ["GPU-00000000-0000-0000-0000-000000000000"]
        kinds: list[tuple[float, Callable[[], str]]] = [
            (3, lambda: f'{D}.profile == "{rng.choice(profiles)}"'),
            (1, lambda: f'{D}.profile.startsWith("{rng.choice(["1g", "2g", "3g"])}")'),
            (2, lambda: f'{D}.productName == "{rng.choice(products)}"'),
            (2, lambda: f'{C}.memory.compareTo(quantity("{rng.choice(["9Gi", "19Gi", "20Gi", "40Gi"])}")) >= 0'),
            (1, lambda: f'{C}.multiprocessors.compareTo(quantity("{rng.choice([16, 20, 28, 40])}")) > 0'),
            (1, lambda: f'{D}.parentUUID == "{rng.choice(parents)}"'),
            (1, lambda: f'"memorySlice0" in {C}'),
            *self.held_selectors(),
        ]
        return self.pick(kinds)

    def held_selectors(self) -> list[tuple[float, Callable[[], str]]]:
        """Devices pods hold (an admin-access request may take them all the same), or one of them."""
        if not self.held:
            return []
        uuids = sorted(d.uuid for d in self.held)
        return [
            (1.5, lambda: f'{D}.uuid == "{self.rng.choice(uuids)}"'),
            (0.5, lambda: f"{D}.uuid in {json.dumps(self.rng.sample(uuids, min(2, len(uuids))))}"),
        ]

    def pick(self, kinds: list[tuple[float, Callable[[], str]]]) -> str:
        return self.rng.choices([k for _, k in kinds], weights=[w for w, _ in kinds])[0]()

    def device_request(self, *, sub: bool) -> Obj:
        rng = self.rng
        roll = rng.random()
        kinds = {d.type for d in self.inventory}
        gpus = 0.55 if kinds == {"gpu", "mig"} else 0.9 if "gpu" in kinds else 0.1  # some ask for what is not there
        klass = "gpu.nvidia.com" if roll < gpus else "mig.nvidia.com" if roll < 0.98 else "tpu.example.com"
        body: Obj = {"deviceClassName": klass}
        selector = self.mig_selector if klass == "mig.nvidia.com" else self.gpu_selector
        selectors = [selector() for _ in range(rng.choice((0, 0, 0, 1, 1, 1, 2)))]
        if selectors:
            body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        if rng.random() < (0.3 if sub else 0.12):  # two All subrequests in a row: see test_allocator
            body["allocationMode"] = "All"
        else:
            body["count"] = rng.choice(
                (1, 1, 1, 1, 2, 2, 3, 4) if klass == "gpu.nvidia.com" else (1, 1, 1, 2, 2, 3, 4, 7)
            )
        if not sub and rng.random() < 0.1:
            body["adminAccess"] = True
            self.admin = True
        return body

    def request(self, name: str) -> Obj:
        if self.rng.random() < 0.25:
            subs = [{"name": f"s{i}", **self.device_request(sub=True)} for i in range(self.rng.randint(2, 3))]
            return {"name": name, "firstAvailable": subs}
        return {"name": name, "exactly": self.device_request(sub=False)}

    def constraint(self, requests: list[Obj]) -> Obj:
        rng = self.rng
        attribute = rng.choice(
            [
                "resource.kubernetes.io/pcieRoot",
                "gpu.nvidia.com/productName",
                "gpu.nvidia.com/parentUUID",
                "gpu.nvidia.com/architecture",
                "gpu.nvidia.com/profile",
            ]
        )
        out: Obj = {"matchAttribute": attribute}
        if self.minor >= 36 and rng.random() < 0.25:  # DRAConsumableCapacity (on from 1.36)
            out = {"distinctAttribute": rng.choice(["resource.kubernetes.io/pciBusID", "gpu.nvidia.com/uuid"])}
        if len(requests) > 1 and rng.random() < 0.5:
            chosen = rng.sample(requests, rng.randint(1, len(requests)))
            names = []
            for r in chosen:
                subs = r.get("firstAvailable")
                names.append(f"{r['name']}/{rng.choice(subs)['name']}" if subs and rng.random() < 0.5 else r["name"])
            out["requests"] = names
        return out

    def claim_spec(self) -> Obj:
        requests = [self.request(f"r{i}") for i in range(self.rng.choice((1, 1, 1, 1, 1, 2, 2, 3)))]
        devices: Obj = {"requests": requests}
        if self.rng.random() < 0.35:
            devices["constraints"] = [self.constraint(requests)]
        return {"devices": devices}

    def case(self, name: str) -> Case:
        rng = self.rng
        objects: list[Obj] = []
        entries: list[Obj] = []
        for i in range(1 if rng.random() < 0.75 else 2):
            claim_name = f"{name}-c{i}"
            spec = self.claim_spec()
            if rng.random() < 0.3:
                template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"}
                objects.append({**template, "metadata": {"name": claim_name}, "spec": {"spec": spec}})
                entries.append({"name": f"c{i}", "resourceClaimTemplateName": claim_name})
            else:
                claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
                objects.append({**claim, "metadata": {"name": claim_name}, "spec": spec})
                entries.append({"name": f"c{i}", "resourceClaimName": claim_name})
        namespace = ADMIN_NS if self.admin else CASES_NS
        placement: Obj = {}
        nodes = sorted({d.node for d in self.inventory})
        roll = rng.random()
        if roll < 0.1:  # explain reads only the nodes the pod may use
            placement["nodeSelector"] = {"kubernetes.io/hostname": rng.choice(nodes)}
        elif roll < 0.15:
            term = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [rng.choice(nodes)]}
            required = {"nodeSelectorTerms": [{"matchExpressions": [term]}]}
            placement["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        for obj in objects:
            obj["metadata"]["namespace"] = namespace
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedulingGates": [{"name": HOLD}],
                "terminationGracePeriodSeconds": 0,
                **placement,
                "resourceClaims": entries,
                "containers": [
                    {"name": "main", "image": IMAGE, "resources": {"claims": [{"name": e["name"]} for e in entries]}}
                ],
            },
        }
        return Case(self.seed, namespace, objects, pod)


# --------------------------------------------------------------------------- judging


@dataclass
class Verdict:
    """What kube-scheduler did with the ungated pod."""

    node: str = ""  # bound to
    reason: str = ""  # PodScheduled=False reason (Unschedulable, SchedulerError) or "FailedScheduling"
    message: str = ""
    allocation: list[str] = field(default_factory=list)  # claim: request -> pool/device of the bound pod

    def describe(self) -> str:
        if self.node:
            return f"bound to {self.node}: " + ("; ".join(self.allocation) or "no allocation")
        if self.reason:
            return f"not scheduled ({self.reason}): {self.message}"
        return f"no verdict within {VERDICT_TIMEOUT:.0f} s"


@dataclass
class Outcome:
    case: Case
    layout: Layout
    holders: list[str]
    exit_code: int
    answer: Obj | None
    stderr: str
    verdict: Verdict
    problems: list[str] = field(default_factory=list)
    allocation_note: str = ""  # explain chose other devices on the scheduler's node
    known: str = ""  # why a disagreement is a known difference

    def report(self, version: str) -> str:
        lines = [
            f"seed {self.case.seed} (Kubernetes {version}, mix {self.layout.mix}, layout seed {self.layout.seed})",
            *(f"  problem: {p}" for p in self.problems),
        ]
        if self.known:
            lines.append(f"  known difference: {self.known}")
        if self.allocation_note:
            lines.append(f"  note: {self.allocation_note}")
        lines.append("  devices held before the case: " + ("; ".join(self.holders) or "none"))
        lines.append(f"  kube-scheduler: {self.verdict.describe()}")
        lines.append(
            f"  explain: exit {self.exit_code}" + (f", stderr: {self.stderr.strip()}" if self.stderr.strip() else "")
        )
        if self.answer is not None:
            lines.append("  explain -o json: " + json.dumps(self.answer, sort_keys=True))
        lines.append("  case objects:")
        lines.extend(f"    {json.dumps(o, sort_keys=True)}" for o in [*self.case.objects, self.case.pod])
        return "\n".join(lines)


def judge(outcome: Outcome) -> None:
    """Fill ``outcome.problems``: where explain and the scheduler disagree."""
    answer, verdict = outcome.answer, outcome.verdict
    if answer is None or outcome.exit_code not in (0, 1):
        outcome.problems.append(f"explain failed (exit {outcome.exit_code})")
        return
    fits = [n["node"] for n in answer.get("nodes") or [] if n.get("satisfiable")]
    if bool(answer.get("satisfiable")) != (outcome.exit_code == 0):
        outcome.problems.append(f"explain exit {outcome.exit_code} contradicts satisfiable={answer.get('satisfiable')}")
    if verdict.node:
        if not answer.get("satisfiable"):
            outcome.problems.append(f"the scheduler bound the pod to {verdict.node}, explain says it fits nowhere")
        elif verdict.node not in fits:
            outcome.problems.append(
                f"the scheduler bound the pod to {verdict.node}, explain says it fits only on {fits}"
            )
        else:
            node = next(n for n in answer["nodes"] if n["node"] == verdict.node)
            mine = sorted(f"{a['request']} -> {a['pool']}/{a['device']}" for a in node.get("allocation") or [])
            theirs = sorted(a.split(": ", 1)[1].removesuffix(ADMIN_MARK) for a in verdict.allocation)
            if mine != theirs:
                outcome.allocation_note = f"on {verdict.node} explain allocates {mine}, the scheduler {theirs}"
        return
    if not verdict.reason:
        outcome.problems.append("the scheduler gave no verdict")
        return
    if answer.get("satisfiable"):
        outcome.problems.append(f"the scheduler refused the pod, explain says it fits on {fits}")
        return
    errors = answer.get("errors") or []
    nodes = answer.get("nodes") or []
    if not errors and (not nodes or any(not n.get("reasons") for n in nodes)):
        outcome.problems.append("explain says the pod does not fit but gives no reason for some node")
    if verdict.reason == "SchedulerError":
        said = PLUGIN_ERROR.match(verdict.message)
        if not errors:
            outcome.problems.append("the scheduler failed with an error, explain reports no error")
        elif said and said.group(1) not in errors:  # explain words the allocator's errors as upstream does
            outcome.problems.append(f"the scheduler's error is not among explain's: {said.group(1)!r}")


def cel_error_worded_as_1_37(outcome: Outcome) -> bool:
    """Kubernetes 1.37 names the device in a CEL runtime error and adds a hint
    (kubernetes/kubernetes#136709): ``claim X: selector #0 on device D: CEL runtime error: no such
    key: profile. consider using CEL optional chaining ...``. Explain follows 1.36, the newest
    version it emulates, whose error is ``claim X: selector #0: CEL runtime error: no such key:
    profile``; otherwise the two agree (both refuse the pod with that error)."""
    said = PLUGIN_ERROR.match(outcome.verdict.message)
    if not said or outcome.answer is None or not outcome.case.seed.split("/")[1].startswith("1.37"):
        return False
    plain = re.sub(r"(selector #\d+) on device \S+?:", r"\1:", said.group(1))
    plain = re.sub(r"\. consider using CEL optional chaining.*$", "", plain, flags=re.DOTALL)
    errors = outcome.answer.get("errors") or []
    return plain in errors and all(p.startswith("the scheduler's error is not among") for p in outcome.problems)


# Known differences: (predicate on a disagreeing outcome, why it is not explain's bug).
KNOWN_DIFFERENCES: list[tuple[Callable[[Outcome], bool], str]] = [
    (
        cel_error_worded_as_1_37,
        "Kubernetes 1.37 words CEL runtime errors with the device and a hint; explain words them as 1.36",
    ),
]


# --------------------------------------------------------------------------- the cluster


def device_classes() -> list[Obj]:
    """The NVIDIA DeviceClasses as the project's operand render makes them."""
    manifest = {"apiVersion": gc.API_VERSION, "kind": gc.KIND, "metadata": {"name": "gpu-cluster"}, "spec": {}}
    result = validate_gpucluster(manifest)
    assert result.ok and result.obj is not None, result.problems
    env = {
        name: "registry.example/operand:1"
        for name in ("DRA_DRIVER_IMAGE", "DCGM_EXPORTER_IMAGE", "DCGM_IMAGE", "VALIDATOR_IMAGE")
    }
    objs = render(result.obj, ClusterFacts(env=env))
    return [
        o for o in objs if o["kind"] == "DeviceClass" and o["metadata"]["name"] in ("gpu.nvidia.com", "mig.nvidia.com")
    ]


def plugin_daemonset() -> Obj:
    """A DaemonSet the kubelet stand-in takes for the DRA driver's kubelet plugin (it is not run)."""
    labels = {"app": PLUGIN}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PLUGIN, "namespace": PLUGIN_NS},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "gpus", "image": "registry.example/dra-driver:1"}]},
            },
        },
    }


def create(api: Api, obj: Obj) -> Obj:
    namespace = obj["metadata"].get("namespace")
    kind = obj["kind"]
    plural = {"ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates"}.get(kind)
    if plural:
        return api.ok("POST", f"{DRA}/namespaces/{namespace}/{plural}", obj)
    if kind == "Pod":
        return api.ok("POST", f"/api/v1/namespaces/{namespace}/pods", obj)
    if kind == "DeviceClass":
        return api.ok("POST", f"{DRA}/deviceclasses", obj)
    if kind == "DaemonSet":
        return api.ok("POST", f"/apis/apps/v1/namespaces/{namespace}/daemonsets", obj)
    raise AssertionError(kind)


def namespace(api: Api, name: str, labels: dict[str, str] | None = None) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
    api.ok("POST", "/api/v1/namespaces", body)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def inventory_of(slices: list[Obj]) -> list[Device]:
    out = []
    for s in sorted(slices, key=lambda s: s["spec"]["nodeName"]):
        for d in s["spec"].get("devices") or []:
            attributes = {}
            for name, value in (d.get("attributes") or {}).items():
                plain = value.get("string", value.get("version"))
                if isinstance(plain, str):
                    attributes[name] = plain
            capacity = {name: c["value"] for name, c in (d.get("capacity") or {}).items()}
            out.append(Device(s["spec"]["nodeName"], d["name"], attributes["type"], attributes, capacity))
    return out


def occupant_objects(index: int, device: Device, admin: bool) -> tuple[Obj, Obj]:
    name = f"occ-{index}"
    request: Obj = {
        "deviceClassName": f"{device.type}.nvidia.com",
        "count": 1,
        "selectors": [{"cel": {"expression": f'{D}.uuid == "{device.uuid}"'}}],
    }
    if admin:
        request["adminAccess"] = True
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": OCCUPANTS_NS},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": request}]}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": OCCUPANTS_NS},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": device.node},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "dev", "resourceClaimName": name}],
            "containers": [{"name": "main", "image": IMAGE, "resources": {"claims": [{"name": "dev"}]}}],
        },
    }
    return claim, pod


def results(claim: Obj) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    out = []
    for r in (allocation.get("devices") or {}).get("results") or []:
        admin = ADMIN_MARK if r.get("adminAccess") else ""
        out.append(f"{r['request']} -> {r['pool']}/{r['device']}{admin}")
    return out


@dataclass
class Cluster:
    """One layout's running control plane."""

    plane: ControlPlane
    api: Api
    inventory: list[Device]
    held: list[Device]  # devices the occupants' claims hold (or, with admin access, use)
    holders: list[str]


def start_cluster(version: str, layout: Layout) -> Cluster:
    """The layout's control plane, with the DeviceClasses, the nodes' slices and the occupants' pods
    running; :func:`stop_clusters` stops it (also when this raises)."""
    plane = ControlPlane(ClusterOptions(version=version, nodes=layout.nodes, gpus_per_node=2, mix=layout.mix))
    STARTED.append(plane)
    plane.up()
    api = kube_client(plane)
    for klass in device_classes():
        create(api, klass)
    namespace(api, PLUGIN_NS)
    namespace(api, CASES_NS)
    namespace(api, ADMIN_NS, ADMIN_LABEL)
    namespace(api, OCCUPANTS_NS, ADMIN_LABEL)
    create(api, plugin_daemonset())

    def published() -> list[Obj] | None:
        slices = api.ok("GET", f"{DRA}/resourceslices")["items"]
        nodes = {s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] == "gpu.nvidia.com"}
        return slices if nodes >= set(plane.node_names) else None

    inventory = inventory_of(wait_for("the nodes' ResourceSlices", published))
    occupied = choose_occupied(layout, inventory)
    for i, (device, admin) in enumerate(zip(occupied, layout.admin_occupants, strict=False)):
        claim, pod = occupant_objects(i, device, admin)
        create(api, claim)
        create(api, pod)

    def running() -> bool:
        pods = api.ok("GET", f"/api/v1/namespaces/{OCCUPANTS_NS}/pods")["items"]
        return len(pods) == len(occupied) and all(p.get("status", {}).get("phase") == "Running" for p in pods)

    wait_for(f"the occupants of {[d.node + '/' + d.name for d in occupied]} to run", running)
    claims = api.ok("GET", f"{DRA}/namespaces/{OCCUPANTS_NS}/resourceclaims")["items"]
    holders = [f"{OCCUPANTS_NS}/{c['metadata']['name']}: {', '.join(results(c))}" for c in claims]
    return Cluster(plane, api, inventory, occupied, holders)


STARTED: list[ControlPlane] = []


def stop_clusters() -> None:
    while STARTED:
        STARTED.pop().stop()


@pytest.fixture
def cluster_factory() -> Iterator[Callable[[str, Layout], Cluster]]:
    """Starts a layout's cluster, stopping the one before (one control plane at a time)."""

    def start(version: str, layout: Layout) -> Cluster:
        stop_clusters()
        return start_cluster(version, layout)

    try:
        yield start
    finally:
        stop_clusters()


def pod_claim_names(api: Api, case: Case) -> list[str]:
    pod = api.ok("GET", f"/api/v1/namespaces/{case.namespace}/pods/{case.pod['metadata']['name']}")
    generated = {
        s["name"]: s.get("resourceClaimName") for s in pod.get("status", {}).get("resourceClaimStatuses") or []
    }
    names = []
    for entry in case.pod["spec"]["resourceClaims"]:
        name = entry.get("resourceClaimName") or generated.get(entry["name"])
        if name:
            names.append(name)
    return names


def scheduler_verdict(api: Api, case: Case) -> Verdict:
    name = case.pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{case.namespace}/pods/{name}"
    events = f"/api/v1/namespaces/{case.namespace}/events"
    deadline = time.monotonic() + VERDICT_TIMEOUT
    polls = 0
    while time.monotonic() < deadline:
        pod = api.ok("GET", path)
        if pod["spec"].get("nodeName"):
            allocation = []
            for claim_name in pod_claim_names(api, case):
                claim = api.ok("GET", f"{DRA}/namespaces/{case.namespace}/resourceclaims/{claim_name}")
                allocation.extend(f"{claim_name}: {r}" for r in results(claim))
            return Verdict(node=pod["spec"]["nodeName"], allocation=allocation)
        for c in pod.get("status", {}).get("conditions") or []:
            # SchedulingGated is the gate's condition, until the scheduler has looked at the pod.
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") in REFUSED:
                return Verdict(reason=c["reason"], message=c.get("message", ""))
        polls += 1
        if polls % 5 == 0:
            query = f"?fieldSelector=involvedObject.name={name},reason=FailedScheduling"
            failed = api.ok("GET", events + query)["items"]
            if failed:
                return Verdict(reason="FailedScheduling", message=failed[-1].get("message", ""))
        time.sleep(0.1)
    return Verdict()


def run_explain(plane: ControlPlane, case: Case) -> tuple[int, Obj | None, str]:
    argv = [GPUCLUSTER, "explain", f"pod/{case.pod['metadata']['name']}", "-n", case.namespace]
    argv += ["--kubeconfig", str(plane.admin_kubeconfig), "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        answer = None
    return done.returncode, answer if isinstance(answer, dict) else None, done.stderr


def clean(api: Api, case: Case) -> None:
    ns = case.namespace
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{case.pod['metadata']['name']}", {"gracePeriodSeconds": 0})
    for obj in case.objects:
        plural = "resourceclaims" if obj["kind"] == "ResourceClaim" else "resourceclaimtemplates"
        api.request("DELETE", f"{DRA}/namespaces/{ns}/{plural}/{obj['metadata']['name']}")

    def gone() -> bool:
        pods = api.ok("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        claims = api.ok("GET", f"{DRA}/namespaces/{ns}/resourceclaims")["items"]
        return not pods and not claims

    wait_for(f"case {case.seed} to be deleted", gone, timeout=60)


def run_case(cluster: Cluster, layout: Layout, case: Case) -> Outcome:
    api = cluster.api
    for obj in case.objects:
        create(api, obj)
    create(api, case.pod)
    if case.templates:  # explain the claims generated for the pod, as the scheduler sees them
        wait_for("the generated claims", lambda: len(pod_claim_names(api, case)) == len(case.objects), timeout=30)
    exit_code, answer, stderr = run_explain(cluster.plane, case)
    api.ok(
        "PATCH", f"/api/v1/namespaces/{case.namespace}/pods/{case.pod['metadata']['name']}",
        [{"op": "remove", "path": "/spec/schedulingGates"}], content_type="application/json-patch+json",
    )  # fmt: skip
    verdict = scheduler_verdict(api, case)
    outcome = Outcome(case, layout, cluster.holders, exit_code, answer, stderr, verdict)
    judge(outcome)
    for applies, why in KNOWN_DIFFERENCES:
        if outcome.problems and applies(outcome):
            outcome.known = why
    clean(api, case)
    return outcome


# --------------------------------------------------------------------------- the tier


@pytest.mark.parametrize("version", VERSIONS)
def test_explain_agrees_with_kube_scheduler(
    version: str, cluster_factory: Callable[[str, Layout], Cluster], capsys: pytest.CaptureFixture[str]
) -> None:
    require_kube(version)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    for index in range(LAYOUTS):
        layout = generate_layout(f"{SEED}/{version}/L{index}")
        seeds = [f"{layout.seed}/C{c}" for c in range(CASES_PER_LAYOUT)]
        if ONLY and not ONLY & set(seeds):
            continue
        cluster = cluster_factory(version, layout)
        for c, seed in enumerate(seeds):
            if ONLY and seed not in ONLY:
                continue
            case = CaseGenerator(seed, cluster.inventory, cluster.held, version).case(f"case-{index}-{c}")
            outcomes.append(run_case(cluster, layout, case))
    disagreements = [o for o in outcomes if o.problems and not o.known]
    known = [o for o in outcomes if o.problems and o.known]
    notes = [o for o in outcomes if o.allocation_note]
    summary = f"explain vs kube-scheduler {version}: {len(outcomes)} cases, {len(disagreements)} disagreements"
    bound = sum(1 for o in outcomes if o.verdict.node)
    errors = sum(1 for o in outcomes if o.verdict.reason == "SchedulerError")
    summary += f" ({bound} bound, {len(outcomes) - bound} refused, {errors} of them with a scheduler error)"
    if known:
        summary += f", {len(known)} known differences"
    if notes:
        summary += f", {len(notes)} with other devices chosen"
    summary += f"; {time.monotonic() - started:.0f} s"
    with capsys.disabled():
        print(f"\n{summary}")
        for o in outcomes if VERBOSE else [*disagreements, *known, *notes]:
            print(o.report(version) if o.problems or o.allocation_note else f"{o.case.seed}: {o.verdict.describe()}")
    assert not disagreements, summary + "\n" + "\n".join(o.report(version) for o in disagreements)
