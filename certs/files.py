"""Write certificate material into a directory atomically, the way the kubelet projects a Secret.

The files are written into a fresh hidden directory ``..<timestamp>``; a ``..data`` symlink is
then swapped to it with one ``rename`` and each visible name (``tls.crt``...) is a symlink through
``..data``. A reader therefore sees either the whole old set or the whole new set, never a new
certificate with an old key (``gpucluster.webhook.tls.ReloadingTLS`` re-reads the files when their bytes
change). Private keys (``*.key``) are written 0600, the rest 0644; the directory is 0700 when it is ours.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

DATA_LINK = "..data"
KEY_MODE = 0o600
CERT_MODE = 0o644


def file_mode(name: str) -> int:
    """0600 for private keys, 0644 for certificates."""
    return KEY_MODE if name.endswith(".key") else CERT_MODE


def _check_name(name: str) -> None:
    if not name or name.startswith(".") or "/" in name or name in (".", ".."):
        raise ValueError(f"{name!r}: not a plain file name")


def read_dir(directory: Path, names: Iterable[str]) -> dict[str, bytes]:
    """The files ``names`` of ``directory`` that exist."""
    out = {}
    for name in names:
        path = directory / name
        if path.is_file():
            out[name] = path.read_bytes()
    return out


def write_atomically(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Make ``directory`` hold exactly ``files`` (besides names it never held); False when it
    already did. Names the previous write had and ``files`` lacks are removed."""
    for name in files:
        _check_name(name)
    directory.mkdir(parents=True, exist_ok=True)
    # A directory the kubelet made (the chart's emptyDir) belongs to root: its mode is the kubelet's
    # to set, and chmod by the non-root operator would fail with EPERM.
    if directory.stat().st_uid == os.geteuid():
        os.chmod(directory, 0o700)
    if read_dir(directory, files) == dict(files) and _visible(directory) == set(files):
        return False
    stamp = tempfile.mkdtemp(prefix="..", dir=directory)
    for name, data in files.items():
        path = Path(stamp) / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode(name))
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(path, file_mode(name))  # the umask may have narrowed the mode
    os.chmod(stamp, 0o755)
    old_target = os.readlink(directory / DATA_LINK) if (directory / DATA_LINK).is_symlink() else None
    _replace_with_symlink(directory / DATA_LINK, os.path.basename(stamp))
    for name in files:
        link = directory / name
        if not (link.is_symlink() and os.readlink(link) == f"{DATA_LINK}/{name}"):
            _replace_with_symlink(link, f"{DATA_LINK}/{name}")
    for stale in _visible(directory) - set(files):
        (directory / stale).unlink()
    if old_target and old_target != os.path.basename(stamp):
        shutil.rmtree(directory / old_target, ignore_errors=True)
    return True


def _visible(directory: Path) -> set[str]:
    """Names the writer manages: symlinks into ..data."""
    out = set()
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.is_symlink() and os.readlink(entry).startswith(DATA_LINK + "/"):
            out.add(entry.name)
    return out


def _replace_with_symlink(path: Path, target: str) -> None:
    """Point ``path`` at ``target`` with one rename (a regular file there is replaced too)."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, path)


def write_plain(directory: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write each file as a regular file (mode set before it appears, replaced with one rename)."""
    for name in files:
        _check_name(name)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        path = directory / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        try:
            os.fchmod(fd, file_mode(name))
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        written.append(path)
    return written
