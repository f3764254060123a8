"""`gpucluster admit`: the server's answer, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.webhook.reviews import clusterpolicy, gpucluster, nvidiadriver, review


def admit(tmp: Path, body: Any, *cluster: dict[str, Any], raw: str | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp / "review.json"
    path.write_text(raw if raw is not None else json.dumps(body))
    args = [sys.executable, "-m", "gpucluster.cli", "admit", "-f", str(path)]
    if cluster:
        cpath = tmp / "cluster.yaml"
        cpath.write_text(yaml.safe_dump_all(cluster))
        args += ["--cluster", str(cpath)]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_allowed_review_exits_0(tmp_path: Path) -> None:
    out = admit(tmp_path, review(gpucluster()))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["response"]["response"]["allowed"] is True
    assert result["patchedObject"] is None and result["creates"] == []


def test_denied_review_exits_1(tmp_path: Path) -> None:
    out = admit(tmp_path, review(gpucluster()), clusterpolicy())
    assert out.returncode == 1
    assert "one GPU management model" in json.loads(out.stdout)["response"]["response"]["status"]["message"]


def test_mutation_then_validation_like_the_api_server(tmp_path: Path) -> None:
    out = admit(tmp_path, review(nvidiadriver()), gpucluster())
    assert out.returncode == 0
    result = json.loads(out.stdout)
    assert result["response"]["response"]["patchType"] == "JSONPatch"
    assert result["patchedObject"]["spec"]["upgradePolicy"] == {"autoUpgrade": False}
    denied = admit(tmp_path, review(nvidiadriver(upgradePolicy={"autoUpgrade": True})), gpucluster())
    assert denied.returncode == 1


def test_bad_reviews_exit_2_with_one_line(tmp_path: Path) -> None:
    out = admit(tmp_path, None, raw="{broken")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "review.json: body is not JSON" in out.stderr
    out = admit(tmp_path, {"apiVersion": "v1", "kind": "Pod"})
    assert out.returncode == 2 and "expected apiVersion admission.k8s.io/v1" in out.stderr


def test_a_review_in_yaml_is_answered_as_the_same_review_in_json(tmp_path: Path) -> None:
    body = review(nvidiadriver())
    as_json = admit(tmp_path, body, gpucluster())
    as_yaml = admit(tmp_path, None, gpucluster(), raw=yaml.safe_dump(body))
    assert as_yaml.returncode == as_json.returncode == 0, as_yaml.stderr
    assert json.loads(as_yaml.stdout) == json.loads(as_json.stdout)
    flow = admit(tmp_path, None, gpucluster(), raw=yaml.safe_dump(body, default_flow_style=True))
    assert flow.returncode == 0 and json.loads(flow.stdout) == json.loads(as_json.stdout), flow.stderr
    bom = admit(tmp_path, None, gpucluster(), raw="\ufeff" + json.dumps(body))
    assert bom.returncode == 0 and json.loads(bom.stdout) == json.loads(as_json.stdout), bom.stderr
    two = admit(tmp_path, None, raw=yaml.safe_dump_all([body, body]))
    assert two.returncode == 2 and "an AdmissionReview is one document, found 2" in two.stderr
    bad = admit(tmp_path, None, raw="request: [\n")
    assert bad.returncode == 2 and "invalid YAML" in bad.stderr and bad.stderr.count("\n") == 1


def test_a_review_with_a_duplicate_key_exits_2(tmp_path: Path) -> None:
    text = json.dumps(review(gpucluster())).replace(
        '"kind": "AdmissionReview"', '"kind": "AdmissionReview", "kind": "X"', 1
    )
    out = admit(tmp_path, None, raw=text)
    assert out.returncode == 2
    assert out.stderr.strip().endswith('invalid JSON: duplicate key "kind" in an object')
