"""The operator image (``make image``): its size, what a node pays to unpack it, and the webhook's
cold start from it to ``/readyz``, against the same webhook from the checkout's venv as a floor.

The webhook runs as the chart runs it: read-only root, ``/tmp`` an emptyDir, its certificates a
Secret volume (0440, fsGroup), as UID 65532, with in-cluster configuration pointing at a sandbox
API server (``--kubeconfig`` is not what the chart uses; the service-account token and the
``KUBERNETES_SERVICE_*`` variables are). "Cold" is the first start after the image was unpacked
into an empty cache (a node that just pulled it); "warm" the median of the next starts.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gpucluster.sandbox.server import SandboxThread
from gpucluster.sandbox.sim.images import ImageStore
from tests.image.run import Webhook
from tools import image as build

STARTS = 5
READY_GOAL_S = 2.0
SIZE_GOAL_MB = 200.0


def _row(name: str, value: float, unit: str, target: str | None = None, ok: bool | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def run() -> list[dict[str, Any]]:
    record = build.current()
    if record is None:
        return [_row("image built from these sources", 0.0, "", "make image", False)]
    if os.geteuid() != 0:
        return [_row("image runs here (needs root)", 0.0, "", "root", False)]
    mb = 10**6
    compressed = int(record["compressed_bytes"]) / mb
    rows = [
        _row("image size, compressed (registry)", compressed, "MB", f"< {SIZE_GOAL_MB:.0f} MB",
             compressed < SIZE_GOAL_MB),
        _row("image size, unpacked", int(record["unpacked_bytes"]) / mb, "MB"),
        _row("make image, last build", float(record["seconds"]["total"]), "s"),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpucluster-bench-image-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        image = ImageStore([build.ARCHIVE], cache=work / "cache").get(record["reference"])
        assert image is not None
        rows.append(_row("node unpacks the image (cold, empty cache)", time.monotonic() - started, "s"))
        sandbox = SandboxThread()
        sb = sandbox.start()
        try:
            webhook = Webhook(sb, work)
            cold = webhook.from_image(image)
            warm = statistics.median(webhook.from_image(image) for _ in range(STARTS))
            floor = statistics.median(webhook.from_venv() for _ in range(STARTS))
        finally:
            sandbox.stop()
    rows += [
        _row("webhook from the image to /readyz, cold (first start)", cold, "s", f"< {READY_GOAL_S:.0f} s",
             cold < READY_GOAL_S),
        _row(f"webhook from the image to /readyz, warm (median of {STARTS})", warm, "s", f"< {READY_GOAL_S:.0f} s",
             warm < READY_GOAL_S),
        _row(f"floor: the same webhook from the venv (median of {STARTS})", floor, "s"),
        _row("image start over the venv's", warm / floor, "x"),
    ]  # fmt: skip
    return rows
