"""Pod CREATE translation through the mutating webhook: every case of the webhook issue."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import TRANSLATE_LABEL, Settings
from gpucluster.webhook.admission import Admission, admit
from gpucluster.webhook.review import decode_patch
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "ml", "labels": {"kubernetes.io/metadata.name": "ml"}},
}


def mutate(obj: dict[str, Any], *cluster: dict[str, Any], mode: str = "auto", **kw: Any) -> Admission:
    body = review(obj, namespace=kw.pop("namespace", "ml"), **kw)
    state = ClusterState.from_objects([NAMESPACE, *cluster])
    return admit(json.dumps(body), path="mutate", cluster=state, settings=Settings(translation_mode=mode))  # type: ignore[arg-type]


def patched(out: Admission) -> dict[str, Any]:
    assert out.request.obj is not None
    result: dict[str, Any] = jsonpatch.apply_patch(out.request.obj, decode_patch(out.response))
    return result


def all_containers(p: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(p["spec"].get("initContainers") or []), *p["spec"]["containers"]]


def gpu_left(p: dict[str, Any]) -> bool:
    return any(
        k.startswith("nvidia.com/")
        for c in all_containers(p)
        for section in ("limits", "requests")
        for k in (c.get("resources", {}).get(section) or {})
    )


def test_single_container_gets_a_claim_and_a_template() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "2"})))
    resp = out.response["response"]
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    p = patched(out)
    assert not gpu_left(p)
    c = p["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "500m", "memory": "1Gi"}  # other resources kept
    [ref] = p["spec"]["resourceClaims"]
    assert c["resources"]["claims"] == [{"name": ref["name"]}]
    [template] = out.creates
    assert template["kind"] == "ResourceClaimTemplate" and template["metadata"]["namespace"] == "ml"
    assert template["metadata"]["name"] == ref["resourceClaimTemplateName"]
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
    assert json.loads(p["metadata"]["annotations"]["gpucluster.nvidia.com/translated-from"]) == {
        "containers": {"cuda": {"nvidia.com/gpu": "2"}}
    }


def test_multiple_containers_each_get_their_own_devices() -> None:
    out = mutate(pod(container("a", {"nvidia.com/gpu": "1"}), container("b", {"nvidia.com/gpu": "3"}), container("c")))
    p = patched(out)
    a, b, c = p["spec"]["containers"]
    assert a["resources"]["claims"] != b["resources"]["claims"]
    assert "claims" not in c["resources"]
    counts = sorted(r["exactly"]["count"] for t in out.creates for r in t["spec"]["spec"]["devices"]["requests"])
    assert counts == [1, 3]


def test_init_container_reuses_the_app_containers_devices() -> None:
    init = [container("warmup", {"nvidia.com/gpu": "1"})]
    out = mutate(pod(container("train", {"nvidia.com/gpu": "2"}), init=init))
    p = patched(out)
    total = sum(r["exactly"]["count"] for t in out.creates for r in t["spec"]["spec"]["devices"]["requests"])
    assert total == 2  # max(init 1, regular 2): never more than the device plugin would have given
    assert not gpu_left(p)
    assert p["spec"]["initContainers"][0]["resources"]["claims"]


def test_sidecar_adds_to_the_total() -> None:
    init = [container("monitor", {"nvidia.com/gpu": "1"}, restart="Always")]
    out = mutate(pod(container("train", {"nvidia.com/gpu": "2"}), init=init))
    total = sum(r["exactly"]["count"] for t in out.creates for r in t["spec"]["spec"]["devices"]["requests"])
    assert total == 3


def test_mig_request_selects_the_profile() -> None:
    out = mutate(pod(container("infer", {"nvidia.com/mig-1g.10gb": "1"})))
    [template] = out.creates
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert request["exactly"]["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}}
    ]


def test_mixed_gpu_and_mig_in_one_container() -> None:
    out = mutate(pod(container("both", {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "2"})))
    p = patched(out)
    refs = p["spec"]["containers"][0]["resources"]["claims"]
    assert len(refs) == 2 and all("request" in r for r in refs)  # one claim, two requests
    assert len({r["name"] for r in refs}) == 1
    assert not gpu_left(p)
    [template] = out.creates
    requests = {r["name"]: r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]}
    assert {r["request"] for r in refs} == set(requests)  # the container names the template's requests
    by_class = sorted((e["deviceClassName"], e["count"], [s["cel"]["expression"] for s in e.get("selectors", [])])
                      for e in requests.values())  # fmt: skip
    assert by_class == [
        ("gpu.nvidia.com", 1, []),
        ("mig.nvidia.com", 2, ['device.attributes["gpu.nvidia.com"].profile == "3g.40gb"']),
    ]


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [({TRANSLATE_LABEL: "false"}, None), (None, {TRANSLATE_LABEL: "false"})],
)
def test_pod_opt_out(labels: dict[str, str] | None, annotations: dict[str, str] | None) -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"}), labels=labels, annotations=annotations))
    assert "patch" not in out.response["response"] and out.creates == []


def test_namespace_opt_out() -> None:
    ns = {**NAMESPACE, "metadata": {"name": "ml", "labels": {TRANSLATE_LABEL: "false"}}}
    body = review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")
    out = admit(json.dumps(body), path="mutate", cluster=ClusterState.from_objects([ns]), settings=Settings())
    assert "patch" not in out.response["response"]


def test_operator_namespace_is_left_alone() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"}), namespace="gpu-operator"), namespace="gpu-operator")
    assert "patch" not in out.response["response"]


NATIVE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression": "true"}}]},
}


def test_native_mapping_in_auto_mode_steps_aside() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), NATIVE_CLASS)
    assert "patch" not in out.response["response"]
    mig = mutate(pod(container("cuda", {"nvidia.com/mig-1g.10gb": "1"})), NATIVE_CLASS)
    assert "patch" in mig.response["response"]  # no native mapping for MIG names: still translated


def test_always_mode_translates_despite_native_mapping() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), NATIVE_CLASS, mode="always")
    assert "patch" in out.response["response"]


def test_audit_mode_warns_and_changes_nothing() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "2"})), mode="audit")
    resp = out.response["response"]
    assert resp["allowed"] is True and "patch" not in resp and out.creates == []
    assert resp["warnings"][0].startswith("audit: would translate container cuda: nvidia.com/gpu 2")
    assert all(len(w) < 120 for w in resp["warnings"])


def test_off_mode() -> None:
    assert "patch" not in mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), mode="off").response["response"]


def test_already_translated_pod_is_unchanged_on_reinvocation() -> None:
    first = patched(mutate(pod(container("cuda", {"nvidia.com/gpu": "1"}))))
    again = mutate(first)
    assert "patch" not in again.response["response"] and again.creates == []


def test_pod_without_gpus_is_untouched() -> None:
    out = mutate(pod(container("web")))
    assert out.response["response"] == {"uid": out.request.uid, "allowed": True}


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_other_operations_pass_through(operation: str) -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    kwargs: dict[str, Any] = {"operation": operation, "old": obj}
    out = mutate(obj if operation != "DELETE" else None, kind="Pod", **kwargs)  # type: ignore[arg-type]
    assert out.response["response"] == {"uid": out.request.uid, "allowed": True}


def test_generate_name_pod_takes_the_namespace_from_the_request() -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "1"}), name=None, namespace=None)
    out = mutate(obj, namespace="ml", name="")
    assert out.creates[0]["metadata"]["namespace"] == "ml"
    assert "namespace" not in patched(out)["metadata"]  # the API server sets it; we do not invent it


def test_dry_run_still_answers_with_the_patch() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), dry_run=True)
    assert "patch" in out.response["response"]
    assert out.request.dry_run  # the server skips creating templates for dry runs (see test_server_pods)


def test_preset_node_name_warns() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"}), node_name="node-1"))
    assert any("nodeName" in w for w in out.response["response"]["warnings"])


def test_invalid_requests_are_reported_not_translated() -> None:
    bad = container("cuda", {"nvidia.com/gpu": "1"})
    bad["resources"]["requests"]["nvidia.com/gpu"] = "2"
    out = mutate(pod(bad))
    resp = out.response["response"]
    assert "patch" not in resp
    assert resp["warnings"] and resp["warnings"][0].startswith("not translated:")


def test_existing_claims_for_the_same_class_leave_the_pod_alone() -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "my-gpu", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
    }
    obj = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    obj["spec"]["resourceClaims"] = [{"name": "mine", "resourceClaimTemplateName": "my-gpu"}]
    out = mutate(obj, template)
    resp = out.response["response"]
    assert "patch" not in resp and "already claims gpu.nvidia.com" in resp["warnings"][0]


def test_one_translation_serves_every_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    # A shape is translated once for all namespaces; what each namespace holds (here a template of
    # the same name with another spec in "taken") is read per review, and each pod's templates are
    # created in its own namespace.
    import gpucluster.webhook.rules.pods as rule

    translated: list[Any] = []
    real = rule.translate_pod_spec

    def counted(*args: Any, **kwargs: Any) -> Any:
        translated.append(kwargs.get("namespace"))
        return real(*args, **kwargs)

    monkeypatch.setattr(rule, "translate_pod_spec", counted)
    obj = pod(container("cuda", {"nvidia.com/gpu": "2"}))
    first = mutate(obj)
    name = first.creates[0]["metadata"]["name"]
    squatter = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "taken"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    state = ClusterState.from_objects([NAMESPACE, squatter])
    bodies = {ns: json.dumps(review(obj, namespace=ns)) for ns in ("ml", "team-a", "taken")}
    outs = {ns: admit(body, path="mutate", cluster=state, settings=Settings()) for ns, body in bodies.items()}
    assert len(translated) == 2  # once for the first view, once for the second: not per namespace
    for ns, out in outs.items():
        [template] = out.creates
        assert template["metadata"]["namespace"] == ns
        # The same answer as on a view that translates for this namespace alone.
        alone = ClusterState.from_objects([NAMESPACE, *([squatter] if ns == "taken" else [])])
        assert out.response == admit(bodies[ns], path="mutate", cluster=alone, settings=Settings()).response
    assert outs["ml"].creates[0]["metadata"]["name"] == outs["team-a"].creates[0]["metadata"]["name"] == name
    assert outs["taken"].creates[0]["metadata"]["name"] != name  # renamed there only


@pytest.mark.parametrize(
    ("field", "key", "value"),
    [
        ("annotations", "gpucluster.nvidia.com/translated-from", {}),
        ("annotations", "gpucluster.nvidia.com/claim-templates", 1),
        ("labels", TRANSLATE_LABEL, None),
    ],
)
def test_a_label_or_annotation_the_rule_reads_that_is_not_a_string_is_reported(
    field: str, key: str, value: Any
) -> None:
    # kube-apiserver admits only strings there; a review made by hand gets a warning, not a crash.
    obj = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    obj["metadata"][field] = {key: value}
    out = mutate(obj)
    resp = out.response["response"]
    assert resp["allowed"] is True and "patch" not in resp
    assert resp["warnings"] == [f"not translated: metadata.{field}[{key!r}] is not a string"]
    assert out.verdict.outcome == "warned"


def test_null_resource_claims_of_a_review_made_by_hand_are_read_as_absent() -> None:
    # kube-apiserver never sends null there; a review made by hand (gpucluster admit) may. The
    # rule used to fail on it ("gpucluster webhook error; request not checked").
    p = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    p["spec"]["resourceClaims"] = None
    out = mutate(p)
    assert out.verdict.outcome == "mutated" and not out.verdict.warnings
    result = patched(out)
    [ref] = result["spec"]["resourceClaims"]
    assert result["spec"]["containers"][0]["resources"]["claims"] == [{"name": ref["name"]}]
