"""What the kubelet and the container runtime compute for a container run from an image (the
process kubelet's image mode, ``container.py`` carries it out). Pure functions of the pod, the
container and the image's config:

* argv: ``command`` replaces the image's ENTRYPOINT and drops its CMD; ``args`` alone replace CMD;
  ``$(VAR)`` references expanded (``podenv.expand``);
* the user: ``runAsUser``/``runAsGroup`` (container over pod) over the image's ``USER``
  (``uid[:gid]`` or a name from its ``/etc/passwd``), ``runAsNonRoot`` verified as the kubelet
  does; the groups: ``fsGroup`` and ``supplementalGroups``;
* volume ownership (``SetVolumeOwnership``): with ``fsGroup``, volume files get that group and
  group read (``0440`` more for the read-only secret/configMap/downwardAPI/projected volumes,
  ``0660`` for emptyDir), directories setgid; a projected service-account token is ``0600`` and
  owned by the pods' common ``runAsUser`` (``FsUserFrom``) when there is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucluster.sandbox.sim import podenv
from gpucluster.sandbox.sim.images import Image

Obj = dict[str, Any]

ATOMIC_VOLUMES = ("secret", "configMap", "downwardAPI", "projected")


class ImageConfigError(podenv.ConfigError):
    """The container cannot start from its image (CreateContainerConfigError)."""


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]


def _security(pod: Obj, container: Obj, key: str) -> Any:
    own = (container.get("securityContext") or {}).get(key)
    if own is not None:
        return own
    return ((pod.get("spec") or {}).get("securityContext") or {}).get(key)


def _passwd(rootfs: Path, name: str) -> tuple[int, int] | None:
    try:
        lines = (rootfs / "etc" / "passwd").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 4 and (fields[0] == name or fields[2] == name):
            try:
                return int(fields[2]), int(fields[3])
            except ValueError:
                return None
    return None


def _group(rootfs: Path, name: str) -> int | None:
    try:
        lines = (rootfs / "etc" / "group").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] == name:
            return int(fields[2]) if fields[2].isdigit() else None
    return None


def identity(pod: Obj, container: Obj, image_user: str, rootfs: Path) -> Identity:
    """The process's uid, gid and supplementary groups; ``runAsNonRoot`` checked."""
    user, _, group = image_user.partition(":")
    run_as_user = _security(pod, container, "runAsUser")
    image_uid: int | None = None
    image_gid: int | None = None
    if user.isdigit():
        image_uid = int(user)
        found = _passwd(rootfs, user)
        image_gid = found[1] if found else None
    elif user:
        found = _passwd(rootfs, user)
        if found is None and run_as_user is None:
            raise ImageConfigError(f"unable to find user {user}: no matching entries in passwd file")
        if found:
            image_uid, image_gid = found
    if group:
        image_gid = int(group) if group.isdigit() else _group(rootfs, group)
        if image_gid is None:
            raise ImageConfigError(f"unable to find group {group}: no matching entries in group file")
    if _security(pod, container, "runAsNonRoot"):
        if run_as_user is None and user and not user.isdigit():
            raise ImageConfigError(
                f"container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root"
            )
        if run_as_user == 0:
            raise ImageConfigError("container's runAsUser breaks non-root policy")
        if run_as_user is None and not image_uid:
            raise ImageConfigError("container has runAsNonRoot and image will run as root")
    uid = int(run_as_user) if run_as_user is not None else (image_uid or 0)
    run_as_group = _security(pod, container, "runAsGroup")
    gid = int(run_as_group) if run_as_group is not None else (image_gid or 0)
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    groups = {int(g) for g in pod_sc.get("supplementalGroups") or []}
    if pod_sc.get("fsGroup") is not None:
        groups.add(int(pod_sc["fsGroup"]))
    return Identity(uid, gid, tuple(sorted(groups)))


def argv(container: Obj, entrypoint: Sequence[str], cmd: Sequence[str], env: Mapping[str, str]) -> list[str]:
    command = [podenv.expand(str(c), env) for c in container.get("command") or []]
    args = [podenv.expand(str(a), env) for a in container.get("args") or []]
    # command drops the image's CMD as well; args alone replace only CMD.
    out = [*command, *args] if command else [*entrypoint, *(args if container.get("args") else cmd)]
    if not out:
        raise ImageConfigError("no command specified")
    return out


def launch_spec(
    pod: Obj,
    container: Obj,
    image: Image,
    *,
    layers: Path,
    mounts: Sequence[Obj],
    etc: Mapping[str, str],
    argv: Sequence[str],
    env: Mapping[str, str],
) -> Obj:
    """What ``container.py`` is given to start ``container`` of ``pod`` from ``image``: the root's
    layers under ``layers`` (``root``, ``upper``, ``work``), the mounts, the user, the privileges."""
    who = identity(pod, container, image.user, image.rootfs)
    sc = container.get("securityContext") or {}
    return {
        "rootfs": str(image.rootfs),
        "root": str(layers / "root"),
        "upper": str(layers / "upper"),
        "work": str(layers / "work"),
        "readOnlyRoot": bool(sc.get("readOnlyRootFilesystem")),
        "mounts": list(mounts),
        "etc": dict(etc),
        "uid": who.uid,
        "gid": who.gid,
        "groups": list(who.groups),
        "noNewPrivs": sc.get("allowPrivilegeEscalation") is False,
        "cwd": str(container.get("workingDir") or image.workdir or "/"),
        "argv": list(argv),
        "env": dict(env),
    }


def fs_user(pod: Obj) -> int | None:
    """kubelet's ``FsUserFrom``: the runAsUser every container shares, or None."""
    spec = pod.get("spec") or {}
    users = set()
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        uid = _security(pod, c, "runAsUser")
        if uid is None:
            return None
        users.add(int(uid))
    return users.pop() if len(users) == 1 else None


def fs_group(pod: Obj) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return None if value is None else int(value)


@dataclass(frozen=True)
class Ownership:
    uid: int
    gid: int
    mode: int


def file_ownership(pod: Obj, volume: Obj, mode: int, *, token: bool) -> Ownership:
    """A volume file's owner, group and mode as the kubelet leaves them."""
    group = fs_group(pod)
    user = fs_user(pod)
    uid = 0
    if token and (user is not None or group is not None):
        mode = 0o600
    if token and user is not None:
        uid = user
    if group is None:
        return Ownership(uid, 0, mode & 0o7777)
    mask = 0o440 if any(k in volume for k in ATOMIC_VOLUMES) else 0o660
    return Ownership(uid, group, (mode | mask) & 0o7777)


def dir_ownership(pod: Obj, volume: Obj) -> Ownership:
    """A volume's directory: emptyDir is 0777; the atomic-writer volumes 0755 (read-only anyway)."""
    group = fs_group(pod)
    mode = 0o755 if any(k in volume for k in ATOMIC_VOLUMES) else 0o777
    if group is None:
        return Ownership(0, 0, mode)
    return Ownership(0, group, mode | 0o2000 | 0o110 | (0o440 if mode == 0o755 else 0o660))
