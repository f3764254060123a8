"""The provisioner and the GPUCluster's deletion."""

from __future__ import annotations

from gpucluster.controller.runtime import Controller


def test_no_claim_template_is_created_while_or_after_the_gpucluster_is_deleted() -> None:
    """After an uninstall's GPUCluster deletion the operator runs a little longer: a Deployment's
    replacement pod must not get a template that would outlive the release."""
    c = Controller(None, leader_election=False)  # type: ignore[arg-type]
    assert c.provisioner.accepting()  # no GPUCluster seen yet: translated pods still get templates
    meta = {"name": "gpu-cluster", "uid": "u1"}
    live = {"kind": "GPUCluster", "metadata": meta}
    c.state.upsert("GPUCluster", live)
    assert c.provisioner.accepting()
    deleting = {"kind": "GPUCluster", "metadata": {**meta, "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    c.state.upsert("GPUCluster", deleting)
    assert not c.provisioner.accepting()
    c.state.delete("GPUCluster", deleting)
    assert not c.provisioner.accepting()
    c.state.upsert("GPUCluster", {"kind": "GPUCluster", "metadata": {"name": "gpu-cluster", "uid": "u2"}})
    assert c.provisioner.accepting()
