"""The process kubelet: pods whose images have a local program (``podenv.entrypoint_for``: the
project's own image, ``registry.k8s.io/kubectl``) run as real local processes.

Per pod, ``PodRuntime`` (an asyncio task) owns a directory under the runtime root
(``<root>/<namespace>_<name>_<uid>``) holding the volumes (``.volumes/<name>``, linked at
``<poddir><mountPath>``), the logs (``.logs/<container>.log``, the previous instance's
``.previous.log``) and a loopback pod IP (``127.x.y.z``). It materialises the volumes (with the
service-account token from ``core.authn``, refreshed at 80 % of its lifetime), runs the init
containers in order to completion, then the containers, each restarted per ``restartPolicy`` with
the kubelet's back-off, with its probes. The kubelet (``kubelet.Kubelet``) turns the runtime's
state into pod status (``pod_status``) and stops the pod on deletion (SIGTERM to the process
group, SIGKILL after the grace period). Processes get ``PR_SET_PDEATHSIG`` so none outlives the
sandbox, even a killed one.

Environment every process gets (besides the container's own): ``PATH``, ``HOME`` (the pod
directory), ``HOSTNAME`` (the pod name), ``KUBERNETES_SERVICE_HOST``/``_PORT``/``_PORT_HTTPS``,
``KUBERNETES_PORT``/``KUBERNETES_PORT_443_TCP*`` (the sandbox), ``GPUCLUSTER_BIND_ADDRESS`` (the
pod IP), ``GPUCLUSTER_SERVICEACCOUNT_DIR`` (the remapped service-account directory, when
mounted), ``TMPDIR`` (when ``/tmp`` is a mount), ``KUBECONFIG`` (kubectl images),
``PYTHONUNBUFFERED=1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import inspect
import ipaddress
import logging
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from gpucluster import timestamps
from gpucluster.sandbox.apiserver.core import ApiCore
from gpucluster.sandbox.sim import container as container_launcher
from gpucluster.sandbox.sim import imagespec, podenv
from gpucluster.sandbox.sim.images import Image, ImageStore
from gpucluster.sandbox.sim.probes import ProbeResult, ProbeWorker

Obj = dict[str, Any]
log = logging.getLogger("sandbox.kubelet")


@dataclass(frozen=True)
class RuntimeOptions:
    root: Path | None = None
    """Where pod directories go (default: a fresh directory in tempfile.gettempdir())."""
    backoff_base: float = 10.0
    backoff_max: float = 300.0
    config_retry: float = 1.0
    """How often a container whose configuration failed (missing Secret...) is retried."""
    entrypoints: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Extra images to run: repository -> argv of its entrypoint."""
    images: ImageStore | None = None
    """The node's images (``make image``'s archive): a container whose image is here runs from its
    root filesystem (``container.py``), one whose repository is here under another tag fails to
    pull, the rest as before."""


@dataclass(frozen=True)
class LogFile:
    path: Path
    running: Callable[[], bool]
    """Whether the instance writing it still runs (``kubectl logs -f`` follows until it stops)."""


@dataclass
class ApiEndpoint:
    url: str
    ca_pem: str


def _pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _now() -> str:
    return timestamps.rfc3339()


def _write(path: Path, data: bytes, mode: int, owner: imagespec.Ownership | None = None) -> None:
    """Replace ``path`` atomically; with ``owner``, that owner, group and exact mode (image pods:
    the kubelet's ownership), otherwise the mode kept writable for us and a replaced file's owner
    kept (a refreshed token stays readable by the user it was given to)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    if owner is not None:
        os.chown(tmp, owner.uid, owner.gid)
        os.chmod(tmp, owner.mode)
    else:
        os.chmod(tmp, mode & 0o777 | 0o200)  # keep it writable for us: the next refresh replaces it
        with contextlib.suppress(OSError):
            old = path.stat()
            if os.geteuid() == 0 and (old.st_uid, old.st_gid) != (0, 0):
                os.chown(tmp, old.st_uid, old.st_gid)
                os.chmod(tmp, old.st_mode & 0o7777)
    os.replace(tmp, path)


class ContainerRun:
    """One container of a pod: its current instance and what the kubelet reports about it."""

    def __init__(self, spec: Obj, *, init: bool) -> None:
        self.spec = spec
        self.name = str(spec.get("name"))
        self.init = init
        self.restart_count = 0
        self.state: Obj = {"waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}}
        self.last_state: Obj = {}
        self.ready = False
        self.started = False
        self.container_id = ""
        self.proc: asyncio.subprocess.Process | None = None
        self.exit_code: int | None = None
        self.killed_for: str = ""
        self.deaths = 0
        self.image_id = ""  # repository@digest when run from the node's image store

    @property
    def running(self) -> bool:
        return "running" in self.state

    def terminated(self) -> Obj | None:
        t = self.state.get("terminated")
        return t if isinstance(t, dict) else None


class PodRuntime:
    def __init__(self, owner: ProcessRuntime, pod: Obj, ip: str, host_ip: str) -> None:
        md = pod["metadata"]
        self.owner = owner
        self.namespace = str(md["namespace"])
        self.name = str(md["name"])
        self.uid = str(md.get("uid") or "")
        self.pod = pod
        self.ip = ip
        self.host_ip = host_ip
        self.dir = owner.root / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        spec = pod.get("spec") or {}
        self.restart_policy = str(spec.get("restartPolicy") or "Always")
        grace = spec.get("terminationGracePeriodSeconds")
        self.grace = 30 if grace is None else int(grace)
        self.init = [ContainerRun(c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [ContainerRun(c, init=False) for c in spec.get("containers") or []]
        self.sandbox_ready = False
        self.initialized = not self.init
        self.init_failed = False
        self.terminating = False
        self.finished = False  # every process stopped for good (terminal phase, or terminated)
        self.message = ""
        self.started_at = _now()
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._probes: dict[str, list[ProbeWorker]] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._token_files: list[tuple[Path, Obj, int]] = []
        self._volume_specs: list[Obj] = []
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message) for the kubelet to record
        self.volumes: dict[str, Path] = {}
        self.mounts: dict[str, list[str]] = {}  # container -> mount paths
        self.images: dict[str, Image] = {}  # container -> the image it runs from (image mode)
        store = owner.options.images
        if store is not None:
            for c in self.all():
                found = store.get(str(c.spec.get("image") or ""))
                if found is not None:
                    self.images[c.name] = found
        self.image_mounts: dict[str, list[Obj]] = {}  # container -> launcher mounts (image mode)

    # ------------------------------------------------------------ public

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def all(self) -> list[ContainerRun]:
        return [*self.init, *self.containers]

    def container(self, name: str) -> ContainerRun | None:
        return next((c for c in self.all() if c.name == name), None)

    def log_path(self, name: str, *, previous: bool = False) -> Path:
        return self.dir / ".logs" / (f"{name}.previous.log" if previous else f"{name}.log")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._main(), name=f"pod-{self.namespace}-{self.name}")

    def terminate(self, grace: float | None = None) -> None:
        """Stop every container (SIGTERM, SIGKILL after ``grace``); ``finished`` once they are down."""
        if self.terminating:
            return
        self.terminating = True
        grace = self.grace if grace is None else grace
        self._spawn(self._terminate(max(grace, 0.0)))

    async def kill(self) -> None:
        """Stop at once (sandbox shutdown): SIGKILL to every process group, wait for them."""
        self.terminating = True
        for task in [self._task, self._refresh, *self._tasks]:
            if task is not None:
                task.cancel()
        for c in self.all():
            self._signal(c, signal.SIGKILL)
        for c in self.all():
            if c.proc is not None and c.proc.returncode is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.proc.wait(), 5)
        self._stop_probes()
        self.finished = True

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ internals

    def _notify(self) -> None:
        self.owner.notify(self.key)

    def _event(self, type_: str, reason: str, message: str) -> None:
        """Queue an Event as the kubelet words it; the kubelet records it on its next sync."""
        if self.events and self.events[-1] == (type_, reason, message):
            return
        self.events.append((type_, reason, message))
        self._notify()

    def take_events(self) -> list[tuple[str, str, str]]:
        out, self.events = self.events, []
        return out

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _main(self) -> None:
        try:
            await self._prepare()
            for c in self.init:
                ok = await self._run_until_done(c)
                if not ok:
                    if not self.terminating:
                        self.init_failed = True
                        self.finished = True
                        self._notify()
                    return
            self.initialized = True
            self._notify()
            runs = [self._spawn(self._supervise(c)) for c in self.containers]
            await asyncio.gather(*runs, return_exceptions=True)
            if not self.terminating:
                self.finished = True
                self._stop_refresh()
                self._notify()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep the sandbox alive; report it on the pod
            log.exception("pod %s/%s: runtime failed", self.namespace, self.name)
            self.message = f"sandbox kubelet: {exc}"
            self._notify()

    # -- volumes

    def _ctx(self) -> podenv.PodContext:
        return podenv.PodContext(self.pod, self.ip, self.host_ip, self.owner.lookup(self.namespace))

    async def _prepare(self) -> None:
        (self.dir / ".logs").mkdir(parents=True, exist_ok=True)
        (self.dir / ".volumes").mkdir(parents=True, exist_ok=True)
        spec = self.pod.get("spec") or {}
        volumes = list(spec.get("volumes") or [])
        sa = self.owner.lookup(self.namespace)("serviceaccounts", str(spec.get("serviceAccountName") or "default"))
        implicit = podenv.service_account_volume(self.pod, sa)
        if implicit is not None:
            volumes.append(implicit)
        while True:
            try:
                await self._materialise(volumes)
                break
            except (podenv.ConfigError, TokenUnavailable) as exc:
                if self.message != f"MountVolume.SetUp failed: {exc}":
                    self._event("Warning", "FailedMount", f"MountVolume.SetUp failed: {exc}")
                self.message = f"MountVolume.SetUp failed: {exc}"
                for c in self.all():
                    c.state = {"waiting": {"reason": "ContainerCreating"}}
                self._notify()
                await asyncio.sleep(self.owner.options.config_retry)
        self.message = ""
        for c in self.all():
            mounts = [
                (str(m.get("mountPath") or ""), str(m.get("name") or ""), str(m.get("subPath") or ""))
                for m in c.spec.get("volumeMounts") or []
            ]
            if implicit is not None:
                mounts.append((podenv.SERVICEACCOUNT_PATH, implicit["name"], ""))
            read_only = {
                str(m.get("mountPath") or ""): bool(m.get("readOnly")) for m in c.spec.get("volumeMounts") or []
            }
            if implicit is not None:
                read_only[podenv.SERVICEACCOUNT_PATH] = True
            self.image_mounts[c.name] = []
            for path, vol, sub in mounts:
                source = self.volumes.get(vol)
                if not path.startswith("/") or source is None:
                    continue
                if c.name in self.images:
                    target = source / sub if sub else source
                    if sub and not target.exists():
                        target.mkdir(parents=True, exist_ok=True)  # as the kubelet makes a missing subPath
                    self.image_mounts[c.name].append(
                        {"source": str(target), "target": path, "readOnly": read_only.get(path, False),
                         "file": target.is_file()}
                    )  # fmt: skip
                link = self.dir / path.lstrip("/")
                target = source / sub if sub else source
                if link.is_symlink() or link.exists():
                    continue  # another container mounts it already (same volume, or first wins)
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(target)
            self.mounts[c.name] = [p for p, _, _ in mounts]
        if self.images:
            self._write_etc()
        self.sandbox_ready = True
        for c in self.all():
            if not c.init:
                c.state = {"waiting": {"reason": "PodInitializing" if self.init else "ContainerCreating"}}
        self._notify()
        if self._token_files:
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_tokens())

    async def _materialise(self, volumes: list[Obj]) -> None:
        self._volume_specs = volumes
        ctx = self._ctx()
        self._token_files = []
        pending: list[tuple[Obj, Obj]] = []

        def token(source: Obj) -> str:
            pending.append((source, {}))
            return ""  # filled in below: issuing may be asynchronous

        for vol in volumes:
            name = str(vol.get("name") or "")
            path = self.dir / ".volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            if self.images:
                own = imagespec.dir_ownership(self.pod, vol)
                os.chown(path, own.uid, own.gid)
                os.chmod(path, own.mode)
            self.volumes[name] = path
            pending.clear()
            files = podenv.volume_files(ctx, vol, token, self.owner.api.ca_pem)
            if files is None:
                continue
            for f in files:
                data = f.data
                is_token = False
                if pending and not data and f.path == str(pending[0][0].get("path") or "token"):
                    source = pending.pop(0)[0]
                    ttl = int(source.get("expirationSeconds") or 3607)
                    data = (await self.owner.issue_token(self.pod, source, ttl)).encode()
                    self._token_files.append((path / f.path, source, ttl))
                    is_token = True
                _write(path / f.path, data, f.mode, self._ownership(vol, f.mode, token=is_token))

    def _ownership(self, volume: Obj, mode: int, *, token: bool) -> imagespec.Ownership | None:
        """Image pods get the kubelet's owners and modes; process pods run as us and need none."""
        return imagespec.file_ownership(self.pod, volume, mode, token=token) if self.images else None

    def refresh(self, plural: str, name: str) -> None:
        """Secret or ConfigMap ``name`` changed: rewrite the files of the volumes made from it, as the
        kubelet's periodic sync does (here at once). Volumes with a token are left alone."""
        if not self.sandbox_ready:
            return
        ctx = self._ctx()
        for vol in self._volume_specs:
            sources = (vol.get("projected") or {}).get("sources") or [vol]
            if any("serviceAccountToken" in src for src in sources):
                continue
            if not any(_names(src, plural, name) for src in sources):
                continue
            try:
                files = podenv.volume_files(ctx, vol, lambda source: "", self.owner.api.ca_pem)
            except podenv.ConfigError:
                continue  # a kubelet keeps the last good files
            path = self.volumes.get(str(vol.get("name")))
            for f in files or []:
                if path is not None:
                    _write(path / f.path, f.data, f.mode, self._ownership(vol, f.mode, token=False))

    async def _refresh_tokens(self) -> None:
        while True:
            ttl = min(t for _, _, t in self._token_files)
            await asyncio.sleep(max(ttl * 0.8, 1.0))
            for file, source, ttl_s in self._token_files:
                try:
                    token = await self.owner.issue_token(self.pod, source, ttl_s)
                except Exception as exc:
                    log.warning("pod %s/%s: token refresh failed: %s", self.namespace, self.name, exc)
                    continue
                _write(file, token.encode(), file.stat().st_mode)

    def _stop_refresh(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None

    # -- containers

    def _kubelet_env(self) -> dict[str, str]:
        """What the kubelet gives every container, from an image or not: the API's service
        variables, the hostname, and the pod IP to bind (pods share this machine's network)."""
        api = urlparse(self.owner.api.url)
        host, port = api.hostname or "127.0.0.1", str(api.port or 443)
        proto = f"tcp://{host}:{port}"
        return {
            "HOSTNAME": self.name,
            "PYTHONUNBUFFERED": "1",
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": proto,
            "KUBERNETES_PORT_443_TCP": proto,
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_PORT": port,
            "KUBERNETES_PORT_443_TCP_ADDR": host,
            "GPUCLUSTER_BIND_ADDRESS": self.ip,
        }

    def _base_env(self, c: ContainerRun) -> dict[str, str]:
        """A process container's: this machine's PATH and locale, HOME the pod directory, mount
        paths remapped into it."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(self.dir),
            **self._kubelet_env(),
        }
        for name in ("LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR"):
            if name in os.environ:
                env[name] = os.environ[name]
        mounts = self.mounts.get(c.name, [])
        if podenv.SERVICEACCOUNT_PATH in [m.rstrip("/") for m in mounts]:
            env["GPUCLUSTER_SERVICEACCOUNT_DIR"] = str(self.dir) + podenv.SERVICEACCOUNT_PATH
        if "/tmp" in [m.rstrip("/") for m in mounts]:
            env["TMPDIR"] = str(self.dir / "tmp")
        return env

    def _write_etc(self) -> None:
        """The files the kubelet and runtime give every container: hosts, hostname, resolv.conf."""
        etc = self.dir / ".etc"
        hosts = f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{self.ip}\t{self.name}\n"
        _write(etc / "hosts", hosts.encode(), 0o644)
        _write(etc / "hostname", f"{self.name}\n".encode(), 0o644)
        try:
            resolv = Path("/etc/resolv.conf").read_bytes()
        except OSError:
            resolv = b""
        _write(etc / "resolv.conf", resolv, 0o644)

    def _image_env(self, c: ContainerRun, image: Image) -> dict[str, str]:
        """The image's environment under the kubelet's: no path remapping, real mount paths."""
        env = dict(image.env)
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        env.update(self._kubelet_env())
        env.setdefault("HOME", "/")
        return podenv.container_env(self._ctx(), c.spec, env, [x.spec for x in self.containers])

    def _launch_spec(self, c: ContainerRun, image: Image, argv: list[str], env: Mapping[str, str]) -> Obj:
        return imagespec.launch_spec(
            self.pod,
            c.spec,
            image,
            layers=self.dir / ".containers" / c.name,
            mounts=self.image_mounts.get(c.name, []),
            etc={name: str(self.dir / ".etc" / name) for name in ("hosts", "hostname", "resolv.conf")},
            argv=argv,
            env=env,
        )

    def _command(self, c: ContainerRun) -> tuple[list[str], dict[str, str], Path]:
        image = self.images.get(c.name)
        if image is not None:
            env = self._image_env(c, image)
            spec = self._launch_spec(c, image, imagespec.argv(c.spec, image.entrypoint, image.cmd, env), env)
            return container_launcher.command(spec), {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, self.dir
        store = self.owner.options.images
        ref = str(c.spec.get("image") or "")
        if store is not None and store.has_repository(ref):
            raise ImagePullError(
                f'failed to pull image "{ref}": not on this node, which holds {", ".join(store.references())}'
            )
        entry = podenv.entrypoint_for(
            str(c.spec.get("image") or ""), self.owner.options.entrypoints, self.owner.defaults
        )
        if entry is None:
            raise podenv.ConfigError(f"image {c.spec.get('image')!r} cannot run as a process")
        remap = podenv.remapper(self.dir, self.mounts.get(c.name, []))
        env = podenv.container_env(self._ctx(), c.spec, self._base_env(c), [x.spec for x in self.containers], remap)
        if entry.kubeconfig:
            env.setdefault("KUBECONFIG", str(self._kubeconfig(c)))
        argv = podenv.argv_for(c.spec, entry, env, remap)
        workdir = self.dir
        if c.spec.get("workingDir"):
            workdir = self.dir / str(c.spec["workingDir"]).lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        return argv, env, workdir

    def _kubeconfig(self, c: ContainerRun) -> Path:
        sa_dir = self.dir / podenv.SERVICEACCOUNT_PATH.lstrip("/")
        ca = sa_dir / "ca.crt"
        if not ca.exists():
            ca = self.dir / ".kube" / "ca.crt"
            _write(ca, self.owner.api.ca_pem.encode(), 0o644)
        user: Obj = {}
        if (sa_dir / "token").exists() and podenv.SERVICEACCOUNT_PATH in self.mounts.get(c.name, []):
            user = {"tokenFile": str(sa_dir / "token")}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "in-cluster", "cluster": {"server": self.owner.api.url, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": "pod", "user": user}],
            "contexts": [
                {"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "pod", "namespace": self.namespace}}
            ],
            "current-context": "in-cluster",
        }
        path = self.dir / ".kube" / f"{c.name}.kubeconfig"
        _write(path, yaml.safe_dump(config).encode(), 0o600)
        return path

    async def _start_process(self, c: ContainerRun) -> bool:
        """Start the container's process; False (state waiting, retried) when it cannot be configured."""
        try:
            argv, env, workdir = self._command(c)
        except podenv.ConfigError as exc:
            reason = "ErrImagePull" if isinstance(exc, ImagePullError) else "CreateContainerConfigError"
            if (c.state.get("waiting") or {}).get("message") != str(exc):
                self._event("Warning", "Failed", f"Error: {exc}" if reason != "ErrImagePull" else str(exc))
            c.state = {"waiting": {"reason": reason, "message": str(exc)}}
            self._notify()
            return False
        image = self.images.get(c.name)
        if image is not None:  # a fresh writable layer for every instance, as containerd gives
            layers = self.dir / ".containers" / c.name
            for part in ("upper", "work"):
                shutil.rmtree(layers / part, ignore_errors=True)
            for part in ("root", "upper", "work"):
                (layers / part).mkdir(parents=True, exist_ok=True)
            c.image_id = f"{image.repository}@{image.digest}"
        current, previous = self.log_path(c.name), self.log_path(c.name, previous=True)
        if current.exists():
            os.replace(current, previous)
        with open(current, "ab") as out:
            try:
                c.proc = await asyncio.create_subprocess_exec(
                    *argv,
                    env=env,
                    cwd=workdir,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_pdeathsig,
                )
            except OSError as exc:
                c.state = {
                    "waiting": {"reason": "RunContainerError", "message": f"exec: {argv[0]!r}: {exc.strerror or exc}"}
                }
                self._event("Warning", "Failed", f"Error: {c.state['waiting']['message']}")
                return False
        digest = hashlib.sha256(f"{self.uid}/{c.name}/{c.restart_count}/{c.proc.pid}".encode()).hexdigest()
        c.container_id = f"containerd://{digest}"
        c.state = {"running": {"startedAt": _now()}}
        c.exit_code = None
        c.killed_for = ""
        image = c.spec.get("image")
        self._event("Normal", "Pulled", f'Container image "{image}" already present on machine')
        self._event("Normal", "Created", f"Created container: {c.name}")
        self._event("Normal", "Started", f"Started container {c.name}")
        return True

    async def _run_until_done(self, c: ContainerRun) -> bool:
        """An init container: run to completion, restarted on failure unless restartPolicy is Never."""
        while not self.terminating:
            if not await self._start_process(c):
                await asyncio.sleep(self.owner.options.config_retry)
                continue
            self._notify()
            assert c.proc is not None
            code = await c.proc.wait()
            self._record_exit(c, code)
            if code == 0:
                c.ready = True
                self._notify()
                return True
            if self.terminating or self.restart_policy == "Never":
                self._notify()
                return False
            await self._back_off(c)
        return False

    async def _supervise(self, c: ContainerRun) -> None:
        while not self.terminating:
            if not await self._start_process(c):
                await asyncio.sleep(self.owner.options.config_retry)
                continue
            if self.terminating:  # the pod started stopping while this process was being started
                self._signal(c, signal.SIGKILL)
            self._start_probes(c)
            self._notify()
            assert c.proc is not None
            code = await c.proc.wait()
            self._stop_probes(c.name)
            self._record_exit(c, code)
            if self.terminating:
                return
            restart = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and code != 0)
            if not restart:
                self._notify()
                return
            await self._back_off(c)

    def _record_exit(self, c: ContainerRun, code: int) -> None:
        # The container's main process is gone: so is everything it started (its cgroup, on a node).
        if c.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGKILL)
        exit_code = 128 - code if code < 0 else code  # killed by a signal: 128 + signal
        started = (c.state.get("running") or {}).get("startedAt") or _now()
        reason = "Completed" if exit_code == 0 else "Error"
        terminated: Obj = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": _now(),
            "containerID": c.container_id,
        }
        c.state = {"terminated": terminated}
        c.exit_code = exit_code
        c.ready = False
        c.started = False
        c.proc = None
        c.deaths += 1

    async def _back_off(self, c: ContainerRun) -> None:
        """The kubelet's crash-loop back-off: the first restart at once, then base doubling to max."""
        opts = self.owner.options
        delay = 0.0 if c.deaths <= 1 else min(opts.backoff_base * 2 ** (c.deaths - 2), opts.backoff_max)
        c.last_state = dict(c.state)
        if delay > 0:
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {_duration(delay)} restarting failed container={c.name} "
                    f"pod={self.name}_{self.namespace}({self.uid})",
                }
            }
            self._event(
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {self.name}_{self.namespace}({self.uid})",
            )
            await asyncio.sleep(delay)
        c.restart_count += 1

    # -- probes

    def _start_probes(self, c: ContainerRun) -> None:
        spec = c.spec
        workers: list[ProbeWorker] = []
        startup, readiness, liveness = spec.get("startupProbe"), spec.get("readinessProbe"), spec.get("livenessProbe")
        c.started = startup is None
        c.ready = readiness is None and c.started

        def run_exec(command: list[str], timeout: float) -> Any:
            return self._exec(c, command, timeout)

        def failed(kind: str) -> Callable[[str], None]:
            return lambda message: self._event("Warning", "Unhealthy", f"{kind} probe failed: {message}")

        def after_startup() -> None:
            if readiness is not None:
                w = ProbeWorker(
                    "readiness", readiness, spec, self.ip, run_exec, on_ready, initial=False,
                    on_failure=failed("Readiness"),
                )  # fmt: skip
                workers.append(w)
                w.start()
            else:
                c.ready = True
            if liveness is not None:
                w = ProbeWorker(
                    "liveness", liveness, spec, self.ip, run_exec, on_live, initial=True, on_failure=failed("Liveness")
                )
                workers.append(w)
                w.start()

        def on_ready(result: ProbeResult) -> None:
            c.ready = result.success
            self._notify()

        def on_live(result: ProbeResult) -> None:
            if not result.success:
                self._kill_for(c, f"Container {c.name} failed liveness probe, will be restarted", liveness or {})

        def on_startup(result: ProbeResult) -> None:
            if result.success:
                c.started = True
                after_startup()
                self._notify()
            else:
                self._kill_for(c, f"Container {c.name} failed startup probe, will be restarted", startup or {})

        if startup is not None:
            w = ProbeWorker(
                "startup", startup, spec, self.ip, run_exec, on_startup, initial=False, on_failure=failed("Startup")
            )
            workers.append(w)
            w.start()
        else:
            after_startup()
        self._probes[c.name] = workers

    def _stop_probes(self, name: str | None = None) -> None:
        for key in [name] if name is not None else list(self._probes):
            for w in self._probes.pop(key, []):
                w.stop()

    def _kill_for(self, c: ContainerRun, why: str, probe: Obj) -> None:
        if c.proc is None or c.killed_for:
            return
        log.info("pod %s/%s: %s", self.namespace, self.name, why)
        self._event("Normal", "Killing", why)
        c.killed_for = why
        grace = probe.get("terminationGracePeriodSeconds")
        self._spawn(self._stop_container(c, float(grace if grace is not None else self.grace)))

    async def _exec(self, c: ContainerRun, command: list[str], timeout: float) -> int:
        _argv, env, workdir = self._command(c)
        image = self.images.get(c.name)
        if image is not None and c.proc is not None:  # into the running container's mount namespace
            inner = self._image_env(c, image)
            spec = {**self._launch_spec(c, image, list(command), inner), "join": c.proc.pid}
            command, env = container_launcher.command(spec), {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        entry = (
            None
            if image is not None
            else podenv.entrypoint_for(
                str(c.spec.get("image") or ""), self.owner.options.entrypoints, self.owner.defaults
            )
        )
        remap = podenv.remapper(self.dir, [] if image is not None else self.mounts.get(c.name, []))
        command = [remap(x) for x in command]
        if entry is not None and command and Path(command[0]).name == entry.name:
            command = [*entry.argv, *command[1:]]
        proc = await asyncio.create_subprocess_exec(
            *command,
            env=env,
            cwd=workdir,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_pdeathsig,
        )
        try:
            return await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise

    # -- stopping

    def _signal(self, c: ContainerRun, sig: int) -> None:
        if c.proc is not None and c.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, sig)

    async def _stop_container(self, c: ContainerRun, grace: float) -> None:
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        self._signal(c, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except TimeoutError:
            self._signal(c, signal.SIGKILL)

    async def _terminate(self, grace: float) -> None:
        self._stop_probes()
        self._stop_refresh()
        if self._task is not None and not self.initialized:
            self._task.cancel()  # still preparing or initialising: nothing more starts
        running = [c for c in self.all() if c.proc is not None and c.proc.returncode is None]
        for c in running:
            self._event("Normal", "Killing", f"Stopping container {c.name}")
        await asyncio.gather(*(self._stop_container(c, grace) for c in running), return_exceptions=True)
        for c in running:
            if c.proc is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(c.proc.wait(), 5)
        # Let the supervisors record the exits (an init container's was cancelled: record it here).
        for _ in range(100):
            if all(c.proc is None for c in running):
                break
            await asyncio.sleep(0.01)
        for c in running:
            if c.proc is not None and c.proc.returncode is not None:
                self._record_exit(c, c.proc.returncode)
        for c in self.all():
            if "terminated" not in c.state:
                # What the kubelet reports for a container that was not running when the pod stopped.
                c.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "startedAt": None,
                        "finishedAt": _now(),
                    }
                }
            c.ready = False
        self.finished = True
        self._notify()


def core_access(core: ApiCore) -> tuple[Lookup, TokenIssuer]:
    """The sandbox's store and token issuer as a kubelet's lookup and token issuer."""

    def lookup(namespace: str, plural: str, name: str) -> Obj | None:
        return core.store.get(("", plural), namespace, name)

    async def issue(pod: Obj, source: Obj, ttl: int) -> str:
        issue_token = getattr(getattr(core, "authn", None), "issue_service_account_token", None)
        if issue_token is None:
            raise TokenUnavailable("the sandbox issues no service-account tokens")
        md, spec = pod["metadata"], pod.get("spec") or {}
        audience = source.get("audience")
        result = issue_token(
            str(md["namespace"]),
            str(spec.get("serviceAccountName") or "default"),
            audiences=[str(audience)] if audience else None,
            expiration_seconds=ttl,
            bound_pod=pod,
        )
        if inspect.isawaitable(result):
            result = await result
        return str(result[0] if isinstance(result, tuple) else result)

    return lookup, issue


def _names(source: Obj, plural: str, name: str) -> bool:
    """Whether a volume (or projection) source is made from Secret/ConfigMap ``name``."""
    if plural == "secrets" and "secret" in source:
        spec = source["secret"]
        return name in (spec.get("secretName"), spec.get("name"))
    if plural == "configmaps" and "configMap" in source:
        return bool(source["configMap"].get("name") == name)
    return False


class TokenUnavailable(Exception):
    pass


class ImagePullError(podenv.ConfigError):
    """The pod names the project's repository under a tag this node's image store lacks."""


def _duration(seconds: float) -> str:
    """Go's time.Duration.String for whole and fractional seconds and minutes."""
    if seconds >= 60:
        minutes, rest = divmod(int(seconds), 60)
        return f"{minutes}m{rest}s"
    return f"{seconds:g}s"


Lookup = Callable[[str, str, str], "Obj | None"]
"""(namespace, plural, name) -> the object, from the kubelet's cache (None: not there)."""
TokenIssuer = Callable[[Obj, Obj, int], Awaitable[str]]
"""(pod, projected serviceAccountToken source, ttl seconds) -> a token bound to the pod."""


class ProcessRuntime:
    """Every process pod of a node agent: start, status, logs, stop.

    ``lookup`` and ``issue_token`` are the kubelet's view of the API: the sandbox's store and
    token issuer (:func:`core_access`), or a real API server's (``gpucluster.sandbox.controlplane.nodes``).
    """

    def __init__(self, lookup: Lookup, issue_token: TokenIssuer, options: RuntimeOptions | None = None) -> None:
        self._lookup = lookup
        self._issue_token = issue_token
        self.options = options or RuntimeOptions()
        self.defaults = podenv.default_entrypoints()
        self._own_root = self.options.root is None
        self._root = self.options.root
        self.api = ApiEndpoint("https://127.0.0.1:443", "")
        self.pods: dict[tuple[str, str], PodRuntime] = {}
        self.notify: Callable[[tuple[str, str]], None] = lambda key: None
        self._ips: dict[str, tuple[str, str]] = {}
        self._leaving: dict[str, PodRuntime] = {}  # uid -> pods gone from the API, still stopping
        self._background: set[asyncio.Task[None]] = set()
        self._next_ip = 0
        # Each sandbox draws its own /16 of the loopback range, so two sandboxes on one machine (or
        # a stale process of an earlier one) never hold the same pod address and port.
        self._ip_base = ipaddress.IPv4Address("127.0.0.0") + (1 + secrets.randbelow(254)) * 65536

    @property
    def root(self) -> Path:
        """The pods' directories' parent, created with the first process pod."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="gpucluster-sandbox-pods-"))
        return self._root

    def runs(self, pod: Obj) -> bool:
        store = self.options.images
        if store is not None:
            spec = pod.get("spec") or {}
            containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
            if containers and all(
                store.has_repository(str(c.get("image") or ""))
                or podenv.entrypoint_for(str(c.get("image") or ""), self.options.entrypoints, self.defaults)
                for c in containers
            ):
                return True
        return podenv.pod_runs_locally(pod, self.options.entrypoints, self.defaults)

    def lookup(self, namespace: str) -> Callable[[str, str], Obj | None]:
        def get(plural: str, name: str) -> Obj | None:
            return self._lookup(namespace, plural, name)

        return get

    async def issue_token(self, pod: Obj, source: Obj, ttl: int) -> str:
        try:
            return await self._issue_token(pod, source, ttl)
        except TokenUnavailable:
            raise
        except Exception as exc:  # an API error (no such ServiceAccount) or the issuer's own
            raise TokenUnavailable(str(getattr(exc, "message", None) or exc)) from None

    def allocate_ip(self, key: tuple[str, str]) -> str:
        used = {ip for ip, _ in self._ips.values()}
        while True:
            self._next_ip += 1
            # <base>.0.1 upwards, skipping .0 and .255 host parts (some tools refuse them).
            candidate = str(self._ip_base + self._next_ip)
            if candidate.endswith((".0", ".255")) or candidate in used:
                continue
            return candidate

    def start(self, pod: Obj, host_ip: str) -> PodRuntime:
        key = (str(pod["metadata"]["namespace"]), str(pod["metadata"]["name"]))
        ip = self.allocate_ip(key)
        self._ips[str(pod["metadata"].get("uid"))] = (ip, key[0])
        runtime = PodRuntime(self, pod, ip, host_ip)
        self.pods[key] = runtime
        runtime.start()
        return runtime

    def get(self, key: tuple[str, str]) -> PodRuntime | None:
        return self.pods.get(key)

    def object_changed(self, plural: str, namespace: str, name: str) -> None:
        for runtime in list(self.pods.values()):
            if runtime.namespace == namespace:
                runtime.refresh(plural, name)

    def log_file(self, namespace: str, name: str, container: str, *, previous: bool = False) -> LogFile | None:
        runtime = self.pods.get((namespace, name))
        c = runtime.container(container) if runtime is not None else None
        if runtime is None or c is None:
            return None
        path = runtime.log_path(container, previous=previous)
        if not path.exists():
            return None
        return LogFile(path, (lambda: False) if previous else (lambda: c.running))

    def forget(self, key: tuple[str, str]) -> None:
        """The pod is gone: stop what still runs (in the background) and remove its directory."""
        runtime = self.pods.pop(key, None)
        if runtime is None:
            return
        self._ips.pop(runtime.uid, None)
        self._leaving[runtime.uid] = runtime

        async def stop() -> None:
            if not runtime.finished:
                runtime.terminate()
                while not runtime.finished:
                    await asyncio.sleep(0.05)
            runtime.cleanup()
            self._leaving.pop(runtime.uid, None)

        task = asyncio.get_running_loop().create_task(stop())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        pods = [*self.pods.values(), *self._leaving.values()]
        self.pods, self._leaving = {}, {}
        await asyncio.gather(*(p.kill() for p in pods), return_exceptions=True)
        for p in pods:
            p.cleanup()
        if self._own_root and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


# --------------------------------------------------------------------------- status


def _condition(kind: str, ok: bool, now: str, previous: Mapping[str, Obj], reason: str = "", message: str = "") -> Obj:
    before = previous.get(kind)
    status = "True" if ok else "False"
    since = before.get("lastTransitionTime") if before and before.get("status") == status else now
    out: Obj = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if not ok and reason:
        out["reason"] = reason
        if message:
            out["message"] = message
    return out


def phase(runtime: PodRuntime) -> str:
    """The kubelet's getPhase over the runtime's containers."""
    if runtime.init_failed:
        return "Failed"
    if not runtime.initialized:
        return "Failed" if runtime.finished else "Pending"
    states = [c.state for c in runtime.containers]
    codes = [t.get("exitCode") for s in states if (t := s.get("terminated")) is not None]
    if runtime.finished and len(codes) == len(states):
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
    if any("running" in s for s in states):
        return "Running"
    if any(c.restart_count or c.deaths for c in runtime.containers):
        return "Running"  # waiting to restart
    return "Pending"


def pod_status(pod: Obj, runtime: PodRuntime, now: str, image_id: Callable[[str], str]) -> Obj:
    """The status the kubelet reports for a process pod."""
    status = dict(pod.get("status") or {})
    previous = {str(c.get("type")): c for c in status.get("conditions") or []}
    current = phase(runtime)
    terminal = current in ("Succeeded", "Failed")

    def container_status(c: ContainerRun) -> Obj:
        image = str(c.spec.get("image") or "")
        out: Obj = {
            "name": c.name,
            "image": image,
            "imageID": (c.image_id or image_id(image)) if c.container_id else "",
            "restartCount": c.restart_count,
            "ready": c.ready and not terminal,
            "started": c.started and c.running,
            "state": c.state,
            "lastState": c.last_state,
        }
        if c.container_id:
            out["containerID"] = c.container_id
        if c.init:
            out["started"] = c.running
        return out

    unready = [c.name for c in runtime.containers if not (c.ready and not terminal)]
    incomplete = [c.name for c in runtime.init if "terminated" not in c.state or c.state["terminated"].get("exitCode")]
    ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    ready_message = "" if terminal else f"containers with unready status: [{' '.join(unready)}]"
    scheduled = previous.get("PodScheduled") or {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    conditions = [
        _condition("PodReadyToStartContainers", runtime.sandbox_ready and not runtime.finished, now, previous),
        _condition(
            "Initialized",
            runtime.initialized,
            now,
            previous,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(incomplete)}]",
        ),
        _condition("Ready", not unready, now, previous, ready_reason, ready_message),
        _condition("ContainersReady", not unready, now, previous, ready_reason, ready_message),
        scheduled,
    ]
    status.update(
        phase=current,
        conditions=conditions,
        hostIP=runtime.host_ip,
        hostIPs=[{"ip": runtime.host_ip}],
        podIP=runtime.ip,
        podIPs=[{"ip": runtime.ip}],
        startTime=status.get("startTime") or now,
        containerStatuses=[container_status(c) for c in runtime.containers],
    )
    if runtime.init:
        status["initContainerStatuses"] = [container_status(c) for c in runtime.init]
    if runtime.message:
        status["message"] = runtime.message
    else:
        status.pop("message", None)
    status.pop("reason", None)
    return status
