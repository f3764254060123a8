"""The process kubelet's image mode, its pure parts: references, layers with whiteouts, what the
kubelet computes for a container from an image (argv, user, ownership), and path resolution
inside a root filesystem. The image itself is tested in tests/image."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpucluster.sandbox.sim import container, images, imagespec
from gpucluster.sandbox.sim.images import ImageError, apply_layer, normalize


@pytest.mark.parametrize(
    ("reference", "normalized"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("nvidia/cuda:12.4", "docker.io/nvidia/cuda:12.4"),
        ("ghcr.io/gpucluster/gpucluster:0.1.0", "ghcr.io/gpucluster/gpucluster:0.1.0"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("localhost/gpucluster-base:bookworm", "localhost/gpucluster-base:bookworm"),
        ("ghcr.io/a/b@sha256:ab", "ghcr.io/a/b@sha256:ab"),
    ],
)
def test_references_normalize_as_a_runtime_resolves_them(reference: str, normalized: str) -> None:
    assert normalize(reference) == normalized


def _layer(entries: list[tuple[str, bytes | None]]) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o644
                info.uid = info.gid = 65532
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return tarfile.open(fileobj=buf, mode="r|")


def test_layers_apply_in_order_with_whiteouts(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    apply_layer(_layer([("etc", None), ("etc/a", b"1"), ("etc/b", b"2"), ("opt", None), ("opt/x", b"x")]), root)
    apply_layer(_layer([("etc/.wh.a", b""), ("opt/.wh..wh..opq", b""), ("opt/y", b"y"), ("etc/b", b"3")]), root)
    assert not (root / "etc/a").exists()
    assert (root / "etc/b").read_bytes() == b"3"
    assert sorted(p.name for p in (root / "opt").iterdir()) == ["y"]  # the opaque dir hid x
    if os.geteuid() == 0:
        assert (root / "etc/b").stat().st_uid == 65532  # owners as in the image


def test_a_layer_cannot_write_outside_its_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(ImageError, match="leaves the root"):
        apply_layer(_layer([("../escape", b"x")]), root)
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(ImageError, match="leaves the root"):
        apply_layer(_layer([("link/escape", b"x")]), root)
    assert not (tmp_path / "escape").exists()


def test_mount_targets_resolve_symlinks_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # Debian's absolute link: the host's /run if followed naively
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    target = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert container._inside(str(root), target) == str(root / "run/secrets/kubernetes.io/serviceaccount")
    assert container._inside(str(root), "/bin/../../../etc") == str(root / "etc")
    assert container._inside(str(root), "/bin/sh") == str(root / "usr/bin/sh")


POD: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}


def test_argv_follows_kubernetes_command_and_args_over_entrypoint_and_cmd() -> None:
    entry, cmd, env = ["gpucluster"], ["--help"], {"NS": "gpu-operator"}
    assert imagespec.argv({}, entry, cmd, env) == ["gpucluster", "--help"]
    assert imagespec.argv({"args": ["webhook", "--ns=$(NS)"]}, entry, cmd, env) == [
        "gpucluster", "webhook", "--ns=gpu-operator",
    ]  # fmt: skip
    assert imagespec.argv({"command": ["python3"]}, entry, cmd, env) == ["python3"]  # CMD dropped too
    assert imagespec.argv({"command": ["sh"], "args": ["-c", "x"]}, entry, cmd, env) == ["sh", "-c", "x"]
    with pytest.raises(imagespec.ImageConfigError):
        imagespec.argv({}, [], [], env)


def test_identity_takes_the_pod_over_the_image(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
    pod = {"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]}}}
    c: dict[str, Any] = {"name": "c", "securityContext": {"runAsGroup": 1500}}
    assert imagespec.identity(pod, c, "65532:65532", tmp_path) == imagespec.Identity(1000, 1500, (2000, 3000))
    assert imagespec.identity(POD, {}, "nobody", tmp_path) == imagespec.Identity(65534, 65534, ())
    assert imagespec.identity(POD, {}, "", tmp_path).uid == 0
    non_root = {"securityContext": {"runAsNonRoot": True}}
    with pytest.raises(imagespec.ImageConfigError, match="will run as root"):
        imagespec.identity(POD, non_root, "", tmp_path)
    with pytest.raises(imagespec.ImageConfigError, match="breaks non-root policy"):
        imagespec.identity(POD, {"securityContext": {"runAsNonRoot": True, "runAsUser": 0}}, "65532", tmp_path)
    with pytest.raises(imagespec.ImageConfigError, match="unable to find user"):
        imagespec.identity(POD, {}, "nosuchuser", tmp_path)


def test_volume_ownership_is_the_kubelets() -> None:
    chart = {"spec": {"securityContext": {"runAsUser": 65532, "fsGroup": 65532}, "containers": [{"name": "c"}]}}
    secret = {"secret": {"secretName": "s", "defaultMode": 0o440}}
    projected = {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    # fsGroup: group fsGroup, group-readable (0440 more for the read-only kinds)
    assert imagespec.file_ownership(chart, secret, 0o440, token=False) == imagespec.Ownership(0, 65532, 0o440)
    assert imagespec.file_ownership(chart, secret, 0o400, token=False) == imagespec.Ownership(0, 65532, 0o440)
    # the token: 0600 for the pods' common runAsUser, then group-readable through fsGroup
    assert imagespec.file_ownership(chart, projected, 0o644, token=True) == imagespec.Ownership(65532, 65532, 0o640)
    # without fsGroup nothing is given away: a 0400 Secret stays root's alone
    plain = {"spec": {"containers": [{"name": "c"}]}}
    assert imagespec.file_ownership(plain, secret, 0o400, token=False) == imagespec.Ownership(0, 0, 0o400)
    assert imagespec.file_ownership(plain, projected, 0o644, token=True) == imagespec.Ownership(0, 0, 0o644)
    assert imagespec.dir_ownership(plain, {"emptyDir": {}}).mode == 0o777
    assert imagespec.dir_ownership(chart, {"emptyDir": {}}) == imagespec.Ownership(0, 65532, 0o2777)
    # a container with another runAsUser: no common fsUser, the token stays root's
    mixed = {"spec": {"securityContext": {"fsGroup": 1}, "containers": [{"name": "a", "securityContext": {"runAsUser": 5}},
                                                                       {"name": "b"}]}}  # fmt: skip
    assert imagespec.fs_user(mixed) is None
    assert imagespec.file_ownership(mixed, projected, 0o644, token=True) == imagespec.Ownership(0, 1, 0o640)


def test_only_the_newest_unpacked_images_are_kept(tmp_path: Path) -> None:
    for i in range(5):
        d = tmp_path / f"sha256-{i}"
        (d / "rootfs").mkdir(parents=True)
        (d / ".complete").write_text("x")
        os.utime(d / ".complete", (1000 + i, 1000 + i))
    (tmp_path / "sha256-9.partial").mkdir()  # another sandbox unpacking: not ours to remove
    images._prune(tmp_path, keep=tmp_path / "sha256-0")  # the one just unpacked stays, however old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sha256-0", "sha256-3", "sha256-4", "sha256-9.partial"]
