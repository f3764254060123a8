"""Run a command from the operator image the way the chart mounts it, without a cluster: the
process kubelet's launcher (``sandbox.sim.container``) with volumes laid out as the kubelet lays
them out (``sandbox.sim.imagespec`` owners and modes). Shared by the image tests and ``make bench``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.sim import container, imagespec
from sandbox.sim.images import Image

UID = 65532
# The operator Deployment's pod security context (charts/gpucluster/templates/deployment.yaml).
CHART_POD: dict[str, Any] = {
    "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID},
        "containers": [{"name": "operator"}],
    }
}


@dataclass(frozen=True)
class Volume:
    target: str
    source: dict[str, Any]
    """The pod's volume source: ``{"secret": {...}}``, ``{"emptyDir": {}}``..."""
    files: dict[str, tuple[bytes, int]]
    """name -> (content, mode as the volume's spec gives it)."""
    read_only: bool = True
    token: str = ""
    """The file that is a projected service-account token."""


def lay_out(root: Path, pod: dict[str, Any], volumes: list[Volume]) -> list[dict[str, Any]]:
    """The volumes' directories under ``root`` with the kubelet's owners and modes; launcher mounts."""
    mounts = []
    for i, v in enumerate(volumes):
        path = root / f"volume-{i}"
        path.mkdir(parents=True)
        own = imagespec.dir_ownership(pod, v.source)
        os.chown(path, own.uid, own.gid)
        os.chmod(path, own.mode)
        for name, (data, mode) in v.files.items():
            f = path / name
            f.write_bytes(data)
            owner = imagespec.file_ownership(pod, v.source, mode, token=name == v.token)
            os.chown(f, owner.uid, owner.gid)
            os.chmod(f, owner.mode)
        mounts.append({"source": str(path), "target": v.target, "readOnly": v.read_only})
    return mounts


def launch(
    image: Image,
    argv: list[str],
    root: Path,
    volumes: list[Volume],
    *,
    pod: dict[str, Any] = CHART_POD,
    env: dict[str, str] | None = None,
    **popen: Any,
) -> subprocess.Popen[str]:
    """Start ``argv`` in a container of ``image`` (read-only root, no privileges, the pod's user)."""
    mounts = lay_out(root / "volumes", pod, volumes)
    who = imagespec.identity(pod, pod["spec"]["containers"][0], image.user, image.rootfs)
    layers = root / "layers"
    for part in ("root", "upper", "work"):
        (layers / part).mkdir(parents=True, exist_ok=True)
    spec = {
        "rootfs": str(image.rootfs),
        "root": str(layers / "root"),
        "upper": str(layers / "upper"),
        "work": str(layers / "work"),
        "readOnlyRoot": True,
        "mounts": mounts,
        "etc": {},
        "uid": who.uid,
        "gid": who.gid,
        "groups": list(who.groups),
        "noNewPrivs": True,
        "cwd": image.workdir,
        "argv": argv,
        "env": {**dict(image.env), **(env or {})},
    }
    return subprocess.Popen(
        [sys.executable, "-I", "-S", container.__file__, json.dumps(spec)], text=True, start_new_session=True, **popen
    )


def tmp_volume() -> Volume:
    return Volume("/tmp", {"emptyDir": {}}, {}, read_only=False)
