"""The pod rule's encoded answers, found from a review's bytes: a workload's next pod gets the
answer its siblings got, with its own uid, and that answer is always the one the full decode and
a fresh cluster view give. Every member of the key splits it; a review that is not plainly a Pod
CREATE has no key, and keeps the full decode's answer or error."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import WEBHOOK_CONFIG, Settings
from gpucluster.translate import sharing_resource
from gpucluster.webhook.admission import HOOKS
from gpucluster.webhook.cached_answers import Answer, _Annotations, _Labels, answer_key
from gpucluster.webhook.review import decode_patch
from gpucluster.webhook.rules.pods import ANNOTATIONS_READ, LABELS_READ
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review
from tests.webhook.served import NAMESPACE, Decodes, fresh, post
from tests.webhook.test_answer_cache import own
from tests.webhook.test_pods_properties import gpu_pods


def base() -> dict[str, Any]:
    return review(pod(container("cuda", {"nvidia.com/gpu": "2"}), name="train-0"), namespace="ml")


def key(body: dict[str, Any]) -> Any:
    keyed = answer_key(json.dumps(body).encode())
    assert keyed is not None
    return keyed.key


def _spec(r: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = r["request"]["object"]["spec"]
    return spec


def _meta(r: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = r["request"]["object"]["metadata"]
    return meta


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(r: dict[str, Any]) -> None:
        path(r)[field] = value

    return change


def _container(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return _set(lambda r: _spec(r)["containers"][0], field, value)


def _resources(r: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = _spec(r)["containers"][0]["resources"]
    return resources


def _drop_metadata(r: dict[str, Any]) -> None:
    del r["request"]["object"]["metadata"]


def _pop(path: Callable[[dict[str, Any]], dict[str, Any]], field: str) -> Callable[[dict[str, Any]], None]:
    return lambda r: path(r).pop(field, None)


# Each row changes one thing the answer depends on: the key must change with it.
SPLITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "a container name that is not a DNS label": _container("name", "Cuda_1"),
    "two containers of one name": lambda r: _spec(r)["containers"].append(container("cuda")),
    "container restartPolicy": _container("restartPolicy", "Always"),
    "a GPU count alone": lambda r: _resources(r).setdefault("limits", {}).__setitem__("nvidia.com/gpu", "3"),
    "a GPU count written as a number": lambda r: (
        _resources(r).setdefault("limits", {}).__setitem__("nvidia.com/gpu", 3)
    ),
    "a GPU count written as a fraction": lambda r: (
        _resources(r).setdefault("limits", {}).__setitem__("nvidia.com/gpu", 3.0)
    ),
    "a cpu limit taken out": lambda r: (_resources(r).get("limits") or {}).pop("cpu", None),
    "memory requested": lambda r: _resources(r).__setitem__("requests", {"memory": "1Gi"}),
    "null limits": _container("resources", {"limits": None}),
    "null resources": _container("resources", None),
    "no resources": _pop(lambda r: _spec(r)["containers"][0], "resources"),
    "container claims": lambda r: _resources(r).__setitem__("claims", [{"name": "mine"}]),
    "a second container": lambda r: _spec(r)["containers"].append(container("two", {"nvidia.com/gpu": "1"})),
    "init containers": _set(_spec, "initContainers", [container("init", {"nvidia.com/gpu": "1"})]),
    "resourceClaims": _set(_spec, "resourceClaims", [{"name": "mine", "resourceClaimName": "c"}]),
    "nodeName": _set(_spec, "nodeName", "gpu-1"),
    "schedulingGates": _set(_spec, "schedulingGates", [{"name": "example.com/quota"}]),
    "no labels": _pop(_meta, "labels"),
    "no annotations": _pop(_meta, "annotations"),
    "null labels": _set(_meta, "labels", None),
    "null annotations": _set(_meta, "annotations", None),
    "no metadata": _drop_metadata,
    "namespace": lambda r: r["request"].__setitem__("namespace", "other"),
    "namespace in metadata only": lambda r: (r["request"].pop("namespace"), _meta(r).__setitem__("namespace", "x")),
    "a node sends it": lambda r: r["request"].__setitem__("userInfo", {"username": "system:node:gpu-1"}),
    "review apiVersion": lambda r: r.__setitem__("apiVersion", "admission.k8s.io/v1beta1"),
    **{f"label {k}": _set(lambda r: _meta(r)["labels"], k, "false") for k in LABELS_READ},
    **{f"annotation {k}": _set(lambda r: _meta(r).setdefault("annotations", {}), k, "x") for k in ANNOTATIONS_READ},
}


@pytest.mark.parametrize("member", list(SPLITS))
def test_each_member_of_the_key_splits_it(member: str) -> None:
    changed = base()
    _meta(changed)["annotations"] = {"unread": "y"}
    before = key(changed)
    SPLITS[member](changed)
    assert key(changed) != before


def test_what_the_rule_never_reads_does_not_split_the_key() -> None:
    first, second = base(), base()
    first["request"]["object"] = own(first["request"]["object"], 0)
    second["request"]["object"] = own(second["request"]["object"], 1)
    _meta(second)["labels"]["team"] = "b"
    second["request"]["name"] = "train-1"
    second["request"]["dryRun"] = True  # the answer is the same; only what the controller provisions is not
    second["request"]["userInfo"] = {"username": "someone-else", "groups": []}
    a, b = answer_key(json.dumps(first).encode()), answer_key(json.dumps(second).encode())
    assert a is not None and b is not None
    assert a.key == b.key and a.uid != b.uid


def test_amounts_of_names_without_a_domain_do_not_split_the_key() -> None:
    # What the key leaves out must not change the answer either: the full decode, on a fresh
    # view each, gives both pods the same patch.
    sized = []
    for cpu, memory, scratch, pages in [("500m", "1Gi", "10Gi", "2Mi"), ("7", "31Gi", "1Ti", "40Mi")]:
        r = base()
        _resources(r)["limits"].update({"cpu": cpu, "memory": memory, "ephemeral-storage": scratch})
        _resources(r)["requests"] = {"cpu": cpu, "hugepages-2Mi": pages}
        sized.append(r)
    assert key(sized[0]) == key(sized[1])
    patches = [fresh(orjson.dumps(r)).response["response"]["patch"] for r in sized]
    assert patches[0] == patches[1]


def test_the_order_of_resources_members_is_in_the_key() -> None:
    # The patch takes the GPUs out of limits and requests in the order the container lists them:
    # containers that list them the other way round get their own answer.
    gpu = {"nvidia.com/gpu": "1"}
    limits_first, requests_first = base(), base()
    _spec(limits_first)["containers"][0]["resources"] = {"limits": dict(gpu), "requests": dict(gpu)}
    _spec(requests_first)["containers"][0]["resources"] = {"requests": dict(gpu), "limits": dict(gpu)}
    assert key(limits_first) != key(requests_first)
    bodies = [orjson.dumps(limits_first), orjson.dumps(requests_first)]
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert [got for _, got in answers] == [fresh(b).response for b in bodies]
    assert answers[0][1]["response"]["patch"] != answers[1][1]["response"]["patch"]


def _numbered(r: dict[str, Any], gpus: Any, cpu: Any) -> bytes:
    """``r`` with its container's GPU count and cpu limit written as ``gpus`` and ``cpu``, JSON text."""
    _resources(r)["limits"].update({"nvidia.com/gpu": gpus, "cpu": cpu})
    _resources(r)["requests"] = {"nvidia.com/gpu": gpus}
    return orjson.dumps(r)


def test_amounts_written_as_numbers_are_answered_from_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reviews made from YAML (`nvidia.com/gpu: 1`) carry numbers: a workload's pods still share
    # one answer, and each number is keyed as written, since the answer records it so.
    pods = [review(own(base()["request"]["object"], i), namespace="ml") for i in range(8)]
    written = [2, 2, 2.0, "2", 2, 2.0, -0.0, 0.0]
    bodies = [
        _numbered(r, gpus, cpu) for r, gpus, cpu in zip(pods, written, [1, 7, 0.5, 3, "1", 1e3, 1, 1], strict=True)
    ]
    keys = [answer_key(b) for b in bodies]
    assert all(k is not None for k in keys)
    assert len({k.key for k in keys if k is not None}) == 5  # 2, 2.0, "2", -0.0, 0.0
    decodes = Decodes(monkeypatch)
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert [got for _, got in answers] == [fresh(b).response for b in bodies]
    assert len(decodes.bodies) == 5
    # The answers differ where the number is written otherwise: the record keeps it as written.
    patches = [got["response"].get("patch") for _, got in answers]
    assert patches[0] == patches[1] == patches[4] and patches[0] != patches[2]


def test_null_strings_of_a_review_made_by_hand_read_as_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    # The full decode reads a null subResource, name, namespace or username as ""; so does the key.
    plain, nulls = base(), base()
    nulls["request"].update({"subResource": None, "name": None, "userInfo": {"username": None}})
    nulls["request"]["namespace"] = None
    _meta(nulls)["namespace"] = "ml"
    assert key(plain) == key(nulls)
    decodes = Decodes(monkeypatch)
    bodies = [orjson.dumps(plain), orjson.dumps(nulls)]
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert [got for _, got in answers] == [fresh(b).response for b in bodies]
    assert len(decodes.bodies) == 1


def test_null_labels_are_not_missing_labels() -> None:
    # The patch replaces a null map and adds a missing one: two answers, two keys.
    for field in ("labels", "annotations"):
        missing, null = base(), base()
        _meta(missing).pop(field, None)
        _meta(null)[field] = None
        assert key(missing) != key(null)
        patches = [fresh(orjson.dumps(r)).response["response"]["patch"] for r in (missing, null)]
        assert patches[0] != patches[1]


def test_the_key_reads_exactly_the_labels_and_annotations_the_rule_reads() -> None:
    # The sparse read names them one by one; the rule's lists are the source.
    assert [f.encode_name for f in msgspec.structs.fields(_Labels)] == list(LABELS_READ)
    assert [f.encode_name for f in msgspec.structs.fields(_Annotations)] == list(ANNOTATIONS_READ)
    unread = base()
    _meta(unread)["labels"] = {"app": 1, "team": None}  # not the rule's: neither read nor checked
    assert answer_key(json.dumps(unread).encode()) is not None


def test_no_name_without_a_domain_is_read_by_amount() -> None:
    # Why the key holds only whether cpu, memory ... are asked for: the translation reads the
    # amounts of the names it maps, watches or takes for GPU sharing, all of which have a domain.
    config = WEBHOOK_CONFIG
    assert all("/" in name for name in config.mapping)
    assert all("/" in prefix for prefix in (*config.watched_prefixes, config.mig_prefix or "/"))
    for name in ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "gpu", "mig-1g.10gb", "gpumem", "vgpu", "Cpu"]:
        assert config.resolve(name) is None and not config.watched(name) and not sharing_resource(name, config)


def _not(r: dict[str, Any], *path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(r)
    at = out
    for p in path[:-1]:
        at = at[p]
    at[path[-1]] = value
    return out


NO_KEY: dict[str, bytes] = {
    "not JSON": b"{",
    "not UTF-8 where unread": json.dumps(base()).encode().replace(b"nvidia-smi", b"nvidia-\xff"),
    "an update": json.dumps(_not(base(), "request", "operation", value="UPDATE")).encode(),
    "a subresource": json.dumps(_not(base(), "request", "subResource", value="status")).encode(),
    "another kind": json.dumps(
        _not(base(), "request", "kind", value={"group": "", "version": "v1", "kind": "X"})
    ).encode(),
    "an object of another kind": json.dumps(_not(base(), "request", "object", "kind", value="ConfigMap")).encode(),
    "no uid": json.dumps(_not(base(), "request", "uid", value="")).encode(),
    "dryRun not a boolean": json.dumps(_not(base(), "request", "dryRun", value="yes")).encode(),
    "a null spec": json.dumps(_not(base(), "request", "object", "spec", value=None)).encode(),
    "labels not a map": json.dumps(_not(base(), "request", "object", "metadata", "labels", value=["a"])).encode(),
    "a label the rule reads, not a string": json.dumps(
        _not(base(), "request", "object", "metadata", "labels", value={LABELS_READ[0]: 1})
    ).encode(),
    "an annotation the rule reads, null": json.dumps(
        _not(base(), "request", "object", "metadata", "annotations", value={ANNOTATIONS_READ[2]: None})
    ).encode(),
    "an old object on a create": json.dumps(_not(base(), "request", "oldObject", value={})).encode(),
    "a field resources do not have": json.dumps(
        _not(base(), "request", "object", "spec", "containers", value=[{"name": "c", "resources": {"gpus": 1}}])
    ).encode(),
    "limits not a map": json.dumps(
        _not(base(), "request", "object", "spec", "containers", value=[{"name": "c", "resources": {"limits": [1]}}])
    ).encode(),
    "an amount that is a boolean": json.dumps(base()).encode().replace(b'"500m"', b"true"),
    "an amount that is null": json.dumps(base()).encode().replace(b'"500m"', b"null"),
    "an amount that is an object": json.dumps(base()).encode().replace(b'"500m"', b"{}"),
    "an amount beyond a double": json.dumps(base()).encode().replace(b'"500m"', b"1e400"),
    # orjson reads the largest double, and integers beyond 64 bits, otherwise than msgspec may.
    "an amount at the largest double": json.dumps(base()).encode().replace(b'"500m"', b"1.7976931348623157e308"),
    "an integer amount beyond 64 bits": json.dumps(base()).encode().replace(b'"500m"', b"18446744073709551616"),
    "a GPU count beyond 64 bits": json.dumps(base()).encode().replace(b'"2"', b"-9223372036854775809"),
    "a container not a map": json.dumps(_not(base(), "request", "object", "spec", "containers", value=[1])).encode(),
    "an old object": json.dumps(_not(base(), "request", "oldObject", value={"kind": "Pod"})).encode(),
    "another review kind": json.dumps(_not(base(), "kind", value="TokenReview")).encode(),
    "a null object": json.dumps(_not(base(), "request", "object", value=None)).encode(),
    "no request": json.dumps(_not(base(), "request", value=None)).encode(),
    "an object of another apiVersion": json.dumps(_not(base(), "request", "object", "apiVersion", value="v2")).encode(),
    "a namespace only in metadata, not a string": json.dumps(
        _not(_not(base(), "request", "namespace", value=""), "request", "object", "metadata", "namespace", value=7)
    ).encode(),
    "a namespace beyond a double": json.dumps(_not(base(), "request", "namespace", value=""))
    .encode()
    .replace(b'"namespace": "ml"', b'"namespace": 1e400'),
    "nesting deeper than the sparse read's limit": json.dumps(base())
    .encode()
    .replace(b'"containers": [', b'"deep": ' + b"[" * 5000 + b"]" * 5000 + b', "containers": [', 1),
}


@pytest.mark.parametrize("case", list(NO_KEY))
def test_a_review_that_is_not_plainly_a_pod_create_has_no_key(case: str) -> None:
    assert answer_key(NO_KEY[case]) is None


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(gpu_pods(), st.lists(st.sampled_from([None, *SPLITS]), min_size=2, max_size=6))
def test_every_answer_is_the_full_decodes_own(
    monkeypatch: pytest.MonkeyPatch, obj: dict[str, Any], changes: list[str | None]
) -> None:
    # A workload's pods (each its own env, images, index) and pods that differ from them in one
    # member of the key, on one server: each gets exactly what the full decode on a fresh view gives.
    bodies = []
    for i, change in enumerate(changes):
        r = review(own(obj, i), namespace="ml")
        if change is not None:
            SPLITS[change](r)
        bodies.append(orjson.dumps(r))
    decodes = Decodes(monkeypatch)
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    for body, (status, got) in zip(bodies, answers, strict=False):
        assert status == 200
        assert got == fresh(body).response
    distinct = {answer_key(b).key for b in bodies if answer_key(b) is not None}  # type: ignore[union-attr]
    assert len(decodes.bodies) == len(distinct)  # every other review was answered from its key


def _renamed(obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``obj`` with its containers (regular ones first, then init containers) named ``names``."""
    out = copy.deepcopy(obj)
    for c, name in zip([*out["spec"]["containers"], *out["spec"].get("initContainers", [])], names, strict=False):
        c["name"] = name
    return out


# Names that also occur elsewhere in an answer (its claims, templates, resources, the patch's
# own members), and random DNS labels.
CONTAINER_NAMES = st.one_of(
    st.sampled_from(["gpu", "gpu-0", "containers", "nvidia-com", "true", "uid", "patch", "path", "value", "a", "0"]),
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,12}[a-z0-9])?", fullmatch=True),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(gpu_pods(), st.data())
def test_pods_whose_containers_have_names_of_their_own_get_the_full_decodes_answer(
    monkeypatch: pytest.MonkeyPatch, obj: dict[str, Any], data: st.DataObject
) -> None:
    count = len(obj["spec"]["containers"]) + len(obj["spec"].get("initContainers", []))
    bodies, first = [], None
    for i in range(6):
        names = data.draw(st.lists(CONTAINER_NAMES, min_size=count, max_size=count, unique=True))
        if first is not None and data.draw(st.booleans()):  # other names in the first pod's order
            order = sorted(range(count), key=first.__getitem__)
            names = [sorted(names)[order.index(k)] for k in range(count)]
        first = first or names
        bodies.append(orjson.dumps(review(own(_renamed(obj, names), i), namespace="ml")))
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    for body, (status, got) in zip(bodies, answers, strict=False):
        assert status == 200
        assert got == fresh(body).response


def test_a_workloads_pods_with_container_names_of_their_own_share_one_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a build system's or a test harness's pods are: the same workload, each container named for its pod.
    obj = pod(container("cuda", {"nvidia.com/gpu": "2"}), container("log", cpu="100m"), name="x")
    obj["spec"]["initContainers"] = [container("warm", {"nvidia.com/gpu": "1"})]
    bodies = [
        orjson.dumps(review(own(_renamed(obj, [f"w{i}", f"x{i}", f"y{i}"]), i), namespace="ml")) for i in range(5)
    ]
    decodes = Decodes(monkeypatch)
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert decodes.bodies == bodies[:1]
    for i, (body, (_, got)) in enumerate(zip(bodies, answers, strict=False)):
        assert got == fresh(body).response
        patched = jsonpatch.apply_patch(json.loads(body)["request"]["object"], decode_patch(got))
        record = patched["metadata"]["annotations"]["gpucluster.nvidia.com/translated-from"]
        assert json.loads(record) == {
            "containers": {f"w{i}": {"nvidia.com/gpu": "2"}, f"y{i}": {"nvidia.com/gpu": "1"}}
        }


def test_only_the_order_of_container_names_is_in_the_key() -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "2"}), container("log", {"nvidia.com/gpu": "1"}), name="x")

    def named(*names: str) -> Any:
        return key(review(_renamed(obj, list(names)), namespace="ml"))

    assert named("a", "b") == named("c", "d") == named("a", "z")
    assert named("b", "a") != named("a", "b")  # the annotation lists them the other way round
    assert named("a", "B") != named("a", "b")  # not a DNS label: the names themselves are the key


def test_answers_that_name_containers_elsewhere_are_kept_under_their_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # A container asking for zero GPUs is left alone, with a warning that names it.
    obj = pod(container("cuda", {"nvidia.com/gpu": "2"}), container("idle", {"nvidia.com/gpu": "0"}), name="x")
    names = [["a", "b"], ["c", "d"], ["a", "b"], ["c", "d"], ["e", "f"]]
    bodies = [orjson.dumps(review(own(_renamed(obj, n), i), namespace="ml")) for i, n in enumerate(names)]
    decodes = Decodes(monkeypatch)
    answers, _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert decodes.bodies == [bodies[0], bodies[1], bodies[4]]
    for body, (_, got), (_, second) in zip(bodies, answers, names, strict=False):
        assert got == fresh(body).response
        assert any(f"container {second}" in w for w in got["response"]["warnings"])


def test_the_next_pod_is_answered_without_decoding_it_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = [orjson.dumps(review(own(base()["request"]["object"], i), namespace="ml")) for i in range(3)]
    decodes = Decodes(monkeypatch)
    answers, metrics = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert decodes.bodies == bodies[:1]
    uids = [json.loads(b)["request"]["uid"] for b in bodies]
    assert [a["response"]["uid"] for _, a in answers] == uids
    assert answers[1][1]["response"]["patch"] == answers[0][1]["response"]["patch"]
    assert (
        'gpucluster_webhook_reviews_total{operation="CREATE",outcome="mutated",rule="pods.mutate.gpucluster.nvidia.com"} 3.0'
        in metrics
    )
    assert 'gpucluster_webhook_review_duration_seconds_count{path="mutate"} 3.0' in metrics


@pytest.mark.parametrize("case", ["dryRun not a boolean", "not UTF-8 where unread", "an object of another apiVersion"])
def test_a_review_the_full_decode_refuses_is_refused_after_its_shape_was_answered(case: str) -> None:
    ((ok, _), (status, text)), _ = post(
        [json.dumps(base()).encode(), NO_KEY[case]], ClusterState.from_objects([NAMESPACE])
    )
    assert ok == 200 and status == 400 and "cannot decode AdmissionReview" in text


@pytest.mark.rule_crash
def test_a_rule_error_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    (hook,) = [h for h in HOOKS if h.kind == "Pod"]
    calls = {"n": 0}

    def flaky(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return hook.rule(*args)

    monkeypatch.setattr(
        "gpucluster.webhook.admission.HOOKS", tuple(h if h is not hook else _with_rule(h, flaky) for h in HOOKS)
    )
    bodies = [orjson.dumps(review(own(base()["request"]["object"], i), namespace="ml")) for i in range(3)]
    ((_, first), (_, second), (_, third)), _ = post(bodies, ClusterState.from_objects([NAMESPACE]))
    assert "request not checked" in first["response"]["warnings"][0] and "patch" not in first["response"]
    assert second["response"]["patch"] and third["response"]["patch"] == second["response"]["patch"]
    assert calls["n"] == 2  # the error was answered once; the next review ran the rule, the third was kept


def _with_rule(hook: Any, rule: Callable[..., Any]) -> Any:
    return dataclasses.replace(hook, rule=rule)


def test_a_change_of_the_cluster_view_drops_the_kept_answers() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    body = json.dumps(base()).encode()
    ((_, before),), _ = post([body], state)
    state.upsert(
        "Namespace", {**NAMESPACE, "metadata": {"name": "ml", "labels": {"gpucluster.nvidia.com/translate": "false"}}}
    )
    ((_, after),), _ = post([body], state)
    assert "patch" in before["response"] and "patch" not in after["response"]


@pytest.mark.parametrize(
    "case", ["a namespace beyond a double", "nesting deeper than the sparse read's limit", "a null object"]
)
def test_a_review_the_sparse_read_cannot_take_gets_the_full_decodes_answer(case: str) -> None:
    body = NO_KEY[case]
    ((status, got),), _ = post([body], ClusterState.from_objects([NAMESPACE]))
    try:
        expected: Any = fresh(body).response
    except Exception as exc:  # the full decode refuses it: so does the server, with a 400
        assert status == 400 and "cannot decode AdmissionReview" in got, exc
    else:
        assert status == 200 and got == expected


def test_a_validating_review_never_gets_a_kept_mutation() -> None:
    body = json.dumps(base()).encode()
    state = ClusterState.from_objects([NAMESPACE])
    ((_, mutated),), _ = post([body], state)
    ((_, validated),), _ = post([body], state, path="validate")  # the same view: the mutation is kept
    assert "patch" in mutated["response"]
    assert "patch" not in validated["response"] and validated["response"]["allowed"]


def test_a_pod_without_metadata_and_one_with_empty_metadata_get_their_own_keys() -> None:
    # The rule's patch adds /metadata/labels to the one and cannot to the other.
    bare, empty = base(), base()
    del bare["request"]["object"]["metadata"]
    empty["request"]["object"]["metadata"] = {}
    assert key(bare) != key(empty)


def test_answers_are_kept_per_settings() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    body = json.dumps(base()).encode()

    ((_, auto),), _ = post([body], state, settings=Settings(translation_mode="auto"))
    ((_, off),), _ = post([body], state, settings=Settings(translation_mode="off"))
    assert "patch" in auto["response"]
    assert "patch" not in off["response"]  # same view, same key, other settings


def test_a_kept_answer_is_counted_under_its_own_outcome() -> None:
    opted_out = base()
    _meta(opted_out)["labels"]["gpucluster.nvidia.com/translate"] = "false"
    bodies = [json.dumps(r).encode() for r in (opted_out, opted_out, base(), base())]
    _, metrics = post(bodies, ClusterState.from_objects([NAMESPACE]))
    rule = 'rule="pods.mutate.gpucluster.nvidia.com"'
    assert f'gpucluster_webhook_reviews_total{{operation="CREATE",outcome="skipped",{rule}}} 2.0' in metrics
    assert f'gpucluster_webhook_reviews_total{{operation="CREATE",outcome="mutated",{rule}}} 2.0' in metrics


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=8),
    st.lists(st.tuples(st.integers(0, 2), st.binary(max_size=5)), max_size=4),
    st.integers(0, 2),
    st.binary(max_size=7),
    st.lists(st.binary(min_size=1, max_size=9), min_size=3, max_size=3),
)
def test_a_patch_put_together_with_names_is_the_base64_of_the_whole(
    first: bytes, middle: list[tuple[int, bytes]], index: int, last: bytes, names: list[bytes]
) -> None:
    # The base64 encoded once around the names, and the part between encoded per review, give the
    # base64 of the whole patch, whatever the lengths (each group of 3 bytes falls anywhere).
    pieces: tuple[bytes | int, ...] = (first, index, *[p for pair in middle for p in pair], last)
    answer = Answer(b"{", b"}", "pods", "mutated", pieces)
    whole = b"".join([p if isinstance(p, bytes) else names[p] for p in pieces])
    assert answer.encode("u", tuple(names)) == b'{"u"}' + base64.b64encode(whole)


def test_container_names_kept_by_their_text_are_bounded() -> None:
    # Names are read once per text, up to 4,096 texts of at most a DNS label's length: a review
    # with huge names (no API server sends one) is read, and none of it is kept.
    from gpucluster.webhook import cached_answers

    huge = base()
    _spec(huge)["containers"][0]["name"] = "a" * 100_000
    keyed = answer_key(json.dumps(huge).encode())
    assert keyed is not None and keyed.names is None  # the name itself is in the key
    assert all(len(text) <= 65 for text in cached_answers._LABELS)
    for i in range(5000):
        many = base()
        _spec(many)["containers"][0]["name"] = f"c-{i}"
        answer_key(json.dumps(many).encode())
    assert len(cached_answers._LABELS) <= 4096
