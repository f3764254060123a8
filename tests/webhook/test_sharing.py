"""GPU sharing (HAMi's nvidia.com/gpumem, gpucores ...): one rule in gpucluster.translate, used by
the webhook, migrate and audit alike. A container so qualified is never given a whole-GPU claim."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch

from gpucluster.audit import audit
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import WEBHOOK_CONFIG, Settings
from gpucluster.translate import SharedGPU, sharing_resource, translate_pod_spec
from gpucluster.webhook.admission import admit
from gpucluster.webhook.audit import decider
from gpucluster.webhook.review import MAX_WARNING_LENGTH, decode_patch
from tests.migrate.test_audit import deployment_with_pods, namespace
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

HAMI = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


def mutate(obj: dict[str, Any]) -> Any:
    state = ClusterState.from_objects([namespace("ml")])
    return admit(json.dumps(review(obj, namespace="ml")), path="mutate", cluster=state, settings=Settings())


def test_sharing_resources_are_recognised() -> None:
    for name in ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "volcano.sh/vgpu-memory"):
        assert sharing_resource(name), name
    for name in ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu", "nvidia.com/gpu.shared"):
        assert not sharing_resource(name), name


def test_translation_leaves_a_shared_container_alone_and_says_why() -> None:
    spec = pod(container("shared", HAMI), container("whole", {"nvidia.com/gpu": "1"}))["spec"]
    t = translate_pod_spec(spec, namespace="ml", config=WEBHOOK_CONFIG)
    assert t.changed and t.devices == {"gpu.nvidia.com": 1}
    assert t.pod_spec["containers"][0] == spec["containers"][0]
    assert t.shared == [
        SharedGPU("container shared", ("nvidia.com/gpu",), ("nvidia.com/gpucores", "nvidia.com/gpumem"))
    ]
    # The qualifiers are not also reported as resources we do not know.
    assert t.problems == [t.shared[0].problem]
    assert "qualified by nvidia.com/gpucores, nvidia.com/gpumem" in t.problems[0]


def test_webhook_does_not_translate_a_shared_container() -> None:
    out = mutate(pod(container("shared", HAMI)))
    assert decode_patch(out.response) == [] and out.verdict.creates == []
    (warning,) = out.response["response"]["warnings"]
    assert len(warning) <= MAX_WARNING_LENGTH
    assert warning.startswith("not translated: container shared: nvidia.com/gpu shared via nvidia.com/gpucores")


def test_webhook_translates_the_other_containers_only() -> None:
    obj = pod(container("shared", HAMI), container("whole", {"nvidia.com/gpu": "1"}))
    out = mutate(obj)
    result = jsonpatch.apply_patch(obj, decode_patch(out.response))
    shared, whole = result["spec"]["containers"]
    assert shared == obj["spec"]["containers"][0]
    assert whole["resources"]["claims"] == [{"name": "gpu-0"}]
    assert any("shared via" in w for w in out.response["response"]["warnings"])


def test_audit_reports_a_shared_workload_as_skip_with_the_reason() -> None:
    tpl = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container("shared", HAMI)]}}
    (finding,) = audit([namespace("ml"), *deployment_with_pods("hami", tpl, 2)], decide=decider())
    assert finding.action == "skip"
    assert finding.reason.startswith("container shared: nvidia.com/gpu qualified by nvidia.com/gpucores")
    assert "container left unchanged" in finding.reason
