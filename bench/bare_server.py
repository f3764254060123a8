"""A bare aiohttp TLS server answering every review with a constant allowed response: the baseline."""

from __future__ import annotations

import json
import ssl
import sys

from aiohttp import web

RESPONSE = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": True}}


async def handle(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response(RESPONSE)


def main() -> None:
    cert_dir, port = sys.argv[1], int(sys.argv[2])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(f"{cert_dir}/tls.crt", f"{cert_dir}/tls.key")
    app = web.Application()
    app.router.add_post("/mutate", handle)
    app.router.add_get("/healthz", lambda r: web.Response(text=json.dumps("ok")))
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=ctx, print=None, access_log=None)


if __name__ == "__main__":
    main()
