"""An HTTPS admission webhook for tests: on 127.0.0.1 with a CA of its own, it answers each
AdmissionReview with what ``answer(request, path)`` returns (the response's ``uid`` is filled in),
so both the sandbox and the real kube-apiserver can call it by URL with its ``caBundle``."""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpucluster.certs.authority import new_ca, new_serving_cert

Obj = dict[str, Any]
Answer = Callable[[Obj, str], Obj]


def json_patch(ops: list[Obj]) -> Obj:
    """The response fields of a mutation applying ``ops``."""
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


class ReviewServer:
    def __init__(self, answer: Answer, name: str = "test-webhook") -> None:
        self.ca = new_ca(f"{name}-ca")
        serving = new_serving_cert(self.ca, ["localhost"], ip_addresses=["127.0.0.1"])
        self._dir = tempfile.TemporaryDirectory(prefix=f"{name}-")
        cert, key = Path(self._dir.name, "tls.crt"), Path(self._dir.name, "tls.key")
        cert.write_bytes(serving.cert_pem)
        key.write_bytes(serving.key_pem)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                request = review.get("request") or {}
                response = {"allowed": True, **answer(request, self.path.split("?")[0]), "uid": request.get("uid", "")}
                data = json.dumps(
                    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def start(self) -> ReviewServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._dir.cleanup()
