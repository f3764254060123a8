"""The structured allocator (gpucluster.dra.allocator) against Kubernetes' own expectations.

Test names in comments ("upstream: <name>") are the cases of
k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/allocator_testing.go
(release-1.34 unless noted) whose expected outcome a test reproduces.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.dra import allocator
from gpucluster.dra.allocator import AllocatorInputError, Explanation, explain
from gpucluster.sandbox.sim import gpunodes as simulate

GPU = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"

Obj = dict[str, Any]


# ----------------------------------------------------------------------------- builders


def device_class(name: str = GPU, *expressions: str) -> Obj:
    exprs = expressions or (f"device.driver == '{GPU}' && device.attributes['{GPU}'].type == 'gpu'",)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
    }


def driver_class(name: str, driver: str) -> Obj:
    return device_class(name, f"device.driver == '{driver}'")


def sel(*expressions: str) -> list[Obj]:
    return [{"cel": {"expression": e}} for e in expressions]


def exact(name: str = "gpu", cls: str = GPU, count: Any = None, **extra: Any) -> Obj:
    body: Obj = {"deviceClassName": cls, **extra}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def first_available(name: str, *subs: Obj) -> Obj:
    return {"name": name, "firstAvailable": list(subs)}


def sub(name: str, cls: str = GPU, count: int | None = None, **extra: Any) -> Obj:
    body: Obj = {"name": name, "deviceClassName": cls, **extra}
    if count is not None:
        body["count"] = count
    return body


def claim(*requests: Obj, name: str = "c", constraints: list[Obj] | None = None, kind: str = "ResourceClaim") -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    spec: Obj = {"devices": devices}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec,
    }


def dev(name: str, attrs: dict[str, Any] | None = None, **extra: Any) -> Obj:
    attributes = {"type": {"string": "gpu"}}
    for key, value in (attrs or {}).items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        attributes[key] = {kind: value}
    return {"name": name, "attributes": attributes, **extra}


def rslice(
    name: str,
    node: str | None,
    pool: str,
    *devices: Obj,
    driver: str = GPU,
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> Obj:
    body: Obj = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": list(devices),
        **spec,
    }
    if node is not None:
        body["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}


def node(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


def allocated(name: str, *devices: tuple[str, str, str], admin: bool = False) -> Obj:
    results = [
        {"request": "gpu", "driver": d, "pool": p, "device": x, **({"adminAccess": True} if admin else {})}
        for d, p, x in devices
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [exact()]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def h100_node(name: str = "node-a", gpus: int = 8) -> list[Obj]:
    return [*simulate.node_slices(name, "H100", gpus), simulate.node_object(name, "H100", gpus)]


# Tests of taints and partitionable devices switch their gates on (off by default before 1.36).
GATED_ON = {"DRADeviceTaints": True, "DRAPartitionableDevices": True}


def explain_gated(*args: Any, **kwargs: Any) -> Explanation:
    return explain(*args, feature_gates=GATED_ON, **kwargs)


def picks(result: Explanation, node_name: str | None = None) -> list[tuple[str, str, str, str]]:
    node_result = result.nodes[0] if node_name is None else next(n for n in result.nodes if n.node == node_name)
    return [(a.request, a.driver, a.pool, a.device) for a in node_result.allocation]


def node_of(result: Explanation, name: str) -> allocator.NodeResult:
    return next(n for n in result.nodes if n.node == name)


# ----------------------------------------------------------------------------- basics


def test_eight_gpus_on_a_realistic_h100_node() -> None:
    result = explain(
        [claim(exact(count=8, selectors=sel(f"device.attributes['{GPU}'].productName == '{H100}'")))],
        [*h100_node(), device_class()],
    )
    assert result.satisfiable
    assert result.errors == []
    assert picks(result) == [("gpu", GPU, "node-a", f"gpu-{i}") for i in range(8)]
    as_json = result.to_json()
    assert set(as_json) == {"satisfiable", "nodes", "errors", "kubernetesVersion", "featureGates"}
    assert set(as_json["nodes"][0]) == {"node", "satisfiable", "allocation", "reasons"}
    assert as_json["nodes"][0]["allocation"][0] == {
        "claim": "default/c",
        "request": "gpu",
        "driver": GPU,
        "pool": "node-a",
        "device": "gpu-0",
    }
    assert as_json["nodes"][0]["reasons"] == ["request gpu: 8/8 devices usable, need 8"]


def test_selector_explains_every_rejected_device_per_node() -> None:
    cluster = [
        *h100_node("h100-node"),
        *simulate.node_slices("l4-node", "L4", 4),
        simulate.node_object("l4-node", "L4", 4),
        device_class(),
    ]
    result = explain(
        [claim(exact(count=2, selectors=sel(f"device.attributes['{GPU}'].productName == '{H100}'")))], cluster
    )
    assert result.satisfiable
    l4 = node_of(result, "l4-node")
    assert not l4.satisfiable
    assert l4.allocation == []
    assert l4.reasons[0] == "request gpu: 0/4 devices usable, need 2; 4 selector #0 false"
    assert l4.reasons[1:] == [f"request gpu: {GPU}/l4-node/gpu-{i}: selector #0 false" for i in range(4)]
    assert node_of(result, "h100-node").satisfiable
    text = result.to_text()
    assert "l4-node: does not fit" in text
    assert "request gpu: 0/4 devices usable, need 2; 4 selector #0 false (device.attributes" in text
    assert "h100-node: fits: request gpu -> gpu-0, gpu-1" in text


def test_class_selectors_are_evaluated_before_request_selectors() -> None:
    # A MIG node announces only MIG devices: the class (type == 'gpu') rejects them first.
    mig = simulate.node_slices("mig-node", "A100", 1, mig_gpus={0: ["1g.10gb"] * 7})
    result = explain(
        [claim(exact(selectors=sel(f"device.attributes['{GPU}'].productName == 'nothing'")))],
        [*mig, device_class()],
    )
    assert not result.satisfiable
    report = result.nodes[0].requests[0]
    assert report.considered == 7
    assert {reason for _, reason in report.rejections} == {"class selector #0 false"}


def test_resource_claim_template_uses_spec_spec() -> None:
    result = explain([claim(exact(count=8), kind="ResourceClaimTemplate")], [*h100_node(), device_class()])
    assert result.satisfiable
    assert len(picks(result)) == 8


def test_claims_are_allocated_together_on_one_node() -> None:
    # upstream: not-enough-suitable-devices (two claims, one device)
    cluster = [rslice("s", "n1", "p1", dev("d1")), device_class()]
    result = explain([claim(exact(), name="a"), claim(exact(), name="b")], cluster)
    assert not result.satisfiable
    # upstream: small-and-large-backtrack-claims (the second claim needs the "large" device
    # the first one took).
    cluster = [
        rslice("s", "n1", "p1", dev("large", {"size": "large"}), dev("small", {"size": "small"})),
        device_class(),
    ]
    result = explain(
        [
            claim(exact(), name="a"),
            claim(exact(selectors=sel(f"device.attributes['{GPU}'].size == 'large'")), name="b"),
        ],
        cluster,
    )
    assert result.satisfiable
    assert [(a.claim, a.device) for a in result.nodes[0].allocation] == [("default/a", "small"), ("default/b", "large")]


def test_backtracking_across_requests() -> None:
    # upstream: small-and-large-backtrack-requests
    cluster = [
        rslice("s", "n1", "p1", dev("large", {"size": "large"}), dev("small", {"size": "small"})),
        device_class(),
    ]
    result = explain(
        [claim(exact("small"), exact("large", selectors=sel(f"device.attributes['{GPU}'].size == 'large'")))], cluster
    )
    assert picks(result) == [("small", GPU, "p1", "small"), ("large", GPU, "p1", "large")]


def test_missing_device_class_is_unsatisfiable_like_prefilter() -> None:
    result = explain([claim(exact(cls="foo"))], [*h100_node(), device_class()])
    assert not result.satisfiable
    assert result.nodes == []
    assert result.errors == ["request gpu: device class foo does not exist"]
    result = explain([claim(first_available("gpu", sub("a"), sub("b", cls="bar")))], [*h100_node(), device_class()])
    assert result.errors == ["request gpu/b: device class bar does not exist"]


# ----------------------------------------------------------------------------- CEL errors


def test_cel_runtime_error_aborts_with_schedulers_message() -> None:
    result = explain(
        [claim(exact(selectors=sel(f"device.attributes['{GPU}'].nosuch == 'x'")))], [*h100_node(), device_class()]
    )
    assert not result.satisfiable
    assert result.errors == ["claim default/c: selector #0: CEL runtime error: no such key: nosuch"]
    n = result.nodes[0]
    assert n.error == result.errors[0]
    assert result.errors[0] in n.reasons
    # Every device is explained, and kept apart from "no device matches".
    assert n.requests[0].rejections[0] == (f"{GPU}/node-a/gpu-0", "selector #0 CEL error: no such key: nosuch")


def test_cel_runtime_error_in_class_names_the_class() -> None:
    cls = device_class("broken", f"device.attributes['{GPU}'].nosuch == 'x'")
    result = explain([claim(exact(cls="broken"))], [*h100_node(), cls])
    assert result.errors == ["class broken: selector #0: CEL runtime error: no such key: nosuch"]
    assert result.nodes[0].requests[0].rejections[0][1] == "class selector #0 CEL error: no such key: nosuch"


def test_cel_error_on_a_device_the_search_never_reaches_is_harmless() -> None:
    # The allocator evaluates selectors lazily: a solution found before the failing device
    # means no error (and an in-use device is skipped before its selectors run).
    expr = f"device.attributes['{GPU}'].model == 'x'"
    cluster = [rslice("s", "n1", "p1", dev("d0", {"model": "x"}), dev("d1")), device_class()]
    result = explain([claim(exact(selectors=sel(expr)))], cluster)
    assert result.satisfiable
    assert picks(result) == [("gpu", GPU, "p1", "d0")]
    cluster = [
        rslice("s", "n1", "p1", dev("d0"), dev("d1", {"model": "x"})),
        device_class(),
        allocated("o", (GPU, "p1", "d0")),
    ]
    result = explain([claim(exact(selectors=sel(expr)))], cluster)
    assert result.satisfiable
    assert picks(result) == [("gpu", GPU, "p1", "d1")]
    # ... but asking for two reaches it.
    cluster = [rslice("s", "n1", "p1", dev("d0", {"model": "x"}), dev("d1")), device_class()]
    result = explain([claim(exact(count=2, selectors=sel(expr)))], cluster)
    assert result.errors == ["claim default/c: selector #0: CEL runtime error: no such key: model"]


def test_all_mode_evaluates_every_device_up_front() -> None:
    # upstream: validateDeviceRequest (allocationMode All) - a CEL error anywhere aborts.
    expr = f"device.attributes['{GPU}'].model == 'x'"
    cluster = [rslice("s", "n1", "p1", dev("d0", {"model": "x"}), dev("d1")), device_class()]
    result = explain([claim(exact(allocationMode="All", selectors=sel(expr)))], cluster)
    assert result.errors == ["claim default/c: selector #0: CEL runtime error: no such key: model"]


# ----------------------------------------------------------------------------- in use, admin access


def test_devices_of_allocated_claims_are_in_use() -> None:
    held = [(GPU, "node-a", f"gpu-{i}") for i in range(6)]
    cluster = [*h100_node(), device_class(), allocated("other", *held)]
    result = explain([claim(exact(count=4))], cluster)
    assert not result.satisfiable
    report = result.nodes[0].requests[0]
    assert (report.usable, report.considered) == (2, 8)
    assert report.rejections[0] == (f"{GPU}/node-a/gpu-0", "in use by default/other")
    assert result.nodes[0].reasons[0] == "request gpu: 2/8 devices usable, need 4; 6 in use"
    assert picks(explain([claim(exact(count=2))], cluster)) == [
        ("gpu", GPU, "node-a", "gpu-6"),
        ("gpu", GPU, "node-a", "gpu-7"),
    ]


def test_admin_access_results_do_not_hold_devices() -> None:
    cluster = [*h100_node(gpus=1), device_class(), allocated("monitor", (GPU, "node-a", "gpu-0"), admin=True)]
    assert explain([claim(exact())], cluster).satisfiable


def test_claim_being_explained_does_not_hold_its_own_devices() -> None:
    mine = allocated("c", (GPU, "node-a", "gpu-0"))
    cluster = [*h100_node(gpus=1), device_class(), mine]
    assert explain([claim(exact())], cluster).satisfiable


def test_admin_access_uses_devices_in_use() -> None:
    # upstream: count-devices-some-allocated-admin-access
    cluster = [rslice("s", "n1", "p1", dev("d1"), dev("d2")), device_class(), allocated("o", (GPU, "p1", "d1"))]
    result = explain([claim(exact(count=2, adminAccess=True))], cluster)
    assert picks(result) == [("gpu", GPU, "p1", "d1"), ("gpu", GPU, "p1", "d2")]
    # upstream: all-devices-some-allocated-admin-access
    result = explain([claim(exact(allocationMode="All", adminAccess=True))], cluster)
    assert picks(result) == [("gpu", GPU, "p1", "d1"), ("gpu", GPU, "p1", "d2")]
    # upstream: all-devices-some-allocated
    assert not explain([claim(exact(allocationMode="All"))], cluster).satisfiable


def test_admin_access_shares_devices_between_claims() -> None:
    cluster = [rslice("s", "n1", "p1", dev("d1"), dev("d2")), device_class()]
    # upstream: separate-claims-share-device-admin-access
    result = explain([claim(exact(adminAccess=True), name="a"), claim(exact(adminAccess=True), name="b")], cluster)
    assert [a.device for a in result.nodes[0].allocation] == ["d1", "d1"]
    # upstream: admin-access-claims-device-allocating-for-non-admin-access
    result = explain([claim(exact(), name="a"), claim(exact(adminAccess=True), name="b")], cluster)
    assert [a.device for a in result.nodes[0].allocation] == ["d1", "d1"]


def test_admin_access_does_not_take_a_device_twice_in_one_claim() -> None:
    # upstream: all-devices-some-allocating-admin-access
    cluster = [rslice("s", "n1", "p1", dev("d1"), dev("d2")), device_class()]
    a, b = exact("a", adminAccess=True), exact("b", adminAccess=True, allocationMode="All")
    result = explain([claim(a, b)], cluster)
    assert not result.satisfiable
    assert result.nodes[0].requests[1].rejections == [
        (f"{GPU}/p1/d1", "chosen for request a"),
        (f"{GPU}/p1/d2", "chosen for request a"),
    ]
    # The same two requests in two claims of one pod: admin access shares a device across claims.
    result = explain([claim(a, name="c1"), claim(b, name="c2")], cluster)
    assert [(x.claim, x.request, x.device) for x in result.nodes[0].allocation] == [
        ("default/c1", "a", "d1"),
        ("default/c2", "b", "d1"),
        ("default/c2", "b", "d2"),
    ]


# ----------------------------------------------------------------------------- allocation modes


def test_all_mode_takes_every_matching_device() -> None:
    # upstream: all-devices-many
    cluster = [rslice("s1", "n1", "p1", dev("d1")), rslice("s2", "n1", "p2", dev("d1")), device_class()]
    result = explain([claim(exact(allocationMode="All"))], cluster)
    assert picks(result) == [("gpu", GPU, "p1", "d1"), ("gpu", GPU, "p2", "d1")]
    assert result.nodes[0].reasons == ["request gpu: 2/2 devices usable, need all 2 matching"]


def test_all_mode_needs_at_least_one_device() -> None:
    # upstream: all-devices-slice-without-devices
    cluster = [rslice("s1", "n1", "p1"), device_class()]
    result = explain([claim(exact(allocationMode="All"))], cluster)
    assert not result.satisfiable
    assert result.nodes[0].reasons == [
        "no devices are published for this node",
        "request gpu: 0/0 devices usable, need all 0 matching",
    ]
    # One device in the slice: All takes it.
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    assert picks(explain([claim(exact(allocationMode="All"))], cluster)) == [("gpu", GPU, "p1", "d1")]


def test_all_mode_on_an_incomplete_pool_is_an_error() -> None:
    # upstream: all-devices-of-the-incomplete-pool
    cluster = [rslice("s1", "n1", "p1", dev("d1"), count=2), device_class()]
    result = explain([claim(exact(allocationMode="All"))], cluster)
    assert result.errors == [
        f"claim default/c, request gpu: asks for all devices, but resource pool {GPU}/p1 is currently being updated"
    ]


def test_all_mode_with_a_violated_constraint_is_an_error() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1", {"numa": 0}), dev("d2", {"numa": 1})), device_class()]
    result = explain([claim(exact(allocationMode="All"), constraints=[{"matchAttribute": f"{GPU}/numa"}])], cluster)
    assert result.errors == [
        f"claim default/c, request gpu: cannot add device {GPU}/p1/d2 because a claim constraint would not be satisfied"
    ]


def test_results_limit_of_32_devices() -> None:
    many = rslice("s1", "n1", "p1", *(dev(f"d{i}") for i in range(40)))
    # upstream: max-number-devices
    assert len(picks(explain([claim(exact(count=32))], [many, device_class()]))) == 32
    # upstream: too-many-devices-single-request
    result = explain([claim(exact(count=500))], [many, device_class()])
    assert result.errors == ["claim default/c: number of requested devices 500 exceeds the claim limit of 32"]
    # upstream: too-many-devices-total
    result = explain([claim(exact("a", count=32), exact("b"))], [many, device_class()])
    assert result.errors == ["claim default/c: number of requested devices 33 exceeds the claim limit of 32"]


# ----------------------------------------------------------------------------- firstAvailable


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    # upstream: prioritized-list-first-unavailable
    cluster = [
        rslice("s1", "n1", "p1", dev("d1"), driver="driver-a"),
        driver_class("a", "driver-a"),
        driver_class("b", "driver-b"),
    ]
    result = explain([claim(first_available("req-0", sub("sub-0", "b"), sub("sub-1", "a")))], cluster)
    assert picks(result) == [("req-0/sub-1", "driver-a", "p1", "d1")]
    reports = result.nodes[0].requests
    assert [(r.request, r.chosen) for r in reports] == [("req-0/sub-0", False), ("req-0/sub-1", True)]
    assert result.nodes[0].reasons[0].startswith("request req-0/sub-0: 0/1 devices usable, need 1, not chosen")
    # upstream: prioritized-list-non-available
    result = explain([claim(first_available("req-0", sub("sub-0", "b", 2), sub("sub-1", "a", 2)))], cluster)
    assert not result.satisfiable


def test_first_available_backtracks_into_a_later_subrequest() -> None:
    # upstream: prioritized-list-with-backtracking (big = 8Gi, small = 4Gi)
    big = f"device.attributes['{GPU}'].size == 'big'"
    any_size = f"device.attributes['{GPU}'].size == 'big' || device.attributes['{GPU}'].size == 'small'"
    cluster = [
        rslice("s1", "n1", "p1", dev("d1", {"size": "big"})),
        rslice("s2", "n1", "p2", dev("d2", {"size": "small"})),
        device_class(),
    ]
    result = explain(
        [
            claim(
                first_available("req-0", sub("sub-0", selectors=sel(big)), sub("sub-1", selectors=sel(any_size))),
                exact("req-1", selectors=sel(big)),
            )
        ],
        cluster,
    )
    assert picks(result) == [("req-0/sub-1", GPU, "p2", "d2"), ("req-1", GPU, "p1", "d1")]


def test_first_available_skips_subrequests_over_the_results_limit() -> None:
    # upstream: prioritized-list-too-many-in-first-subrequest
    cluster = [
        rslice("s1", "n1", "p1", dev("d1"), driver="driver-a"),
        driver_class("a", "driver-a"),
        driver_class("b", "driver-b"),
    ]
    result = explain([claim(first_available("req-0", sub("sub-0", "b", 500), sub("sub-1", "a", 1)))], cluster)
    assert picks(result) == [("req-0/sub-1", "driver-a", "p1", "d1")]


def test_first_available_results_limit_backtracking_matches_upstream_step_count() -> None:
    # upstream: prioritized-list-max-allocation-limit-request (expectNumAllocateOneInvocations: 75)
    cluster = [rslice("s1", "n1", "p1", *(dev(f"device-{i}") for i in range(64))), device_class()]
    req = claim(
        first_available("req-0", sub("sub-0", count=32), sub("sub-1", count=16)),
        first_available("req-1", sub("sub-0", count=32), sub("sub-1", count=16)),
    )
    result = explain([req], cluster)
    chosen = picks(result)
    assert [c[0] for c in chosen] == ["req-0/sub-1"] * 16 + ["req-1/sub-1"] * 16
    assert [c[3] for c in chosen] == [f"device-{i}" for i in range(32)]
    assert result.nodes[0].steps == 75


def test_first_available_all_mode_over_the_limit_matches_upstream() -> None:
    # upstream: prioritized-list-max-allocation-allocation-mode-all (expectNumAllocateOneInvocations: 42)
    cluster = [
        rslice("s1", "n1", "p1", *(dev(f"device-{i}") for i in range(31)), driver="driver-a"),
        rslice("s2", "n1", "p2", *(dev(f"device-{i}") for i in range(2)), driver="driver-b"),
        driver_class("a", "driver-a"),
        driver_class("b", "driver-b"),
    ]
    req = claim(
        first_available("req-0", sub("sub-0", "a", allocationMode="All"), sub("sub-1", "a", 2)),
        exact("req-1", "b", 2),
    )
    result = explain([req], cluster)
    assert picks(result) == [
        ("req-0/sub-1", "driver-a", "p1", "device-0"),
        ("req-0/sub-1", "driver-a", "p1", "device-1"),
        ("req-1", "driver-b", "p2", "device-0"),
        ("req-1", "driver-b", "p2", "device-1"),
    ]
    assert result.nodes[0].steps == 42


_V5 = f"device.attributes['{GPU}'].generation == 'v5'"
_V6 = f"device.attributes['{GPU}'].generation == 'v6'"
_ALL_V5 = sub("sub-1", selectors=sel(_V5), allocationMode="All")


def test_a_second_all_subrequest_gets_the_devices_of_the_first_in_1_34() -> None:
    # kube-scheduler 1.34.4 checks the second subrequest of a firstAvailable list under the first
    # one's key of its device-match cache (found by tests/realkube/test_explain_scheduler.py): with
    # both asking for All devices, the second gets what the first's class and selectors match.
    # 1.35 still does (the oracle's v0.35.10); 1.36 fixed it (upstream:
    # prioritized-list-allocation-mode-all-with-selectors, 1.36 table).
    cluster = [rslice("s1", "n1", "p1", dev("d1", {"generation": "v5"})), device_class()]
    subs = (
        sub("sub-0", selectors=sel(_V6), allocationMode="All"),
        sub("sub-1", selectors=sel(_V5), allocationMode="All"),
    )
    claims = [claim(first_available("req-0", *subs))]
    for version in ("1.34", "1.35"):
        old = explain(claims, cluster, kubernetes_version=version)
        assert not old.satisfiable
        assert old.nodes[0].reasons[0] == (
            f"request req-0/sub-1: Kubernetes {version} gives it the devices the class and selectors of req-0/sub-0 "
            "match (both ask for all devices), its own are not evaluated"
        )
        assert "request req-0/sub-1: gpu.nvidia.com/p1/d1: subrequest sub-0's selector #0 false" in old.nodes[0].reasons
    assert picks(explain(claims, cluster, kubernetes_version="1.36")) == [("req-0/sub-1", GPU, "p1", "d1")]
    # Where the first fails for another reason (here an untolerated taint), the second takes its
    # devices, though its own selector matches none of them.
    tainted = [
        rslice("s1", "n1", "p1", dev("d1", {"generation": "v6"}, taints=[taint()]), dev("d2", {"generation": "v5"})),
        device_class(),
    ]
    tolerant = sub("sub-1", selectors=sel(_V5), allocationMode="All", tolerations=[{"operator": "Exists"}])
    claims = [claim(first_available("req-0", subs[0], tolerant))]
    assert picks(explain_gated(claims, tainted, kubernetes_version="1.34")) == [("req-0/sub-1", GPU, "p1", "d1")]
    assert picks(explain_gated(claims, tainted, kubernetes_version="1.35")) == [("req-0/sub-1", GPU, "p1", "d1")]
    assert picks(explain(claims, tainted, kubernetes_version="1.36")) == [("req-0/sub-1", GPU, "p1", "d2")]
    # Only the first two: a third subrequest is checked under its own key (and fails here as the
    # next test says: after its first device it goes on as sub-0, which has no devices).
    exact_second = (subs[0], sub("sub-1", selectors=sel(_V6)), sub("sub-2", selectors=sel(_V5), allocationMode="All"))
    three = [claim(first_available("req-0", *exact_second))]
    old = explain(three, cluster, kubernetes_version="1.34")
    assert not old.satisfiable
    assert not old.nodes[0].notes
    assert picks(explain(three, cluster, kubernetes_version="1.35")) == [("req-0/sub-2", GPU, "p1", "d1")]


def test_an_all_subrequest_after_the_first_keeps_one_device_in_1_34() -> None:
    # kube-scheduler 1.34.4 looks for the next device of an All subrequest as the first
    # subrequest's (its recursion drops the subrequest index; found by
    # tests/realkube/test_explain_scheduler.py, seed 21/1.34/L0/C1): it keeps its first device and
    # the first subrequest supplies the rest. 1.35 fixed it (upstream:
    # prioritized-list-allocation-mode-all-with-selectors-multiple-pools, 1.35 table).
    cluster = [
        rslice("s1", "n1", "p1", *(dev(f"d{i}", {"generation": g}) for i, g in enumerate(("v5", "v6", "v5")))),
        device_class(),
    ]
    two_v6 = [claim(first_available("req-0", sub("sub-0", count=2, selectors=sel(_V6)), _ALL_V5))]
    assert picks(explain(two_v6, cluster, kubernetes_version="1.34")) == [
        ("req-0/sub-1", GPU, "p1", "d0"),
        ("req-0/sub-0", GPU, "p1", "d1"),
    ]
    assert picks(explain(two_v6, cluster, kubernetes_version="1.35")) == [
        ("req-0/sub-1", GPU, "p1", "d0"),
        ("req-0/sub-1", GPU, "p1", "d2"),
    ]
    # With the first subrequest asking for one device the All one stops at its first: a device
    # in use after it does not matter in 1.34.
    one_v6 = [claim(first_available("req-0", sub("sub-0", selectors=sel(_V6)), _ALL_V5))]
    busy = [*cluster, allocated("other", (GPU, "p1", "d1"), (GPU, "p1", "d2"))]
    assert picks(explain(one_v6, busy, kubernetes_version="1.34")) == [("req-0/sub-1", GPU, "p1", "d0")]
    assert not explain(one_v6, busy, kubernetes_version="1.35").satisfiable


# ----------------------------------------------------------------------------- constraints


def test_match_attribute_backtracks_like_upstream() -> None:
    # upstream: with-constraint-for-request-retry
    cluster = [
        rslice(
            "s1",
            "n1",
            "p1",
            dev("device-1", {"driverVersion": "1.0.0", "stringAttribute": "a"}),
            dev("device-2", {"driverVersion": "2.0.0", "stringAttribute": "b"}),
            dev("device-3", {"driverVersion": "3.0.0", "stringAttribute": "b"}),
        ),
        device_class(),
    ]
    constraints: list[Obj] = [
        {"requests": ["req-0"], "matchAttribute": f"{GPU}/driverVersion"},
        {"matchAttribute": f"{GPU}/stringAttribute"},
    ]
    result = explain([claim(exact("req-0"), exact("req-1"), constraints=constraints)], cluster)
    assert picks(result) == [("req-0", GPU, "p1", "device-2"), ("req-1", GPU, "p1", "device-3")]


def test_match_attribute_on_pcie_root_of_a_real_node() -> None:
    # Simulated H100 node: GPUs 0-3 share one PCIe root, 4-7 another.
    root = simulate.PCIE_ROOT_ATTRIBUTE
    slices = simulate.node_slices("node-a", "H100", 8)
    roots = [d["attributes"][root]["string"] for d in slices[0]["spec"]["devices"]]
    group = [i for i, r in enumerate(roots) if r == roots[0]]
    result = explain(
        [claim(exact(count=len(group)), constraints=[{"matchAttribute": root}])], [*slices, device_class()]
    )
    assert [a.device for a in result.nodes[0].allocation] == [f"gpu-{i}" for i in group]
    result = explain(
        [claim(exact(count=len(group) + 1), constraints=[{"matchAttribute": root}])], [*slices, device_class()]
    )
    assert not result.satisfiable
    reasons = dict(result.nodes[0].requests[0].rejections)
    other = next(i for i, r in enumerate(roots) if r != roots[0])
    assert reasons[f"{GPU}/node-a/gpu-{other}"].startswith(f"constraint matchAttribute {root} (")


def test_match_attribute_missing_is_a_device_reason() -> None:
    # upstream: with-constraint-non-existent-attribute
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    result = explain([claim(exact(), constraints=[{"matchAttribute": f"{GPU}/numa"}])], cluster)
    assert not result.satisfiable
    assert result.nodes[0].requests[0].rejections == [
        (f"{GPU}/p1/d1", f"constraint matchAttribute {GPU}/numa (attribute not set)")
    ]


def test_match_attribute_unqualified_attribute_of_the_driver_and_type_mismatch() -> None:
    # lookupAttribute: "<driver>/name" also finds the unqualified "name" of that driver's devices.
    # upstream: with-constraint-not-matching-int-attribute
    cluster = [
        rslice("s1", "n1", "p1", dev("d1", {"numa": 1}), dev("d2", {"numa": 2}), dev("d3", {"numa": 1})),
        device_class(),
    ]
    result = explain([claim(exact(count=2), constraints=[{"matchAttribute": f"{GPU}/numa"}])], cluster)
    assert [a.device for a in result.nodes[0].allocation] == ["d1", "d3"]
    cluster = [rslice("s1", "n1", "p1", dev("d1", {"numa": 1}), dev("d2", {"numa": "1"})), device_class()]
    assert not explain([claim(exact(count=2), constraints=[{"matchAttribute": f"{GPU}/numa"}])], cluster).satisfiable


def test_constraint_scoped_to_a_subrequest() -> None:
    # upstream: prioritized-list-subrequests-with-constraints-ref-sub-request
    cluster = [
        rslice("s1", "n1", "p1", dev("d1", {"numa": 1}), dev("d2", {"numa": 2}), dev("d3", {"numa": 2})),
        device_class(),
    ]
    constraints = [{"requests": ["req-0/sub-0", "req-1"], "matchAttribute": f"{GPU}/numa"}]
    result = explain([claim(first_available("req-0", sub("sub-0")), exact("req-1"), constraints=constraints)], cluster)
    assert picks(result) == [("req-0/sub-0", GPU, "p1", "d2"), ("req-1", GPU, "p1", "d3")]


def test_distinct_attribute() -> None:
    # Upstream's distinctAttributeConstraint (the same code from 1.34 to 1.37) remembers one value
    # per request, its last device's; 1.34 compares the values' pointers, so only the same device
    # is a duplicate there. Every answer here is the oracle's (k8s.io/dynamic-resource-allocation).
    cluster = [
        rslice("s1", "n1", "p1", dev("d1", {"nic": "a"}), dev("d2", {"nic": "a"}), dev("d3", {"nic": "b"})),
        device_class(),
    ]
    constraints = [{"distinctAttribute": f"{GPU}/nic"}]
    two = [claim(exact(count=2), constraints=constraints)]
    three = [claim(exact(count=3), constraints=constraints)]
    split = [claim(exact("a", count=1), exact("b", count=2), constraints=constraints)]
    devices = lambda r: [(a.request, a.device) for a in r.nodes[0].allocation]  # noqa: E731
    # 1.34: nothing is a duplicate of another device.
    assert devices(explain(two, cluster)) == [("gpu", "d1"), ("gpu", "d2")]
    assert devices(explain(three, cluster)) == [("gpu", "d1"), ("gpu", "d2"), ("gpu", "d3")]
    assert devices(explain(split, cluster)) == [("a", "d1"), ("b", "d2"), ("b", "d3")]
    # 1.36 compares values: d2 repeats d1's "a"; no third value, and b's second device meets a's.
    assert devices(explain(two, cluster, kubernetes_version="1.36")) == [("gpu", "d1"), ("gpu", "d3")]
    assert not explain(three, cluster, kubernetes_version="1.36").satisfiable
    assert not explain(split, cluster, kubernetes_version="1.36").satisfiable
    # Only the last device of a request is remembered: a, b, a is accepted.
    alternating = [
        rslice("s1", "n1", "p1", dev("d1", {"nic": "a"}), dev("d2", {"nic": "b"}), dev("d3", {"nic": "a"})),
        device_class(),
    ]
    assert devices(explain(three, alternating, kubernetes_version="1.36")) == [
        ("gpu", "d1"),
        ("gpu", "d2"),
        ("gpu", "d3"),
    ]
    # 1.35's default implementation (incubating) has no distinctAttribute at all.
    assert explain(two, cluster, kubernetes_version="1.35").errors == [
        "claim default/c, constraint #0: empty constraint (unsupported constraint type?)"
    ]


# ----------------------------------------------------------------------------- taints


def taint(key: str = "example.com/taint", value: str = "tainted", effect: str = "NoSchedule") -> Obj:
    return {"key": key, "value": value, "effect": effect}


def test_tainted_devices_need_tolerations() -> None:
    cluster = [
        rslice("s1", "n1", "p1", dev("d1", taints=[taint()]), dev("d2", taints=[taint(effect="NoExecute")])),
        device_class(),
    ]
    # upstream: tainted-two-devices
    result = explain_gated([claim(exact())], cluster)
    assert not result.satisfiable
    assert result.nodes[0].requests[0].rejections == [
        (f"{GPU}/p1/d1", "taint example.com/taint=tainted:NoSchedule not tolerated"),
        (f"{GPU}/p1/d2", "taint example.com/taint=tainted:NoExecute not tolerated"),
    ]
    # upstream: tainted-two-devices-tolerated
    no_execute = {"key": "example.com/taint", "operator": "Exists", "effect": "NoExecute"}
    assert picks(explain_gated([claim(exact(tolerations=[no_execute]))], cluster)) == [("gpu", GPU, "p1", "d2")]
    # Equal needs the value; an empty key with Exists tolerates everything.
    equal = {"key": "example.com/taint", "operator": "Equal", "value": "tainted", "effect": "NoSchedule"}
    assert picks(explain_gated([claim(exact(tolerations=[equal]))], cluster)) == [("gpu", GPU, "p1", "d1")]
    wrong = {**equal, "value": "other"}
    assert not explain_gated([claim(exact(tolerations=[wrong]))], cluster).satisfiable
    everything = {"operator": "Exists"}
    assert picks(explain_gated([claim(exact(count=2, tolerations=[everything]))], cluster)) == [
        ("gpu", GPU, "p1", "d1"),
        ("gpu", GPU, "p1", "d2"),
    ]


def test_tainted_device_with_two_taints() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1", taints=[taint(), taint(effect="NoExecute")])), device_class()]
    # upstream: tainted-one-device-two-taints, tainted-one-device-two-taints-both-tolerated
    assert not explain_gated(
        [claim(exact(tolerations=[{"key": "example.com/taint", "operator": "Exists", "effect": "NoSchedule"}]))],
        cluster,
    ).satisfiable
    tolerations = [{"key": "example.com/taint", "operator": "Exists", "effect": e} for e in ("NoSchedule", "NoExecute")]
    assert explain_gated([claim(exact(tolerations=tolerations))], cluster).satisfiable


def test_taints_in_subrequests_and_the_none_effect() -> None:
    # upstream: tainted-prioritized-list
    cluster = [
        rslice("s1", "n1", "p1", dev("d1", taints=[taint()]), driver="driver-a"),
        driver_class("a", "driver-a"),
        driver_class("b", "driver-b"),
    ]
    assert not explain_gated(
        [claim(first_available("req-0", sub("sub-0", "b"), sub("sub-1", "a")))], cluster
    ).satisfiable
    # 1.35 added the "None" effect, which never prevents allocation; 1.34 requires every taint
    # to be tolerated.
    cluster = [rslice("s1", "n1", "p1", dev("d1", taints=[taint(effect="None")])), device_class()]
    assert not explain_gated([claim(exact())], cluster, kubernetes_version="1.34").satisfiable
    assert explain_gated([claim(exact())], cluster, kubernetes_version="1.35").satisfiable


# ----------------------------------------------------------------------------- partitionable devices


def counter_set(name: str = "counter-set-1", **counters: str) -> Obj:
    return {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}


def consumes(memory: str, name: str = "counter-set-1") -> list[Obj]:
    return [{"counterSet": name, "counters": {"memory": {"value": memory}}}]


def test_partitionable_device_single() -> None:
    # upstream: partitionable-devices-single-device
    cluster = [
        rslice(
            "s1", "n1", "p1", dev("d1", consumesCounters=consumes("4Gi")), sharedCounters=[counter_set(memory="8Gi")]
        ),
        device_class(),
    ]
    assert picks(explain_gated([claim(exact())], cluster)) == [("gpu", GPU, "p1", "d1")]


def test_partitionable_counters_count_existing_allocations() -> None:
    # upstream: partitionable-devices-no-capacity-available
    cluster = [
        rslice(
            "s1",
            "n1",
            "p1",
            dev("d1", consumesCounters=consumes("4Gi")),
            dev("d2", consumesCounters=consumes("16Gi")),
            sharedCounters=[counter_set(memory="18Gi")],
        ),
        device_class(),
        allocated("o", (GPU, "p1", "d2")),
    ]
    result = explain_gated([claim(exact())], cluster)
    assert not result.satisfiable
    assert result.nodes[0].requests[0].rejections == [
        (f"{GPU}/p1/d1", "counter counter-set-1/memory exhausted"),
        (f"{GPU}/p1/d2", "in use by default/o"),
    ]


def test_partitionable_overallocated_counter_set() -> None:
    # upstream: partitionable-devices-overallocated-capacity-pool
    devices = rslice(
        "s1",
        "n1",
        "p1",
        dev("d1", consumesCounters=consumes("4Gi")),
        dev("d2", consumesCounters=consumes("20Gi")),
        sharedCounters=[counter_set(memory="18Gi")],
    )
    cluster = [devices, device_class(), allocated("o", (GPU, "p1", "d2"))]
    # d2, allocated, already takes more than the set holds: nothing is left for d1.
    result = explain_gated([claim(exact())], cluster)
    assert not result.satisfiable
    assert result.nodes[0].requests[0].rejections == [
        (f"{GPU}/p1/d1", "counter counter-set-1/memory exhausted"),
        (f"{GPU}/p1/d2", "in use by default/o"),
    ]
    # With d2 free, d1 fits in the set (d2 alone never does).
    result = explain_gated([claim(exact())], [devices, device_class()])
    assert picks(result) == [("gpu", GPU, "p1", "d1")]
    assert result.nodes[0].requests[0].rejections == [(f"{GPU}/p1/d2", "counter counter-set-1/memory exhausted")]


def test_partitionable_counters_exhausted_by_a_combination() -> None:
    # Two partitions fit one at a time, not together (MIG-like: a whole GPU's memory).
    cluster = [
        rslice(
            "s1",
            "n1",
            "p1",
            dev("whole", consumesCounters=consumes("80Gi")),
            dev("half-0", consumesCounters=consumes("40Gi")),
            dev("half-1", consumesCounters=consumes("40Gi")),
            sharedCounters=[counter_set(memory="80Gi")],
        ),
        device_class(),
    ]
    assert picks(explain_gated([claim(exact(count=2))], cluster)) == [
        ("gpu", GPU, "p1", "half-0"),
        ("gpu", GPU, "p1", "half-1"),
    ]
    result = explain_gated([claim(exact(count=3))], cluster)
    assert not result.satisfiable
    # Three partitions of one GPU's memory can never fit together: the search stops before
    # trying any combination (pruned), and says why.
    why = "counter counter-set-1/memory: 3 more device(s) from here on would consume at least 160Gi, 80Gi left"
    assert result.nodes[0].requests[0].rejections == [(f"{GPU}/p1/{d}", why) for d in ("whole", "half-0", "half-1")]
    assert result.nodes[0].steps == 1
    # Combinations in entry order: "whole" is tried first, then neither half fits beside it.
    result = explain_gated([claim(exact(count=2), exact("other", count=1))], cluster)
    assert not result.satisfiable
    reasons = dict(result.nodes[0].requests[0].rejections)
    assert (
        reasons[f"{GPU}/p1/half-0"] == "counter counter-set-1/memory exhausted together with the devices already chosen"
    )
    # A taint-rejected partition keeps its counters until the node's search ends in 1.34 and 1.35
    # (allocateDevice takes them before the taint check); 1.36 gives them back (kubernetes#140436).
    cluster = [
        rslice(
            "s1",
            "n1",
            "p1",
            dev("tainted", consumesCounters=consumes("80Gi"), taints=[taint()]),
            dev("clean", consumesCounters=consumes("80Gi")),
            sharedCounters=[counter_set(memory="80Gi")],
        ),
        device_class(),
    ]
    assert not explain_gated([claim(exact())], cluster).satisfiable
    counters = rslice("counters", "n1", "p1", count=2, sharedCounters=[counter_set(memory="80Gi")])
    del counters["spec"]["devices"]
    devices = rslice(
        "s1",
        "n1",
        "p1",
        dev("tainted", consumesCounters=consumes("80Gi"), taints=[taint()]),
        dev("clean", consumesCounters=consumes("80Gi")),
        count=2,
    )
    at_136 = explain([claim(exact())], [counters, devices, device_class()], kubernetes_version="1.36")
    assert picks(at_136) == [("gpu", GPU, "p1", "clean")]


def test_partitionable_counters_per_pool_from_135() -> None:
    # 1.35 moved counter sets into their own slices of the pool (upstream 1.35:
    # partitionable-devices-* with sliceWithCounterSets); a device consuming counters of
    # another node's slice of the pool sees them.
    counters = rslice("counters", None, "p1", count=3, allNodes=True, sharedCounters=[counter_set(memory="80Gi")])
    del counters["spec"]["devices"]
    n1 = rslice("s-n1", "n1", "p1", dev("a", consumesCounters=consumes("60Gi")), count=3)
    n2 = rslice("s-n2", "n2", "p1", dev("b", consumesCounters=consumes("60Gi")), count=3)
    cluster = [counters, n1, n2, device_class(), node("n1"), node("n2")]
    result = explain_gated([claim(exact())], cluster, kubernetes_version="1.35")
    assert result.satisfiable
    assert [n.satisfiable for n in result.nodes] == [True, True]
    result = explain_gated([claim(exact())], [*cluster, allocated("o", (GPU, "p1", "b"))], kubernetes_version="1.35")
    assert node_of(result, "n1").requests[0].rejections == [(f"{GPU}/p1/a", "counter counter-set-1/memory exhausted")]
    # 1.34 keeps counters per slice: a slice with devices and sharedCounters is 1.34-only.
    mixed = rslice(
        "s1", "n1", "p1", dev("d1", consumesCounters=consumes("4Gi")), sharedCounters=[counter_set(memory="8Gi")]
    )
    with pytest.raises(AllocatorInputError, match="only one of devices and sharedCounters"):
        explain_gated([claim(exact())], [mixed, device_class()], kubernetes_version="1.35")


# ----------------------------------------------------------------------------- pools


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    # upstream: obsolete-slice
    cluster = [
        rslice("old", "n1", "p1", dev("d-old"), generation=1),
        rslice("new", "n1", "p1", dev("d-new"), generation=2),
        device_class(),
    ]
    assert picks(explain([claim(exact())], cluster)) == [("gpu", GPU, "p1", "d-new")]


def test_invalid_pool_aborts_in_134_and_is_skipped_from_135() -> None:
    # upstream: duplicate-slice (1.34: "pool pool-1 is invalid: duplicate device name device-1";
    # 1.35+: "invalid resource pools were encountered", only for this node)
    dup = [rslice("s1", "n1", "p1", dev("d1"), count=2), rslice("s1-2", "n1", "p1", dev("d1"), count=2)]
    result = explain([claim(exact())], [*dup, device_class()], kubernetes_version="1.34")
    assert result.errors == ["pool p1 is invalid: duplicate device name d1"]
    for version in ("1.35", "1.36"):
        result = explain([claim(exact())], [*dup, device_class()], kubernetes_version=version)
        assert not result.satisfiable
        assert result.errors == []
        assert f"pool {GPU}/p1: invalid (duplicate device name d1), not used" in result.nodes[0].reasons
        assert "invalid resource pools were encountered" in result.nodes[0].reasons
        # Another valid pool on the node still serves the claim.
        result = explain(
            [claim(exact())], [*dup, rslice("s2", "n1", "p2", dev("d9")), device_class()], kubernetes_version=version
        )
        assert picks(result) == [("gpu", GPU, "p2", "d9")]


def test_incomplete_pool_is_used_in_134_only() -> None:
    # upstream: no-allocation-from-incomplete-pools (1.35+); 1.34 allocated from it.
    cluster = [rslice("s1", "n1", "p1", dev("d1"), count=2), device_class()]
    assert picks(explain([claim(exact())], cluster, kubernetes_version="1.34")) == [("gpu", GPU, "p1", "d1")]
    result = explain([claim(exact())], cluster, kubernetes_version="1.35")
    assert not result.satisfiable
    assert f"pool {GPU}/p1: incomplete (1 of 2 slices), not used" in result.nodes[0].reasons


def test_pool_complete_through_slices_of_other_nodes_from_135() -> None:
    # 1.35 counts the pool's slices of the same generation whatever node they name.
    cluster = [
        rslice("s1", "n1", "p1", dev("d1"), count=2),
        rslice("s2", "n2", "p1", dev("d2"), count=2),
        device_class(),
    ]
    result = explain([claim(exact())], cluster, node="n1", kubernetes_version="1.35")
    assert picks(result) == [("gpu", GPU, "p1", "d1")]


def test_search_order_134_input_order_136_sorted() -> None:
    cluster = [
        rslice("z-slice", "n1", "pool-b", dev("b1")),
        rslice("a-slice", "n1", "pool-a", dev("a1")),
        device_class(),
    ]
    assert picks(explain([claim(exact())], cluster, kubernetes_version="1.34")) == [("gpu", GPU, "pool-b", "b1")]
    assert picks(explain([claim(exact())], cluster, kubernetes_version="1.35")) == [("gpu", GPU, "pool-b", "b1")]
    assert picks(explain([claim(exact())], cluster, kubernetes_version="1.36")) == [("gpu", GPU, "pool-a", "a1")]
    # Slices within a pool: by name in 1.36.
    cluster = [
        rslice("s-2", "n1", "p1", dev("from-s2"), count=2),
        rslice("s-1", "n1", "p1", dev("from-s1"), count=2),
        device_class(),
    ]
    assert picks(explain([claim(exact())], cluster, kubernetes_version="1.35")) == [("gpu", GPU, "p1", "from-s2")]
    assert picks(explain([claim(exact())], cluster, kubernetes_version="1.36")) == [("gpu", GPU, "p1", "from-s1")]


def test_too_few_devices_are_decided_without_searching() -> None:
    # upstream (1.36): check-combinations-within-single-request-single-pool-single-slice takes
    # 16 allocateOne calls with combinations, 65 with permutations (1.34, 1.35); counting the
    # usable devices first decides it in one step in every version.
    cluster = [rslice("s1", "n1", "p1", *(dev(f"device-{i}") for i in range(1, 5))), device_class()]
    for version in ("1.34", "1.35", "1.36"):
        result = explain([claim(exact(count=5))], cluster, kubernetes_version=version)
        assert not result.satisfiable
        assert result.nodes[0].steps == 1, version
        assert result.nodes[0].reasons == ["request gpu: 4/4 devices usable, need 5"]


def test_binding_conditions_need_1_36() -> None:
    # upstream: binding-conditions-without-feature-gate (off by default before 1.36)
    cluster = [rslice("s1", "n1", "p1", dev("d1", bindingConditions=["ready"])), device_class()]
    result = explain([claim(exact())], cluster, kubernetes_version="1.35")
    assert not result.satisfiable
    assert result.nodes[0].requests[0].rejections[0][1].startswith("binding conditions not supported")
    assert explain([claim(exact())], cluster, kubernetes_version="1.36").satisfiable


# ----------------------------------------------------------------------------- nodes


def test_node_selection_by_name_selector_and_all_nodes() -> None:
    network = rslice("net", None, "net-pool", dev("shared"), allNodes=True)
    zone = rslice(
        "zone",
        None,
        "zone-pool",
        dev("zonal"),
        nodeSelector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        },
    )
    by_field = rslice(
        "field",
        None,
        "field-pool",
        dev("pinned"),
        nodeSelector={
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
        },
    )
    cluster = [
        network,
        zone,
        by_field,
        rslice("local", "n1", "n1", dev("local")),
        node("n1", zone="a"),
        node("n2", zone="b"),
        device_class(),
    ]
    result = explain([claim(exact(allocationMode="All"))], cluster)
    assert {(a.pool, a.device) for a in node_of(result, "n1").allocation} == {
        ("net-pool", "shared"),
        ("zone-pool", "zonal"),
        ("n1", "local"),
    }
    assert {(a.pool, a.device) for a in node_of(result, "n2").allocation} == {
        ("net-pool", "shared"),
        ("field-pool", "pinned"),
    }


def test_nodes_named_only_by_slices_and_node_filter() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1")), rslice("s2", "n2", "p2", dev("d2")), device_class()]
    result = explain([claim(exact())], cluster)
    assert [n.node for n in result.nodes] == ["n1", "n2"]
    result = explain([claim(exact())], cluster, node="n2")
    assert [n.node for n in result.nodes] == ["n2"]
    assert picks(result) == [("gpu", GPU, "p2", "d2")]  # n2's own device, not n1's
    with pytest.raises(AllocatorInputError, match="node 'n3' not found"):
        explain([claim(exact())], cluster, node="n3")


def test_per_device_node_selection() -> None:
    # upstream: partitionable-devices-per-device-node-selection-nodename
    cluster = [
        rslice(
            "s1",
            None,
            "p1",
            {**dev("d1"), "nodeName": "n1"},
            {**dev("d2"), "nodeName": "n2"},
            perDeviceNodeSelection=True,
        ),
        node("n1"),
        node("n2"),
        device_class(),
    ]
    result = explain_gated([claim(exact())], cluster, node="n2")
    assert picks(result) == [("gpu", GPU, "p1", "d2")]
    assert result.nodes[0].requests[0].rejections == [
        (f"{GPU}/p1/d1", "not available on this node (perDeviceNodeSelection)")
    ]


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("claims", "cluster", "message", "source"),
    [
        (
            [claim(exact())],
            [{"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"pool": {"name": "p"}}}],
            "ResourceSlice s: spec.driver: required",
            "cluster",
        ),
        (
            [claim(exact(allocationMode="Some"))],
            [],
            "ResourceClaim default/c: spec.devices.requests[0].exactly.allocationMode: unsupported value 'Some'",
            "claims",
        ),
        (
            [claim({"name": "gpu"})],
            [],
            "spec.devices.requests[0]: one of exactly or firstAvailable is required",
            "claims",
        ),
        (
            [claim(exact(count=0))],
            [],
            "spec.devices.requests[0].exactly.count: must be greater than zero, not 0",
            "claims",
        ),
        ([claim(exact(count="2"))], [], "spec.devices.requests[0].exactly.count: must be an integer", "claims"),
        (
            [claim(exact(count=2, allocationMode="All"))],
            [],
            "count: must not be set when allocationMode is All",
            "claims",
        ),
        (
            [claim(exact(selectors=sel("device.driver ==")))],
            [],
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: 1:",
            "claims",
        ),
        ([claim(exact(selectors=[{}]))], [], "selectors[0].cel.expression: required", "claims"),
        (
            [claim(exact(), constraints=[{"requests": ["gpu"]}])],
            [],
            "constraints[0]: exactly one of matchAttribute",
            "claims",
        ),
        (
            [claim(exact(cls="bad"))],
            [device_class("bad", "device.driver ==")],
            "DeviceClass bad: spec.selectors[0].cel.expression: 1:",
            "cluster",
        ),
        ([claim(exact(), kind="Pod")], [], "claim #0: kind: expected ResourceClaim or ResourceClaimTemplate", "claims"),
        (  # an allocated claim of the cluster's: the error is the cluster file's, not the command's
            [claim(exact())],
            [
                *h100_node(),
                {
                    **claim(exact(), name="used"),
                    "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": 5}]}}},
                },
            ],
            "ResourceClaim default/used: status.allocation.devices.results[0]: driver, pool and device are required",
            "cluster",
        ),
    ],
)
def test_bad_input_names_object_and_field(claims: list[Obj], cluster: list[Obj], message: str, source: str) -> None:
    with pytest.raises(AllocatorInputError) as info:
        explain(claims, [*cluster, device_class()])
    assert message in str(info.value)
    assert info.value.source == source


def test_no_claims_allocate_nothing_as_upstream() -> None:
    result = explain([], [rslice("s1", "n1", "p1", dev("d1")), device_class()])
    assert result.satisfiable and [n.allocation for n in result.nodes] == [[]]


def test_unknown_kubernetes_version() -> None:
    with pytest.raises(AllocatorInputError, match=r"1\.33"):
        explain([claim(exact())], [device_class()], kubernetes_version="1.33")


# ----------------------------------------------------------------------------- fixtures, limits, output


def _fixture_cluster() -> list[Obj]:
    from pathlib import Path

    from gpucluster.manifests import load_objects

    root = Path(__file__).parent / "fixtures"
    objects = load_objects(str(root / "nodes.yaml"))
    for path in sorted((root / "resourceslices").glob("*.yaml")):
        objects.extend(load_objects(str(path)))
    return objects


def test_fixture_cluster_full_gpus_and_mig_devices() -> None:
    mig_class = device_class("mig.nvidia.com", f"device.driver == '{GPU}' && device.attributes['{GPU}'].type == 'mig'")
    cluster = [*_fixture_cluster(), device_class(), mig_class]
    result = explain(
        [claim(exact(count=2, selectors=sel(f"device.attributes['{GPU}'].productName == '{H100}'")))], cluster
    )
    assert [n.node for n in result.nodes if n.satisfiable] == ["h100-node"]
    mig = claim(exact(cls="mig.nvidia.com", count=8, selectors=sel(f"device.attributes['{GPU}'].profile == '1g.10gb'")))
    result = explain([mig], cluster)
    assert [n.node for n in result.nodes if n.satisfiable] == ["a100-mig-node"]
    assert all(
        a.device.startswith("gpu-") and "-mig-1g10gb-" in a.device for a in node_of(result, "a100-mig-node").allocation
    )
    result = explain(
        [
            claim(
                exact(
                    cls="mig.nvidia.com",
                    count=9,
                    selectors=mig["spec"]["devices"]["requests"][0]["exactly"]["selectors"],
                )
            )
        ],
        cluster,
    )
    assert not result.satisfiable
    assert node_of(result, "a100-mig-node").reasons[0] == (
        "request gpu: 8/16 devices usable, need 9; 6 class selector #0 false, 2 selector #0 false"
    )


def _hard_claim(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # A search no pruning cuts short at 1.36 (1.34's distinctAttribute refuses nothing): n
    # requests of one device each, distinct in x and in y
    # (upstream's distinctAttribute remembers one value per request, so it is a pairwise
    # constraint across requests); each x has two devices, the first n-3 with two y values of
    # their own, the last 3 sharing y0 and y1 (pigeonhole): the choices for the first n-3
    # requests are tried before the last three fail.
    devices = [
        dev(f"d{x}-{y}", {"x": f"x{x}", "y": f"y{y}"})
        for x in range(n)
        for y in ([0, 1] if x >= n - 3 else [2 * x + 10, 2 * x + 11])
    ]
    cluster = [rslice("s1", "n1", "p1", *devices), device_class()]
    constraints = [{"distinctAttribute": f"{GPU}/x"}, {"distinctAttribute": f"{GPU}/y"}]
    return [claim(*[exact(f"r{i}") for i in range(n)], constraints=constraints)], cluster


def test_search_is_bounded_by_steps() -> None:
    claims, cluster = _hard_claim(16)
    result = explain(claims, cluster, max_steps=1000, kubernetes_version="1.36")
    assert not result.satisfiable
    assert result.errors == []
    assert "timed out trying to allocate devices (search stopped after 1000 steps)" in result.nodes[0].reasons


def test_search_has_a_deadline_like_the_filter_timeout() -> None:
    claims, cluster = _hard_claim(22)
    result = explain(claims, cluster, deadline_ms=20, kubernetes_version="1.36")
    assert not result.satisfiable
    assert result.errors == []
    gave_up = [r for r in result.nodes[0].reasons if r.startswith("gave up after ")]
    assert gave_up and gave_up[0].endswith(" ms on node n1"), result.nodes[0].reasons
    assert result.nodes[0].gave_up == gave_up[0]
    assert result.one_line() == f"no node fits so far: {gave_up[0]}"


def test_devices_taken_by_another_request_are_explained() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    result = explain([claim(exact("a"), exact("b"))], cluster)
    assert not result.satisfiable
    reports = {r.request: r for r in result.nodes[0].requests}
    assert reports["a"].rejections == []
    assert reports["b"].rejections == [(f"{GPU}/p1/d1", "chosen for request a")]
    assert result.nodes[0].reasons[1] == "request b: 1/1 devices usable, need 1; 1 chosen for another request"


def test_multiple_claims_are_labelled_in_text() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1"), dev("d2")), device_class()]
    result = explain([claim(exact(), name="a"), claim(exact(), name="b")], cluster)
    text = result.to_text()
    assert (
        "n1: fits: claim default/a, request gpu -> d1 (gpu.nvidia.com/p1); claim default/b, request gpu -> d2" in text
    )
    assert result.nodes[0].reasons == [
        "claim default/a, request gpu: 2/2 devices usable, need 1",
        "claim default/b, request gpu: 2/2 devices usable, need 1",
    ]


def test_one_line_sums_over_nodes_for_events() -> None:
    from gpucluster.dra.allocator import explain as explain_claims
    from tests.fixtures import load_fixture

    gpu_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                 "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}  # fmt: skip
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                      "selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'}}]}}]}}}  # fmt: skip
    cluster = [gpu_class, *load_fixture("h100-node"), *load_fixture("l4-node")]
    result = explain_claims([claim], cluster)
    assert result.one_line() == (
        '0/12 devices usable for request gpu on 2 nodes, need 2 on one node: 12 selector #0 false (productName == "NVIDIA B200")'
    )
    claim["spec"]["devices"]["requests"][0]["exactly"].pop("selectors")
    assert explain_claims([claim], cluster).one_line() == ""
