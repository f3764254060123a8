"""Pod-mutation reviews over TLS on loopback: our webhook against a bare aiohttp TLS server.

Both servers run in their own process; the load comes from this process. Throughput is measured
with 32 requests in flight; latency at a fixed 500 requests/s.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from certs.authority import new_ca, new_serving_cert
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

DURATION = float(os.environ.get("BENCH_WEBHOOK_SECONDS", "8"))
ROUNDS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


async def _throughput(url: str, bodies: list[bytes], ctx: ssl.SSLContext, seconds: float) -> float:
    done = 0
    stop = time.monotonic() + seconds
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, ssl=ctx)) as session:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                body = bodies[done % len(bodies)]
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    assert resp.status == 200
                done += 1

        await asyncio.gather(*(worker() for _ in range(32)))
    return done / seconds


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


def run() -> list[dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    (tmp / "tls.crt").write_bytes(pair.cert_pem)
    (tmp / "tls.key").write_bytes(pair.key_pem)
    (tmp / "cluster.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n")
    body = _bodies()
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    ours_port, bare_port = _free_port(), _free_port()
    ours = _start(
        [sys.executable, "-m", "gpucluster.cli", "webhook", "--host", "127.0.0.1", "--port", str(ours_port),
         "--cert-dir", str(tmp), "--cluster", str(tmp / "cluster.yaml"), "--log-level", "warning", "--shutdown-delay", "0"],
        ours_port, ca.cert_pem,
    )  # fmt: skip
    bare = _start([sys.executable, "-m", "tests.bench.bare_server", str(tmp), str(bare_port)], bare_port, ca.cert_pem)
    try:
        ours_url, bare_url = f"https://127.0.0.1:{ours_port}/mutate", f"https://127.0.0.1:{bare_port}/mutate"
        asyncio.run(_throughput(ours_url, body, ctx, 1.0))  # warm up both
        asyncio.run(_throughput(bare_url, body, ctx, 1.0))
        # Alternate short windows so that whatever else the machine does weighs on both alike.
        ours_runs, bare_runs = [], []
        for _ in range(ROUNDS):
            ours_runs.append(asyncio.run(_throughput(ours_url, body, ctx, DURATION / ROUNDS)))
            bare_runs.append(asyncio.run(_throughput(bare_url, body, ctx, DURATION / ROUNDS)))
        ours_rps, bare_rps = statistics.median(ours_runs), statistics.median(bare_runs)
        latencies = sorted(asyncio.run(_latency(ours_url, body, ctx, 500, DURATION)))
    finally:
        for proc in (ours, bare):
            proc.terminate()
            proc.wait(10)
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    ratio = ours_rps / bare_rps
    return [
        {
            "name": "pod mutation throughput (32 in flight)",
            "value": ours_rps,
            "unit": "req/s",
            "target": None,
            "ok": None,
        },
        {"name": "bare aiohttp TLS constant review", "value": bare_rps, "unit": "req/s", "target": None, "ok": None},
        {
            "name": "throughput vs bare server",
            "value": ratio * 100,
            "unit": "%",
            "target": ">= 70 %",
            "ok": ratio >= 0.7,
        },
        {"name": "p99 latency at 500 req/s", "value": p99, "unit": "ms", "target": "< 10 ms", "ok": p99 < 10},
        {
            "name": "median latency at 500 req/s",
            "value": statistics.median(latencies) * 1000,
            "unit": "ms",
            "target": None,
            "ok": None,
        },
    ]
