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
