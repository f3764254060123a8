"""A serving certificate nearing expiry: a Warning event and the GPUCluster condition, the replica
still ready; the controller keeps the webhook's condition when it writes the status."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from gpucluster.certs.authority import new_ca
from gpucluster.clusterstate import ClusterState
from gpucluster.controller.status import desired_status
from gpucluster.webhook.expiry import CONDITION, EXPIRING, INVALID, STATUS_PATH, ExpiryReporter, desired_conditions
from tests.kit.fakekube import FakeKube
from tests.webhook.test_tls_reload import Clock, pair, tls_for

NOW = "2026-01-01T00:00:00Z"


def _gpucluster(conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster", "uid": "u1", "generation": 2},
        "spec": {}, "status": {"state": "ready", "conditions": conditions or [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def served() -> tuple[FakeKube, ClusterState]:
    """The API server with the GPUCluster, and the webhook's cache of it as listed from there."""
    kube = FakeKube([_gpucluster()])
    return kube, ClusterState.from_objects([kube.object(STATUS_PATH.removesuffix("/status"))])


def test_the_condition_is_set_only_after_a_problem_and_keeps_the_others() -> None:
    ready = {"type": "Ready", "status": "True"}
    assert desired_conditions([ready], None, 1, NOW) is None  # never had a problem: nothing written
    problem = (EXPIRING, "replica a: serving certificate expires ...")
    conditions = desired_conditions([ready], problem, 1, NOW)
    assert conditions is not None and conditions[0] == ready
    assert conditions[1] | {"lastTransitionTime": ""} == {
        "type": CONDITION, "status": "False", "reason": EXPIRING, "message": problem[1],
        "lastTransitionTime": "", "observedGeneration": 1,
    }  # fmt: skip
    assert desired_conditions(conditions, problem, 1, "later") is None  # unchanged: no write
    good = desired_conditions(conditions, None, 1, "later")
    assert good is not None and good[1]["status"] == "True" and good[1]["reason"] == "Valid"


async def test_nearing_expiry_sends_a_warning_event_and_sets_the_condition(tmp_path: Path) -> None:
    clock = Clock()
    tls = tls_for(tmp_path, pair(new_ca()), clock)
    kube, state = served()
    reporter = ExpiryReporter(kube, state, tls, replica="webhook-0")
    await reporter.report_once()
    assert kube.calls == []  # a good certificate: nothing to say

    assert tls.live is not None
    clock.now = tls.live.not_after - dt.timedelta(minutes=10)
    await reporter.report_once()
    events = [c.body for c in kube.calls if c.path.endswith("/events")]
    assert len(events) == 1 and events[0]["type"] == "Warning" and events[0]["reason"] == EXPIRING
    assert "replica webhook-0: serving certificate expires at" in events[0]["message"]
    assert events[0]["involvedObject"]["name"] == "gpu-cluster"
    cluster = state.get("GPUCluster", "gpu-cluster")
    assert cluster is not None
    condition = next(c for c in cluster["status"]["conditions"] if c["type"] == CONDITION)
    assert condition["status"] == "False" and condition["reason"] == EXPIRING
    assert tls.problem() is None  # still served, still ready

    calls = len(kube.calls)
    await reporter.report_once()  # the same problem: no new event, no write
    assert len(kube.calls) == calls

    clock.now = tls.live.not_after + dt.timedelta(seconds=1)  # expired: another reason
    await reporter.report_once()
    assert [c.body["reason"] for c in kube.calls if c.path.endswith("/events") and c.method == "POST"] == [
        EXPIRING,
        INVALID,
    ]
    cluster = state.get("GPUCluster", "gpu-cluster")
    assert cluster is not None
    assert next(c for c in cluster["status"]["conditions"] if c["type"] == CONDITION)["reason"] == INVALID


async def test_a_conflicting_write_is_retried_at_the_next_poll(tmp_path: Path) -> None:
    clock = Clock()
    tls = tls_for(tmp_path, pair(new_ca()), clock)
    assert tls.live is not None
    clock.now = tls.live.not_after - dt.timedelta(minutes=10)
    kube, state = served()
    conflict = kube.fail("PATCH", STATUS_PATH, 409)
    reporter = ExpiryReporter(kube, state, tls, replica="webhook-0")
    await reporter.report_once()  # logged, not raised
    cluster = state.get("GPUCluster", "gpu-cluster")
    assert cluster is not None and not any(c["type"] == CONDITION for c in cluster["status"]["conditions"])
    kube.off(conflict)
    await reporter.report_once()
    cluster = state.get("GPUCluster", "gpu-cluster")
    assert cluster is not None and any(c["type"] == CONDITION for c in cluster["status"]["conditions"])


def test_the_controller_keeps_the_webhooks_condition() -> None:
    ours = {"type": CONDITION, "status": "False", "reason": EXPIRING, "message": "m", "lastTransitionTime": NOW}
    previous = {"conditions": [{"type": "Ready", "status": "True"}, ours]}
    status = desired_status(
        previous, state="ready", namespace="gpu-operator", reason="", message="", generation=1, now=NOW
    )
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Error", CONDITION]
    assert status["conditions"][2] == ours
