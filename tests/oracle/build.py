"""Builds the oracle program with the go command, once per Kubernetes minor version, into a cache.

One source directory serves every version: ``go.<minor>.mod`` (``go.mod`` for the newest) pins
the modules, and the build tag ``k8s1_<minor>`` picks the file that fills that version's feature
structs the way its kube-scheduler does. Only the go command and the Go module proxy are used.
The binaries land in ``~/.cache/gpucluster/oracle/<minor>/`` (``$GPUCLUSTER_KUBE_CACHE``'s
sibling ``oracle`` when that is set); a stamp of the sources and the Go version makes a second
build a no-op. ``python -m tests.oracle.build [MINOR...]`` builds them (``make oracle``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from gpucluster.sandbox.controlplane.build import BuildError, cache_root, go_command, go_version

SOURCE = Path(__file__).resolve().parent

# minor -> the k8s.io/dynamic-resource-allocation release linked (newest patch served when pinned).
VERSIONS: Mapping[str, str] = {"1.34": "v0.34.13", "1.35": "v0.35.10", "1.36": "v0.36.6", "1.37": "v0.37.2"}
NEWEST = "1.37"


def modfile(minor: str) -> str:
    return "go.mod" if minor == NEWEST else f"go.{minor}.mod"


def binary_dir(minor: str) -> Path:
    return cache_root().parent / "oracle" / minor


def _stamp(minor: str, go_text: str) -> str:
    digest = hashlib.sha256(f"{minor}\n{go_text}\n".encode())
    for path in sorted(SOURCE.iterdir()):
        if path.suffix in {".go", ".mod", ".sum"}:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cached(minor: str) -> Path | None:
    """The built oracle of ``minor`` if it is up to date (the stamp needs Go to check; without Go
    a built binary is taken as it is)."""
    path = binary_dir(minor) / "oracle"
    if not os.access(path, os.X_OK):
        return None
    stamp = binary_dir(minor) / ".stamp"
    go = shutil.which("go")
    if go is not None and (not stamp.exists() or stamp.read_text() != _stamp(minor, go_version(go))):
        return None
    return path


def build(minor: str, *, say: Callable[[str], None] | None = None) -> Path:
    tell = say or (lambda line: print(line, file=sys.stderr, flush=True))
    if minor not in VERSIONS:
        raise BuildError(f"no oracle for Kubernetes {minor}; one of {', '.join(VERSIONS)}")
    go = go_command()
    go_text = go_version(go)
    directory = binary_dir(minor)
    directory.mkdir(parents=True, exist_ok=True)
    expected = _stamp(minor, go_text)
    stamp = directory / ".stamp"
    target = directory / "oracle"
    if stamp.exists() and stamp.read_text() == expected and os.access(target, os.X_OK):
        tell(f"DRA oracle {minor} ({VERSIONS[minor]}) is up to date in {directory}")
        return target
    started = time.monotonic()
    tell(f"building the DRA oracle {minor} against k8s.io/dynamic-resource-allocation {VERSIONS[minor]} ({go_text})")
    env = {
        **os.environ,
        "GOFLAGS": f"-modfile={modfile(minor)} -mod=readonly -trimpath -buildvcs=false",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }
    command = [
        go,
        "build",
        f"-tags=k8s1_{minor.split('.')[1]}",
        "-ldflags=-s -w",
        "-o",
        str(directory / "oracle.new"),
        ".",
    ]
    result = subprocess.run(command, cwd=SOURCE, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise BuildError(f"go build of the DRA oracle {minor} failed (exit {result.returncode}):\n{detail}")
    (directory / "oracle.new").replace(target)
    stamp.write_text(expected)
    tell(f"      oracle {minor}: {time.monotonic() - started:.0f} s")
    return target


def require(minor: str) -> Path:
    """The oracle of ``minor``, built if Go is here; skipped with one line where Go is absent,
    which fails under CI=true."""
    found = cached(minor)
    if found is not None:
        return found
    if shutil.which("go") is None:
        reason = f"DRA oracle {minor}: Go is not installed (install Go >= 1.24, then `make oracle`)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason + "; CI=true never skips this tier")
        pytest.skip(reason)
    try:
        return build(minor)
    except BuildError as exc:
        pytest.fail(str(exc))


def main(argv: list[str]) -> int:
    try:
        for minor in argv or list(VERSIONS):
            build(minor)
    except BuildError as exc:
        print(f"make oracle: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
