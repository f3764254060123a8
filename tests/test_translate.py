"""gpucluster.translate: legacy GPU extended resources -> DRA ResourceClaims.

The pods are shaped the way the API server hands them to a mutating webhook on CREATE: decoded
and defaulted (limits copied into requests, imagePullPolicy, terminationMessagePath, ...), after
the ServiceAccount and DefaultTolerationSeconds admission plugins, with only generateName when a
ReplicaSet or Job created them (name and uid are filled in later).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from gpucluster.translate import (
    DEFAULT_CONFIG,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ResourceMapping,
    Translation,
    TranslationConfig,
    gpu_resources,
    mig_profile,
    parse_quantity,
    translate_pod,
    translate_pod_spec,
)
from tests.kit.pods import defaulted_container, defaulted_pod

KUBERNETES_VERSION = "1.34"
ANNOTATION = "gpucluster.nvidia.com/translated-from"
GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TEMPLATE_NAME = re.compile(r"^gpucluster-[a-z0-9.-]*-[0-9a-f]{10}$")


# ----------------------------------------------------------------------------- fixtures


def container(
    name: str,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    *,
    image: str = "nvcr.io/nvidia/cuda:12.6.2-base-ubi9",
    sidecar: bool = False,
) -> dict[str, Any]:
    """A container as written in a manifest (:func:`api_pod` defaults it)."""
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    c: dict[str, Any] = {"name": name, "image": image, "command": ["sleep", "infinity"], "resources": resources}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def api_pod(
    containers: list[dict[str, Any]],
    init_containers: list[dict[str, Any]] | None = None,
    *,
    namespace: str | None = "ml",
    annotations: dict[str, str] | None = None,
    resource_claims: list[dict[str, Any]] | None = None,
    defaulted: bool = True,
) -> dict[str, Any]:
    """A Pod as a mutating webhook receives it from a ReplicaSet's CREATE (``defaulted=False``:
    limits not copied into requests, as a manifest is written)."""
    metadata: dict[str, Any] = {
        "generateName": "trainer-7d9f8b6c5-",
        "labels": {"app": "trainer", "pod-template-hash": "7d9f8b6c5"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "trainer-7d9f8b6c5",
                "uid": "6f1c1f9e-3c4a-4f7a-9a55-0e4b8f1b2d11",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-01-12T09:30:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}}},
            }
        ],
    }
    if namespace:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec = {"resourceClaims": resource_claims} if resource_claims else {}
    return defaulted_pod(
        containers, init_containers or (), metadata=metadata, spec=spec, requests_from_limits=defaulted
    )


def run(pod: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], Translation]:
    """translate_pod, checking what holds for every translation."""
    before = copy.deepcopy(pod)
    out, t = translate_pod(pod, **kwargs)
    assert pod == before, "the input pod was modified"
    assert out["spec"] == t.pod_spec
    assert t.changed == (out != pod)
    # The webhook's patch: a diff of the two objects, which must reproduce the result.
    assert jsonpatch.make_patch(pod, out).apply(copy.deepcopy(pod)) == out
    # Idempotent: translating the result changes nothing.
    again, t2 = translate_pod(out, **kwargs)
    assert again == out
    assert not t2.changed
    assert not t2.templates and not t2.annotations
    if t.changed:
        assert set(t.annotations) == {ANNOTATION}
        kubernetes_validate.validate(out, KUBERNETES_VERSION, strict=True)
        for template in t.templates:
            kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
        check_references(out["spec"], t.templates)
    return out, t


def check_references(spec: dict[str, Any], templates: list[dict[str, Any]]) -> None:
    by_name = {t["metadata"]["name"]: t for t in templates}
    claims = {rc["name"]: rc for rc in spec.get("resourceClaims", [])}
    for rc in spec.get("resourceClaims", []):
        assert DNS_LABEL.match(rc["name"])
    for c in spec.get("initContainers", []) + spec["containers"]:
        for ref in c.get("resources", {}).get("claims", []):
            assert ref["name"] in claims
            tpl_name = claims[ref["name"]].get("resourceClaimTemplateName")
            if tpl_name in by_name and "request" in ref:
                names = [r["name"] for r in by_name[tpl_name]["spec"]["spec"]["devices"]["requests"]]
                assert ref["request"] in names
    for t in templates:
        assert len(t["metadata"]["name"]) <= 63
        for r in t["spec"]["spec"]["devices"]["requests"]:
            assert DNS_LABEL.match(r["name"])


def template_requests(t: Translation, claim: str) -> list[dict[str, Any]]:
    name = next(rc["resourceClaimTemplateName"] for rc in t.pod_spec["resourceClaims"] if rc["name"] == claim)
    template = next(x for x in t.templates if x["metadata"]["name"] == name)
    requests: list[dict[str, Any]] = template["spec"]["spec"]["devices"]["requests"]
    return requests


def visible(t: Translation, c: dict[str, Any]) -> Counter[tuple[str, str | None]]:
    """Devices a container sees: (device class, selector) -> count."""
    seen: Counter[tuple[str, str | None]] = Counter()
    for ref in c.get("resources", {}).get("claims", []):
        for r in template_requests(t, ref["name"]):
            if "request" not in ref or ref["request"] == r["name"]:
                ex = r["exactly"]
                selector = ex["selectors"][0]["cel"]["expression"] if "selectors" in ex else None
                seen[(ex["deviceClassName"], selector)] += ex["count"]
    return seen


def by_name(spec: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)
    return found


GPU_KEY = ("gpu.nvidia.com", None)


def mig_key(profile: str) -> tuple[str, str]:
    return ("mig.nvidia.com", f'device.attributes["gpu.nvidia.com"].profile == "{profile}"')


# ----------------------------------------------------------------------------- single container


def test_single_container_gets_a_claim_from_a_shared_template() -> None:
    pod = api_pod(
        [container("cuda", {GPU: "2", "cpu": "4", "memory": "16Gi"}, {"cpu": "2", "memory": "8Gi"})],
    )
    out, t = run(pod)
    assert t.changed and not t.problems
    spec = out["spec"]
    assert spec["resourceClaims"] == [
        {"name": "gpu-0", "resourceClaimTemplateName": t.templates[0]["metadata"]["name"]}
    ]
    cuda = spec["containers"][0]
    # GPU gone from limits and requests, cpu/memory kept as they were, one claim reference.
    assert cuda["resources"] == {
        "limits": {"cpu": "4", "memory": "16Gi"},
        "requests": {"cpu": "2", "memory": "8Gi"},
        "claims": [{"name": "gpu-0"}],
    }
    # Everything else the API server defaulted is untouched.
    for key in ("volumeMounts", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "image"):
        assert cuda[key] == pod["spec"]["containers"][0][key]
    assert {k: v for k, v in spec.items() if k not in ("containers", "resourceClaims")} == {
        k: v for k, v in pod["spec"].items() if k != "containers"
    }
    assert out["metadata"] == {**pod["metadata"], "annotations": t.annotations}
    assert out["status"] == {}

    [template] = t.templates
    assert template == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template["metadata"]["name"],
            "namespace": "ml",
            "labels": {"app.kubernetes.io/managed-by": "gpucluster"},
        },
        "spec": {
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "gpucluster"}},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 2,
                            },
                        }
                    ]
                }
            },
        },
    }
    assert (MANAGED_BY_LABEL, MANAGED_BY) == ("app.kubernetes.io/managed-by", "gpucluster")
    assert template["metadata"]["name"].startswith("gpucluster-gpu-2-")
    assert TEMPLATE_NAME.match(template["metadata"]["name"])
    assert t.devices == {"gpu.nvidia.com": 2}
    assert t.changes == [f"container cuda: nvidia.com/gpu 2 -> claim gpu-0 (template {template['metadata']['name']})"]
    assert t.annotations == {ANNOTATION: '{"containers": {"cuda": {"nvidia.com/gpu": "2"}}}'}
    assert json.loads(t.annotations[ANNOTATION]) == {"containers": {"cuda": {GPU: "2"}}}


def test_gpu_only_container_loses_empty_limits_and_requests() -> None:
    out, t = run(api_pod([container("cuda", {GPU: "1"})]))
    assert out["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu-0"}]}
    assert t.devices == {"gpu.nvidia.com": 1}


def test_multiple_containers_get_their_own_claims_and_share_templates() -> None:
    pod = api_pod([container("a", {GPU: "1"}), container("b", {GPU: "1"}), container("c", {GPU: "3"})])
    out, t = run(pod)
    spec = out["spec"]
    assert [rc["name"] for rc in spec["resourceClaims"]] == ["gpu-0", "gpu-1", "gpu-2"]
    assert [c["resources"]["claims"] for c in spec["containers"]] == [
        [{"name": "gpu-0"}],
        [{"name": "gpu-1"}],
        [{"name": "gpu-2"}],
    ]
    tpl = [rc["resourceClaimTemplateName"] for rc in spec["resourceClaims"]]
    assert tpl[0] == tpl[1] != tpl[2]
    assert len(t.templates) == 2  # one per shape
    assert t.devices == {"gpu.nvidia.com": 5}
    for c, n in zip(spec["containers"], (1, 1, 3), strict=True):
        assert visible(t, c) == {GPU_KEY: n}


# ----------------------------------------------------------------------------- init containers and sidecars


def test_init_container_reuses_the_devices_of_a_larger_regular_container() -> None:
    pod = api_pod([container("train", {GPU: "2"})], [container("warmup", {GPU: "1"})])
    out, t = run(pod)
    spec = out["spec"]
    assert t.devices == {"gpu.nvidia.com": 2}  # max(2, 1), not 3
    assert [rc["name"] for rc in spec["resourceClaims"]] == ["gpu-0"]
    assert [r["exactly"]["count"] for r in template_requests(t, "gpu-0")] == [1, 1]
    warmup, train = spec["initContainers"][0], spec["containers"][0]
    assert warmup["resources"]["claims"] == [{"name": "gpu-0", "request": "gpu-0"}]
    assert train["resources"]["claims"] == [
        {"name": "gpu-0", "request": "gpu-0"},
        {"name": "gpu-0", "request": "gpu-1"},
    ]
    assert visible(t, warmup) == {GPU_KEY: 1}
    assert visible(t, train) == {GPU_KEY: 2}
    assert t.changes[0].startswith("init container warmup: nvidia.com/gpu 1 -> claim gpu-0 request gpu-0 (template")


def test_equal_init_and_regular_share_one_request() -> None:
    pod = api_pod([container("train", {GPU: "2"})], [container("warmup", {GPU: "2"})])
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 2}
    assert [r["exactly"]["count"] for r in template_requests(t, "gpu-0")] == [2]
    for c in out["spec"]["initContainers"] + out["spec"]["containers"]:
        assert c["resources"]["claims"] == [{"name": "gpu-0"}]


def test_larger_init_container_gets_extra_devices_only_for_the_difference() -> None:
    pod = api_pod([container("serve", {GPU: "1"})], [container("convert", {GPU: "3"})])
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 3}  # max(1, 3)
    assert visible(t, by_name(out["spec"], "convert")) == {GPU_KEY: 3}
    assert visible(t, by_name(out["spec"], "serve")) == {GPU_KEY: 1}


def test_init_containers_run_one_after_the_other_and_share() -> None:
    pod = api_pod(
        [container("main", {"cpu": "1"})],
        [container("a", {GPU: "2"}), container("b", {GPU: "3"}), container("c", {GPU: "1"})],
    )
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 3}
    for name, n in (("a", 2), ("b", 3), ("c", 1)):
        assert visible(t, by_name(out["spec"], name)) == {GPU_KEY: n}
    assert "claims" not in out["spec"]["containers"][0]["resources"]


def test_sidecar_adds_to_the_regular_containers() -> None:
    pod = api_pod([container("train", {GPU: "1"})], [container("monitor", {GPU: "1"}, sidecar=True)])
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 2}
    spec = out["spec"]
    assert [rc["name"] for rc in spec["resourceClaims"]] == ["gpu-0", "gpu-1"]
    assert spec["initContainers"][0]["resources"]["claims"] == [{"name": "gpu-0"}]
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "gpu-1"}]
    assert t.changes[0].startswith("sidecar monitor: nvidia.com/gpu 1 -> claim gpu-0")


def test_kubernetes_issue_134880_example() -> None:
    """ic1: 1, sidecar: 1, ic2: 2, c1: 1 -> 3 devices (max(2, 1 + 0, 2 + 1))."""
    pod = api_pod(
        [container("c1", {GPU: "1"})],
        [
            container("ic1", {GPU: "1"}),
            container("sidecar", {GPU: "1"}, sidecar=True),
            container("ic2", {GPU: "2"}),
        ],
    )
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 3}
    spec = out["spec"]
    for name, n in (("ic1", 1), ("sidecar", 1), ("ic2", 2), ("c1", 1)):
        assert visible(t, by_name(spec, name)) == {GPU_KEY: n}
    # ic2 runs while the sidecar runs: it must not see the sidecar's device.
    sidecar_claims = {ref["name"] for ref in by_name(spec, "sidecar")["resources"]["claims"]}
    assert not sidecar_claims & {ref["name"] for ref in by_name(spec, "ic2")["resources"]["claims"]}
    # ic2 reuses c1's device (c1 starts after it).
    c1_refs = {(r["name"], r.get("request")) for r in by_name(spec, "c1")["resources"]["claims"]}
    ic2_refs = {(r["name"], r.get("request")) for r in by_name(spec, "ic2")["resources"]["claims"]}
    assert c1_refs <= ic2_refs


def test_init_container_after_a_sidecar_cannot_reuse_its_devices() -> None:
    pod = api_pod(
        [container("main", {"cpu": "1"})],
        [container("proxy", {GPU: "2"}, sidecar=True), container("setup", {GPU: "1"})],
    )
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 3}  # setup runs next to proxy
    assert [rc["name"] for rc in out["spec"]["resourceClaims"]] == ["gpu-0", "gpu-1"]


def test_init_container_before_a_sidecar_reuses_its_devices() -> None:
    pod = api_pod(
        [container("main", {"cpu": "1"})],
        [container("setup", {GPU: "1"}), container("proxy", {GPU: "2"}, sidecar=True)],
    )
    out, t = run(pod)
    assert t.devices == {"gpu.nvidia.com": 2}
    assert visible(t, by_name(out["spec"], "setup")) == {GPU_KEY: 1}


# ----------------------------------------------------------------------------- MIG and several resources


@pytest.mark.parametrize(
    ("resource", "profile"),
    [
        ("nvidia.com/mig-1g.10gb", "1g.10gb"),
        ("nvidia.com/mig-3g.40gb", "3g.40gb"),
        ("nvidia.com/mig-1g.5gb", "1g.5gb"),
        ("nvidia.com/mig-1g.10gb.me", "1g.10gb+me"),
        ("nvidia.com/mig-1g.24gb.me.all", "1g.24gb+me.all"),
        ("nvidia.com/mig-4g.96gb.gfx", "4g.96gb+gfx"),
        ("nvidia.com/mig-1c.3g.20gb", "1c.3g.20gb"),
    ],
)
def test_mig_resource_becomes_a_profile_request(resource: str, profile: str) -> None:
    out, t = run(api_pod([container("cuda", {resource: "2"})]))
    [request] = template_requests(t, "gpu-0")
    assert request["exactly"] == {
        "deviceClassName": "mig.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 2,
        "selectors": [{"cel": {"expression": f'device.attributes["gpu.nvidia.com"].profile == "{profile}"'}}],
    }
    assert t.devices == {"mig.nvidia.com": 2}
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-0"}]


def test_mig_profile_spelling() -> None:
    assert mig_profile("2g.20gb") == "2g.20gb"
    assert mig_profile("1g.10gb.me") == "1g.10gb+me"
    assert mig_profile("1g.10gb-me") == "1g.10gb-me"
    assert mig_profile("custom") == "custom"


def test_gpu_and_mig_in_one_container_share_one_claim() -> None:
    out, t = run(api_pod([container("cuda", {GPU: "1", MIG_1G: "2"})]))
    requests = template_requests(t, "gpu-0")
    assert [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests] == [
        ("gpu", "gpu.nvidia.com", 1),
        ("mig-1g-10gb", "mig.nvidia.com", 2),
    ]
    assert out["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "gpu-0", "request": "gpu"},
        {"name": "gpu-0", "request": "mig-1g-10gb"},
    ]
    assert t.devices == {"gpu.nvidia.com": 1, "mig.nvidia.com": 2}
    assert t.templates[0]["metadata"]["name"].startswith("gpucluster-gpu-1-mig-1g-10gb-2-")
    assert len(t.changes) == 2


def test_several_gpu_types_across_containers() -> None:
    pod = api_pod(
        [container("small", {MIG_1G: "1"}), container("large", {MIG_3G: "1"}), container("full", {GPU: "2"})],
        [container("prep", {MIG_1G: "2"})],
    )
    out, t = run(pod)
    assert t.devices == {"mig.nvidia.com": 3, "gpu.nvidia.com": 2}  # 2 x 1g (init needs 2) + 1 x 3g
    spec = out["spec"]
    assert visible(t, by_name(spec, "small")) == {mig_key("1g.10gb"): 1}
    assert visible(t, by_name(spec, "large")) == {mig_key("3g.40gb"): 1}
    assert visible(t, by_name(spec, "prep")) == {mig_key("1g.10gb"): 2}
    assert visible(t, by_name(spec, "full")) == {GPU_KEY: 2}


# ----------------------------------------------------------------------------- idempotence


def test_translating_a_translated_pod_changes_nothing() -> None:
    pod = api_pod([container("cuda", {GPU: "2"})], [container("warmup", {GPU: "1"})])
    once, _ = run(pod)
    twice, t = translate_pod(once)
    assert twice == once
    assert not t.changed and not t.problems and not t.changes and t.devices == {}
    spec_again = translate_pod_spec(once["spec"], namespace="ml")
    assert spec_again.pod_spec == once["spec"] and not spec_again.changed


def test_new_gpu_request_in_an_already_translated_pod_is_reported() -> None:
    once, _ = run(api_pod([container("cuda", {GPU: "1"})]))
    once["spec"]["containers"].append(defaulted_container(container("late", {GPU: "1"})))
    again, t = translate_pod(once)
    assert again == once and not t.changed
    assert t.problems == [f"pod already translated ({ANNOTATION} is set); GPU requests of late left unchanged"]


# ----------------------------------------------------------------------------- defaulting and what is not translated


def test_limits_only_manifest_is_translated_like_the_defaulted_pod() -> None:
    undefaulted = api_pod([container("cuda", {GPU: 2, "cpu": "1"})], defaulted=False)
    defaulted = api_pod([container("cuda", {GPU: 2, "cpu": "1"})])
    out_u, t_u = run(undefaulted)
    out_d, t_d = run(defaulted)
    assert out_u["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "gpu-0"}]}
    assert out_d["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1"},
        "requests": {"cpu": "1"},
        "claims": [{"name": "gpu-0"}],
    }
    assert t_u.templates == t_d.templates
    assert t_u.annotations == {ANNOTATION: '{"containers": {"cuda": {"nvidia.com/gpu": "2"}}}'}


def test_requests_only_is_rejected_by_kubernetes_so_not_translated() -> None:
    pod = api_pod([container("cuda", None, {GPU: "1"})])
    out, t = run(pod)
    assert out == pod and not t.changed
    assert t.problems == [
        "container cuda: nvidia.com/gpu has a request but no limit (Kubernetes requires one); container left unchanged"
    ]


def test_request_different_from_limit_leaves_that_container_unchanged() -> None:
    pod = api_pod([container("bad", {GPU: "2"}, {GPU: "1"}), container("good", {GPU: "1"})])
    out, t = run(pod)
    assert out["spec"]["containers"][0] == pod["spec"]["containers"][0]
    assert out["spec"]["containers"][1]["resources"] == {"claims": [{"name": "gpu-0"}]}
    assert t.problems == ["container bad: nvidia.com/gpu request 1 differs from limit 2; container left unchanged"]
    assert json.loads(t.annotations[ANNOTATION]) == {"containers": {"good": {GPU: "1"}}}


def test_equal_quantities_in_different_spellings_are_equal() -> None:
    _, t = run(api_pod([container("cuda", {GPU: "2"}, {GPU: "2000m"})]))
    assert t.devices == {"gpu.nvidia.com": 2} and not t.problems


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("500m", "nvidia.com/gpu 500m is not a whole number of devices"),
        ("1.5", "nvidia.com/gpu 1.5 is not a whole number of devices"),
        (1.5, "nvidia.com/gpu 1.5 is not a whole number of devices"),
        ("-1", "nvidia.com/gpu -1 is negative"),
        ("two", "nvidia.com/gpu 'two' is not a valid quantity"),
        # Beyond int64, which counts an extended resource: refused as such, and 1e26 read as written
        # (not the double 100000000000000004764729344).
        (1e26, "nvidia.com/gpu 1e+26 is beyond the largest count Kubernetes schedules (2^63-1)"),
        ("1e26", "nvidia.com/gpu 1e26 is beyond the largest count Kubernetes schedules (2^63-1)"),
        (2**63, f"nvidia.com/gpu {2**63} is beyond the largest count Kubernetes schedules (2^63-1)"),
    ],
)
def test_unusable_quantities_are_reported_and_left(value: Any, why: str) -> None:
    pod = api_pod([container("cuda", {GPU: value, MIG_1G: "1"})])
    out, t = run(pod)
    assert out == pod and not t.changed
    assert t.problems == [f"container cuda: {why}; container left unchanged"]
    assert gpu_resources(pod["spec"]) == {}


def test_unknown_nvidia_resource_is_reported_and_untouched() -> None:
    pod = api_pod(
        [
            container("shared", {"nvidia.com/gpu.shared": "1"}),
            container("both", {"nvidia.com/gpu.shared": "1", GPU: "1", "example.com/fpga": "1"}),
        ]
    )
    out, t = run(pod)
    spec = out["spec"]
    assert spec["containers"][0] == pod["spec"]["containers"][0]
    assert spec["containers"][1]["resources"] == {
        "limits": {"nvidia.com/gpu.shared": "1", "example.com/fpga": "1"},
        "requests": {"nvidia.com/gpu.shared": "1", "example.com/fpga": "1"},
        "claims": [{"name": "gpu-0"}],
    }
    assert t.problems == [
        "container shared: nvidia.com/gpu.shared is not a resource gpucluster translates; left as it is",
        "container both: nvidia.com/gpu.shared is not a resource gpucluster translates; left as it is",
    ]


def test_pod_without_gpu_is_unchanged() -> None:
    pod = api_pod([container("web", {"cpu": "1", "memory": "1Gi"})])
    out, t = run(pod)
    assert out == pod
    assert t == Translation(pod_spec=pod["spec"])
    assert gpu_resources(pod["spec"]) == {}


def test_existing_resource_claims_are_kept() -> None:
    nic = {"name": "nic", "resourceClaimTemplateName": "rdma-nic"}
    cuda = container("cuda", {GPU: "1"})
    cuda["resources"]["claims"] = [{"name": "nic"}]
    pod = api_pod([cuda], resource_claims=[nic])
    out, _ = run(pod)
    spec = out["spec"]
    assert spec["resourceClaims"][0] == nic
    assert spec["resourceClaims"][1]["name"] == "gpu-0"
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "nic"}, {"name": "gpu-0"}]


def test_colliding_claim_name_gets_a_free_name() -> None:
    mine = {"name": "gpu-0", "resourceClaimName": "reserved-gpu"}
    other = container("other", {"cpu": "1"})
    other["resources"]["claims"] = [{"name": "gpu-0"}]
    pod = api_pod([other, container("cuda", {GPU: "1"})], resource_claims=[mine])
    out, t = run(pod)
    assert t.changed and not t.problems
    assert [rc["name"] for rc in out["spec"]["resourceClaims"]] == ["gpu-0", "gpu-1"]
    assert out["spec"]["containers"][1]["resources"]["claims"] == [{"name": "gpu-1"}]


def test_claim_prefix_avoids_a_collision() -> None:
    pod = api_pod([container("cuda", {GPU: "1"})], resource_claims=[{"name": "gpu-0", "resourceClaimName": "x"}])
    config = TranslationConfig(mapping=DEFAULT_CONFIG.mapping, claim_prefix="nvidia-gpu")
    out, t = run(pod, config=config)
    assert [rc["name"] for rc in out["spec"]["resourceClaims"]] == ["gpu-0", "nvidia-gpu-0"]
    assert t.changes[0].startswith("container cuda: nvidia.com/gpu 1 -> claim nvidia-gpu-0 (template")


def test_more_devices_than_a_claim_can_hold() -> None:
    pod = api_pod([container("cuda", {MIG_1G: "33"})])
    out, t = run(pod)
    assert out == pod and not t.changed
    assert t.problems == [
        "claim gpu-0 would need 33 devices in 1 request (a ResourceClaim holds at most 32); pod left unchanged"
    ]


def test_ephemeral_containers_are_ignored() -> None:
    pod = api_pod([container("cuda", {GPU: "1"})])
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "resources": {}}]
    out, _ = run(pod)
    assert out["spec"]["ephemeralContainers"] == pod["spec"]["ephemeralContainers"]


# ----------------------------------------------------------------------------- pod templates and names


def test_pod_template_without_namespace() -> None:
    """migrate hands over spec.template of a Deployment: no name, no namespace."""
    template_spec = {
        "containers": [
            {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.6.2-base-ubi9", "resources": {"limits": {GPU: 1}}}
        ]
    }
    before = copy.deepcopy(template_spec)
    t = translate_pod_spec(template_spec, namespace=None, existing_annotations={"team": "ml"})
    assert template_spec == before
    assert t.changed
    assert "namespace" not in t.templates[0]["metadata"]
    assert t.pod_spec["containers"][0]["resources"] == {"claims": [{"name": "gpu-0"}]}
    assert t.annotations == {ANNOTATION: '{"containers": {"cuda": {"nvidia.com/gpu": "1"}}}'}
    # The same template spec in a namespace gives the same names.
    t_ns = translate_pod_spec(template_spec, namespace="ml")
    assert t_ns.pod_spec == t.pod_spec
    assert t_ns.templates[0]["metadata"]["namespace"] == "ml"


def test_generate_name_pod_takes_the_namespace_argument() -> None:
    pod = api_pod([container("cuda", {GPU: "1"})], namespace=None)
    assert "name" not in pod["metadata"]
    _, t = run(pod, namespace="team-a")
    assert t.templates[0]["metadata"]["namespace"] == "team-a"
    _, t = run(api_pod([container("cuda", {GPU: "1"})], namespace="ml"), namespace="ignored")
    assert t.templates[0]["metadata"]["namespace"] == "ml"


def test_template_names_depend_on_content_only() -> None:
    a = translate_pod_spec(api_pod([container("x", {GPU: "2"})])["spec"], namespace="a")
    b = translate_pod_spec(api_pod([container("other-name", {GPU: 2})], defaulted=False)["spec"], namespace="b")
    c = translate_pod_spec(api_pod([container("x", {GPU: "3"})])["spec"], namespace="a")
    name = a.templates[0]["metadata"]["name"]
    assert name == b.templates[0]["metadata"]["name"]
    assert name != c.templates[0]["metadata"]["name"]
    assert a.templates[0]["spec"] == b.templates[0]["spec"]
    # The name is the content's: the same in every process and release (live templates carry it),
    # so it is pinned here rather than recomputed.
    assert name == "gpucluster-gpu-2-fe27b22c2a"
    # A different mapping for the same resource never reuses the name.
    pinned = TranslationConfig(
        mapping={GPU: ResourceMapping("gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].productName == "H100"')}
    )
    d = translate_pod_spec(api_pod([container("x", {GPU: "2"})])["spec"], namespace="a", config=pinned)
    assert d.templates[0]["metadata"]["name"] != name
    assert d.templates[0]["metadata"]["name"].startswith("gpucluster-gpu-2-")


def test_custom_mapping() -> None:
    config = TranslationConfig(
        mapping={
            GPU: ResourceMapping("gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100"'),
            "example.com/fpga": ResourceMapping("fpga.example.com"),
        },
        mig_prefix=None,
        annotation="example.com/translated",
        template_prefix="acme",
    )
    pod = api_pod([container("cuda", {GPU: "1", "example.com/fpga": "1", MIG_1G: "1"})])
    out, t = translate_pod(pod, config=config)
    assert t.changed
    assert set(t.annotations) == {"example.com/translated"}
    assert out["metadata"]["annotations"] == t.annotations
    assert t.devices == {"gpu.nvidia.com": 1, "fpga.example.com": 1}
    # With the MIG rule off, MIG resources are unknown nvidia.com resources: reported and kept.
    assert out["spec"]["containers"][0]["resources"]["limits"] == {MIG_1G: "1"}
    assert t.problems == [
        "container cuda: nvidia.com/mig-1g.10gb is not a resource gpucluster translates; left as it is"
    ]
    requests = t.templates[0]["spec"]["spec"]["devices"]["requests"]
    assert [(r["name"], r["exactly"]["deviceClassName"]) for r in requests] == [
        ("fpga", "fpga.example.com"),
        ("gpu", "gpu.nvidia.com"),
    ]
    assert requests[1]["exactly"]["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100"'}}
    ]
    assert t.templates[0]["metadata"]["name"].startswith("acme-fpga-1-gpu-1-")
    assert gpu_resources(pod["spec"], config) == {"cuda": {GPU: 1, "example.com/fpga": 1}}


def test_explicit_mapping_wins_over_the_mig_rule() -> None:
    config = TranslationConfig(mapping={**DEFAULT_CONFIG.mapping, MIG_1G: ResourceMapping("small-mig.example.com")})
    _, t = translate_pod(api_pod([container("cuda", {MIG_1G: "1"})]), config=config)
    assert t.devices == {"small-mig.example.com": 1}


def test_gpu_resources() -> None:
    spec = api_pod(
        [container("cuda", {GPU: "2", MIG_1G: 1, "cpu": "1"}), container("web", {"cpu": "1"})],
        [container("warmup", {GPU: "1"}), container("bad", {GPU: "0.5"})],
    )["spec"]
    assert gpu_resources(spec) == {"warmup": {GPU: 1}, "cuda": {GPU: 2, MIG_1G: 1}}


def test_parse_quantity() -> None:
    assert parse_quantity("2") == 2
    assert parse_quantity("2000m") == 2
    assert parse_quantity("1k") == 1000
    assert parse_quantity("1Ki") == 1024
    assert parse_quantity("1e3") == 1000
    assert parse_quantity("+3") == 3
    assert parse_quantity(".5") * 2 == 1
    assert parse_quantity(4) == 4
    assert parse_quantity("m") == 0 == parse_quantity("-")  # ParseQuantity: no digits read as 0
    for bad in ("", "1.2.3", "1x", "1Qi", True, None, [1], float("nan")):
        with pytest.raises(ValueError):
            parse_quantity(bad)


def test_long_resource_names_give_valid_names() -> None:
    long_name = "example.com/" + "a" * 60
    config = TranslationConfig(mapping={long_name: ResourceMapping("long.example.com")})
    out, t = run(api_pod([container("cuda", {long_name: "1"})]), config=config)
    assert len(t.templates[0]["metadata"]["name"]) <= 63
    check_references(out["spec"], t.templates)


def test_null_resource_claims_read_as_absent() -> None:
    # YAML's `resourceClaims:` with no value (a chart that renders an empty list) is null, which
    # kube-apiserver reads as absent: the pod gets its claims as if the field were not there.
    pod = api_pod([container("cuda", {GPU: "1"})])
    pod["spec"]["resourceClaims"] = None
    out, t = run(pod)
    assert t.changed and not t.problems
    assert out["spec"]["resourceClaims"] == [
        {"name": "gpu-0", "resourceClaimTemplateName": t.templates[0]["metadata"]["name"]}
    ]
    assert pod["spec"]["resourceClaims"] is None  # the input is never modified


@pytest.mark.parametrize("value", ["bad", {"name": "x"}, 3])
def test_resource_claims_that_are_not_a_list_leave_the_pod_alone(value: Any) -> None:
    pod = api_pod([container("cuda", {GPU: "1"})])
    pod["spec"]["resourceClaims"] = value
    out, t = run(pod)
    assert not t.changed and not t.templates
    assert t.problems == ["spec.resourceClaims is not a list; pod left unchanged"]
    assert out["spec"] == pod["spec"]


@pytest.mark.parametrize("value", ["x", {"name": "x"}])
def test_container_claims_that_are_not_a_list_leave_the_container_alone(value: Any) -> None:
    bad = container("cuda", {GPU: "1"})
    bad["resources"]["claims"] = value
    pod = api_pod([bad, container("other", {GPU: "2"})])
    out, t = translate_pod(pod)  # not run(): the output keeps the invalid field, which the schema refuses
    assert t.problems == ["container cuda: resources.claims is not a list; container left unchanged"]
    assert out["spec"]["containers"][0]["resources"] == pod["spec"]["containers"][0]["resources"]
    assert out["spec"]["containers"][1]["resources"] == {"claims": [{"name": "gpu-0"}]}
    # A container the translation does not rewrite is not judged.
    plain = api_pod(
        [{**container("side", {"cpu": "1"}), "resources": {"claims": value}}, container("other", {GPU: "1"})]
    )
    out, t = translate_pod(plain)
    assert t.changed and not t.problems
    # A null list is absent: the container is translated.
    bad["resources"]["claims"] = None
    out, t = run(api_pod([bad]))
    assert not t.problems and out["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu-0"}]}
