"""Rolling updates of DaemonSets and Deployments: the sandbox defaults and validates them as
kube-apiserver does.

Cases from pkg/apis/apps/validation/validation_test.go (TestDaemonSetUpdateMaxSurge's table, spelled
with both values since REST defaults an absent one; TestValidateDeployment's strategy cases) and
the defaults of pkg/apis/apps/v1/defaults.go, each a dry-run create on both backends: the same code,
message and causes, or the same stored strategy. An update refuses what a create does.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.realkube.agreement import Case, Obj, Step, answer
from tests.realkube.api import Api

NS = "agree-builtins"
DAEMONSETS = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
DRY = "?dryRun=All"


def workload(kind: str, name: str, strategy_key: str, strategy: Any) -> Obj:
    labels = {"app": name}
    spec: Obj = {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}},
    }
    if strategy is not ...:
        spec[strategy_key] = strategy
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def daemonset_strategy(body: Obj) -> Any:
    return body["spec"].get("updateStrategy")


def deployment_strategy(body: Obj) -> Any:
    return body["spec"].get("strategy")


def ds(case: str, strategy: Any = ...) -> Case:
    body = workload("DaemonSet", "ds", "updateStrategy", strategy)
    return Case(f"DaemonSet-{case}", Step("POST", DAEMONSETS + DRY, body), keep=daemonset_strategy)


def rolling_ds(case: str, unavailable: Any, surge: Any) -> Case:
    return ds(case, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": unavailable, "maxSurge": surge}})


def deploy(case: str, strategy: Any = ...) -> Case:
    body = workload("Deployment", "deploy", "strategy", strategy)
    return Case(f"Deployment-{case}", Step("POST", DEPLOYMENTS + DRY, body), keep=deployment_strategy)


def rolling_deploy(case: str, **rolling: Any) -> Case:
    return deploy(case, {"type": "RollingUpdate", "rollingUpdate": rolling})


def updated(case: str, path: str, kind: str, key: str, strategy: Any) -> Case:
    name = f"{kind.lower()}-updated"
    step = Step("PUT", f"{path}/{name}{DRY}", workload(kind, name, key, strategy))
    return Case(f"{kind}-update-{case}", step, setup=(Step("POST", path, workload(kind, name, key, ...)),))


CASES = [
    # TestDaemonSetUpdateMaxSurge (maxSurge 0 where the table leaves it unset)
    rolling_ds("unset", 0, 0),
    rolling_ds("zero-percent", "0%", 0),
    rolling_ds("zero", 0, 0),
    rolling_ds("one", 1, 0),
    rolling_ds("one-percent", "1%", 0),
    rolling_ds("100-percent", "100%", 0),
    rolling_ds("greater-than-100-percent", "101%", 0),
    rolling_ds("surge-and-unavailable-set", "1%", "1%"),
    rolling_ds("surge-zero-percent", 0, "0%"),
    rolling_ds("surge-one", 0, 1),
    rolling_ds("surge-one-percent", 0, "1%"),
    rolling_ds("surge-100-percent", 0, "100%"),
    rolling_ds("surge-greater-than-100-percent", 0, "101%"),
    rolling_ds("surge-and-unavailable-zero-percent", "0%", "0%"),
    rolling_ds("surge-and-unavailable-mixed-zero", 0, "0%"),
    # strings that are no percentages, negative numbers (ValidatePositiveIntOrPercent)
    rolling_ds("numeric-string", "1", 0),
    rolling_ds("zero-string", "0", 0),
    rolling_ds("signed-string", "+1", 0),
    rolling_ds("word", "abc", 0),
    rolling_ds("negative", -1, 0),
    rolling_ds("negative-surge-and-string", "20Percent", -2),
    # defaults (SetDefaults_DaemonSet) and the strategy type
    ds("no-strategy"),
    ds("empty-strategy", {}),
    ds("rolling-update-without-parameters", {"type": "RollingUpdate"}),
    ds("only-max-surge", {"rollingUpdate": {"maxSurge": "10%", "maxUnavailable": None}}),
    ds("on-delete", {"type": "OnDelete"}),
    ds("on-delete-with-rolling-update", {"type": "OnDelete", "rollingUpdate": {"maxUnavailable": "x"}}),
    ds("unknown-type", {"type": "Foo"}),
    ds("unknown-type-with-rolling-update", {"type": "Foo", "rollingUpdate": {"maxUnavailable": 2}}),
    ds("null-rolling-update", {"type": "RollingUpdate", "rollingUpdate": None}),
    # TestValidateDeployment's strategy cases
    rolling_deploy("max-surge-not-a-percentage", maxSurge="20Percent"),
    rolling_deploy("both-zero", maxSurge="0%", maxUnavailable=0),
    rolling_deploy("max-unavailable-over-100-percent", maxUnavailable="110%"),
    rolling_deploy("max-surge-over-100-percent", maxSurge="101%"),
    rolling_deploy("both-zero-numbers", maxSurge=0, maxUnavailable=0),
    rolling_deploy("numeric-string", maxUnavailable="1"),
    rolling_deploy("word-and-zero-surge", maxUnavailable="abc", maxSurge=0),
    rolling_deploy("negative", maxUnavailable=-1, maxSurge=-2),
    rolling_deploy("only-max-unavailable-zero", maxUnavailable=0),
    rolling_deploy("only-max-surge-zero", maxSurge=0),
    deploy("no-strategy"),
    deploy("empty-strategy", {}),
    deploy("recreate", {"type": "Recreate"}),
    deploy("recreate-with-rolling-update", {"type": "Recreate", "rollingUpdate": {}}),
    deploy("unknown-type", {"type": "Foo"}),
    deploy("null-rolling-update", {"type": "RollingUpdate", "rollingUpdate": None}),
    # updates are judged as creates
    updated("numeric-string", DAEMONSETS, "DaemonSet", "updateStrategy", {"rollingUpdate": {"maxUnavailable": "1"}}),
    updated(
        "both-zero", DEPLOYMENTS, "Deployment", "strategy", {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}
    ),
]


@pytest.fixture(scope="module")
def namespace(apis: list[Api]) -> str:
    for api in apis:
        api.namespace(NS)
    return NS


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rolling_updates_agree_with_kube_apiserver(apis: list[Api], namespace: str, case: Case) -> None:
    sandbox, kube = (answer(api, case, {}) for api in apis)
    assert sandbox == kube
