"""Claim templates you can trust: hand-written annotations buy nothing, names bind specs,
a squatted name gets a true event and keeps the pod gated, refused creates back off, namespaces
take turns, waiting pods are touched or ungated, and no template is collected while any pod names it.

Expectations are written out (counts, device classes, names of the fixtures), never recomputed
with the code under test.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

from gpucluster.claimtemplates import CLAIM_TEMPLATES_GATE, bound_problems
from gpucluster.clusterstate import ClusterState
from gpucluster.controller.provision import (
    CONFLICT_REASON,
    REFUSED_REASON,
    TOUCH_ANNOTATION,
    FairQueue,
    Provisioner,
    owned,
    plan,
    wanted_templates,
)
from gpucluster.policy import WEBHOOK_CONFIG
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL, translate_pod_spec
from tests.kit.fakekube import FakeKube

RECORD = "gpucluster.nvidia.com/translated-from"
# The template the webhook gives one container asking for nvidia.com/gpu: 1 (a fixture: the
# README's example shape, name and spec as the webhook writes them).
ONE_GPU = "gpucluster-gpu-1-18c4435f83"
ONE_GPU_SPEC = {
    "metadata": {"labels": {"app.kubernetes.io/managed-by": "gpucluster"}},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1},
                }
            ]
        }
    },
}


def forged(
    name: str, record: Mapping[str, Any], refs: list[str], namespace: str = "tenant", **spec: Any
) -> dict[str, Any]:
    """A pod written by hand: no GPU request (the webhook is never called), our label and annotations."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {TRANSLATED_LABEL: "true"},
            "annotations": {
                RECORD: json.dumps(record),
                TEMPLATES_ANNOTATION: json.dumps({r: ONE_GPU_SPEC for r in refs}),
            },
        },
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": f"gpu-{i}", "resourceClaimTemplateName": r} for i, r in enumerate(refs)],
            **spec,
        },
    }


def one_gpu(name: str = "p", namespace: str = "ml") -> dict[str, Any]:
    return forged(name, {"containers": {"c": {"nvidia.com/gpu": "1"}}}, [ONE_GPU], namespace)


def mig_slice(profile: str) -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "devices": [{"name": "mig-0", "attributes": {"profile": {"string": profile}}}],
        },
    }


def test_the_honest_shape_is_rederived_from_the_record() -> None:
    wants, problems = wanted_templates(one_gpu())
    assert problems == [] and list(wants) == [ONE_GPU] and wants[ONE_GPU].spec == ONE_GPU_SPEC


def test_a_name_of_the_users_choosing_gets_nothing() -> None:
    pod = forged("a", {"containers": {"c": {"nvidia.com/gpu": "1"}}}, ["gpucluster-owned-by-attacker-1a2b3c4d5e"])
    result = plan([pod], lambda ns, n: None, set())
    assert result.create == {} and "not a template the translation" in result.refused[0][1]


def test_more_than_64_devices_per_pod_get_nothing() -> None:
    # 96 GPUs in three containers: three 32-GPU templates, beyond the webhook's bound of 64.
    record = {"containers": {f"c{i}": {"nvidia.com/gpu": "32"} for i in range(3)}}
    pod = forged("big", record, [ONE_GPU])
    pod["spec"]["containers"] = [{"name": f"c{i}", "image": "x"} for i in range(3)]
    result = plan([pod], lambda ns, n: None, set())
    assert result.create == {}
    assert "the pod asks for 96 devices (at most 64 are translated)" in result.refused[0][1]


def test_a_mig_profile_no_node_publishes_gets_nothing() -> None:
    pod = forged("mig", {"containers": {"c": {"nvidia.com/mig-7g.99gb": "1"}}}, ["gpucluster-mig-7g-99gb-1-d92ce2280d"])
    view = ClusterState.from_objects([mig_slice("1g.10gb")])
    result = plan([pod], lambda ns, n: None, set(), view)
    assert result.create == {} and "no node publishes MIG profile 7g.99gb" in result.refused[0][1]


def test_a_mig_profile_gets_nothing_while_no_node_publishes_any() -> None:
    """The controller's view is a synced cache of every ResourceSlice: no NVIDIA slice means no node
    publishes any MIG profile (the webhook, whose view may lag the driver, does not bound MIG then)."""
    pod = forged("mig", {"containers": {"c": {"nvidia.com/mig-7g.99gb": "1"}}}, ["gpucluster-mig-7g-99gb-1-d92ce2280d"])
    result = plan([pod], lambda ns, n: None, set(), ClusterState.from_objects([]))
    assert result.create == {} and "no node publishes MIG profile 7g.99gb" in result.refused[0][1]
    translation = translate_pod_spec(
        {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-7g.99gb": "1"}}}]},
        namespace="ml",
        config=WEBHOOK_CONFIG,
    )
    assert bound_problems(translation, ClusterState.from_objects([]), WEBHOOK_CONFIG) == []


def test_salted_copies_of_one_spec_get_nothing() -> None:
    # The webhook's alternatives for the 1-GPU spec (salted with the attempt number), all named by one pod.
    salted = [
        ONE_GPU, "gpucluster-gpu-1-34f14df515", "gpucluster-gpu-1-0bc2c62bba",
    ]  # fmt: skip
    pod = forged("salted", {"containers": {"c": {"nvidia.com/gpu": "1"}}}, salted[:2])
    result = plan([pod], lambda ns, n: None, set())
    assert result.create == {}
    assert (
        f"templates {ONE_GPU}, gpucluster-gpu-1-34f14df515: one translated spec under 2 names" in result.refused[0][1]
    )


def test_a_record_naming_containers_the_pod_lacks_is_refused_clearly() -> None:
    pod = forged("x", {"containers": {"ghost": {"nvidia.com/gpu": "1"}}}, [ONE_GPU])
    _, problems = wanted_templates(pod)
    assert problems == ["the record names container ghost, which the pod does not have"]
    pod = forged("y", {}, [ONE_GPU])
    del pod["metadata"]["annotations"][RECORD]
    assert wanted_templates(pod)[1] == ["the pod has no record of its original GPU requests"]


def test_a_label_alone_never_makes_a_template_ours() -> None:
    labelled = {"gpucluster.nvidia.com/provisioned": "true", "app.kubernetes.io/managed-by": "gpucluster"}
    ours = {"metadata": {"name": ONE_GPU, "namespace": "ml", "labels": labelled}, "spec": ONE_GPU_SPEC}
    assert owned(ours)
    theirs = {"metadata": {"name": "precious", "namespace": "ml", "labels": labelled}, "spec": ONE_GPU_SPEC}
    other_spec = {**ours, "spec": {"spec": {"devices": {"requests": []}}}}
    assert not owned(theirs) and not owned(other_spec)
    # Cached under our label with another spec: a conflict, never "already there".
    result = plan([one_gpu()], lambda ns, n: other_spec if n == ONE_GPU else None, set())
    assert result.create == {} and [(p["metadata"]["name"], k) for p, k, _ in result.conflicts] == [
        ("p", ("ml", ONE_GPU))
    ]


def test_namespaces_take_turns() -> None:
    queue = FairQueue()
    for key in [("flood", f"t{i}") for i in range(5)] + [("victim", "v0"), ("flood", "t0")]:
        queue.push(key)
    assert len(queue) == 6  # t0 queued twice is served once
    served = [queue.pop() for _ in range(7)]
    assert served == [("flood", "t0"), ("victim", "v0"), ("flood", "t1"), ("flood", "t2"), ("flood", "t3"),
                      ("flood", "t4"), None]  # fmt: skip
    queue.push(("victim", "v1"))  # a namespace that arrives later is next, not behind the flood
    queue.push(("flood", "t5"))
    queue.push(("flood", "t6"))
    queue.push(("late", "l0"))
    assert [queue.pop() for _ in range(3)] == [("victim", "v1"), ("flood", "t5"), ("late", "l0")]


TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"  # in every namespace
ML_TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates"


def api(*templates: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> FakeKube:
    """The API server with ``templates`` and ``pods`` (the pods it lists, besides those the provisioner knows)."""
    kind = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"}
    return FakeKube(
        [*({**kind, **t} for t in templates), *({"apiVersion": "v1", "kind": "Pod", **p} for p in pods or [])]
    )


def template_names(kube: FakeKube) -> set[str]:
    return {t["metadata"]["name"] for t in kube.objects(TEMPLATES)}


def posts(kube: FakeKube) -> int:
    return len(kube.paths("POST"))


def hold(kube: FakeKube, name: str) -> asyncio.Event:
    """Hold the create of the template ``name`` until the event is set (a slow create)."""
    gate = asyncio.Event()
    kube.on("POST", "", lambda call: gate.wait() if call.body["metadata"]["name"] == name else None)
    return gate


def provisioner(
    kube: FakeKube, pods: list[dict[str, Any]], clock: list[float], **kw: Any
) -> tuple[Provisioner, list[tuple[str, str]]]:
    """A provisioner whose cache holds ``pods``, which the API server has too."""
    events: list[tuple[str, str]] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((reason, message))

    for pod in pods:
        kube.put(pod)
    p = Provisioner(kube, event=event, clock=lambda: clock[0], **kw)
    p.state.replace("Pod", pods)
    p.state.replace("ResourceClaimTemplate", [])
    p.state.replace("ResourceSlice", [])
    return p, events


async def test_a_squatted_name_gets_a_warning_that_tells_the_truth() -> None:
    # Between admission and the controller's POST someone created the pod's template with 1 GPU of
    # another class; the pod asked for 7 GPUs, and kube-controller-manager made its claim from the squatter's.
    pod = forged("seven", {"containers": {"c": {"nvidia.com/gpu": "7"}}}, ["gpucluster-gpu-7-df3119dd05"], "ml")
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpu-0", "resourceClaimName": "seven-gpu-0-abcde"}]}
    squatter = {
        "metadata": {"name": "gpucluster-gpu-7-df3119dd05", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
    }
    kube = api(squatter)
    squatted = kube.object(f"{ML_TEMPLATES}/gpucluster-gpu-7-df3119dd05")
    p, events = provisioner(kube, [pod], [0.0])
    await p.reconcile()
    await p.reconcile()
    [(reason, message)] = events
    assert reason == CONFLICT_REASON
    assert "ResourceClaimTemplate ml/gpucluster-gpu-7-df3119dd05 exists with another spec" in message
    assert "claim gpu-0 (ResourceClaim seven-gpu-0-abcde) was made from it" in message
    assert "gets 1 of gpu.nvidia.com instead of the 7 of gpu.nvidia.com it asked for" in message
    assert "cannot be made from it" not in message
    assert kube.object(f"{ML_TEMPLATES}/gpucluster-gpu-7-df3119dd05") == squatted  # never overwritten
    assert posts(kube) == 1  # backed off, not POSTed on every pass


async def test_a_refused_create_backs_off_per_template() -> None:
    clock = [0.0]
    kube = api()
    kube.fail("POST", "", 403, times=3, message="exceeded quota")  # the next 3 POSTs (a quota)
    p, events = provisioner(kube, [one_gpu()], clock)
    for _ in range(20):  # 20 passes within the first second: one POST
        await p.reconcile()
    assert posts(kube) == 1 and events[0][0] == REFUSED_REASON
    clock[0] = 1.5
    await p.reconcile()
    clock[0] = 2.0  # the second delay is 2 s: not yet
    await p.reconcile()
    assert posts(kube) == 2
    clock[0] = 3.6
    await p.reconcile()
    clock[0] = 7.7
    await p.reconcile()
    assert posts(kube) == 4 and ONE_GPU in template_names(kube)


async def test_a_pod_that_waited_is_touched_once_the_template_exists() -> None:
    kube = api()
    p, _ = provisioner(kube, [one_gpu("w")], [0.0])
    await p.reconcile()
    patches = [(c.path, c.body) for c in kube.calls if c.method == "PATCH"]
    assert [path for path, _ in patches] == ["/api/v1/namespaces/ml/pods/w"]
    assert list(patches[0][1]["metadata"]["annotations"]) == [TOUCH_ANNOTATION]


TWO_GPUS = "gpucluster-gpu-2-fe27b22c2a"  # the webhook's name for nvidia.com/gpu: 2
THREE_GPUS = "gpucluster-gpu-3-b6234dd844"


def gpus(name: str, count: int, template: str, namespace: str = "ml") -> dict[str, Any]:
    return forged(name, {"containers": {"c": {"nvidia.com/gpu": str(count)}}}, [template], namespace)


async def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


def touched(kube: FakeKube) -> list[str]:
    return [path.rsplit("/", 1)[-1] for path in kube.paths("PATCH")]


async def test_a_pod_is_touched_once_its_own_template_exists_not_the_whole_batch() -> None:
    kube = api()
    slow = hold(kube, ONE_GPU)
    p, _ = provisioner(kube, [one_gpu("slow"), gpus("quick", 2, TWO_GPUS)], [0.0], concurrency=2)
    await p.reconcile(wait=False)
    await until(lambda: touched(kube) == ["quick"], "the pod whose template exists is touched")
    assert ONE_GPU not in template_names(kube)  # while the other create is still under way
    slow.set()
    await until(lambda: touched(kube) == ["quick", "slow"], "then the other")
    await p.reconcile()  # nothing more: each pod is touched once
    assert touched(kube) == ["quick", "slow"] and posts(kube) == 2


async def test_a_pod_that_arrives_during_a_batch_does_not_wait_for_it() -> None:
    kube = api()
    slow = hold(kube, ONE_GPU)
    p, _ = provisioner(kube, [one_gpu("slow")], [0.0], concurrency=4)
    await p.reconcile(wait=False)
    await until(lambda: posts(kube) == 1, "the slow create is under way")
    late = gpus("late", 3, THREE_GPUS, "other")
    kube.put(late)
    p.state.upsert("Pod", late)
    await p.reconcile(wait=False)  # the next pass, while the first pass's create still runs
    await until(lambda: touched(kube) == ["late"], "the late pod's template is created and the pod touched")
    assert ONE_GPU not in template_names(kube) and THREE_GPUS in template_names(kube)
    # The slow template is not POSTed again while its create is under way.
    await p.reconcile(wait=False)
    assert [c.method for c in kube.calls if c.method == "POST" and c.body["metadata"]["name"] == ONE_GPU] == ["POST"]
    slow.set()
    await p.reconcile()
    assert touched(kube) == ["late", "slow"]


async def test_a_pod_with_two_templates_is_touched_once_both_exist() -> None:
    pod = forged(
        "both",
        {"containers": {"c": {"nvidia.com/gpu": "1"}, "d": {"nvidia.com/gpu": "2"}}},
        [ONE_GPU, TWO_GPUS],
        "ml",
    )
    pod["spec"]["containers"].append({"name": "d", "image": "x"})
    wants, problems = wanted_templates(pod)
    assert problems == [] and sorted(wants) == [ONE_GPU, TWO_GPUS]
    kube = api()
    slow = hold(kube, ONE_GPU)
    p, _ = provisioner(kube, [pod], [0.0], concurrency=2)
    await p.reconcile(wait=False)
    await until(lambda: TWO_GPUS in template_names(kube), "one of its templates exists")
    assert touched(kube) == []
    slow.set()
    await until(lambda: touched(kube) == ["both"], "touched once both exist")


async def test_a_template_any_pod_names_is_never_collected() -> None:
    # A migrated Deployment's pod: not translated, not labelled, names the template.
    migrated = {
        "metadata": {"name": "m", "namespace": "ml"},
        "spec": {"resourceClaims": [{"name": "gpu-0", "resourceClaimTemplateName": ONE_GPU}]},
    }
    labels = {"gpucluster.nvidia.com/provisioned": "true", "app.kubernetes.io/managed-by": "gpucluster"}
    ours = {
        "kind": "ResourceClaimTemplate",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": ONE_GPU, "namespace": "ml", "labels": labels, "uid": "u", "resourceVersion": "1",
                     "creationTimestamp": "2020-01-01T00:00:00Z"},
        "spec": ONE_GPU_SPEC,
    }  # fmt: skip
    clock = [0.0]
    kube = api(ours, pods=[migrated])
    p, _ = provisioner(kube, [], clock, grace_period=10.0)
    p.state.replace("ResourceClaimTemplate", kube.objects(TEMPLATES))
    for t in (0.0, 11.0, 30.0, 60.0):
        clock[0] = t
        await p.reconcile()
    assert ONE_GPU in template_names(kube) and not kube.paths("DELETE")
    kube.remove(
        "/api/v1/namespaces/ml/pods/m"
    )  # the migrated pods are gone: collected once the grace period has passed again
    clock[0] = 65.0
    await p.reconcile()
    assert ONE_GPU in template_names(kube)
    clock[0] = 71.0
    await p.reconcile()
    assert ONE_GPU not in template_names(kube)


async def test_a_template_labelled_ours_by_someone_else_is_never_collected() -> None:
    labels = {"gpucluster.nvidia.com/provisioned": "true"}
    theirs = {"metadata": {"name": "precious", "namespace": "ml", "labels": labels, "uid": "u",
                           "creationTimestamp": "2020-01-01T00:00:00Z"},
              "spec": ONE_GPU_SPEC}  # fmt: skip
    clock = [0.0]
    kube = api(theirs)
    p, _ = provisioner(kube, [], clock, grace_period=1.0)
    p.state.replace("ResourceClaimTemplate", kube.objects(TEMPLATES))
    for t in (0.0, 5.0, 10.0):
        clock[0] = t
        await p.reconcile()
    assert "precious" in template_names(kube) and p.owned() == []


async def test_a_pod_is_translated_again_only_when_what_the_translation_reads_or_the_mig_profiles_change(
    monkeypatch: Any,
) -> None:
    import gpucluster.controller.provision as provision

    calls: list[str] = []
    real = provision.wanted_templates

    def counting(pod: Any, cluster: Any = None) -> Any:
        calls.append(pod["metadata"]["name"])
        return real(pod, cluster)

    monkeypatch.setattr(provision, "wanted_templates", counting)
    pod = one_gpu("p")
    pod["metadata"]["resourceVersion"] = "7"
    p, _ = provisioner(api(), [pod], [0.0])
    for _ in range(3):
        await p.reconcile()
    assert calls == ["p"]
    # Its life: a status, a node, a label, an image. Nothing the translation reads.
    lived = json.loads(json.dumps(pod))
    lived["metadata"]["resourceVersion"] = "8"
    lived["metadata"]["labels"]["team"] = "a"
    lived["spec"]["nodeName"] = "node-0"
    lived["spec"]["containers"][0]["image"] = "y"
    lived["status"] = {"phase": "Running"}
    p.state.upsert("Pod", lived)
    await p.reconcile()
    # A replica of the same shape, in the same namespace: the same answer.
    p.state.upsert("Pod", {**one_gpu("q"), "metadata": {**one_gpu("q")["metadata"], "resourceVersion": "9"}})
    await p.reconcile()
    assert calls == ["p"]
    # Its record changes (2 GPUs): translated again. So is everything when the MIG profiles change.
    two = forged("p", {"containers": {"c": {"nvidia.com/gpu": "2"}}}, [ONE_GPU], "ml")
    two["metadata"]["resourceVersion"] = "10"
    p.state.upsert("Pod", two)
    await p.reconcile()
    assert calls == ["p", "p"]
    p.state.replace("ResourceSlice", [mig_slice("1g.10gb")])
    await p.reconcile()
    assert sorted(calls) == ["p", "p", "p", "q"]


def gated(pod: dict[str, Any], *others: str) -> dict[str, Any]:
    """``pod`` as the webhook admits it when its view lacks the template: gated (after ``others``)."""
    pod["spec"]["schedulingGates"] = [*({"name": g} for g in others), {"name": CLAIM_TEMPLATES_GATE}]
    return pod


def gates(kube: FakeKube, name: str, namespace: str = "ml") -> list[str]:
    return [
        g["name"] for g in kube.object(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("schedulingGates", [])
    ]


async def test_a_gated_pod_is_ungated_once_its_template_exists() -> None:
    kube = api()
    p, events = provisioner(kube, [gated(one_gpu("w"), "example.com/quota")], [0.0])
    await p.reconcile()
    assert ONE_GPU in template_names(kube)
    assert gates(kube, "w") == ["example.com/quota"]  # ours removed, the other left
    pod = kube.object("/api/v1/namespaces/ml/pods/w")
    assert TOUCH_ANNOTATION not in pod["metadata"].get("annotations", {})  # the update itself is the cue
    assert events == []


async def held_ungate(kube: FakeKube) -> tuple[Provisioner, asyncio.Event, str]:
    """A provisioner whose template exists and is cached, a pod ``second`` gated for it, and its
    ungate PATCH held until the returned event is set; and that pod's path."""
    p, _ = provisioner(kube, [one_gpu("first")], [0.0])
    await p.reconcile()
    p.state.upsert("Pod", kube.put(gated(one_gpu("second"))))
    release = asyncio.Event()
    second = "/api/v1/namespaces/ml/pods/second"
    kube.on("PATCH", second, lambda call: release.wait())
    return p, release, second


async def test_a_pod_is_ungated_by_one_request_while_passes_overlap() -> None:
    # The worker that created the template and the next pass both find the pod gated in the cache
    # until the ungate's own watch event arrives: one PATCH, not one each (86 of 200 pods of a burst
    # were patched twice).
    kube = api()
    p, release, second = await held_ungate(kube)
    passes = [asyncio.create_task(p.reconcile()) for _ in range(3)]
    await until(lambda: second in kube.paths("PATCH"), "the first ungate is sent")
    await asyncio.sleep(0)  # the other passes reach the pod meanwhile
    release.set()
    await asyncio.gather(*passes)
    assert kube.paths("PATCH").count(second) == 1
    assert gates(kube, "second") == []
    await p.reconcile()  # the cache still shows the gate: the pod is known to be ungated
    assert kube.paths("PATCH").count(second) == 1


async def test_the_run_loops_pass_does_not_wait_for_an_ungate() -> None:
    # Under a burst an ungate takes as long as a template's POST: a pass that waited for it kept
    # the templates of pods that arrived meanwhile from being queued (0.9 s in one burst).
    kube = api()
    p, release, second = await held_ungate(kube)
    await asyncio.wait_for(p.reconcile(wait=False), 1)  # returns with the PATCH held
    await until(lambda: second in kube.paths("PATCH"), "the ungate is sent")
    late = gpus("late", 2, TWO_GPUS, "other")
    p.state.upsert("Pod", kube.put(late))
    await asyncio.wait_for(p.reconcile(wait=False), 1)  # the next pass, the ungate still held
    await until(lambda: TWO_GPUS in template_names(kube), "the late pod's template is created meanwhile")
    assert kube.paths("PATCH").count(second) == 1  # the held ungate is not sent again
    release.set()
    await until(lambda: gates(kube, "second") == [], "the pod is ungated once its PATCH is let through")
    await p.reconcile()
    assert kube.paths("PATCH").count(second) == 1


async def test_an_ungate_refused_because_the_gates_changed_asks_for_another_pass() -> None:
    # The event that changed the gates may have come while the PATCH was on its way, and woken a
    # pass that found the ungate already under way: without another pass the pod would wait for
    # the timer.
    kube = api()
    p, _ = provisioner(kube, [one_gpu("first")], [0.0])
    await p.reconcile()
    p.state.upsert("Pod", kube.put(gated(one_gpu("second"))))
    kube.fail("PATCH", "/api/v1/namespaces/ml/pods/second", 422, times=1)
    p.dirty.clear()
    await p.reconcile()
    assert p.dirty.is_set()
    assert gates(kube, "second") == [CLAIM_TEMPLATES_GATE]  # still gated: the next pass ungates it
    p.dirty.clear()
    await p.reconcile()
    assert gates(kube, "second") == [] and not p.dirty.is_set()


async def test_a_gated_pod_whose_template_exists_is_ungated_without_a_create() -> None:
    kube = api()
    p, _ = provisioner(kube, [one_gpu("first")], [0.0])
    await p.reconcile()  # the template now exists, ours, and is cached
    p.state.upsert("Pod", kube.put(gated(one_gpu("second"))))
    await p.reconcile()
    await p.reconcile()  # the cache still shows the gate: not removed twice
    assert posts(kube) == 1 and gates(kube, "second") == []
    assert len([path for path in kube.paths("PATCH") if path.endswith("/second")]) == 1


async def test_a_squatted_name_keeps_the_pod_gated_and_says_so() -> None:
    pod = gated(forged("seven", {"containers": {"c": {"nvidia.com/gpu": "7"}}}, ["gpucluster-gpu-7-df3119dd05"], "ml"))
    squatter = {
        "metadata": {"name": "gpucluster-gpu-7-df3119dd05", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
    }
    kube = api(squatter)
    p, events = provisioner(kube, [pod], [0.0])
    for _ in range(3):
        await p.reconcile()
    assert gates(kube, "seven") == [CLAIM_TEMPLATES_GATE]  # never scheduled onto 1 GPU it did not ask for
    [(reason, message)] = events
    assert reason == CONFLICT_REASON
    assert "instead of the 7 of gpu.nvidia.com it asked for, so the pod stays gated" in message
    assert "so the pod gets" not in message


async def test_a_forged_gated_pod_is_never_ungated() -> None:
    # A name of the user's choosing: refused, so the gate (the user's to write) stays.
    pod = gated(forged("f", {"containers": {"c": {"nvidia.com/gpu": "1"}}}, ["gpucluster-owned-by-attacker-1"], "ml"))
    kube = api({"metadata": {"name": "gpucluster-owned-by-attacker-1", "namespace": "ml"}, "spec": ONE_GPU_SPEC})
    p, events = provisioner(kube, [pod], [0.0])
    await p.reconcile()
    assert gates(kube, "f") == [CLAIM_TEMPLATES_GATE] and kube.paths("PATCH") == []
    [(reason, message)] = events
    assert reason == REFUSED_REASON
    assert message.endswith(
        "; the pod stays gated (gpucluster.nvidia.com/claim-templates) and is not scheduled while this holds"
    )


def test_a_pods_status_changes_do_not_wake_a_pass_but_what_a_pass_reads_does() -> None:
    # On a cluster of many translated pods, every kubelet or scheduler status update woke a pass
    # over all of them.
    p, _ = provisioner(api(), [], [0.0])

    def wakes(type_: str, pod: dict[str, Any]) -> bool:
        p.dirty.clear()
        p._on_event(type_, pod)
        return p.dirty.is_set()

    pod = gated(one_gpu("w"))
    assert wakes("ADDED", pod)
    running = json.loads(json.dumps(pod))
    running["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    running["metadata"]["resourceVersion"] = "2"
    assert not wakes("MODIFIED", running)  # the scheduler's condition
    running["status"]["resourceClaimStatuses"] = [{"name": "gpu-0", "resourceClaimName": "w-gpu-0-x"}]
    assert not wakes("MODIFIED", running)  # kube-controller-manager's claim names
    ungated = json.loads(json.dumps(running))
    ungated["spec"]["schedulingGates"] = []
    assert wakes("MODIFIED", ungated)  # the gate went
    ungated["status"]["phase"] = "Running"
    assert not wakes("MODIFIED", ungated)
    done = json.loads(json.dumps(ungated))
    done["status"]["phase"] = "Succeeded"
    assert wakes("MODIFIED", done)  # terminal: its templates may be collected
    edited = json.loads(json.dumps(ungated))
    edited["metadata"]["annotations"][TEMPLATES_ANNOTATION] = "{}"
    assert wakes("MODIFIED", edited)  # what the translation is re-derived from
    deleting = json.loads(json.dumps(ungated))
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    assert wakes("MODIFIED", deleting)
    assert wakes("DELETED", deleting)
    template = {"kind": "ResourceClaimTemplate", "metadata": {"name": ONE_GPU, "namespace": "ml"}}
    assert wakes("MODIFIED", template)
    p.state.replace("Pod", [running])
    p.dirty.clear()
    p._on_list("Pod")  # a relist: whatever changed meanwhile is unknown, so a pass
    assert p.dirty.is_set()
    later = json.loads(json.dumps(running))
    later["status"]["conditions"].append({"type": "Ready", "status": "False"})
    assert not wakes("MODIFIED", later)  # compared with the pod as listed
    assert wakes("MODIFIED", ungated)
