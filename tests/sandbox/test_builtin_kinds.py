"""batch/v1 Jobs and CronJobs, policy/v1 PodDisruptionBudgets, and built-in quantity validation.

Against real kubectl and the official client, as kube-apiserver 1.34 behaves.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpucluster.sandbox.server import SandboxThread
from tests.sandbox.conftest import KUBECTL
from tests.sandbox.test_kubectl import kubectl

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: %(name)s}
spec:
  template:
    metadata: {labels: {app: hook}}
    spec:
      restartPolicy: %(policy)s
      containers: [{name: c, image: busybox:1.36}]
"""


def test_api_resources_list_batch_and_policy(threaded: SandboxThread) -> None:
    out = kubectl(threaded, "api-resources", "--api-group=batch", "--no-headers").stdout
    assert [line.split()[0] for line in out.splitlines()] == ["cronjobs", "jobs"]
    pdb = kubectl(threaded, "api-resources", "--api-group=policy", "--no-headers").stdout.split()
    assert pdb[:4] == ["poddisruptionbudgets", "pdb", "policy/v1", "true"]


def test_job_defaults_selector_and_labels(threaded: SandboxThread) -> None:
    kubectl(threaded, "create", "-f", "-", stdin=JOB % {"name": "j1", "policy": "Never"})
    job = json.loads(kubectl(threaded, "get", "job", "j1", "-o", "json").stdout)
    spec, uid = job["spec"], job["metadata"]["uid"]
    assert {k: spec[k] for k in ("backoffLimit", "completions", "parallelism", "completionMode", "suspend")} == {
        "backoffLimit": 6,
        "completions": 1,
        "parallelism": 1,
        "completionMode": "NonIndexed",
        "suspend": False,
    }
    assert spec["manualSelector"] is False and spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "app": "hook",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "j1",
        "controller-uid": uid,
        "job-name": "j1",
    }
    # The Job's own labels are the template's labels as the user gave them.
    assert job["metadata"]["labels"] == {"app": "hook"}
    assert job["metadata"]["generation"] == 1 and job["status"] == {}
    patched = kubectl(
        threaded,
        "patch",
        "job",
        "j1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"active": 1}}',
        "-o",
        "json",
    ).stdout
    assert json.loads(patched)["status"] == {"active": 1}


def test_job_restart_policy_and_immutable_template(threaded: SandboxThread) -> None:
    bad = kubectl(threaded, "create", "-f", "-", stdin=JOB % {"name": "j2", "policy": "Always"}, check=False)
    assert bad.returncode == 1
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"' in (
        bad.stderr
    )
    kubectl(threaded, "create", "-f", "-", stdin=JOB % {"name": "j3", "policy": "OnFailure"})
    changed = kubectl(
        threaded,
        "patch",
        "job",
        "j3",
        "--type=json",
        "-p",
        '[{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "busybox:2"}]',
        check=False,
    )
    assert changed.returncode == 1 and "spec.template: Invalid value" in changed.stderr
    negative = kubectl(
        threaded, "patch", "job", "j3", "--type=merge", "-p", '{"spec":{"backoffLimit":-1}}', check=False
    )
    assert "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0" in negative.stderr


def test_cronjob_defaults_and_schedule(threaded: SandboxThread) -> None:
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}
                    }
                }
            },
        },
    }
    kubectl(threaded, "create", "-f", "-", stdin=json.dumps(cron))
    got = json.loads(kubectl(threaded, "get", "cj", "nightly", "-o", "json").stdout)["spec"]
    assert (got["concurrencyPolicy"], got["suspend"]) == ("Allow", False)
    assert (got["successfulJobsHistoryLimit"], got["failedJobsHistoryLimit"]) == (3, 1)
    cron["metadata"] = {"name": "broken"}
    cron["spec"]["schedule"] = "every day"  # type: ignore[index]
    bad = kubectl(threaded, "create", "-f", "-", stdin=json.dumps(cron), check=False)
    assert bad.returncode == 1 and 'spec.schedule: Invalid value: "every day"' in bad.stderr


def test_pdb_validation_and_status(threaded: SandboxThread) -> None:
    def pdb(name: str, **spec: object) -> str:
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}}
        return yaml.safe_dump({**body, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}})

    kubectl(threaded, "create", "-f", "-", stdin=pdb("ok", minAvailable=1))
    got = json.loads(kubectl(threaded, "get", "pdb", "ok", "-o", "json").stdout)
    assert got["status"] == {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    both = kubectl(threaded, "create", "-f", "-", stdin=pdb("both", minAvailable=1, maxUnavailable=1), check=False)
    assert "minAvailable and maxUnavailable cannot be both set" in both.stderr
    neg = kubectl(threaded, "create", "-f", "-", stdin=pdb("neg", maxUnavailable=-1), check=False)
    assert "spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0" in neg.stderr
    pct = kubectl(threaded, "create", "-f", "-", stdin=pdb("pct", minAvailable="150%"), check=False)
    assert 'spec.minAvailable: Invalid value: "150%": must not be greater than 100%' in pct.stderr
    kubectl(threaded, "create", "-f", "-", stdin=pdb("half", maxUnavailable="50%"))


def test_official_client_jobs_and_pdbs(threaded: SandboxThread) -> None:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(threaded.sandbox.kubeconfig_path))
    batch = client.BatchV1Api(api_client)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="from-client"),
        spec=client.V1JobSpec(
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never", containers=[client.V1Container(name="c", image="busybox:1.36")]
                )
            )
        ),
    )
    created = batch.create_namespaced_job("default", job)
    assert created.spec.backoff_limit == 6 and created.spec.completion_mode == "NonIndexed"
    assert created.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "from-client"
    policy = client.PolicyV1Api(api_client)
    pdb = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="client-pdb"),
        spec=client.V1PodDisruptionBudgetSpec(min_available="50%", selector=client.V1LabelSelector()),
    )
    assert policy.create_namespaced_pod_disruption_budget("default", pdb).status.disruptions_allowed == 0
    batch.delete_namespaced_job("from-client", "default", propagation_policy="Background")
    policy.delete_namespaced_pod_disruption_budget("client-pdb", "default")
