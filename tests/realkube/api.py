"""One raw HTTP client shape for both backends, so a differential case is written once.

``Api.request(method, path, body=..., content_type=..., token=...)`` returns ``(status, body)``
as the server answered; ``token`` speaks as another identity (a ServiceAccount token from
``Api.service_account_token``, which both servers issue through the TokenRequest API).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


@dataclass
class Api:
    name: str
    """``sandbox`` or ``kube``."""
    server: str
    ca_file: Path
    admin_token: str | None = None
    """The sandbox's admin speaks with a bearer token; the real control plane's with a client certificate."""
    admin_cert: tuple[Path, Path] | None = None
    webhook_client_ca: Path | None = None
    """The CA of the client certificate the API server presents to admission webhooks."""

    def context(self, *, admin: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if admin and self.admin_cert is not None:
            ctx.load_cert_chain(*self.admin_cert)
        return ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        token: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, Obj]:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        bearer = token or (self.admin_token if token is None else None)
        if bearer:
            request.add_header("Authorization", f"Bearer {bearer}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, context=self.context(admin=token is None), timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            decoded = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            decoded = {"raw": raw.decode(errors="replace")}
        return status, decoded if isinstance(decoded, dict) else {"items": decoded}

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Obj:
        status, answer = self.request(method, path, body, **kwargs)
        assert 200 <= status < 300, f"{self.name}: {method} {path}: {status} {answer}"
        return answer

    def service_account_token(self, namespace: str, name: str, *, create: bool = True) -> str:
        """A token of ServiceAccount ``namespace/name`` (created when missing)."""
        if create:
            status, _ = self.request(
                "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )  # fmt: skip
            assert status in (201, 409), status
        answer = self.ok(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )  # fmt: skip
        return str(answer["status"]["token"])

    def namespace(self, name: str) -> str:
        status, _ = self.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        assert status in (201, 409), status
        return name
