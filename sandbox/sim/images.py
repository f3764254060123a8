"""The node's image store: OCI image archives (``make image``'s ``dist/gpucluster-image.tar``, or
any ``buildah push ... oci-archive:``) unpacked once into root filesystems the process kubelet
runs containers from (``container.py``), as containerd's snapshotter would.

An archive holds an ``index.json`` naming its manifests (``org.opencontainers.image.ref.name``
is the tag), each with a config (entrypoint, cmd, env, user, working directory, labels) and gzip
layers applied in order, whiteouts included. Unpacked trees are cached by manifest digest under
``~/.cache/gpucluster/images/`` (``$GPUCLUSTER_IMAGE_CACHE``), so a second sandbox starts at once.
Unpacking needs root: files keep their owners and modes, as in the image. The newest three
unpacked images are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import os
import shutil
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

Obj = dict[str, Any]

REF_NAME = "org.opencontainers.image.ref.name"


class ImageError(Exception):
    """An archive that cannot be read or unpacked: the message names it and why."""


def normalize(reference: str) -> str:
    """A reference as a container runtime resolves it: ``busybox`` -> ``docker.io/library/busybox:latest``."""
    name, at, digest = reference.partition("@")
    head, _, last = name.rpartition("/")
    tag = ""
    if ":" in last:
        last, tag = last.split(":", 1)
    parts = [p for p in (head.split("/") if head else []) if p] + [last]
    if len(parts) == 1 or ("." not in parts[0] and ":" not in parts[0] and parts[0] != "localhost"):
        parts = ["docker.io", *(["library"] if len(parts) == 1 else []), *parts]
    out = "/".join(parts)
    if at:
        return f"{out}@{digest}"
    return f"{out}:{tag or 'latest'}"


@dataclass(frozen=True)
class Image:
    """One unpacked image: its root filesystem and the run configuration from its config."""

    reference: str
    digest: str
    rootfs: Path
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    user: str = ""
    workdir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def repository(self) -> str:
        return self.reference.rsplit(":", 1)[0]


def cache_root() -> Path:
    override = os.environ.get("GPUCLUSTER_IMAGE_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpucluster" / "images"


class ImageStore:
    """The images of some archives, by normalized reference (and by ``repo@digest``)."""

    def __init__(self, archives: Sequence[Path], cache: Path | None = None) -> None:
        self.cache = cache or cache_root()
        self.images: dict[str, Image] = {}
        for archive in archives:
            for image in load_archive(Path(archive), self.cache):
                self.images[image.reference] = image
                self.images[f"{image.repository}@{image.digest}"] = image

    def __bool__(self) -> bool:
        return bool(self.images)

    def get(self, reference: str) -> Image | None:
        return self.images.get(normalize(reference))

    def repositories(self) -> set[str]:
        return {i.repository for i in self.images.values()}

    def has_repository(self, reference: str) -> bool:
        """Whether some image here is ``reference``'s repository (under any tag)."""
        norm = normalize(reference)
        repository = norm.split("@")[0] if "@" in norm else norm.rsplit(":", 1)[0]
        return repository in self.repositories()

    def references(self) -> list[str]:
        return sorted({i.reference for i in self.images.values()})


def _member(tar: tarfile.TarFile, name: str, what: str) -> IO[bytes]:
    try:
        f = tar.extractfile(name)
    except KeyError:
        f = None
    if f is None:
        raise ImageError(f"{tar.name!s}: {what} is missing")
    return f


def blob(tar: tarfile.TarFile, digest: str) -> IO[bytes]:
    """The content an OCI archive holds under ``digest`` (``sha256:...``)."""
    algorithm, _, hexdigest = digest.partition(":")
    return _member(tar, f"blobs/{algorithm}/{hexdigest}", f"blob {digest}")


@dataclass(frozen=True)
class Manifest:
    """One tagged image of an archive, as its index names it."""

    reference: str
    """As tagged (``org.opencontainers.image.ref.name``), not normalized."""
    digest: str
    manifest: Obj
    config: Obj


def manifests(tar: tarfile.TarFile) -> list[Manifest]:
    """The tagged images of an open OCI archive (index.json, then each manifest and config)."""
    index = json.load(_member(tar, "index.json", "index.json"))
    out = []
    for desc in index.get("manifests") or []:
        ref = (desc.get("annotations") or {}).get(REF_NAME)
        if not ref:
            continue
        digest = str(desc["digest"])
        manifest = json.load(blob(tar, digest))
        out.append(Manifest(str(ref), digest, manifest, json.load(blob(tar, manifest["config"]["digest"]))))
    return out


def load_archive(archive: Path, cache: Path) -> list[Image]:
    """Every tagged manifest of an OCI archive, unpacked (or found in the cache)."""
    if not archive.is_file():
        raise ImageError(f"{archive}: no such image archive (build it with `make image`)")
    try:
        with tarfile.open(archive) as tar:
            return _images(tar, archive, cache)
    except tarfile.ReadError:
        raise ImageError(
            f"{archive}: not a tar archive (an OCI image archive is what `buildah push IMAGE oci-archive:FILE` writes)"
        ) from None
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise ImageError(f"{archive}: not a readable OCI image archive: {exc}") from exc


def _images(tar: tarfile.TarFile, archive: Path, cache: Path) -> list[Image]:
    out = []
    for tagged in manifests(tar):
        rootfs = _unpack(tar, tagged.digest, tagged.manifest, cache)
        run = tagged.config.get("config") or {}
        env = []
        for item in run.get("Env") or []:
            key, _, value = str(item).partition("=")
            env.append((key, value))
        out.append(
            Image(
                reference=normalize(tagged.reference),
                digest=tagged.digest,
                rootfs=rootfs,
                entrypoint=tuple(run.get("Entrypoint") or ()),
                cmd=tuple(run.get("Cmd") or ()),
                env=tuple(env),
                user=str(run.get("User") or ""),
                workdir=str(run.get("WorkingDir") or "/"),
                labels=dict(run.get("Labels") or {}),
            )
        )
    if not out:
        raise ImageError(f"{archive}: no tagged image in index.json")
    return out


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _unpack(tar: tarfile.TarFile, digest: str, manifest: Obj, cache: Path) -> Path:
    target = cache / digest.replace(":", "-")
    rootfs = target / "rootfs"
    if (target / ".complete").exists():
        return rootfs
    if os.geteuid() != 0:
        raise ImageError("unpacking an image keeps its files' owners: it needs root")
    with _locked(cache / ".lock"):
        if (target / ".complete").exists():
            return rootfs
        shutil.rmtree(target, ignore_errors=True)
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        (partial / "rootfs").mkdir(parents=True)
        for layer in manifest.get("layers") or []:
            media = str(layer.get("mediaType") or "")
            stream = blob(tar, str(layer["digest"]))
            fileobj: IO[bytes] = stream
            if "gzip" in media:
                fileobj = gzip.GzipFile(fileobj=stream)  # type: ignore[assignment]
            with tarfile.open(fileobj=fileobj, mode="r|") as layer_tar:
                apply_layer(layer_tar, partial / "rootfs")
        (partial / ".complete").write_text(digest + "\n")
        partial.rename(target)
        _prune(cache, keep=target)
    return rootfs


KEEP_UNPACKED = 3


def _prune(cache: Path, keep: Path) -> None:
    """Each rebuild of an image is a new digest: keep the newest few unpacked, not every one."""
    unpacked = sorted(
        (d for d in cache.iterdir() if d.is_dir() and (d / ".complete").exists() and d != keep),
        key=lambda d: (d / ".complete").stat().st_mtime,
        reverse=True,
    )
    for old in unpacked[KEEP_UNPACKED - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _inside(root: Path, name: str) -> Path:
    """``root/name`` where no component of name's parent leaves the root (through ``..`` or a
    symlink resolving outside): a layer writes only into its own tree."""
    parts = [p for p in PurePosixPath(name).parts if p not in ("/", ".")]
    if ".." in parts:
        raise ImageError(f"layer entry {name!r} leaves the root filesystem")
    path = root.joinpath(*parts) if parts else root
    parent = os.path.realpath(path.parent)
    real_root = os.path.realpath(root)
    if parent != real_root and not parent.startswith(real_root + os.sep):
        raise ImageError(f"layer entry {name!r} is written through a link that leaves the root filesystem")
    return path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def apply_layer(layer: tarfile.TarFile, root: Path) -> None:
    """One layer over ``root``: whiteouts (``.wh.<name>``, ``.wh..wh..opq``) remove what lower
    layers left; other entries are written with their owners, modes and times."""
    for member in layer:
        path = _inside(root, member.name)
        base = path.name
        if base == ".wh..wh..opq":
            for child in list(path.parent.iterdir()) if path.parent.is_dir() else []:
                _remove(child)
            continue
        if base.startswith(".wh."):
            _remove(path.with_name(base[4:]))
            continue
        if member.isdir() and path.is_dir() and not path.is_symlink():
            os.chown(path, member.uid, member.gid, follow_symlinks=False)
            os.chmod(path, member.mode)
            continue
        if path.exists() or path.is_symlink():
            _remove(path)
        if member.islnk():
            _inside(root, member.linkname)
        layer.extract(member, root, numeric_owner=True, filter="fully_trusted")
