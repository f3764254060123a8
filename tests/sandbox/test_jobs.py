"""The Job controller: pods from the template, completions, backoffLimit, activeDeadlineSeconds,
conditions as in 1.34, ttlSecondsAfterFinished; `kubectl wait --for=condition=complete` works."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.sandbox.apiserver.core import Context
from gpucluster.sandbox.server import Sandbox
from tests.sandbox.conftest import KUBECTL, process_sandbox, rt
from tests.sandbox.test_process_kubelet import eventually

NS = "default"
PYTHON = "example.com/python:3"


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    s = await process_sandbox(tmp_path)
    try:
        yield s
    finally:
        await s.stop()


def job(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}, **spec},
    }


async def create_job(s: Sandbox, body: dict[str, Any]) -> Any:
    return await s.core.create(rt(s.core, "batch", "v1", "jobs"), NS, body, Context(field_manager="t"))


def job_status(s: Sandbox, name: str) -> dict[str, Any]:
    return (s.store.get(("batch", "jobs"), NS, name) or {}).get("status") or {}


def conditions(s: Sandbox, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in job_status(s, name).get("conditions") or []}


def pods_of(s: Sandbox, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in s.store.iter(("", "pods"), NS)
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == name
    ]


async def kubectl(s: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [KUBECTL, "--kubeconfig", str(s.kubeconfig_path), *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


async def test_job_runs_to_completion_and_kubectl_wait_sees_it(sandbox: Sandbox) -> None:
    s = sandbox
    main = {"name": "version", "image": "ghcr.io/gpucluster/gpucluster:0.1.0", "args": ["--version"]}
    created = await create_job(s, job("version", main, completions=2, parallelism=1))
    result = await kubectl(s, "wait", "--for=condition=complete", "job/version", "--timeout=60s")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "job.batch/version condition met"
    status = job_status(s, "version")
    assert status["succeeded"] == 2 and "active" not in status and status["startTime"] and status["completionTime"]
    found = conditions(s, "version")
    assert found["SuccessCriteriaMet"]["reason"] == "CompletionsReached"
    assert found["Complete"]["status"] == "True" and "Failed" not in found
    pods = pods_of(s, "version")
    assert len(pods) == 2 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    ref = pods[0]["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("Job", created["metadata"]["uid"], True)
    assert pods[0]["metadata"]["name"].startswith("version-")
    logs = await kubectl(s, "logs", pods[0]["metadata"]["name"])
    assert logs.stdout.startswith("gpucluster "), logs.stderr


async def test_backoff_limit_fails_the_job(sandbox: Sandbox) -> None:
    s = sandbox
    main = {"name": "main", "image": PYTHON, "args": ["-c", "import sys; sys.exit(2)"]}
    await create_job(s, job("flaky", main, backoffLimit=1))
    result = await kubectl(s, "wait", "--for=condition=failed", "job/flaky", "--timeout=60s")
    assert result.returncode == 0, result.stderr
    found = conditions(s, "flaky")
    assert found["FailureTarget"]["reason"] == found["Failed"]["reason"] == "BackoffLimitExceeded"
    assert found["Failed"]["message"] == "Job has reached the specified backoff limit"
    assert job_status(s, "flaky")["failed"] == 2 and "Complete" not in found
    assert len(pods_of(s, "flaky")) == 2


async def test_active_deadline_stops_the_pods(sandbox: Sandbox) -> None:
    s = sandbox
    main = {"name": "main", "image": PYTHON, "args": ["-c", "import time; time.sleep(600)"]}
    body = job("slow", main, activeDeadlineSeconds=1)
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    await create_job(s, body)
    await eventually("DeadlineExceeded", lambda: "Failed" in conditions(s, "slow"), timeout=30)
    assert conditions(s, "slow")["Failed"]["reason"] == "DeadlineExceeded"
    assert conditions(s, "slow")["Failed"]["message"] == "Job was active longer than specified deadline"
    await eventually("the pod to go", lambda: not pods_of(s, "slow"), timeout=30)


async def test_ttl_after_finished_deletes_the_job_and_its_pods(sandbox: Sandbox) -> None:
    s = sandbox
    main = {"name": "main", "image": PYTHON, "args": ["-c", "print('done')"]}
    await create_job(s, job("once", main, ttlSecondsAfterFinished=0))
    await eventually("the Job to go", lambda: s.store.get(("batch", "jobs"), NS, "once") is None, timeout=30)
    await eventually("its pods to go", lambda: not pods_of(s, "once"), timeout=30)


async def test_kubectl_image_job(sandbox: Sandbox) -> None:
    """The chart's pre-delete hook shape: kubectl in a Job, with the pod's service account."""
    s = sandbox
    main = {
        "name": "kubectl",
        "image": "registry.k8s.io/kubectl:v1.34.0",
        "args": ["get", "serviceaccount", "default", "-o", "name"],
    }
    await create_job(s, job("hook", main))
    await eventually(
        "the Job to finish",
        lambda: "Complete" in conditions(s, "hook") or "Failed" in conditions(s, "hook"),
        timeout=60,
    )
    pod = pods_of(s, "hook")[0]["metadata"]["name"]
    logs = await kubectl(s, "logs", pod)
    assert "Unauthorized" not in logs.stdout, logs.stdout
