"""Property tests for gpucluster.translate over generated pod specs.

Pods mix init containers, sidecars (init containers with restartPolicy: Always) and regular
containers with random GPU and MIG counts next to cpu/memory. For every one of them the
translation must give each container exactly the devices it asked for, give the pod exactly the
devices Kubernetes' effective-request rule says (computed here independently), never let two
containers that run at the same time share a device, be idempotent, leave its input alone, and be
expressible as the JSON patch a webhook returns.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from fractions import Fraction
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.translate import DEFAULT_CONFIG, translate_pod, translate_pod_spec
from tests.kit.pods import defaulted_pod

GPU = "nvidia.com/gpu"
MIG = ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb.me"]
GPU_RESOURCES = [GPU, *MIG]
ANNOTATION = DEFAULT_CONFIG.annotation

Key = tuple[str, str | None]  # (device class, selector)


def key_of(resource: str) -> Key:
    mapping = DEFAULT_CONFIG.resolve(resource)
    assert mapping is not None
    return (mapping.device_class, mapping.selector)


# ----------------------------------------------------------------------------- strategies


@st.composite
def resources(draw: st.DrawFn, *, valid: bool = True) -> dict[str, Any]:
    gpus = draw(st.dictionaries(st.sampled_from(GPU_RESOURCES), st.integers(1, 4), max_size=2))
    limits: dict[str, Any] = {}
    for name, n in gpus.items():
        limits[name] = draw(st.sampled_from([str(n), n, f"{n * 1000}m"]))
    if draw(st.booleans()):
        limits["cpu"] = draw(st.sampled_from(["500m", "1", "2"]))
    if draw(st.booleans()):
        limits["memory"] = draw(st.sampled_from(["512Mi", "1Gi", "8Gi"]))
    requests: dict[str, Any] = {}
    defaulted = draw(st.booleans())
    if defaulted:
        requests = dict(limits)
    if "cpu" in limits and draw(st.booleans()):
        requests["cpu"] = "100m"
    if not valid and draw(st.integers(0, 3)) == 0:
        broken = draw(st.sampled_from([*GPU_RESOURCES, "nvidia.com/gpu.shared"]))
        how = draw(st.sampled_from(["fraction", "zero", "request-only", "mismatch", "unknown"]))
        if how == "fraction":
            limits[broken] = requests[broken] = "1500m"
        elif how == "zero":
            limits[broken] = requests[broken] = "0"
        elif how == "request-only":
            limits.pop(broken, None)
            requests[broken] = "1"
        elif how == "mismatch":
            limits[broken], requests[broken] = "2", "1"
        else:
            limits["nvidia.com/gpu.shared"] = requests["nvidia.com/gpu.shared"] = "1"
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def make_container(name: str, res: dict[str, Any], sidecar: bool) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.6.2-base-ubi9", "resources": res}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


@st.composite
def pods(draw: st.DrawFn, *, valid: bool = True) -> dict[str, Any]:
    n_init = draw(st.integers(0, 4))
    n_regular = draw(st.integers(1, 3))
    inits = [make_container(f"init-{i}", draw(resources(valid=valid)), draw(st.booleans())) for i in range(n_init)]
    regular = [make_container(f"app-{i}", draw(resources(valid=valid)), False) for i in range(n_regular)]
    spec: dict[str, Any] = {"restartPolicy": draw(st.sampled_from(["Always", "OnFailure", "Never"]))}
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma"}]
        regular[0]["resources"]["claims"] = [{"name": "nic"}]
    metadata = {"generateName": "job-", "namespace": "ml", "labels": {"app": "job"}}
    # The drawn resources say whether requests were defaulted from limits.
    return defaulted_pod(regular, inits, metadata=metadata, spec=spec, requests_from_limits=False)


# ----------------------------------------------------------------------------- independent model


def all_containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(kind, container) in start order: init containers (init or sidecar), then regular ones."""
    out = [("sidecar" if c.get("restartPolicy") == "Always" else "init", c) for c in spec.get("initContainers", [])]
    return out + [("regular", c) for c in spec["containers"]]


def count(value: Any) -> int:
    """The generated GPU quantities: 2, "2" or "2000m"."""
    if isinstance(value, int):
        return value
    return int(value[:-1]) // 1000 if value.endswith("m") else int(value)


def asked(c: dict[str, Any]) -> Counter[str]:
    """The container's GPU devices as Kubernetes defaults them (request = limit)."""
    limits = c.get("resources", {}).get("limits", {})
    return Counter({r: count(v) for r, v in limits.items() if r in GPU_RESOURCES})


def effective(spec: dict[str, Any]) -> Counter[str]:
    """Kubernetes' PodRequests for extended resources, written independently of the code under test."""
    total: Counter[str] = Counter()
    for kind, c in all_containers(spec):
        if kind == "regular":
            total.update(asked(c))
    sidecars: Counter[str] = Counter()
    init_peak: Counter[str] = Counter()
    for kind, c in all_containers(spec):
        if kind == "sidecar":
            total.update(asked(c))
            sidecars.update(asked(c))
            during = Counter(sidecars)
        elif kind == "init":
            during = Counter(sidecars)
            during.update(asked(c))
        else:
            continue
        for r, n in during.items():
            init_peak[r] = max(init_peak[r], n)
    return Counter({r: max(total[r], init_peak[r]) for r in set(total) | set(init_peak) if max(total[r], init_peak[r])})


UNKNOWN = "nvidia.com/gpu.shared"  # the nvidia.com/ resource the invalid pods add, which nothing translates


def quantity(value: Any) -> Fraction:
    """Every GPU quantity the strategies write: 2, "2", "2000m", "1500m", "0"."""
    if isinstance(value, int):
        return Fraction(value)
    return Fraction(int(value[:-1]), 1000) if value.endswith("m") else Fraction(int(value))


def expected_problems(c: dict[str, Any]) -> Counter[str]:
    """What must be reported for one container, from its resources alone: "container left
    unchanged" once per GPU resource it cannot have (a request without a limit, a request other
    than the limit, part of a device), or once if all it asks for is zero devices; "left as it
    is" once per nvidia.com/ resource gpucluster does not translate."""
    res = c.get("resources", {})
    limits, requests = res.get("limits", {}), res.get("requests", {})
    out: Counter[str] = Counter()
    invalid = zeros = counts = 0
    for r in set(limits) | set(requests):
        if r == UNKNOWN:
            out["left as it is"] += 1
        elif r not in GPU_RESOURCES:
            continue
        elif (
            r not in limits
            or (r in requests and quantity(requests[r]) != quantity(limits[r]))
            or quantity(limits[r]).denominator != 1
        ):
            invalid += 1
        elif quantity(limits[r]) == 0:
            zeros += 1
        else:
            counts += 1
    if invalid or (zeros and not counts):
        out["container left unchanged"] += invalid or 1
    return out


def translatable(c: dict[str, Any]) -> bool:
    """Whether the container's GPU resources are translated (it asks for some device, validly)."""
    return "container left unchanged" not in expected_problems(c) and any(asked(c).values())


def concurrent(a: tuple[int, str], b: tuple[int, str]) -> bool:
    """Can two containers, given as (start position, kind), run at the same time?"""
    (_, first), (_, second) = sorted([a, b])
    if first == "init":
        return False  # a non-sidecar init container ends before anything after it starts
    if second == "init":
        return first == "sidecar"  # it runs next to the sidecars started before it
    return True  # regular containers and sidecars all run together


# ----------------------------------------------------------------------------- helpers on the result


def templates_by_claim(spec: dict[str, Any], templates: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_name = {t["metadata"]["name"]: t for t in templates}
    out: dict[str, list[dict[str, Any]]] = {}
    for rc in spec.get("resourceClaims", []):
        tpl = by_name.get(rc.get("resourceClaimTemplateName", ""))
        if tpl is not None:
            out[rc["name"]] = tpl["spec"]["spec"]["devices"]["requests"]
    return out


def pieces(c: dict[str, Any], claims: dict[str, list[dict[str, Any]]]) -> set[tuple[str, str]]:
    """The (claim, request) pairs a container sees, for the claims gpucluster made."""
    seen: set[tuple[str, str]] = set()
    for ref in c.get("resources", {}).get("claims", []):
        for r in claims.get(ref["name"], []):
            if ref.get("request") in (None, r["name"]):
                seen.add((ref["name"], r["name"]))
    return seen


def sees(piece_set: set[tuple[str, str]], claims: dict[str, list[dict[str, Any]]]) -> Counter[Key]:
    out: Counter[Key] = Counter()
    for claim, name in piece_set:
        r = next(r for r in claims[claim] if r["name"] == name)
        ex = r["exactly"]
        selector = ex["selectors"][0]["cel"]["expression"] if "selectors" in ex else None
        out[(ex["deviceClassName"], selector)] += ex["count"]
    return out


def per_key(counts: Counter[str]) -> Counter[Key]:
    out: Counter[Key] = Counter()
    for r, n in counts.items():
        out[key_of(r)] += n
    return out


# ----------------------------------------------------------------------------- properties

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(pods())
def test_every_container_sees_exactly_what_it_asked_for(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    out, t = translate_pod(pod)
    assert pod == before, "input mutated"
    if t.problems:
        # The only thing that can stop a valid pod: one claim over the ResourceClaim limits.
        assert all("a ResourceClaim holds at most 32" in p for p in t.problems)
        assert out == pod and not t.changed
        return
    spec = out["spec"]
    assert t.changed == any(asked(c) for _, c in all_containers(pod["spec"]))

    # No translated extended resource is left anywhere.
    for _, c in all_containers(spec):
        res = c.get("resources", {})
        for part in ("limits", "requests"):
            assert not set(res.get(part, {})) & set(GPU_RESOURCES)
            assert res.get(part, None) != {}
    # cpu and memory are untouched.
    for (_, c0), (_, c1) in zip(all_containers(pod["spec"]), all_containers(spec), strict=True):
        for part in ("limits", "requests"):
            kept = {k: v for k, v in c0.get("resources", {}).get(part, {}).items() if k not in GPU_RESOURCES}
            assert c1.get("resources", {}).get(part, {}) == kept
        assert {k: v for k, v in c1.items() if k != "resources"} == {k: v for k, v in c0.items() if k != "resources"}

    # Every reference resolves: claim names to spec.resourceClaims, requests to the claim's template.
    claim_names = [rc["name"] for rc in spec.get("resourceClaims", [])]
    assert len(claim_names) == len(set(claim_names))
    claims = templates_by_claim(spec, t.templates)
    for _, c in all_containers(spec):
        for ref in c.get("resources", {}).get("claims", []):
            assert ref["name"] in claim_names
            if ref["name"] in claims and "request" in ref:
                assert ref["request"] in {r["name"] for r in claims[ref["name"]]}
            if ref["name"] in claims and "request" not in ref:
                assert len(claims[ref["name"]]) == 1
    for tpl in t.templates:
        assert tpl["metadata"]["namespace"] == "ml"
        assert tpl["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpucluster"}

    # Each container sees exactly its own count.
    placed = []
    for position, (kind, c) in enumerate(all_containers(spec)):
        original = all_containers(pod["spec"])[position][1]
        mine = pieces(c, claims)
        assert sees(mine, claims) == per_key(asked(original))
        placed.append(((position, kind), mine))

    # Containers that run at the same time never share a device.
    for i, (a, pa) in enumerate(placed):
        for b, pb in placed[i + 1 :]:
            if concurrent(a, b):
                assert not pa & pb, (a, b)

    # The pod gets exactly Kubernetes' effective request, per resource and per device class.
    total: Counter[Key] = Counter()
    for claim in claims.values():
        for r in claim:
            ex = r["exactly"]
            total[(ex["deviceClassName"], ex["selectors"][0]["cel"]["expression"] if "selectors" in ex else None)] += (
                ex["count"]
            )
    assert total == per_key(effective(pod["spec"]))
    per_class: Counter[str] = Counter()
    for (device_class, _), n in total.items():
        per_class[device_class] += n
    assert t.devices == dict(per_class)

    # The recorded originals are the GPU limits, as written.
    if t.changed:
        record = json.loads(t.annotations[ANNOTATION])["containers"]
        assert {name: {r: count(v) for r, v in m.items()} for name, m in record.items()} == {
            c["name"]: dict(asked(c)) for _, c in all_containers(pod["spec"]) if asked(c)
        }


@SETTINGS
@given(pods(valid=False))
def test_twice_is_once_and_the_patch_reproduces_the_result(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    once, t1 = translate_pod(pod)
    assert pod == before
    # What the first pass did, held against the input (else "twice is once" holds for a
    # translation that does nothing, or that is wrong the same way twice): the problems the
    # input's resources call for, and every container translated or left alone as they say.
    too_big = [p for p in t1.problems if "a ResourceClaim holds at most 32" in p]
    found: Counter[tuple[str, str]] = Counter()
    for p in t1.problems:
        if p not in too_big:
            found[(p.split(":", 1)[0].rsplit(" ", 1)[-1], p.rsplit("; ", 1)[-1])] += 1
    expected: Counter[tuple[str, str]] = Counter()
    for _, c in all_containers(pod["spec"]):
        for what, n in expected_problems(c).items():
            expected[(c["name"], what)] += n
    assert found == expected
    translated = not too_big and any(translatable(c) for _, c in all_containers(pod["spec"]))
    assert t1.changed == translated
    claims = templates_by_claim(once["spec"], t1.templates)
    for (_, c0), (_, c1) in zip(all_containers(pod["spec"]), all_containers(once["spec"]), strict=True):
        if translated and translatable(c0):
            assert sees(pieces(c1, claims), claims) == per_key(asked(c0))
            for part in ("limits", "requests"):
                assert not set(c1.get("resources", {}).get(part, {})) & set(GPU_RESOURCES)
        else:
            assert c1 == c0
    twice, t2 = translate_pod(once)
    assert twice == once
    assert not t2.changed and not t2.templates and not t2.annotations
    # The same problems are still there, nothing new.
    assert t2.problems == t1.problems
    # Without the annotation (a bare template spec), the translated spec is a fixed point too.
    again = translate_pod_spec(once["spec"], namespace="ml")
    assert again.pod_spec == once["spec"] and not again.changed
    # The webhook's JSON patch: diff, then apply to the original.
    patch = jsonpatch.make_patch(pod, once)
    assert patch.apply(copy.deepcopy(pod)) == once
    assert (len(patch.patch) == 0) == (not t1.changed)


@SETTINGS
@given(pods(valid=False))
def test_containers_with_problems_are_left_as_they_were(pod: dict[str, Any]) -> None:
    out, t = translate_pod(pod)
    reported = {p.split(":", 1)[0].rsplit(" ", 1)[-1] for p in t.problems if "container left unchanged" in p}
    for (_, c0), (_, c1) in zip(all_containers(pod["spec"]), all_containers(out["spec"]), strict=True):
        if c0["name"] in reported:
            assert c1 == c0
    # Unknown nvidia.com resources stay wherever they were.
    for (_, c0), (_, c1) in zip(all_containers(pod["spec"]), all_containers(out["spec"]), strict=True):
        for part in ("limits", "requests"):
            v0 = c0.get("resources", {}).get(part, {}).get("nvidia.com/gpu.shared")
            assert c1.get("resources", {}).get(part, {}).get("nvidia.com/gpu.shared") == v0
    # Whatever was translated still holds up: counts seen == counts asked, for translated containers.
    claims = templates_by_claim(out["spec"], t.templates)
    for (_, c0), (_, c1) in zip(all_containers(pod["spec"]), all_containers(out["spec"]), strict=True):
        if c0["name"] not in reported:
            assert sees(pieces(c1, claims), claims) == per_key(asked(c0))
