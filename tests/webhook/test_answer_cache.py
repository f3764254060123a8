"""The webhook's kept answers: pods of one workload share an answer, never their names, and a
change of the cluster view is seen at once. Pods that differ in what a translation never reads
(env, args, images) share an answer and still get their own, the one a fresh view gives and the
one the translation of the whole pod says. Every answer here comes from the server, its kept
answers included, and is checked against the full path on a view that has answered nothing."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import WEBHOOK_CONFIG, Settings
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL, templates_annotation, translate_pod
from gpucluster.webhook.admission import admit
from gpucluster.webhook.cached_answers import answer_key
from gpucluster.webhook.review import decode_patch
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review
from tests.webhook.served import NAMESPACE, Decodes, fresh, post
from tests.webhook.test_pods_properties import gpu_pods


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Decodes:
    return Decodes(monkeypatch)


def body(obj: dict[str, Any], *, user: str | None = None) -> bytes:
    r = review(obj, namespace="ml")
    if user is not None:
        r["request"]["userInfo"] = {"username": user}
    return json.dumps(r).encode()


def served(bodies: list[bytes], state: ClusterState) -> list[dict[str, Any]]:
    """The server's answers to ``bodies``, in order, on ``state`` (where its kept answers live)."""
    answers, _ = post(bodies, state)
    assert all(status == 200 for status, _ in answers)
    return [answer for _, answer in answers]


def answer(obj: dict[str, Any], state: ClusterState, *, user: str | None = None) -> dict[str, Any]:
    return served([body(obj, user=user)], state)[0]


def replica(i: int, **kw: Any) -> dict[str, Any]:
    return pod(container("cuda", {"nvidia.com/gpu": "2"}), name=f"train-{i}", **kw)


def test_pods_of_one_workload_share_one_patch_that_keeps_each_pods_own_name(decodes: Decodes) -> None:
    state = ClusterState.from_objects([NAMESPACE])
    bodies = [body(replica(1)), body(replica(2))]
    first, second = served(bodies, state)
    assert first["response"]["patch"] == second["response"]["patch"]
    assert [a["response"]["uid"] for a in (first, second)] == [json.loads(b)["request"]["uid"] for b in bodies]
    patched = jsonpatch.apply_patch(replica(2), decode_patch(second))
    assert patched["metadata"]["name"] == "train-2"
    assert patched["spec"]["resourceClaims"] and "nvidia.com/gpu" not in str(patched["spec"]["containers"])
    assert fresh(bodies[0]).creates == fresh(bodies[1]).creates
    assert decodes.bodies == bodies[:1]  # the second was answered with the first's kept answer


def test_labels_annotations_and_requester_are_part_of_the_answer() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    _, opted_out, mirror = served(
        [
            body(replica(1)),
            body(replica(2, labels={"gpucluster.nvidia.com/translate": "false"})),
            body(replica(3), user="system:node:gpu-1"),
        ],
        state,
    )
    assert decode_patch(opted_out) == []
    assert decode_patch(mirror) == [] and "mirror" in mirror["response"]["warnings"][0]


def test_a_change_of_the_cluster_view_is_seen_by_the_next_review() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    before = answer(replica(1), state)
    (template,) = fresh(body(replica(1))).creates
    assert template_named(replica(1), before) == template["metadata"]["name"]
    taken = {**template, "spec": {"spec": {"devices": {"requests": []}}}}
    state.upsert("ResourceClaimTemplate", taken)
    assert template_named(replica(2), answer(replica(2), state)) != template["metadata"]["name"]
    state.upsert(
        "Namespace", {**NAMESPACE, "metadata": {"name": "ml", "labels": {"gpucluster.nvidia.com/translate": "false"}}}
    )
    assert decode_patch(answer(replica(3), state)) == []


def template_named(obj: dict[str, Any], response: dict[str, Any]) -> str:
    name: str = jsonpatch.apply_patch(obj, decode_patch(response))["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"
    ]
    return name


def own(obj: dict[str, Any], i: int) -> dict[str, Any]:
    """``obj`` as pod ``i`` of its workload: every container's env, args, image, and cpu and memory
    amounts its own, and the labels, annotations and hostname a StatefulSet's or an indexed Job's
    pod has of its own."""
    out = json.loads(json.dumps(obj))
    meta = out["metadata"]
    meta["name"] = f"job-{i}"
    meta["labels"] = {
        **meta.get("labels", {}),
        "apps.kubernetes.io/pod-index": str(i),
        "batch.kubernetes.io/job-completion-index": str(i),
    }
    meta["annotations"] = {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(i)}
    out["spec"]["hostname"] = f"job-{i}"
    for c in [*out["spec"].get("initContainers", []), *out["spec"]["containers"]]:
        c["env"] = [{"name": "JOB_COMPLETION_INDEX", "value": str(i)}]
        c["args"] = [f"--rank={i}"]
        c["image"] = f"registry.example.com/train:{i}"
        # Sized per pod: amounts of names without a domain (cpu, memory ...) are never read.
        resources = c.setdefault("resources", {})
        for section in ("limits", "requests"):
            for name in resources.get(section) or {}:
                if "/" not in name:
                    resources[section][name] = f"{i + 1}Mi" if name == "memory" else f"{100 + i}m"
    return out


def translated(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the translation of the whole pod (no part, no memo, no diff) says it is admitted."""
    expected, translation = translate_pod(obj, namespace="ml", config=WEBHOOK_CONFIG)
    if translation.changed:
        meta = expected["metadata"]
        meta["labels"] = {**meta.get("labels", {}), TRANSLATED_LABEL: "true"}
        meta["annotations"][TEMPLATES_ANNOTATION] = templates_annotation(translation.templates)
        if not expected["spec"].get("nodeName"):  # the view shows no template: gated until they exist
            gates = expected["spec"].get("schedulingGates") or []
            expected["spec"]["schedulingGates"] = [*gates, {"name": "gpucluster.nvidia.com/claim-templates"}]
    return expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu_pods(), st.integers(2, 4))
def test_pods_that_differ_in_env_args_and_images_get_their_own_answer(obj: dict[str, Any], n: int) -> None:
    pods = [own(obj, i) for i in range(n)]
    bodies = [body(p) for p in pods]
    # Each after its siblings: their answer is kept.
    for i, (mine, b, out) in enumerate(
        zip(pods, bodies, served(bodies, ClusterState.from_objects([NAMESPACE])), strict=True)
    ):
        assert out == fresh(b).response
        patched = jsonpatch.apply_patch(mine, decode_patch(out))
        assert patched == translated(mine)
        assert all(c["image"] == f"registry.example.com/train:{i}" for c in patched["spec"]["containers"])


def test_a_renamed_template_keeps_each_pods_own_spec() -> None:
    (template,) = fresh(body(own(replica(0), 0))).creates
    taken = {**template, "spec": {"spec": {"devices": {"requests": []}}}}  # the name, another spec

    def view() -> ClusterState:
        return ClusterState.from_objects([NAMESPACE, taken])

    pods = [own(replica(0), i) for i in range(3)]
    bodies = [body(p) for p in pods]
    for i, (mine, b, out) in enumerate(zip(pods, bodies, served(bodies, view()), strict=True)):
        expected = admit(b, path="mutate", cluster=view(), settings=Settings())
        (renamed,) = expected.creates
        assert renamed["metadata"]["name"] != template["metadata"]["name"]
        patched = jsonpatch.apply_patch(mine, decode_patch(out))
        assert patched["spec"]["containers"][0]["image"] == f"registry.example.com/train:{i}"
        assert patched["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == renamed["metadata"]["name"]
        assert out == expected.response


def test_pods_that_differ_only_in_env_args_images_and_their_index_share_one_answer(decodes: Decodes) -> None:
    # A Job's indexed pods, a StatefulSet's, a rollout's builds: one answer, kept once.
    bodies = [body(own(replica(0), i)) for i in range(3)]
    first, second, third = served(bodies, ClusterState.from_objects([NAMESPACE]))
    assert decodes.bodies == bodies[:1]
    assert first["response"]["patch"] == second["response"]["patch"] == third["response"]["patch"]
    keys = {k.key for k in map(answer_key, bodies) if k is not None}
    assert len(keys) == 1


def test_node_name_and_scheduling_gates_are_part_of_the_answer() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    bound = replica(2)
    bound["spec"]["nodeName"] = "gpu-1"
    held = replica(3)
    held["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    plain, pinned, kept = served([body(replica(1)), body(bound), body(held)], state)
    assert decode_patch(pinned) != decode_patch(plain)
    assert "schedulingGates" not in jsonpatch.apply_patch(bound, decode_patch(pinned))["spec"]
    gated = jsonpatch.apply_patch(held, decode_patch(kept))
    assert gated["spec"]["schedulingGates"] == [
        {"name": "example.com/quota"},
        {"name": "gpucluster.nvidia.com/claim-templates"},
    ]


# The labels and annotations the rule reads or writes, with values that change its answer, and
# others that do not.
READ_LABELS = ("gpucluster.nvidia.com/translate", "gpucluster.nvidia.com/translated")
READ_ANNOTATIONS = (
    "gpucluster.nvidia.com/translate",
    "kubernetes.io/config.mirror",
    "gpucluster.nvidia.com/translated-from",
    "gpucluster.nvidia.com/claim-templates",
)
VALUES = st.sampled_from(["false", "False", "true", "", "{}", '{"containers": {}}', "x"])


def members(read: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """A labels or annotations member: absent, null, or a map of read keys and others."""
    mapping = st.dictionaries(st.sampled_from([*read, "app", "apps.kubernetes.io/pod-index"]), VALUES, max_size=4)
    return st.one_of(st.just(None), st.just("absent"), mapping)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(members(READ_LABELS), members(READ_ANNOTATIONS)), min_size=2, max_size=5))
def test_an_answer_is_shared_only_with_pods_whose_read_labels_and_annotations_match(
    metas: list[tuple[Any, Any]],
) -> None:
    # Pods answered one after the other on one view, each as a fresh view answers it alone.
    bodies = []
    for i, (labels, notes) in enumerate(metas):
        mine = replica(i)
        for member, value in (("labels", labels), ("annotations", notes)):
            mine["metadata"].pop(member, None)
            if value != "absent":
                mine["metadata"][member] = value
        bodies.append(body(mine))
    for b, out in zip(bodies, served(bodies, ClusterState.from_objects([NAMESPACE])), strict=True):
        assert out == fresh(b).response


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members(READ_LABELS), members(READ_ANNOTATIONS), st.data())
def test_a_pod_differing_in_one_read_label_or_annotation_gets_its_own_answer(
    labels: Any, annotations: Any, data: st.DataObject
) -> None:
    # The first pod's answer is cached; the second differs from it in one key the rule reads
    # (set, changed or removed), or in a whole member (absent, null, a map).
    member = data.draw(st.sampled_from(["labels", "annotations"]))
    read = READ_LABELS if member == "labels" else READ_ANNOTATIONS
    first = {"labels": labels, "annotations": annotations}
    second = dict(first)
    if isinstance(first[member], dict) and data.draw(st.booleans()):
        changed = dict(first[member])
        key = data.draw(st.sampled_from(read))
        value = data.draw(st.one_of(st.none(), VALUES))
        if value is None:
            changed.pop(key, None)
        else:
            changed[key] = value
        second[member] = changed
    else:
        second[member] = data.draw(st.sampled_from([None, "absent", {}]))
    bodies = []
    for i, metas in enumerate((first, second)):
        mine = replica(i)
        for name, value in metas.items():
            mine["metadata"].pop(name, None)
            if value != "absent":
                mine["metadata"][name] = value
        bodies.append(body(mine))
    for b, out in zip(bodies, served(bodies, ClusterState.from_objects([NAMESPACE])), strict=True):
        assert out == fresh(b).response
