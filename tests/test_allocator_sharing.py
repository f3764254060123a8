"""DRAConsumableCapacity end to end through ``explain``: a device that allows multiple allocations
serves several requests and claims while its capacity lasts, what allocated claims consume is
read from their results (``shareID`` + ``consumedCapacity``), and the answer says what each
shared allocation consumes."""

from __future__ import annotations

from typing import Any

from gpucluster.dra.allocator import explain
from tests.test_allocator import GPU, claim, dev, device_class, exact, node, rslice

Obj = dict[str, Any]
CC = {"DRAConsumableCapacity": True}


def shared_gpu(name: str, memory: str = "80Gi", **policy: Any) -> Obj:
    cap: Obj = {"value": memory}
    if policy:
        cap["requestPolicy"] = policy
    return dev(name, allowMultipleAllocations=True, capacity={"memory": cap})


def memory_request(name: str = "gpu", amount: str | None = None, count: int = 1) -> Obj:
    extra: Obj = {"capacity": {"requests": {"memory": amount}}} if amount else {}
    return exact(name, count=count, **extra)


def cluster(*devices: Obj, extra: list[Obj] | None = None) -> list[Obj]:
    return [device_class(), node("n1"), rslice("s1", "n1", "n1", *devices), *(extra or [])]


def shared_claim(name: str, device: str, memory: str | None, share: str | None = "uid-1") -> Obj:
    result: Obj = {"request": "gpu", "driver": GPU, "pool": "n1", "device": device}
    if share is not None:
        result["shareID"] = share
    if memory is not None:
        result["consumedCapacity"] = {"memory": memory}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"devices": {"requests": [exact()]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def devices_of(result: Any) -> list[tuple[str, str, dict[str, str]]]:
    return [(a.claim, a.device, dict(a.consumed_capacity)) for a in result.nodes[0].allocation]


def test_one_request_takes_one_shared_device_several_times() -> None:
    result = explain(
        [claim(memory_request(amount="30Gi", count=2))], cluster(shared_gpu("g0"), shared_gpu("g1")), feature_gates=CC
    )
    assert result.satisfiable
    assert devices_of(result) == [("default/c", "g0", {"memory": "30Gi"}), ("default/c", "g0", {"memory": "30Gi"})]
    assert all(a.shared for a in result.nodes[0].allocation)


def test_capacity_runs_out_then_the_next_device_serves() -> None:
    result = explain(
        [claim(memory_request(amount="50Gi", count=2))], cluster(shared_gpu("g0"), shared_gpu("g1")), feature_gates=CC
    )
    assert [d for _, d, _ in devices_of(result)] == ["g0", "g1"]


def test_claims_of_one_pod_share_a_device() -> None:
    claims = [claim(memory_request(amount="40Gi"), name="a"), claim(memory_request(amount="40Gi"), name="b")]
    result = explain(claims, cluster(shared_gpu("g0")), feature_gates=CC)
    assert [(c, d) for c, d, _ in devices_of(result)] == [("default/a", "g0"), ("default/b", "g0")]
    too_much = [claim(memory_request(amount="41Gi"), name="a"), claim(memory_request(amount="40Gi"), name="b")]
    result = explain(too_much, cluster(shared_gpu("g0")), feature_gates=CC)
    assert not result.satisfiable
    assert result.nodes[0].reasons[-1] == (
        "claim default/b, request gpu: gpu.nvidia.com/n1/g0: capacity gpu.nvidia.com/memory: needs 40Gi, "
        "39Gi of 80Gi left after the allocations already chosen"
    )


def test_allocated_shared_claims_consume_capacity() -> None:
    elsewhere = shared_claim("x", "g0", "60Gi")
    result = explain(
        [claim(memory_request(amount="30Gi"))], cluster(shared_gpu("g0"), extra=[elsewhere]), feature_gates=CC
    )
    assert not result.satisfiable
    assert any("needs 30Gi, 20Gi of 80Gi left" in r for r in result.nodes[0].reasons), result.nodes[0].reasons
    result = explain(
        [claim(memory_request(amount="20Gi"))], cluster(shared_gpu("g0"), extra=[elsewhere]), feature_gates=CC
    )
    assert devices_of(result) == [("default/c", "g0", {"memory": "20Gi"})]


def test_a_result_without_share_id_holds_the_device_whole() -> None:
    whole = shared_claim("x", "g0", None, share=None)
    result = explain([claim(memory_request(amount="1Gi"))], cluster(shared_gpu("g0"), extra=[whole]), feature_gates=CC)
    assert not result.satisfiable
    assert any("in use by other/x" in r for r in result.nodes[0].reasons)


def test_gate_off_allocates_the_device_once_and_ignores_share_ids() -> None:
    claims = [claim(memory_request(amount="1Gi"), name="a"), claim(memory_request(amount="1Gi"), name="b")]
    # 1.35's defaults run upstream's incubating allocator, which has no consumable-capacity code:
    # the capacity requests are not read, and the device serves one claim.
    off = explain(claims, cluster(shared_gpu("g0")), kubernetes_version="1.35", feature_gates={})
    assert not off.errors and not off.satisfiable
    assert explain(claims[:1], cluster(shared_gpu("g0")), kubernetes_version="1.35").satisfiable
    # With binding conditions on it runs experimental, which knows capacity requests and refuses
    # them while the gate is off.
    experimental = explain(
        claims, cluster(shared_gpu("g0")), kubernetes_version="1.35", feature_gates={"DRADeviceBindingConditions": True}
    )
    assert experimental.errors == [
        "claim default/a, request gpu: has capacity requests, but the DRAConsumableCapacity feature is disabled"
    ]
    claims = [claim(exact(), name="a"), claim(exact(), name="b")]
    assert not explain(claims, cluster(shared_gpu("g0")), kubernetes_version="1.35").satisfiable
    # Gate off: a result with a shareID holds the device like any other.
    held = shared_claim("x", "g0", "1Gi")
    assert not explain([claim(exact())], cluster(shared_gpu("g0"), extra=[held]), kubernetes_version="1.35").satisfiable


def test_default_request_without_capacity_takes_the_default_or_everything() -> None:
    # No request: the policy's default (10Gi) per allocation, so 8 fit; without a policy, all of it.
    with_default = shared_gpu("g0", default="10Gi", validRange={"min": "10Gi", "step": "10Gi"})
    claims = [claim(exact(), name=f"c{i}") for i in range(9)]
    result = explain(claims[:8], cluster(with_default), feature_gates=CC)
    assert result.satisfiable and {u["memory"] for _, _, u in devices_of(result)} == {"10Gi"}
    assert not explain(claims, cluster(with_default), feature_gates=CC).satisfiable
    assert not explain(claims[:2], cluster(shared_gpu("g0")), feature_gates=CC).satisfiable


def test_request_rounded_up_by_the_policy_step() -> None:
    stepped = shared_gpu("g0", validRange={"min": "10Gi", "step": "10Gi"})
    result = explain([claim(memory_request(amount="15Gi"))], cluster(stepped), feature_gates=CC)
    assert devices_of(result) == [("default/c", "g0", {"memory": "20Gi"})]


def test_kubernetes_1_36_shares_by_default_and_json_says_what_is_consumed() -> None:
    claims = [claim(memory_request(amount="8Gi"), name=f"c{i}") for i in range(3)]
    result = explain(claims, cluster(shared_gpu("g0")), kubernetes_version="1.36")
    allocation = result.to_json()["nodes"][0]["allocation"]
    assert [a["device"] for a in allocation] == ["g0", "g0", "g0"]
    assert allocation[0]["consumedCapacity"] == {"memory": "8Gi"}


def test_from_1_36_one_request_takes_a_shared_device_once() -> None:
    # 1.34 and 1.35 try every device again for each device of a request; 1.36 goes on after the
    # device just chosen (startLocation), so one request cannot take one device twice.
    one = [claim(memory_request(amount="8Gi", count=2))]
    assert explain(one, cluster(shared_gpu("g0")), kubernetes_version="1.35", feature_gates=CC).satisfiable
    assert not explain(one, cluster(shared_gpu("g0")), kubernetes_version="1.36").satisfiable
    result = explain(one, cluster(shared_gpu("g0"), shared_gpu("g1")), kubernetes_version="1.36")
    assert [d for _, d, _ in devices_of(result)] == ["g0", "g1"]


def test_a_request_policy_is_checked_on_every_device() -> None:
    # 1.35: 1.34's alpha code checks a request's capacity against another device (tests/oracle).
    # The policy's default is unset and the whole value (6) is not a valid value: a request
    # without capacity cannot take the device, shared or not (upstream checks every device).
    strict = dev("g0", capacity={"memory": {"value": "6", "requestPolicy": {"validValues": ["2", "4"]}}})
    result = explain([claim(exact())], cluster(strict, dev("g1")), feature_gates=CC, kubernetes_version="1.35")
    assert [d for _, d, _ in devices_of(result)] == ["g1"]
    assert not explain([claim(exact())], cluster(strict), feature_gates=CC, kubernetes_version="1.35").satisfiable


def test_a_device_allocated_whole_has_no_consumed_capacity_in_json() -> None:
    plain = dev("g0", capacity={"memory": {"value": "80Gi"}})
    result = explain([claim(memory_request(amount="8Gi"))], cluster(plain), feature_gates=CC)
    assert result.to_json()["nodes"][0]["allocation"] == [
        {"claim": "default/c", "request": "gpu", "driver": GPU, "pool": "n1", "device": "g0"}
    ]
    # Every device is checked against the request's capacity, shared or not.
    assert not explain([claim(memory_request(amount="81Gi"))], cluster(plain), feature_gates=CC).satisfiable


def test_infeasible_shared_claim_is_decided_quickly() -> None:
    # 17 allocations of 10Gi over two 80Gi devices (16 fit): the count bound cannot prune, the
    # capacity check must; the step count stays small. At 1.35: 1.34's capacity check of a
    # request's third device reads past this two-device slice (a fatal error, no search at all).
    devices = [shared_gpu(f"g{i}") for i in range(2)]
    result = explain(
        [claim(memory_request(amount="10Gi", count=17))], cluster(*devices), feature_gates=CC, kubernetes_version="1.35"
    )
    assert not result.satisfiable and not result.errors and not result.gave_up
    assert result.nodes[0].steps < 5_000, result.nodes[0].steps
    assert result.nodes[0].reasons[0] == (
        "the capacity left on the usable devices takes at most 16 more allocation(s), 17 needed by claim "
        "default/c, request gpu and the requests after it"
    )
    # 16 fit: eight on each device.
    result = explain(
        [claim(memory_request(amount="10Gi", count=16))], cluster(*devices), feature_gates=CC, kubernetes_version="1.35"
    )
    assert [d for _, d, _ in devices_of(result)] == ["g0"] * 8 + ["g1"] * 8


# ----------------------------------------------------------------------------- attributes CEL cannot see


def test_an_attribute_without_a_value_fails_every_selector_as_kubernetes_converts_all_first() -> None:
    broken = dev("g0")
    broken["attributes"]["model"] = {}  # no string/int/bool/version: the API server would refuse it
    result = explain([claim(exact())], cluster(broken))
    assert result.errors == [
        f"class {GPU}: selector #0: CEL runtime error: attribute model: unsupported attribute value"
    ]


def test_an_unparsable_version_fails_even_a_selector_that_does_not_read_it() -> None:
    broken = dev("g0")
    broken["attributes"]["driverVersion"] = {"version": "1.0"}
    cls = device_class(GPU, f"device.driver == '{GPU}'")
    result = explain([claim(exact())], [cls, node("n1"), rslice("s1", "n1", "n1", broken)])
    assert len(result.errors) == 1
    assert result.errors[0].startswith(
        f"class {GPU}: selector #0: CEL runtime error: attribute driverVersion: parse semantic version:"
    )


def test_a_device_in_use_is_passed_over_before_its_attributes_are_converted() -> None:
    broken = dev("g1")
    broken["attributes"]["model"] = {"float": 1.5}
    held = shared_claim("x", "g1", None, share=None)
    result = explain([claim(exact())], cluster(broken, dev("g0"), extra=[held]))
    assert result.satisfiable and [d for _, d, _ in devices_of(result)] == ["g0"]


def test_a_device_the_search_never_reaches_does_not_fail_it() -> None:
    broken = dev("g1")
    broken["attributes"]["model"] = {}
    result = explain([claim(exact())], cluster(dev("g0"), broken))
    assert result.satisfiable and [d for _, d, _ in devices_of(result)] == ["g0"]
    result = explain([claim(exact(count=2))], cluster(dev("g0"), broken))
    assert result.errors == [
        f"class {GPU}: selector #0: CEL runtime error: attribute model: unsupported attribute value"
    ]


# ----------------------------------------------------------------------------- the capacity bound


def test_many_requests_that_cannot_all_fit_are_decided_in_a_few_steps() -> None:
    # 9 requests of 10Gi over 8 shared 10Gi GPUs: 219,201 steps (5 s a node) without the bound,
    # which sees that the capacity left takes at most 8 more allocations.
    gpus = [shared_gpu(f"g{i}", "10Gi") for i in range(8)]
    requests = [memory_request(f"r{i}", "10Gi") for i in range(9)]
    result = explain([claim(*requests)], cluster(*gpus), feature_gates=CC, kubernetes_version="1.35")
    assert not result.satisfiable and not result.gave_up
    assert result.nodes[0].steps < 50, result.nodes[0].steps
    assert result.nodes[0].reasons[0] == (
        "the capacity left on the usable devices takes at most 8 more allocation(s), 9 needed by claim "
        "default/c, request r0 and the requests after it"
    )
    # Across claims too, and with counts: 9 x 3 of 30Gi over 8 x 80Gi (16 allocations fit).
    big = [shared_gpu(f"g{i}") for i in range(8)]
    claims = [claim(memory_request(amount="30Gi", count=3), name=f"c{i}") for i in range(9)]
    result = explain(claims, cluster(*big), feature_gates=CC, kubernetes_version="1.35")
    assert not result.satisfiable and result.nodes[0].steps < 200, result.nodes[0].steps


def test_the_bound_counts_the_smallest_amount_asked_of_a_device() -> None:
    # One 80Gi GPU takes 70Gi and one 10Gi, not the other two 10Gi; a second GPU takes them. The
    # bound counts 80Gi // 10Gi = 8 allocations a GPU: it must not refuse the claim.
    requests = [memory_request("big", "70Gi"), *(memory_request(f"r{i}", "10Gi") for i in range(3))]
    assert not explain(
        [claim(*requests)], cluster(shared_gpu("g0")), feature_gates=CC, kubernetes_version="1.35"
    ).satisfiable
    result = explain(
        [claim(*requests)], cluster(shared_gpu("g0"), shared_gpu("g1")), feature_gates=CC, kubernetes_version="1.35"
    )
    assert [d for _, d, _ in devices_of(result)] == ["g0", "g0", "g1", "g1"]


def test_an_attribute_cel_cannot_convert_fails_a_request_selector_when_the_class_has_none() -> None:
    broken = dev("g0")
    broken["attributes"]["model"] = {}
    no_selectors = {**device_class(), "spec": {}}
    picky = exact(selectors=[{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}])
    for claims in ([claim(picky)], [claim(picky), claim(picky, name="d")]):
        result = explain(claims, [no_selectors, node("n1"), rslice("s1", "n1", "n1", broken)])
        assert result.errors == [
            "claim default/c: selector #0: CEL runtime error: attribute model: unsupported attribute value"
        ], claims
    # Neither has a selector: nothing is evaluated, nothing fails.
    assert explain([claim(exact())], [no_selectors, node("n1"), rslice("s1", "n1", "n1", broken)]).satisfiable


def test_a_shared_device_gives_its_counters_back_when_the_search_backs_off_it() -> None:
    # Upstream's incubating allocator leaks here: its undo of a shared device's allocation keeps
    # the counters charged, so it finds no allocation. Ours gives them back once the device's
    # last allocation is undone and finds r0 -> d1, r1 -> d2 (a deliberate difference).
    counters = [{"counterSet": "cs", "counters": {"c": {"value": "1"}}}]
    d0 = dev("d0", {"g": 0, "tag": "y"}, allowMultipleAllocations=True, consumesCounters=counters)
    d1 = dev("d1", {"g": 1, "tag": "y"}, consumesCounters=counters)
    d2 = dev("d2", {"g": 1, "tag": "x"})
    devices_slice = rslice("s1", "n1", "n1", d0, d1, d2, count=2)
    counter_slice = rslice(
        "s2", "n1", "n1", count=2, sharedCounters=[{"name": "cs", "counters": {"c": {"value": "1"}}}]
    )
    del counter_slice["spec"]["devices"]
    only_x = exact("r1", selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].tag == 'x'"}}])
    pod = claim(exact("r0"), only_x, constraints=[{"matchAttribute": f"{GPU}/g"}])
    gates = {**CC, "DRAPartitionableDevices": True}
    result = explain(
        [pod],
        [device_class(), node("n1"), devices_slice, counter_slice],
        kubernetes_version="1.35",
        feature_gates=gates,
    )
    assert [(a.request, a.device) for a in result.nodes[0].allocation] == [("r0", "d1"), ("r1", "d2")]
