"""Container probes as the kubelet runs them (``pkg/kubelet/prober``): httpGet (HTTP, or HTTPS
without verifying the certificate), tcpSocket and exec, against the pod IP, with
``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds`` and the success/failure
thresholds. gRPC probes always fail (not supported here)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

Obj = dict[str, Any]
ExecFn = Callable[[list[str], float], Awaitable[int]]


def resolve_port(port: Any, container: Obj) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text:
            return int(p.get("containerPort") or 0) or None
    return None


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


_INSECURE = _insecure()


async def probe_once(probe: Obj, container: Obj, pod_ip: str, run_exec: ExecFn) -> tuple[bool, str]:
    """One probe attempt: (success, failure message as the kubelet's event words it)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    if "exec" in probe:
        command = [str(c) for c in (probe["exec"].get("command") or [])]
        try:
            code = await run_exec(command, timeout)
        except TimeoutError:
            return False, f"command timed out: {command!r} timed out after {timeout:g}s"
        except OSError as exc:
            return False, str(exc)
        return code == 0, f"command {command!r} exited with {code}"
    if "tcpSocket" in probe:
        spec = probe["tcpSocket"]
        host = str(spec.get("host") or pod_ip)
        port = resolve_port(spec.get("port"), container)
        if port is None:
            return False, f"unknown port {spec.get('port')!r}"
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (OSError, TimeoutError) as exc:
            return False, f"dial tcp {host}:{port}: {_why(exc)}"
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True, ""
    if "httpGet" in probe:
        spec = probe["httpGet"]
        host = str(spec.get("host") or pod_ip)
        port = resolve_port(spec.get("port"), container)
        if port is None:
            return False, f"unknown port {spec.get('port')!r}"
        scheme = str(spec.get("scheme") or "HTTP").lower()
        path = str(spec.get("path") or "/")
        url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
        headers = {"User-Agent": "kube-probe/1.34", "Accept": "*/*"}
        headers.update({str(h.get("name")): str(h.get("value")) for h in spec.get("httpHeaders") or []})
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
                session.get(
                    url, headers=headers, ssl=_INSECURE if scheme == "https" else False, allow_redirects=False
                ) as resp,
            ):
                body = (await resp.content.read(10 * 1024)).decode(errors="replace")
                if 200 <= resp.status < 400:
                    return True, ""
                return False, f"HTTP probe failed with statuscode: {resp.status}" + (f": {body}" if body else "")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return False, f'Get "{url}": {_why(exc)}'
    return False, "probe type not supported in the sandbox"


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(exc, ConnectionRefusedError) or "Connect call failed" in str(exc) or "refused" in str(exc):
        return "connect: connection refused"
    return str(exc) or type(exc).__name__


@dataclass
class ProbeResult:
    success: bool
    message: str


class ProbeWorker:
    """Runs one probe of one container on its schedule; calls ``on_change(result)`` when the
    thresholds flip the result, and ``on_failure(message)`` on every failed probe (the kubelet
    records an ``Unhealthy`` event for each). ``initial`` is the result before the first flip."""

    def __init__(
        self,
        kind: str,
        probe: Obj,
        container: Obj,
        pod_ip: str,
        run_exec: ExecFn,
        on_change: Callable[[ProbeResult], None],
        *,
        initial: bool,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.kind = kind
        self.on_failure = on_failure
        self.probe = probe
        self.container = container
        self.pod_ip = pod_ip
        self.run_exec = run_exec
        self.on_change = on_change
        self.result = initial
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"probe-{self.kind}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        p = self.probe
        period = max(float(p.get("periodSeconds") or 10), 0.1)
        success_threshold = max(int(p.get("successThreshold") or 1), 1)
        failure_threshold = max(int(p.get("failureThreshold") or 3), 1)
        await asyncio.sleep(float(p.get("initialDelaySeconds") or 0))
        successes = failures = 0
        while True:
            ok, message = await probe_once(p, self.container, self.pod_ip, self.run_exec)
            if ok:
                successes, failures = successes + 1, 0
                if not self.result and successes >= success_threshold:
                    self.result = True
                    self.on_change(ProbeResult(True, ""))
            else:
                successes, failures = 0, failures + 1
                if self.on_failure is not None:
                    self.on_failure(message)
                if self.result and failures >= failure_threshold:
                    self.result = False
                    self.on_change(ProbeResult(False, message))
                elif not self.result and failures >= failure_threshold and self.kind == "startup":
                    self.on_change(ProbeResult(False, message))
                    failures = 0
            await asyncio.sleep(period)
