"""Starts one container process from an image's root filesystem, as runc would: run by the
process kubelet as ``python -I -S container.py SPEC`` (standard library only, so it starts in
milliseconds), it sets the container up and then becomes the container's process (execve).

In a new mount namespace (gone with its last process, so nothing is left mounted):

* the root is an overlay: the unpacked image below, a per-container upper directory above (what
  the container writes stays in its pod directory), remounted read-only when the container asks
  for ``readOnlyRootFilesystem``;
* ``/proc``, a small ``/dev`` (null, zero, full, random, urandom, tty, shm), ``/sys`` read-only,
  and the pod's ``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf``;
* each volume mount bound at its mount path, read-only where the mount says so.

Then chroot, the working directory, the user, the groups (``setgroups`` with fsGroup and the
supplemental groups), ``no_new_privs`` when privilege escalation is off, and exec of the argv,
looked up on the image's PATH. With ``join`` it enters a running container's mount namespace
instead (an exec probe). The network is the host's: pods bind their loopback pod IP.

The spec is JSON: ``rootfs``, ``root``, ``upper``, ``work``, ``readOnlyRoot``, ``mounts``
(``source``, ``target``, ``readOnly``, ``file``), ``etc`` (name -> host file), ``uid``, ``gid``,
``groups``, ``noNewPrivs``, ``cwd``, ``argv``, ``env``, ``join`` (a pid).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Any

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
CLONE_NEWNS = 0x00020000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or fstype} on {target}",
    )


def bind(source: str, target: str, *, read_only: bool, recursive: bool = False) -> None:
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if read_only:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _mountpoint(path: str, *, file: bool) -> None:
    if file:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.lexists(path):
            with open(path, "a"):
                pass
    else:
        os.makedirs(path, exist_ok=True)


def _inside(root: str, path: str) -> str:
    """``path`` resolved inside ``root`` as the container will see it: a symlink on the way (Debian's
    ``/var/run -> /run``) is followed relative to the root, never to the host (runc's securejoin)."""
    parts = [p for p in path.split("/") if p and p != "."]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        here = os.path.join(root, *resolved, part)
        if os.path.islink(here):
            hops += 1
            if hops > 40:
                raise OSError(40, f"too many levels of symbolic links in {path}")
            link = os.readlink(here)
            if link.startswith("/"):
                resolved = []
            parts = [p for p in link.split("/") if p and p != "."] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def setup_root(spec: dict[str, Any]) -> str:
    root = str(spec["root"])
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    options = f"lowerdir={spec['rootfs']},upperdir={spec['upper']},workdir={spec['work']}"
    mount("overlay", root, "overlay", 0, options)
    mounts = list(spec.get("mounts") or [])
    for m in mounts:
        _mountpoint(_inside(root, m["target"]), file=bool(m.get("file")))
    for name in spec.get("etc") or {}:
        _mountpoint(_inside(root, f"/etc/{name}"), file=True)
    for d in ("proc", "dev", "sys"):
        os.makedirs(_inside(root, d), exist_ok=True)
    mount("proc", _inside(root, "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = _inside(root, "dev")
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _mountpoint(os.path.join(dev, name), file=True)
            mount(f"/dev/{name}", os.path.join(dev, name), None, MS_BIND)
    os.makedirs(os.path.join(dev, "shm"), exist_ok=True)
    mount("shm", os.path.join(dev, "shm"), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=65536k")
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", os.path.join(dev, name))
    os.symlink("/proc/self/fd", os.path.join(dev, "fd"))
    bind("/sys", _inside(root, "sys"), read_only=True, recursive=True)
    for name, source in (spec.get("etc") or {}).items():
        bind(source, _inside(root, f"/etc/{name}"), read_only=False)
    for m in mounts:
        bind(m["source"], _inside(root, m["target"]), read_only=bool(m.get("readOnly")))
    if spec.get("readOnlyRoot"):
        mount(None, root, None, MS_REMOUNT | MS_RDONLY)
    return root


def join(spec: dict[str, Any]) -> str:
    fd = os.open(f"/proc/{int(spec['join'])}/ns/mnt", os.O_RDONLY)
    try:
        _check(_libc.setns(fd, CLONE_NEWNS), "setns")
    finally:
        os.close(fd)
    return str(spec["root"])


def become(spec: dict[str, Any]) -> None:
    os.setgroups([int(g) for g in spec.get("groups") or []])
    os.setgid(int(spec["gid"]))
    os.setuid(int(spec["uid"]))
    # Changing credentials clears the parent-death signal: the container must still die with us.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if spec.get("noNewPrivs"):
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def command(spec: dict[str, Any]) -> list[str]:
    """The argv that starts a container from ``spec`` (this file, run by the same interpreter,
    isolated: ``-I -S``, standard library only)."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), json.dumps(spec)]


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    try:
        root = join(spec) if spec.get("join") else setup_root(spec)
        os.chroot(root)
        os.chdir("/")
        cwd = str(spec.get("cwd") or "/")
        if not os.path.isdir(cwd):
            os.makedirs(cwd, exist_ok=True)  # as runc does for a missing working directory
        os.chdir(cwd)
        become(spec)
        args = [str(a) for a in spec["argv"]]
        env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
        os.execvpe(args[0], args, env)
    except OSError as exc:
        # The kubelet reports this line (StartError); 128 as runc's "exec failed" does.
        print(f"failed to create containerd task: {exc.strerror or exc}: {spec.get('argv', ['?'])[0]!r}",
              file=sys.stderr)  # fmt: skip
        return 128
    return 0  # not reached: execve replaced us


if __name__ == "__main__":
    sys.exit(main(sys.argv))
