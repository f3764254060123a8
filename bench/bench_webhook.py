"""Pod-mutation reviews over TLS on loopback: our webhook against a bare aiohttp TLS server.

Both servers run in their own process; the load comes from this process. Throughput is measured
with 32 requests in flight; latency at a fixed 500 requests/s. Server CPU per review is the server
process's user+system CPU time (``/proc/<pid>/stat``) over the throughput windows divided by the
reviews answered in them.

Four loads:

* pods as ReplicaSets send them (20 workloads x 100 pods): after a workload's first pod, the
  answer is cached;
* 5,000 shapes: pods of distinct specs (an env value, an image, a memory amount, a hostname, an
  index label and annotation of their own, as the pods of an indexed Job or a StatefulSet have,
  or of workloads rolled out build after build or sized by the VerticalPodAutoscaler), cycled in
  order. They differ in nothing the pod rule reads, so
  they share an answer (the server keeps answers keyed by what the rule reads, taken from the
  review's bytes by a sparse read: webhook.cached_answers): every review is read for its key;
* 5,000 shapes, container names of their own: the same pods with their containers named for the
  pod. Only the names' order is in the key; the kept answer's patch is put together with the
  review's names;
* 5,000 shapes, no answer shared: pods that each ask for their own GPU counts (three containers,
  16 x 16 x 20 combinations), so that every review misses the answer cache (which holds fewer
  entries than this and is visited in a cycle) and is translated, diffed, assembled and encoded:
  a new shape each time.

The 5,000-shape loads carry the issue's targets (CPU <= 1.3x the bare server's, throughput >=
70 % of it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from gpucluster.certs.authority import new_ca, new_serving_cert
from gpucluster.sandbox.ports import free_port
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

DURATION = float(os.environ.get("BENCH_WEBHOOK_SECONDS", "8"))
ROUNDS = 8


def _start(args: list[str], port: int, ca: bytes) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = ssl.create_default_context(cadata=ca.decode())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw,
                ctx.wrap_socket(raw, server_hostname="localhost"),
            ):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server {args} did not start")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bodies() -> list[bytes]:
    """Reviews as ReplicaSets send them: 20 workloads (different specs) x 100 pods (own name and uid)."""
    bodies = []
    for w in range(20):
        gpus = {"nvidia.com/gpu": str(1 + w % 4)} if w % 5 else {"nvidia.com/mig-1g.10gb": "1"}
        spec_pod = pod(container(f"worker-{w}", gpus), container("sidecar-log", cpu="100m"), name=None)
        for i in range(100):
            p = {**spec_pod, "metadata": {**spec_pod["metadata"], "name": f"train-{w}-{i:05d}"}}
            bodies.append(json.dumps(review(p, namespace="ml")).encode())
    return bodies


SHAPES = 5000


def _distinct_bodies(*, names: bool = False, counts: bool = False) -> list[bytes]:
    """5,000 pods of distinct specs (each its own env value, image and memory amount; ``names``:
    its containers named for the pod too; ``counts``: each its own GPU counts, so that every review
    misses the kept answers, which hold fewer entries than this and are visited in a cycle)."""
    bodies = []
    for i in range(SHAPES):
        gpus = {"nvidia.com/gpu": str(1 + i % 4)} if i % 5 else {"nvidia.com/mig-1g.10gb": "1"}
        if counts:  # 16 x 16 x 20 combinations, at most 32 devices in the pod's one claim
            gpus = {"nvidia.com/gpu": str(1 + i % 16)}
        worker = container(f"worker-{i}" if names else "worker", gpus)
        containers = [worker, container(f"log-{i}" if names else "sidecar-log", cpu="100m")]
        if counts:
            containers[1] = container("helper", {"nvidia.com/gpu": str(1 + i // 16 % 16)})
        worker["env"] = [{"name": "JOB_COMPLETION_INDEX", "value": str(i)}]
        worker["image"] = f"registry.example.com/train/worker:build-{i}"
        worker["resources"]["limits"]["memory"] = f"{1 + i % 64}Gi"  # sized per pod, as VPA does
        # The labels, annotation and hostname of a StatefulSet's or an indexed Job's pod.
        labels = {
            "app": "train",
            "apps.kubernetes.io/pod-index": str(i),
            "statefulset.kubernetes.io/pod-name": f"train-{i}",
        }
        annotations = {"batch.kubernetes.io/job-completion-index": str(i)}
        p = pod(*containers, name=f"train-{i}", labels=labels, annotations=annotations)
        if counts:
            p["spec"]["initContainers"] = [container("stage", {"nvidia.com/gpu": str(1 + i // 256 % 20)})]
        p["spec"]["hostname"] = f"train-{i}"
        bodies.append(json.dumps(review(p, namespace="ml")).encode())
    return bodies


async def _throughput(url: str, bodies: Iterator[bytes], ctx: ssl.SSLContext, seconds: float) -> tuple[float, int]:
    """Requests per second and requests answered with 32 in flight, each with the next of ``bodies``."""
    done = 0
    stop = time.monotonic() + seconds
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, ssl=ctx)) as session:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                body = next(bodies)  # each request the next body, in order from window to window
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    assert resp.status == 200
                done += 1

        await asyncio.gather(*(worker() for _ in range(32)))
    return done / seconds, done


async def _latency(url: str, bodies: list[bytes], ctx: ssl.SSLContext, rate: float, seconds: float) -> list[float]:
    latencies: list[float] = []
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, ssl=ctx)) as session:

        async def one(body: bytes) -> None:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
            latencies.append(time.perf_counter() - started)

        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(bodies[i % len(bodies)])))
        await asyncio.gather(*tasks)
    return latencies


def _compare(
    ours: subprocess.Popen[bytes], bare: subprocess.Popen[bytes], urls: tuple[str, str], body: list[bytes],
    ctx: ssl.SSLContext,
) -> tuple[float, float, float, float]:  # fmt: skip
    """(our req/s, bare req/s, our CPU us per review, bare CPU us per review) under ``body``."""
    ours_url, bare_url = urls
    cycles = {"ours": itertools.cycle(body), "bare": itertools.cycle(body)}
    asyncio.run(_throughput(ours_url, cycles["ours"], ctx, 1.0))  # warm up both
    asyncio.run(_throughput(bare_url, cycles["bare"], ctx, 1.0))
    # Alternate short windows so that whatever else the machine does weighs on both alike.
    ours_runs: list[float] = []
    bare_runs: list[float] = []
    cpu = {"ours": 0.0, "bare": 0.0}
    reviews = {"ours": 0, "bare": 0}
    for _ in range(ROUNDS):
        for key, proc, url, runs in (("ours", ours, ours_url, ours_runs), ("bare", bare, bare_url, bare_runs)):
            before = _cpu_seconds(proc.pid)
            rps, done = asyncio.run(_throughput(url, cycles[key], ctx, DURATION / ROUNDS))
            cpu[key] += _cpu_seconds(proc.pid) - before
            reviews[key] += done
            runs.append(rps)
    ours_cpu, bare_cpu = (cpu[k] / max(1, reviews[k]) * 1e6 for k in ("ours", "bare"))
    return statistics.median(ours_runs), statistics.median(bare_runs), ours_cpu, bare_cpu


def _row(name: str, value: float, unit: str, target: str | None = None, ok: bool | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def run() -> list[dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost", "gpucluster-webhook.gpu-operator.svc"], ip_addresses=["127.0.0.1"])
    (tmp / "tls.crt").write_bytes(pair.cert_pem)
    (tmp / "tls.key").write_bytes(pair.key_pem)
    (tmp / "cluster.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n")
    body, distinct = _bodies(), _distinct_bodies()
    named, counted = _distinct_bodies(names=True), _distinct_bodies(counts=True)
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    ours_port, bare_port = free_port(), free_port()
    ours = _start(
        [sys.executable, "-m", "gpucluster.cli", "webhook", "--host", "127.0.0.1", "--port", str(ours_port),
         "--cert-dir", str(tmp), "--cluster", str(tmp / "cluster.yaml"), "--log-level", "warning", "--shutdown-delay", "0"],
        ours_port, ca.cert_pem,
    )  # fmt: skip
    bare = _start([sys.executable, "-m", "bench.bare_server", str(tmp), str(bare_port)], bare_port, ca.cert_pem)
    try:
        urls = (f"https://127.0.0.1:{ours_port}/mutate", f"https://127.0.0.1:{bare_port}/mutate")
        ours_rps, bare_rps, ours_cpu, bare_cpu = _compare(ours, bare, urls, body, ctx)
        latencies = sorted(asyncio.run(_latency(urls[0], body, ctx, 500, DURATION)))
        loads = {
            f"({SHAPES:,} shapes)": _compare(ours, bare, urls, distinct, ctx),
            f"({SHAPES:,} shapes, container names of their own)": _compare(ours, bare, urls, named, ctx),
            f"({SHAPES:,} shapes, no answer shared)": _compare(ours, bare, urls, counted, ctx),
        }
    finally:
        for proc in (ours, bare):
            proc.terminate()
            proc.wait(10)
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    ratio = ours_rps / bare_rps
    rows = [
        _row("pod mutation throughput (32 in flight)", ours_rps, "req/s"),
        _row("bare aiohttp TLS constant review", bare_rps, "req/s"),
        _row("throughput vs bare server", ratio * 100, "%", ">= 90 %", ratio >= 0.9),
        _row("server CPU per pod mutation", ours_cpu, "us"),
        _row("bare server CPU per review", bare_cpu, "us"),
        _row("server CPU per review vs bare server", ours_cpu / bare_cpu, "x"),
        _row("p99 latency at 500 req/s", p99, "ms", "< 10 ms", p99 < 10),
        _row("median latency at 500 req/s", statistics.median(latencies) * 1000, "ms"),
    ]
    for load, (rps, rps_bare, cpu, cpu_bare) in loads.items():
        rps_ratio, cpu_ratio = rps / rps_bare, cpu / cpu_bare
        rows += [
            _row(f"pod mutation throughput {load}", rps, "req/s"),
            _row(f"bare aiohttp TLS constant review {load}", rps_bare, "req/s"),
            _row(f"throughput vs bare server {load}", rps_ratio * 100, "%", ">= 70 %", rps_ratio >= 0.7),
            _row(f"server CPU per pod mutation {load}", cpu, "us"),
            _row(f"bare server CPU per review {load}", cpu_bare, "us"),
            _row(f"server CPU per review vs bare server {load}", cpu_ratio, "x", "<= 1.3x", cpu_ratio <= 1.3),
        ]
    return rows
