"""Property tests over generated pods and reviews through the mutating webhook."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.admission import admit
from gpucluster.webhook.review import ReviewDecodeError, decode_patch
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

RESOURCES = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
CLUSTER = ClusterState.from_objects([])


@st.composite
def gpu_pods(draw: st.DrawFn) -> dict[str, Any]:
    def one(prefix: str, i: int, sidecar: bool = False) -> dict[str, Any]:
        gpus = draw(st.dictionaries(st.sampled_from(RESOURCES), st.integers(1, 4).map(str), max_size=2))
        return container(
            f"{prefix}{i}", gpus, cpu=draw(st.sampled_from([None, "250m"])), restart="Always" if sidecar else None
        )

    regular = [one("app", i) for i in range(draw(st.integers(1, 3)))]
    init = [one("init", i, sidecar=draw(st.booleans())) for i in range(draw(st.integers(0, 3)))]
    return pod(*regular, init=init or None, name=draw(st.sampled_from(["p", None])))


def effective(p: dict[str, Any], resource: str) -> int:
    def count(c: dict[str, Any]) -> int:
        return int((c.get("resources", {}).get("limits") or {}).get(resource, 0))

    regular = sum(count(c) for c in p["spec"]["containers"])
    sidecars, peak = 0, 0
    for c in p["spec"].get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars += count(c)
        else:
            peak = max(peak, count(c) + sidecars)
    return max(regular + sidecars, peak)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu_pods())
def test_translated_pods_are_consistent(obj: dict[str, Any]) -> None:
    out = admit(json.dumps(review(obj, namespace="ml")), path="mutate", cluster=CLUSTER, settings=Settings())
    resp = out.response["response"]
    assert resp["allowed"] is True
    if not any(
        k in RESOURCES
        for c in [*obj["spec"]["containers"], *(obj["spec"].get("initContainers") or [])]
        for k in c["resources"].get("limits", {})
    ):
        assert "patch" not in resp
        return
    result = jsonpatch.apply_patch(obj, decode_patch(out.response))  # applies to the object as received
    templates = {t["metadata"]["name"]: t for t in out.creates}
    claims = {c["name"]: c["resourceClaimTemplateName"] for c in result["spec"]["resourceClaims"]}
    per_class: dict[str, int] = {}
    counted: set[str] = set()
    for c in [*result["spec"].get("initContainers", []), *result["spec"]["containers"]]:
        for section in ("limits", "requests"):
            assert not any(k in RESOURCES for k in c["resources"].get(section, {}))
        for ref in c["resources"].get("claims", []):
            template = templates[claims[ref["name"]]]  # every reference resolves
            names = {r["name"] for r in template["spec"]["spec"]["devices"]["requests"]}
            if "request" in ref:
                assert ref["request"] in names
    for claim, template_name in claims.items():
        if claim in counted:
            continue
        counted.add(claim)
        for r in templates[template_name]["spec"]["spec"]["devices"]["requests"]:
            key = r["exactly"]["deviceClassName"] + r["exactly"].get("selectors", [{}])[0].get("cel", {}).get(
                "expression", ""
            )
            per_class[key] = per_class.get(key, 0) + r["exactly"]["count"]
    expected = {r: effective(obj, r) for r in RESOURCES}
    assert sum(per_class.values()) == sum(expected.values())  # never more devices than the device plugin gave


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=10,
    ),
    st.sampled_from(["spec", "metadata", "containers"]),
)
def test_no_decodable_review_makes_the_webhook_fail(junk: Any, where: str) -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    if where == "containers":
        obj["spec"]["containers"] = junk
    else:
        obj[where] = junk
    body = json.dumps(review(obj, kind="Pod", namespace="ml"))
    if where == "metadata" and not isinstance(junk, dict | None):
        # Not an object the API server could have sent: refused at decode (HTTP 400), never a rule error.
        with pytest.raises(ReviewDecodeError, match=r"request\.object\.metadata must be an object"):
            admit(body, path="mutate", cluster=CLUSTER, settings=Settings())
        return
    out = admit(body, path="mutate", cluster=CLUSTER, settings=Settings())
    assert out.verdict.outcome != "error", out.verdict.warnings
    assert out.response["response"]["uid"] == out.request.uid
