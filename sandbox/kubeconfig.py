"""A kubeconfig for the sandbox: its CA inline, its URL, a user with the bearer token."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "gpucluster-sandbox"


def build(server: str, ca_pem: bytes, token: str, *, name: str = CONTEXT, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin", "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write(path: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` readable by its owner only (it holds a credential)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(config, fh, sort_keys=False)
    tmp.replace(path)
    return path
