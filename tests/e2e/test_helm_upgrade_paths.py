"""Upgrades from the previous chart keep the GPU stack in place, on both backends.

The previous chart versions are packaged in tests/fixtures/charts/ (``git archive`` of
charts/gpucluster at the commit in the file name):
- 9e4b517, chart 0.1.0 as first released: the default NVIDIADriver and GPUCluster are release
  objects. Its webhooks are fail-closed before their pods run, so, as an admin would after a
  first failed attempt, it is installed with those failure policies set to Ignore;
- 266d3b0, chart 0.1.0 as last released: the defaults are applied by a hook.

An upgrade to this chart must not delete and re-create the NVIDIADriver (that removes the driver
from every GPU node) or the GPUCluster, and must restart no operand DaemonSet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import CHART_DIR, DOCS_OPERATOR_MANAGED, set_values
from tests.e2e.chart_install import KUBECTL, NAMESPACE, RELEASE, Cluster

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "charts"
RELEASE_OBJECTS = FIXTURES / "gpucluster-0.1.0-9e4b517.tgz"
HOOK_OBJECTS = FIXTURES / "gpucluster-0.1.0-266d3b0.tgz"
FAIL_OPEN = tuple(
    f"webhook.failurePolicy.{name.replace('.', chr(92) + '.')}=Ignore"
    for name in (
        "gpuclusters.validate.gpucluster.nvidia.com",
        "nvidiadrivers.validate.gpucluster.nvidia.com",
        "nvidiadrivers.mutate.gpucluster.nvidia.com",
    )
)


def _state(cluster: Cluster) -> dict[str, Any]:
    """What must not change: the objects' UIDs and the operand DaemonSets' pod templates."""
    driver = cluster.get("nvidiadriver", "default")["metadata"]
    gpucluster = cluster.get("gpucluster", "gpu-cluster")["metadata"]
    daemonsets = {
        d["metadata"]["name"]: (d["metadata"]["uid"], d["metadata"]["generation"])
        for d in cluster.get("daemonsets", "-n", NAMESPACE)["items"]
    }
    return {"driver": driver["uid"], "gpucluster": gpucluster["uid"], "daemonsets": daemonsets}


@pytest.mark.parametrize(
    ("chart", "extra"), [(RELEASE_OBJECTS, FAIL_OPEN), (HOOK_OBJECTS, ())], ids=["release-objects", "hook-applied"]
)
def test_upgrade_from_the_previous_chart_keeps_driver_and_gpucluster_in_place(
    cluster: Cluster, chart: Path, extra: tuple[str, ...]
) -> None:
    cluster.prepare(DOCS_OPERATOR_MANAGED)
    flags = DOCS_OPERATOR_MANAGED.set_flags
    cluster.helm.install(
        str(chart), RELEASE, set_values(flags + extra), namespace=NAMESPACE, create_namespace=True, timeout=240
    )
    cluster.wait_ready(timeout=180)
    before = _state(cluster)
    assert len(before["daemonsets"]) == 3, before

    release = cluster.helm.upgrade(CHART_DIR, RELEASE, set_values(flags), namespace=NAMESPACE, timeout=240)
    assert release["status"] == "deployed"
    assert "\nkind: NVIDIADriver" not in release["manifest"]
    cluster.wait_ready(timeout=180)
    after = _state(cluster)
    assert after == before
    driver = cluster.get("nvidiadriver", "default")
    assert not driver["metadata"].get("deletionTimestamp")
    # Taken over by the defaults hook: its spec is this chart's.
    assert driver["spec"]["upgradePolicy"] == {"autoUpgrade": False}
    # A second upgrade: nothing left to hand over, nothing changes.
    cluster.helm.upgrade(CHART_DIR, RELEASE, set_values(flags), namespace=NAMESPACE, timeout=240)
    assert _state(cluster) == before

    cluster.uninstall()
    assert cluster.get("gpuclusters")["items"] == [] and cluster.get("nvidiadrivers")["items"] == []
