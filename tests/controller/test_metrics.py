"""Metrics a Prometheus user charts, and /healthz, /readyz, /metrics served by `gpucluster run`."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpucluster.cli.run import RunOptions, Stack
from gpucluster.controller.runtime import Controller, Metrics, error_reason
from gpucluster.kube.client import KubeError
from tests.e2e.test_run import StackThread


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_error_reasons_are_bounded_labels() -> None:
    assert error_reason(KubeError(409, {"reason": "Conflict"}, "PATCH", "/x")) == "Conflict"
    assert error_reason(KubeError(502, None, "PATCH", "/x")) == "HTTP502"
    assert error_reason(TimeoutError()) == "Timeout"
    assert error_reason(ConnectionResetError()) == "ConnectionError"


def test_every_reconciler_series_exists_from_the_start() -> None:
    text = samples(generate_latest(Metrics().registry).decode())
    for name in ("gpucluster", "explanations", "stranded"):
        assert text[("gpucluster_controller_reconciles_total", (("reconciler", name), ("result", "ok")))] == 0
        assert ("gpucluster_controller_reconcile_duration_seconds_count", (("reconciler", name),)) in text


async def test_a_failed_reconcile_counts_an_error_by_reason_and_keeps_the_last_success() -> None:
    controller = Controller(None, leader_election=False)  # type: ignore[arg-type]

    async def ok() -> int:
        return 1

    async def conflict() -> int:
        raise KubeError(409, {"reason": "Conflict"}, "PATCH", "/x")

    assert await controller._timed("gpucluster", ok()) == 1
    with pytest.raises(KubeError):
        await controller._timed("gpucluster", conflict())
    found = samples(generate_latest(controller.metrics.registry).decode())
    assert found[("gpucluster_controller_reconciles_total", (("reconciler", "gpucluster"), ("result", "ok")))] == 1
    assert found[("gpucluster_controller_reconciles_total", (("reconciler", "gpucluster"), ("result", "error")))] == 1
    assert (
        found[("gpucluster_controller_reconcile_errors_total", (("reason", "Conflict"), ("reconciler", "gpucluster")))]
        == 1
    )
    assert found[("gpucluster_controller_reconcile_duration_seconds_count", (("reconciler", "gpucluster"),))] == 2
    assert (
        found[("gpucluster_controller_last_successful_reconcile_timestamp_seconds", (("reconciler", "gpucluster"),))]
        > 0
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    kubeconfig: Path = tmp_path_factory.mktemp("metrics") / "kubeconfig"
    runner = StackThread(RunOptions(sandbox=True, kubeconfig_out=kubeconfig, nodes=1))
    stack = runner.start()
    try:
        yield stack
    finally:
        runner.stop()


def test_run_serves_health_readiness_and_controller_metrics(stack: Stack) -> None:
    if not stack.controller_started:
        pytest.skip("controller not available")
    port = stack.health_port
    assert port > 0
    assert fetch(port, "/healthz") == (200, "ok\n")
    wait_for("/readyz to answer 200", lambda: fetch(port, "/readyz")[0] == 200)
    started = time.time()

    def reconciled() -> Any:
        status, text = fetch(port, "/metrics")
        assert status == 200
        found = samples(text)
        ok = found.get(("gpucluster_controller_reconciles_total", (("reconciler", "gpucluster"), ("result", "ok"))))
        return found if ok else None

    found = wait_for("a successful reconcile in /metrics", reconciled)
    last = found[("gpucluster_controller_last_successful_reconcile_timestamp_seconds", (("reconciler", "gpucluster"),))]
    assert started - 60 < last <= time.time() + 1
    assert found[("gpucluster_controller_reconcile_duration_seconds_count", (("reconciler", "gpucluster"),))] >= 1
    assert ("gpucluster_controller_workqueue_depth", (("name", "gpucluster"),)) in found
