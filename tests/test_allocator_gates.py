"""Feature gates: Kubernetes' defaults per version, ``Name=bool,...``, and what each changes."""

from __future__ import annotations

import pytest

from gpucluster.dra import gates
from gpucluster.dra.allocator import AllocatorInputError, explain
from tests.test_allocator import (
    GPU,
    _hard_claim,
    claim,
    consumes,
    counter_set,
    dev,
    device_class,
    exact,
    first_available,
    node,
    picks,
    rslice,
    sub,
    taint,
)


def test_defaults_follow_kubernetes() -> None:
    d34, d35, d36 = (gates.defaults(v) for v in ("1.34", "1.35", "1.36"))
    assert d34 == d35
    assert {g for g, on in d34.items() if on} == {"DRAAdminAccess", "DRAPrioritizedList", "DRASchedulerFilterTimeout"}
    assert all(d36.values())


def test_parse_like_feature_gates_flag() -> None:
    assert gates.parse("DRADeviceTaints=true, DRAAdminAccess=F,") == {"DRADeviceTaints": True, "DRAAdminAccess": False}
    with pytest.raises(AllocatorInputError, match="missing bool value for DRADeviceTaints"):
        gates.parse("DRADeviceTaints")
    with pytest.raises(AllocatorInputError, match=r"invalid value of DRADeviceTaints=yes"):
        gates.parse("DRADeviceTaints=yes")


def test_unknown_and_locked_gates_are_errors() -> None:
    with pytest.raises(AllocatorInputError, match="unrecognized feature gate: DRAFoo"):
        gates.resolve("1.34", {"DRAFoo": True})
    with pytest.raises(AllocatorInputError, match="cannot set feature gate DRAAdminAccess to false, feature is locked"):
        gates.resolve("1.36", {"DRAAdminAccess": False})
    assert gates.resolve("1.35", {"DRAAdminAccess": False})["DRAAdminAccess"] is False


def test_taints_are_ignored_unless_device_taints_is_on() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1", taints=[taint()])), device_class()]
    assert explain([claim(exact())], cluster).satisfiable  # 1.34 default: off
    assert explain([claim(exact())], cluster, kubernetes_version="1.35").satisfiable
    assert not explain([claim(exact())], cluster, kubernetes_version="1.36").satisfiable
    on = explain([claim(exact())], cluster, feature_gates={"DRADeviceTaints": True})
    assert not on.satisfiable
    assert on.nodes[0].requests[0].rejections[0][1].startswith("taint example.com/taint=tainted:NoSchedule")


def test_counter_devices_are_never_allocated_unless_partitionable_devices_is_on() -> None:
    cluster = [
        rslice(
            "s1",
            "n1",
            "p1",
            dev("part", consumesCounters=consumes("40Gi")),
            dev("plain"),
            sharedCounters=[counter_set(memory="80Gi")],
        ),
        device_class(),
    ]
    # Off (1.34): the slice with sharedCounters is still used (GatherPools skips only per-device
    # node selection), so its device that consumes no counters is allocatable, the other not
    # (upstream's "partitionable-devices-disabled-other-device-do-not-consume-counters").
    assert picks(explain([claim(exact())], cluster)) == [("gpu", GPU, "p1", "plain")]
    assert not explain([claim(exact(count=2))], cluster).satisfiable
    on = explain([claim(exact(count=2))], cluster, feature_gates={"DRAPartitionableDevices": True})
    assert sorted(picks(on)) == [("gpu", GPU, "p1", "part"), ("gpu", GPU, "p1", "plain")]


def test_counter_devices_without_shared_counters_in_their_slice_are_refused_when_off() -> None:
    # 1.35: counter sets live in their own slice (ignored when off); the device slice stays,
    # its devices consuming counters cannot be used.
    cluster = [
        rslice("counters", "n1", "p1", sharedCounters=[counter_set(memory="80Gi")], count=2),
        rslice("devices", "n1", "p1", dev("part", consumesCounters=consumes("40Gi")), count=2),
        device_class(),
    ]
    on = explain([claim(exact())], cluster, kubernetes_version="1.35", feature_gates={"DRAPartitionableDevices": True})
    assert picks(on) == [("gpu", GPU, "p1", "part")]
    devices_only = [rslice("devices", "n1", "p1", dev("part", consumesCounters=consumes("40Gi"))), device_class()]
    off = explain([claim(exact())], devices_only, kubernetes_version="1.35")
    assert not off.satisfiable
    assert off.nodes[0].requests[0].rejections == [
        (f"{GPU}/p1/part", "consumes counters, but DRAPartitionableDevices is off")
    ]


def test_per_device_node_selection_needs_partitionable_devices() -> None:
    cluster = [
        rslice("s1", None, "p1", {**dev("d1"), "nodeName": "n1"}, perDeviceNodeSelection=True),
        node("n1"),
        device_class(),
    ]
    assert not explain([claim(exact())], cluster).satisfiable
    assert explain([claim(exact())], cluster, feature_gates={"DRAPartitionableDevices": True}).satisfiable


def test_admin_access_off_is_an_error() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    result = explain([claim(exact(adminAccess=False))], cluster, feature_gates={"DRAAdminAccess": False})
    assert not result.satisfiable
    assert result.errors == ["claim default/c, request gpu: admin access is requested, but the feature is disabled"]
    assert explain([claim(exact())], cluster, feature_gates={"DRAAdminAccess": False}).satisfiable


def test_prioritized_list_off_is_an_error() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    req = claim(first_available("req-0", sub("a"), sub("b")))
    result = explain([req], cluster, feature_gates={"DRAPrioritizedList": False})
    assert result.errors == [
        "claim default/c, request req-0: has subrequests, but the DRAPrioritizedList feature is disabled"
    ]
    assert explain([req], cluster).satisfiable


def test_binding_conditions_gate() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1", bindingConditions=["ready"])), device_class()]
    assert not explain([claim(exact())], cluster).satisfiable
    assert explain([claim(exact())], cluster, feature_gates={"DRADeviceBindingConditions": True}).satisfiable
    assert not explain(
        [claim(exact())], cluster, kubernetes_version="1.36", feature_gates={"DRADeviceBindingConditions": False}
    ).satisfiable


def test_consumable_capacity_declares_allow_multiple_allocations() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    selector = [{"cel": {"expression": "!device.allowMultipleAllocations"}}]
    with pytest.raises(AllocatorInputError):
        explain([claim(exact(selectors=selector))], cluster)
    assert explain(
        [claim(exact(selectors=selector))], cluster, feature_gates={"DRAConsumableCapacity": True}
    ).satisfiable


def test_filter_timeout_off_means_no_deadline() -> None:
    claims, cluster = _hard_claim(16)
    result = explain(
        claims,
        cluster,
        deadline_ms=0,
        max_steps=2000,
        feature_gates={"DRASchedulerFilterTimeout": False},
        kubernetes_version="1.36",
    )
    assert result.gave_up == "timed out trying to allocate devices (search stopped after 2000 steps)"


def test_json_reports_the_gates_used() -> None:
    cluster = [rslice("s1", "n1", "p1", dev("d1")), device_class()]
    as_json = explain([claim(exact())], cluster, feature_gates={"DRADeviceTaints": True}).to_json()
    assert as_json["kubernetesVersion"] == "1.34"
    assert as_json["featureGates"] == {**gates.defaults("1.34"), "DRADeviceTaints": True}
