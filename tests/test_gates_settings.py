"""Feature gates as a setting: ``--feature-gates`` on ``gpucluster webhook`` and ``gpucluster
controller``, the server's version as the default, and the chart's ``operator.featureGates``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import controller as controller_command
from gpucluster.cli import webhook as webhook_command
from gpucluster.clusterstate import ClusterState
from gpucluster.controller.explain import Explainer
from gpucluster.dra import gates
from gpucluster.dra.model import AllocatorInputError
from gpucluster.errors import InputError
from gpucluster.policy import Settings
from gpucluster.webhook.admission import admit
from tests import test_allocator as t
from tests.chart.helm import DOCS_PREINSTALLED, render_error, render_recipe
from tests.kit.fakekube import FakeKube
from tests.webhook.reviews import review

TAINTED = [t.rslice("s1", "n1", "p1", t.dev("d1", taints=[t.taint()])), t.device_class()]
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {}}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {}}}


def test_supported_version_of_a_server() -> None:
    assert gates.supported_version({"major": "1", "minor": "35"}) == "1.35"
    assert gates.supported_version({"major": "1", "minor": "34+"}) == "1.34"  # GKE, EKS spell it so
    assert gates.supported_version({"major": "1", "minor": "40"}) == "1.36"
    assert gates.supported_version({"major": "1", "minor": "31"}) == "1.34"
    assert gates.supported_version({}) == "1.34"


def test_setting_is_checked_against_the_version() -> None:
    assert gates.setting("", "1.34") == {}
    assert gates.setting("DRADeviceTaints=true", "1.34") == {"DRADeviceTaints": True}
    with pytest.raises(AllocatorInputError, match="locked"):
        gates.setting("DRAAdminAccess=false", "1.36")
    with pytest.raises(AllocatorInputError, match="unrecognized feature gate: DRAFoo"):
        gates.setting("DRAFoo=true", "1.34")


# -- the webhook -------------------------------------------------------------------------------


def _validate(settings: Settings) -> dict[str, Any]:
    state = ClusterState.from_objects([NAMESPACE, NODE, *TAINTED])
    obj = t.claim(t.exact())
    body = review(obj, namespace="default")
    response: dict[str, Any] = admit(json.dumps(body), path="validate", cluster=state, settings=settings).response[
        "response"
    ]
    return response


def test_webhook_claim_check_follows_its_gates() -> None:
    # 1.34 defaults: DRADeviceTaints is off, the tainted device is allocated.
    assert "warnings" not in _validate(Settings())
    on = _validate(Settings(feature_gates=(("DRADeviceTaints", True),)))
    assert on["allowed"] is True
    [warning] = on["warnings"]
    assert "unsatisfiable" in warning and "taint" in warning
    # 1.36 has the gate on by default.
    assert "warnings" in _validate(Settings(kubernetes_version="1.36"))


def test_webhook_consumable_capacity_gate_declares_allow_multiple_allocations() -> None:
    obj = t.claim(t.exact(selectors=[{"cel": {"expression": "device.allowMultipleAllocations == false"}}]))
    state = ClusterState.from_objects([NAMESPACE, NODE, *TAINTED])
    body = json.dumps(review(obj, namespace="default"))
    off = admit(body, path="validate", cluster=state, settings=Settings()).response["response"]
    assert off["allowed"] is False
    assert "undefined field 'allowMultipleAllocations'" in off["status"]["message"]
    on = Settings(feature_gates=(("DRAConsumableCapacity", True),))
    assert admit(body, path="validate", cluster=state, settings=on).response["response"]["allowed"] is True


def _args(module: Any, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpucluster")
    module.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_webhook_flag_errors_are_clear(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(TAINTED))
    common = ("webhook", "--self-signed", "--cluster", str(cluster))
    with pytest.raises(InputError, match="--feature-gates: unrecognized feature gate: DRAFoo"):
        webhook_command.run(_args(webhook_command, *common, "--feature-gates", "DRAFoo=true"))
    with pytest.raises(InputError, match="--feature-gates: invalid value of DRADeviceTaints=yes"):
        webhook_command.run(_args(webhook_command, *common, "--feature-gates", "DRADeviceTaints=yes"))
    with pytest.raises(InputError, match=r"locked to true in Kubernetes 1\.36"):
        webhook_command.run(
            _args(webhook_command, *common, "--kubernetes-version", "1.36", "--feature-gates", "DRAAdminAccess=false")
        )
    assert webhook_command.feature_gates("DRADeviceTaints=1", "1.34") == (("DRADeviceTaints", True),)


async def test_webhook_and_controller_default_to_the_server_version() -> None:
    kube = FakeKube(served={"/version": {"major": "1", "minor": "36", "gitVersion": "v1.36.0"}})
    assert await webhook_command.server_version(kube) == "1.36"
    options = await controller_command.allocator_options(kube, "DRADeviceTaints=false")
    assert options == {"kubernetes_version": "1.36", "feature_gates": {"DRADeviceTaints": False}}
    unreachable = FakeKube()
    unreachable.fail("GET", "/version", OSError("connection refused"))
    assert await webhook_command.server_version(unreachable) == "1.34"
    assert (await controller_command.allocator_options(unreachable, ""))["kubernetes_version"] == "1.34"
    with pytest.raises(InputError, match="--feature-gates: cannot set feature gate DRAAdminAccess to false"):
        await controller_command.allocator_options(kube, "DRAAdminAccess=false")
    assert set(kube.paths() + unreachable.paths()) == {"/version"}  # the version is all they ask


def test_controller_refuses_malformed_gates_before_connecting() -> None:
    with pytest.raises(InputError, match="--feature-gates: missing bool value for DRADeviceTaints"):
        controller_command.run(_args(controller_command, "controller", "--feature-gates", "DRADeviceTaints"))


# -- the controller's explanations -------------------------------------------------------------


def _pending() -> ClusterState:
    claim = t.claim(t.exact())
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}], "containers": [{"name": "c"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    return ClusterState.from_objects([NODE, *TAINTED, claim, pod])


async def _reason(explainer: Explainer) -> str | None:
    pod = explainer.state.get("Pod", "p", "default")
    found, _ = await explainer.explain(pod, "default/p")
    return found[2] if found is not None else None


async def test_explainer_follows_its_gates() -> None:
    assert await _reason(Explainer(_pending())) is None  # taints ignored at the 1.34 defaults
    gated = Explainer(_pending(), allocator_options={"feature_gates": {"DRADeviceTaints": True}})
    assert "taint" in (await _reason(gated) or "")
    newer = Explainer(_pending(), allocator_options={"kubernetes_version": "1.36"})
    assert await _reason(newer) is not None


# -- the chart ---------------------------------------------------------------------------------


def _containers(*flags: str) -> dict[str, list[str]]:
    objs = render_recipe(DOCS_PREINSTALLED.with_flags(*flags)) if flags else render_recipe(DOCS_PREINSTALLED)
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    return {c["name"]: c["args"] for c in deployment["spec"]["template"]["spec"]["containers"]}


def test_chart_passes_feature_gates_to_webhook_and_controller() -> None:
    default = _containers()
    assert not any(a.startswith("--feature-gates") for args in default.values() for a in args)
    gated = _containers("operator.featureGates=DRADeviceTaints=true\\,DRAPartitionableDevices=true")
    for name in ("controller", "webhook"):
        assert "--feature-gates=DRADeviceTaints=true,DRAPartitionableDevices=true" in gated[name]


def test_chart_schema_refuses_malformed_feature_gates() -> None:
    message = render_error([*DOCS_PREINSTALLED.set_flags, "operator.featureGates=DRADeviceTaints"])
    assert "featureGates" in message, message
