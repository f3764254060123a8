"""How many allocator processes a replica runs, and when they start.

A container's CPU limit is a CFS quota, not a cpuset: on a 64-core node the affinity mask is 64
CPUs whatever the limit, and each worker holds its own copy of the cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.dra.worker import AllocatorWorker
from gpucluster.webhook import feasibility
from gpucluster.webhook.feasibility import MAX_DEFAULT_PROCESSES, FeasibilityPool, lane_size, quota_cpus
from tests.webhook.reviews import review
from tests.webhook.test_offload import claim, cluster
from tests.webhook.test_server_hardening import FAST, closed_by_server, head, start


def test_a_quota_limits_the_lane_below_the_affinity_mask() -> None:
    assert lane_size(64, "200000 100000", cap=8) == 2  # a 2-CPU limit on a 64-core node
    assert lane_size(64, "150000 100000", cap=8) == 2  # 1.5 CPUs: rounded up
    assert lane_size(64, "100000 100000") == 1
    assert lane_size(64, "50000 100000") == 1  # half a CPU still gets one process
    assert lane_size(64, "100000 100000 ", cap=8) == 1  # the file's trailing newline
    assert lane_size(4, "1600000 100000", cap=8) == 4  # a quota above the cpuset: the cpuset


def test_without_a_quota_the_lane_is_capped() -> None:
    assert lane_size(64, "max 100000") == MAX_DEFAULT_PROCESSES == 2
    assert lane_size(64, "-1 100000") == MAX_DEFAULT_PROCESSES  # cgroup v1: no quota
    assert lane_size(64, None) == MAX_DEFAULT_PROCESSES  # no cgroup file
    assert lane_size(64, "max 100000", cap=8) == 8
    assert lane_size(1, "max 100000") == 1
    assert lane_size(64, "400000 100000") == MAX_DEFAULT_PROCESSES  # 4 CPUs, but the memory cap


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected 'QUOTA PERIOD'"),
        ("max", "expected 'QUOTA PERIOD'"),
        ("1 2 3", "expected 'QUOTA PERIOD'"),
        ("lots 100000", "must be integers"),
        ("200000 1e5", "must be integers"),
        ("0 100000", "must be positive"),
        ("200000 0", "must be positive"),
        ("-5 100000", "must be positive"),
    ],
)
def test_a_malformed_quota_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"CPU quota {text!r}: .*{message}"):
        quota_cpus(text)


def test_nonsense_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="must be at least 1"):
        lane_size(0, None)
    with pytest.raises(ValueError, match="must be at least 1"):
        lane_size(4, None, cap=0)
    with pytest.raises(ValueError, match="processes 0: must be at least 1"):
        FeasibilityPool(processes=0)


def _on_64_cpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(feasibility.os, "sched_getaffinity", lambda _: set(range(64)))
    monkeypatch.setattr(feasibility, "CPU_MAX", str(tmp_path / "cpu.max"))
    monkeypatch.setattr(feasibility, "CFS_QUOTA", (str(tmp_path / "cpu" / "cpu.cfs_quota_us"),))


def test_the_container_quota_is_read_from_cgroup_v2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _on_64_cpus(monkeypatch, tmp_path)
    assert feasibility.read_cpu_quota() is None
    assert feasibility.replica_cores() == MAX_DEFAULT_PROCESSES
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert feasibility.read_cpu_quota() == "100000 100000"
    assert feasibility.replica_cores() == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert feasibility.replica_cores() == MAX_DEFAULT_PROCESSES


def test_the_container_quota_is_read_from_cgroup_v1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _on_64_cpus(monkeypatch, tmp_path)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert feasibility.read_cpu_quota() == "50000 100000"
    assert feasibility.replica_cores() == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert feasibility.replica_cores() == MAX_DEFAULT_PROCESSES


def test_an_unreadable_quota_is_logged_and_the_cap_applies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _on_64_cpus(monkeypatch, tmp_path)
    (tmp_path / "cpu.max").write_text("garbage\n")
    assert feasibility.replica_cores() == MAX_DEFAULT_PROCESSES
    assert "CPU quota 'garbage'" in caplog.text


def _started(worker: AllocatorWorker) -> int:
    return sum(slot.process is not None for slot in worker._slots)


def test_workers_start_on_first_use_and_only_as_many_as_run_at_once() -> None:
    pool = FeasibilityPool(processes=3, deadline=20)
    try:
        assert _started(pool.quick) == _started(pool.slow) == 0  # nothing before the first check
        objects = cluster(2)
        for count in (1, 2, 3, 9):
            pool.check([claim(count)], objects)
        assert _started(pool.quick) == 1  # one at a time: the same (warm) worker each time
        assert _started(pool.slow) == 0
    finally:
        pool.close()


async def test_a_served_webhook_starts_no_worker_before_a_claim_review(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = FeasibilityPool(processes=2, deadline=20)
    monkeypatch.setattr(feasibility, "_shared", pool)  # a fresh pool: other tests' is warm
    monkeypatch.setattr(feasibility, "_shared_pid", os.getpid())
    try:
        srv, task = await start(tmp_path, FAST, ClusterState.from_objects(cluster(2)))
        try:
            await asyncio.sleep(0.3)
            assert _started(pool.quick) == _started(pool.slow) == 0
            body = json.dumps(review(claim(1), namespace="ml")).encode()
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=srv.client_context())
            writer.write(head(len(body), keep_alive=False) + body)
            await closed_by_server(reader, 20)
            writer.close()
            assert _started(pool.quick) == 1 and _started(pool.slow) == 0
        finally:
            srv.stop.set()
            await task
    finally:
        pool.close()
