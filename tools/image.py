"""Builds the operator image from the repo's Dockerfile with buildah: no container engine, no
registry and no network inside the build.

1. ``wheels``: ``pip wheel`` on the host fills ``dist/wheels`` with the project's wheel and its
   dependencies (the build cannot reach the package index; air-gapped users want that anyway).
2. ``base``: a Debian bookworm root filesystem from mmdebstrap (python3, python3-venv,
   ca-certificates; no documentation), cached under ``~/.cache/gpucluster/image/`` and imported into
   buildah's storage as ``localhost/gpucluster-base:bookworm``.
3. ``buildah bud --isolation chroot`` of the Dockerfile over that base, with the timestamps of
   the commit (``--timestamp``), the version and the revision as build arguments, tagged as the
   chart's default ``repository/image:appVersion``; ``buildah push`` writes it as an OCI archive,
   ``dist/gpucluster-image.tar``, with gzip-compressed layers as a registry would hold them.

``dist/gpucluster-image.json`` records what was built: the reference, the digests, the sizes and
the digest of the sources it was built from. A second ``make image`` over the same sources is a
no-op. ``python -m tools.image build|push REGISTRY|status``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
WHEELS = DIST / "wheels"
ARCHIVE = DIST / "gpucluster-image.tar"
RECORD = DIST / "gpucluster-image.json"
CHART = ROOT / "charts" / "gpucluster"

BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_TAG = f"localhost/gpucluster-base:{BASE_SUITE}"
# Nothing in the image reads documentation, manuals or translations.
BASE_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
# What the wheel is made of: a change to any of these makes a new image.
SOURCES = ("gpucluster", "cli", "webhook", "controller", "certs", "sandbox", "charts/gpucluster")
SOURCE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "Dockerfile", ".dockerignore")
TOOLS = ("buildah", "mmdebstrap")


class ImageError(Exception):
    """The image cannot be built here: the message says why and what to do."""


@dataclass(frozen=True)
class Reference:
    repository: str
    image: str
    tag: str

    def __str__(self) -> str:
        return f"{self.repository}/{self.image}:{self.tag}"


def chart_reference() -> Reference:
    """The chart's default ``operator.repository/image:version`` (``version`` empty: appVersion)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return Reference(str(values["repository"]), str(values["image"]), str(values["version"] or chart["appVersion"]))


def project_version() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def _files(root: Path) -> Iterator[Path]:
    for top in SOURCES:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                yield path
    for name in SOURCE_FILES:
        if (root / name).is_file():
            yield root / name


def source_digest(root: Path = ROOT) -> str:
    """The digest of everything the image is built from (the working tree, committed or not)."""
    digest = hashlib.sha256()
    for path in _files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + digest.hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpucluster" / "image"


def _run(argv: Sequence[str], *, what: str, timeout: float = 1800, **kw: Any) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, **kw)
    except FileNotFoundError as exc:
        raise ImageError(f"{what}: {argv[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageError(f"{what}: timed out after {timeout:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise ImageError(f"{what} failed ({' '.join(argv[:3])} ... exit {done.returncode}):\n{tail}")
    return done


def ensure_tools() -> None:
    """buildah and mmdebstrap, installed from Debian's packages when missing and we may."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(
            f"make image needs {' and '.join(missing)}: install them (Debian/Ubuntu: apt-get install "
            f"{' '.join(missing)}), or build with Docker: make wheels && docker build ."
        )
    print(f"make image: installing {' '.join(missing)} from the distribution's packages", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", *missing]
    if not _run_ok(install, env=env):
        _run(["apt-get", "update", "-qq"], what="apt-get update", env=env)
        _run(install, what="apt-get install", env=env)


def _run_ok(argv: Sequence[str], **kw: Any) -> bool:
    return subprocess.run(list(argv), capture_output=True, check=False, **kw).returncode == 0


def build_wheels(python: str = sys.executable) -> list[Path]:
    """The project's wheel and its dependencies' into dist/wheels (replacing what was there)."""
    shutil.rmtree(WHEELS, ignore_errors=True)
    WHEELS.mkdir(parents=True)
    _run([python, "-m", "pip", "wheel", "-q", "--wheel-dir", str(WHEELS), str(ROOT)], what="pip wheel")
    return sorted(WHEELS.glob("*.whl"))


def commit_epoch() -> int:
    """The commit's time, the timestamp of every file and of the image (SOURCE_DATE_EPOCH wins)."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        return int(os.environ["SOURCE_DATE_EPOCH"])
    done = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


def revision() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    head = done.stdout.strip() if done.returncode == 0 else "unknown"
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)  # fmt: skip
    return head + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def base_image(epoch: int) -> str:
    """The Debian base in buildah's storage (built with mmdebstrap once, then cached)."""
    key = hashlib.sha256(f"{BASE_SUITE}\n{BASE_PACKAGES}\n{BASE_EXCLUDES}".encode()).hexdigest()[:16]
    tar = cache_dir() / f"base-{BASE_SUITE}-{key}.tar"
    tag = f"{BASE_TAG}-{key}"
    if _run_ok(["buildah", "inspect", "--type", "image", tag]):
        return tag
    if not tar.exists():
        tar.parent.mkdir(parents=True, exist_ok=True)
        partial = tar.with_suffix(".partial")
        argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "--quiet"]
        argv += [f"--dpkgopt=path-exclude={p}" for p in BASE_EXCLUDES]
        argv += ["--dpkgopt=path-include=/usr/share/doc/*/copyright"]  # licences stay, as Debian asks
        # The apt lists are the mirror's state, not the image's: they go, so do apt's caches.
        argv += ["--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/* $1/var/log/*"]
        argv += [BASE_SUITE, str(partial)]
        started = time.monotonic()
        _run(argv, what="mmdebstrap", env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)})
        partial.rename(tar)
        print(f"make image: Debian {BASE_SUITE} base built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    ctr = _run(["buildah", "from", "scratch"], what="buildah from").stdout.strip()
    try:
        _run(["buildah", "add", ctr, str(tar), "/"], what="buildah add")
        _run(["buildah", "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              ctr], what="buildah config")  # fmt: skip
        _run(["buildah", "commit", "--quiet", "--timestamp", str(epoch), ctr, tag], what="buildah commit")
    finally:
        _run_ok(["buildah", "rm", ctr])
    return tag


def _archive_facts(archive: Path) -> dict[str, Any]:
    """Digests and sizes read back from the OCI archive itself (the node's own reader)."""
    from gpucluster.sandbox.sim.images import blob, manifests

    with tarfile.open(archive) as tar:
        (tagged,) = manifests(tar)
        layers = tagged.manifest["layers"]
        unpacked = 0
        for layer in layers:
            with gzip.open(blob(tar, layer["digest"])) as g:
                while chunk := g.read(1 << 20):
                    unpacked += len(chunk)
    run = tagged.config.get("config", {})
    return {
        "manifest": tagged.digest,
        "config": tagged.manifest["config"]["digest"],
        "layers": [layer["digest"] for layer in layers],
        "compressed_bytes": sum(int(layer["size"]) for layer in layers),
        "unpacked_bytes": unpacked,
        "user": run.get("User"),
        "labels": run.get("Labels") or {},
    }


def recorded() -> dict[str, Any] | None:
    try:
        record = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and ARCHIVE.exists() else None


def _is_current(record: dict[str, Any]) -> bool:
    """Built from the sources as they are, at this revision (its label must say the truth)."""
    return record.get("source_digest") == source_digest() and record.get("revision") == revision()


def current() -> dict[str, Any] | None:
    """What ``make image`` built, when it was built from the sources as they are now."""
    record = recorded()
    return record if record is not None and _is_current(record) else None


def build(*, force: bool = False) -> dict[str, Any]:
    digest = source_digest()
    record = recorded()
    if not force and record is not None and _is_current(record):
        print(f"make image: {record['reference']} is current ({ARCHIVE.relative_to(ROOT)})", file=sys.stderr)
        return record
    ensure_tools()
    started = time.monotonic()
    epoch = commit_epoch()
    ref = chart_reference()
    wheels = build_wheels()
    t_wheels = time.monotonic() - started
    base = base_image(epoch)
    t_base = time.monotonic() - started - t_wheels
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    argv = ["buildah", "bud", "--quiet", "--isolation", "chroot", "--layers=false", "--timestamp", str(epoch)]
    argv += ["--build-arg", f"BASE={base}", "--build-arg", f"VERSION={project_version()}"]
    rev = revision()
    argv += ["--build-arg", f"REVISION={rev}", "--build-arg", f"CREATED={created}"]
    argv += ["--label", f"io.gpucluster.source-digest={digest}", "--tag", str(ref), "--file", "Dockerfile", "."]
    _run(argv, what="buildah bud", cwd=ROOT)
    t_bud = time.monotonic() - started - t_wheels - t_base
    partial = ARCHIVE.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _run(["buildah", "push", "--quiet", "--compression-format", "gzip", "--format", "oci", str(ref),
          f"oci-archive:{partial}:{ref}"], what="buildah push")  # fmt: skip
    partial.rename(ARCHIVE)
    _run_ok(["buildah", "rmi", "--prune"])  # the previous build, untagged by this one
    facts = _archive_facts(ARCHIVE)
    record = {
        "reference": str(ref),
        "source_digest": digest,
        "revision": rev,
        "archive": str(ARCHIVE.relative_to(ROOT)),
        "base": base,
        "wheels": len(wheels),
        "seconds": {
            "wheels": round(t_wheels, 1),
            "base": round(t_base, 1),
            "build": round(t_bud, 1),
            "total": round(time.monotonic() - started, 1),
        },
        **facts,
    }
    RECORD.write_text(json.dumps(record, indent=2) + "\n")
    mib = 1 << 20
    print(
        f"make image: {ref} built in {record['seconds']['total']:.0f} s: {facts['compressed_bytes'] / mib:.0f} MiB "
        f"compressed, {facts['unpacked_bytes'] / mib:.0f} MiB unpacked -> {ARCHIVE.relative_to(ROOT)}",
        file=sys.stderr,
    )
    return record


def push(registry: str, *, tls_verify: bool = True) -> str:
    """Push the built image to ``registry`` (``host[:port][/path]``) under the same image:tag."""
    record = current()
    if record is None:
        raise ImageError("no current image: run `make image` first")
    ref = chart_reference()
    target = f"{registry.rstrip('/')}/{ref.image}:{ref.tag}"
    _run(["buildah", "push", f"--tls-verify={str(tls_verify).lower()}", f"oci-archive:{ARCHIVE}", f"docker://{target}"],
         what="buildah push")  # fmt: skip
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.image", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image (a no-op when the sources have not changed)")
    b.add_argument("--force", action="store_true", help="build even when the archive is current")
    sub.add_parser("wheels", help="only fill dist/wheels (for docker build)")
    p = sub.add_parser("push", help="push the built image to a registry")
    p.add_argument("registry", help="host[:port][/path]; the image keeps its name and tag")
    p.add_argument("--tls-verify", default="true", choices=["true", "false"])
    sub.add_parser("status", help="say whether dist/gpucluster-image.tar is current")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(force=args.force)
        elif args.command == "wheels":
            print(f"{len(build_wheels())} wheels in {WHEELS.relative_to(ROOT)}")
        elif args.command == "push":
            print(push(args.registry, tls_verify=args.tls_verify == "true"))
        else:
            record = current()
            print(f"{record['reference']} current" if record else "no current image (run `make image`)")
            return 0 if record else 1
    except ImageError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
