"""Builds Kubernetes' own control plane from Go modules with the go command, into a cache.

Each Kubernetes version has a small tools module in ``modules/kube-<minor>`` that requires the
published ``k8s.io/kubernetes`` module and replaces its staging modules (which it points at
``./staging``) with their published ``v0.<minor>.<patch>``; etcd has its own module
(``modules/etcd``) around ``go.etcd.io/etcd/server/v3``'s ``etcdmain``. Nothing is downloaded but
modules from the Go module proxy, and no prebuilt binary is used.

The binaries land in ``~/.cache/gpucluster/kube/<version>/`` (``$GPUCLUSTER_KUBE_CACHE``
overrides the parent). A stamp of the module files, the Go version and the link flags makes a
second build a no-op. The go command compiles into a build cache of its own beside them
(``<cache>/.gocache``, 3 GB a version), removed once the binaries are built: what stays is the
binaries (about 300 MB a version) and the Go module cache. As controller-runtime's envtest does, ``$KUBEBUILDER_ASSETS`` may name a
directory holding ``kube-apiserver`` and ``etcd``; those two are then taken from it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "modules"

# minor -> the patch release built (the newest of that minor the module proxy served when pinned).
VERSIONS: Mapping[str, str] = {"1.34": "1.34.4", "1.37": "1.37.2"}
DEFAULT_VERSION = "1.34"
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
BINARIES = ("etcd", *KUBE_COMMANDS)
GO_MINIMUM = (1, 24)
ASSETS_ENV = "KUBEBUILDER_ASSETS"
CACHE_ENV = "GPUCLUSTER_KUBE_CACHE"


class BuildError(Exception):
    """The control plane cannot be built here (no Go, a failed go build); the message says why."""


@dataclass(frozen=True)
class Binaries:
    version: str
    """The full Kubernetes version, ``1.34.4``."""
    directory: Path
    paths: Mapping[str, Path]

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]


def resolve_version(version: str) -> str:
    """``1.34``, ``v1.34`` or ``1.34.4`` -> ``1.34.4``; anything not pinned is a BuildError."""
    text = version.removeprefix("v")
    minor = ".".join(text.split(".")[:2])
    full = VERSIONS.get(minor)
    if full is None or (text.count(".") == 2 and text != full):
        known = ", ".join(f"{m} ({v})" for m, v in VERSIONS.items())
        raise BuildError(f"Kubernetes {version} is not pinned here; choose one of {known}")
    return full


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path.home() / ".cache" / "gpucluster" / "kube"


def go_command() -> str:
    found = shutil.which("go")
    if found is None:
        raise BuildError(
            "the go command is not installed; the real control plane is built from Go modules "
            f"(Go >= {GO_MINIMUM[0]}.{GO_MINIMUM[1]}): install Go, then run `make kube`"
        )
    return found


def go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    text = out.stdout.strip()
    parts = text.removeprefix("go").split(".")
    try:
        found = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise BuildError(f"cannot tell the Go version from `go env GOVERSION`: {text or out.stderr.strip()}") from None
    if found < GO_MINIMUM:
        raise BuildError(f"{text} is too old: Kubernetes needs Go >= {GO_MINIMUM[0]}.{GO_MINIMUM[1]}")
    return text


def ldflags(full: str) -> str:
    """The version stamp Kubernetes' own build writes (hack/lib/version.sh): without it the binaries
    report v0.0.0 and clients that check the server version (Helm's kubeVersion) refuse them."""
    major, minor, _ = full.split(".")
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for key, value in (("gitVersion", f"v{full}"), ("gitMajor", major), ("gitMinor", minor)):
            flags.append(f"-X {package}.{key}={value}")
        flags.append(f"-X {package}.gitTreeState=clean")
    return " ".join(flags)


def _module_dirs(full: str) -> dict[str, Path]:
    minor = ".".join(full.split(".")[:2])
    return {"etcd": MODULES / "etcd", "kube": MODULES / f"kube-{minor}"}


def stamp(full: str, go_text: str) -> str:
    digest = hashlib.sha256(f"{full}\n{go_text}\n{ldflags(full)}\n".encode())
    for directory in _module_dirs(full).values():
        for path in sorted(directory.iterdir()):
            if path.is_file():
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _assets() -> dict[str, Path]:
    directory = os.environ.get(ASSETS_ENV)
    if not directory:
        return {}
    found = {name: Path(directory) / name for name in ("kube-apiserver", "etcd")}
    return {name: path for name, path in found.items() if os.access(path, os.X_OK)}


def cached(version: str = DEFAULT_VERSION) -> Binaries | None:
    """The binaries if they are built (or supplied by KUBEBUILDER_ASSETS), without building."""
    full = resolve_version(version)
    directory = cache_root() / full
    paths = {name: directory / name for name in BINARIES} | _assets()
    if not all(os.access(p, os.X_OK) for p in paths.values()):
        return None
    return Binaries(full, directory, paths)


def build(version: str = DEFAULT_VERSION, *, say: Callable[[str], None] | None = None) -> Binaries:
    """Build (or find up to date) the control plane of ``version``; ``say`` gets progress lines."""
    tell = say or (lambda line: print(line, file=sys.stderr, flush=True))
    full = resolve_version(version)
    go = go_command()
    go_text = go_version(go)
    directory = cache_root() / full
    directory.mkdir(parents=True, exist_ok=True)
    expected = stamp(full, go_text)
    stamp_file = directory / ".stamp"
    assets = _assets()
    if assets:
        tell(f"{ASSETS_ENV}: using {', '.join(sorted(assets))} from {os.environ[ASSETS_ENV]}")
    wanted = [name for name in BINARIES if name not in assets]
    current = stamp_file.exists() and stamp_file.read_text() == expected
    missing = [name for name in wanted if not current or not os.access(directory / name, os.X_OK)]
    if not missing:
        tell(f"Kubernetes {full} control plane is up to date in {directory}")
    modules = _module_dirs(full)
    gocache = cache_root() / ".gocache"
    env = {
        **os.environ,
        "GOFLAGS": "-mod=readonly -trimpath -buildvcs=false",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
        "GOCACHE": str(gocache),
    }
    for index, name in enumerate(missing, 1):
        started = time.monotonic()
        label = name if name == "etcd" else f"{name} {full}"
        tell(f"[{index}/{len(missing)}] building {label} with {go_text}")
        if name == "etcd":
            command = [go, "build", "-ldflags=-s -w", "-o", str(directory / "etcd.new"), "."]
            cwd = modules["etcd"]
        else:
            command = [
                go, "build", f"-ldflags={ldflags(full)}", "-o", str(directory / f"{name}.new"),
                f"k8s.io/kubernetes/cmd/{name}",
            ]  # fmt: skip
            cwd = modules["kube"]
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            detail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise BuildError(f"go build of {name} failed (exit {result.returncode}):\n{detail}")
        (directory / f"{name}.new").replace(directory / name)
        tell(f"      {name}: {time.monotonic() - started:.0f} s")
    stamp_file.write_text(expected)
    shutil.rmtree(gocache, ignore_errors=True)
    return Binaries(full, directory, {name: directory / name for name in BINARIES} | assets)
