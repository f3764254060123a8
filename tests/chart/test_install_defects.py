"""The install-time defects a render shows, one test each (real Helm renders)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import (
    CA_BUNDLE,
    DOCS_OPERATOR_MANAGED,
    DOCS_PREINSTALLED,
    DOCS_RECIPES,
    NAMESPACE,
    Manifest,
    default_objects,
    render,
    render_error,
    render_recipe,
)


def one(objs: list[Manifest], kind: str, component: str | None = None) -> Manifest:
    found = [
        o
        for o in objs
        if o.kind == kind
        and (
            component is None
            or ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component") == component
        )
    ]
    assert len(found) == 1, (kind, component, [o.name for o in found])
    return found[0]


def rules_of(objs: list[Manifest], kind: str, component: str = "operator") -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = one(objs, kind, component)["rules"]
    return rules


def grants(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


# 1. Helm creates custom resources after the webhook configurations, in the same pass: the default
#    objects must not be release objects, but applied by a hook once the webhook answers.
def test_default_objects_are_applied_by_a_post_install_hook_not_created_by_helm() -> None:
    for recipe in DOCS_RECIPES:
        objs = render_recipe(recipe)
        assert not [o for o in objs if o.kind in ("GPUCluster", "NVIDIADriver")], recipe.name
        defaults = {o.kind for o in default_objects(objs)}
        assert "GPUCluster" in defaults
        assert ("NVIDIADriver" in defaults) == (recipe is DOCS_OPERATOR_MANAGED)
        job = one(objs, "Job", "defaults")
        annotations = job["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-install,post-upgrade,post-rollback"
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"][0] == "apply" and "--filename=/etc/gpucluster/defaults" in container["args"]
        config_map = one(objs, "ConfigMap", "defaults")
        assert pod["volumes"][0]["configMap"]["name"] == config_map.name
        assert not config_map.hook  # a release object: it exists when the post-install hook runs
        # The hooks run under their own identity, which may write the default objects and nothing else
        # (the pre-delete hook alone also lists ResourceClaims, to refuse while pods hold GPUs).
        hook_rules = rules_of(objs, "ClusterRole", "hooks")
        writes = {"create", "update", "patch", "delete", "deletecollection"}
        assert {g for r in hook_rules if writes & set(r["verbs"]) for g in r["apiGroups"]} == {"nvidia.com"}
        assert [r for r in hook_rules if r["apiGroups"] != ["nvidia.com"]] == []
        assert rules_of(objs, "ClusterRole", "cleanup") == [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list"]}
        ]
        assert pod["serviceAccountName"] == one(objs, "ServiceAccount", "hooks").name


def test_an_upgrade_that_changes_the_spec_changes_the_hook_pod() -> None:
    before = one(render_recipe(DOCS_PREINSTALLED, is_upgrade=True), "Job", "defaults")
    after = one(
        render_recipe(DOCS_PREINSTALLED, "gpuCluster.draDriver.version=v0.5.0", is_upgrade=True), "Job", "defaults"
    )
    key = "checksum/defaults"
    assert (
        before["spec"]["template"]["metadata"]["annotations"][key]
        != after["spec"]["template"]["metadata"]["annotations"][key]
    )


# 3. Rights never used, and rights wider than needed.
def test_operator_rbac_grants_no_unused_or_cluster_wide_rights() -> None:
    objs = render_recipe(DOCS_OPERATOR_MANAGED)
    cluster, namespaced = rules_of(objs, "ClusterRole"), rules_of(objs, "Role")
    everything = cluster + namespaced
    assert not any("configmaps" in r["resources"] for r in everything)
    assert not any("events.k8s.io" in r["apiGroups"] for r in everything)
    assert not any("coordination.k8s.io" in r["apiGroups"] for r in cluster)  # leases: namespace only
    assert grants(namespaced, "coordination.k8s.io", "leases", "update")
    assert not grants(cluster, "resource.k8s.io", "resourceclaimtemplates", "patch")
    assert grants(namespaced, "resource.k8s.io", "resourceclaimtemplates", "patch")
    assert not grants(cluster, "nvidia.com", "gpuclusters", "delete")  # the cleanup hook's identity does
    role = one(objs, "Role", "operator")
    assert role["metadata"]["namespace"] == NAMESPACE


# 4. The upstream NVIDIADriver CRD refuses a default NVIDIADriver with a nodeSelector.
def test_nvidiadriver_with_a_node_selector_is_not_the_default_one() -> None:
    objs = render_recipe(DOCS_OPERATOR_MANAGED, "driver.nvidiaDriverCRD.nodeSelector.nvidia\\.com/gpu\\.product=H100")
    (driver,) = [o for o in default_objects(objs) if o.kind == "NVIDIADriver"]
    assert driver["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert driver["spec"]["default"] is False
    (plain,) = [o for o in default_objects(render_recipe(DOCS_OPERATOR_MANAGED)) if o.kind == "NVIDIADriver"]
    assert plain["spec"]["default"] is True and "nodeSelector" not in plain["spec"]


# 6. helm uninstall waits 5 minutes for hooks by default: the cleanup Job must end before that.
def test_cleanup_hook_fits_helms_default_timeout() -> None:
    job = one(render_recipe(DOCS_PREINSTALLED), "Job", "cleanup")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert job["spec"]["activeDeadlineSeconds"] < 300
    (container,) = job["spec"]["template"]["spec"]["containers"]
    timeout = next(a for a in container["args"] if a.startswith("--timeout="))
    assert int(timeout.removeprefix("--timeout=").removesuffix("s")) < job["spec"]["activeDeadlineSeconds"]


def test_cleanup_deletes_the_nvidiadriver_the_chart_created() -> None:
    job = one(render_recipe(DOCS_OPERATOR_MANAGED), "Job", "cleanup")
    pod = job["spec"]["template"]["spec"]
    assert "initContainers" not in pod and [c["name"] for c in pod["containers"]] == ["cleanup"]
    args = pod["containers"][0]["args"]
    # Only the NVIDIADriver this release created, never one an admin made with the same name.
    assert "--driver-selector=app.kubernetes.io/instance=gpu-operator,app.kubernetes.io/component=driver" in args
    pre_installed = one(render_recipe(DOCS_PREINSTALLED), "Job", "cleanup")["spec"]["template"]["spec"]
    assert not [a for a in pre_installed["containers"][0]["args"] if a.startswith("--driver-selector")]


# 7. A silent no-op: clusterPolicy.enabled without gpuCluster.enabled installed nothing.
def test_cluster_policy_alone_fails_with_a_message() -> None:
    message = render_error(["clusterPolicy.enabled=true"])
    assert "never deploys a ClusterPolicy" in message


def test_helm_template_without_capabilities_says_what_to_pass() -> None:
    message = render_error(list(DOCS_PREINSTALLED.set_flags), api_versions=())
    assert "--api-versions resource.k8s.io/v1/DeviceClass --kube-version 1.34.2" in message


# 2. The controller's readiness reflects its caches.
def test_controller_container_has_a_readiness_probe_on_readyz() -> None:
    deployment = one(render_recipe(DOCS_PREINSTALLED), "Deployment", "operator")
    (controller,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "controller"]
    assert controller["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


# Values the API server would refuse once they reach an object are refused by the values schema,
# before anything is created (an invalid fullnameOverride also named every uninstall hook).
@pytest.mark.parametrize(
    ("flag", "field"),
    [
        ("fullnameOverride=Bad_Name", "fullnameOverride"),
        ("fullnameOverride=1gpu", "fullnameOverride"),
        ("nameOverride=gpu.cluster", "nameOverride"),
        ("driver.version=580 95", "driver.version"),
        ("operator.version=v1:2", "operator.version"),
    ],
)
def test_values_that_make_invalid_objects_are_refused(flag: str, field: str) -> None:
    message = render_error([*DOCS_PREINSTALLED.set_flags, flag])
    assert field.split(".")[-1] in message, message


def test_valid_names_and_tags_render() -> None:
    objs = render_recipe(DOCS_PREINSTALLED, "fullnameOverride=gpu-op", "driver.version=580.95.05")
    assert one(objs, "Job", "cleanup").name == "gpu-op-cleanup"
    digest = "sha256:" + "a" * 64
    objs = render_recipe(DOCS_PREINSTALLED, f"operator.version={digest}")
    # A digest is pinned with "@" (as the operands' versions are): "image:sha256:..." is an
    # InvalidImageName for the kubelet, in every operator container and hook.
    images = {
        c["image"]
        for o in objs
        if o.kind in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"]["containers"]
        if c["image"].startswith("ghcr.io/gpucluster/gpucluster")
    }
    assert images == {f"ghcr.io/gpucluster/gpucluster@{digest}"}


def test_a_release_name_of_helms_full_length_names_jobs_kubernetes_accepts() -> None:
    # The Job controller copies a Job's name into its pods' batch.kubernetes.io/job-name label,
    # at most 63 characters: the defaults hook's name was 64 for release names of 44-53 characters.
    release = "gpu-operator-production-cluster-eu-west-1-abcdefgh"  # 50; Helm allows 53
    for recipe in DOCS_RECIPES:
        objs = render(recipe.set_flags, api_versions=recipe.api_versions, release=release)
        jobs = [o.name for o in objs if o.kind == "Job"]
        assert len(jobs) >= 3, jobs
        assert all(len(name) <= 63 for name in jobs), [(n, len(n)) for n in jobs]
    objs = render(
        [*DOCS_PREINSTALLED.set_flags, "fullnameOverride=" + "g" * 63],
        api_versions=DOCS_PREINSTALLED.api_versions,
    )
    assert all(len(o.name) <= 63 for o in objs if o.kind == "Job")


def test_a_release_name_starting_with_a_digit_is_refused_with_what_to_do() -> None:
    # Services are named release-gpucluster-webhook, and a Service name must start with a letter
    # (DNS-1035) on 1.34: kube-apiserver would refuse it after half the release was created.
    message = render_error(release="1gpu")
    assert "Service names must start with a letter" in message and "fullnameOverride" in message
    assert render(["fullnameOverride=gpu"], release="1gpu")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["webhook.port=9444"], "webhook.port and webhook.healthPort are both 9444"),
        (["webhook.healthPort=8081"], "webhook.healthPort=8081 is the controller's health port"),
        (["webhook.port=8081"], "webhook.port=8081 is the controller's health port"),
    ],
)
def test_ports_that_collide_in_the_operator_pod_are_refused(flags: list[str], expected: str) -> None:
    assert expected in render_error(flags)


def test_large_counts_from_a_values_file_render_as_integers() -> None:
    # Helm reads a values file's numbers as float64, which Go prints as 2e+06: the webhook's and
    # the hooks' integer flags would refuse them and the pod would crash-loop.
    values = {
        "webhook": {"connections": {"max": 2000000.0, "perPeer": 1000000.0}},
        "cleanup": {"timeoutSeconds": 1000000.0},
        "gpuCluster": {"enabled": True, "applyTimeoutSeconds": 1000000.0},
        "driver": {"enabled": False},
    }
    args = [
        a
        for o in render(values)
        if o.kind in ("Deployment", "Job")
        for c in o["spec"]["template"]["spec"]["containers"]
        for a in c.get("args", [])
    ]
    assert "--max-connections=2000000" in args and "--max-connections-per-peer=1000000" in args
    assert args.count("--timeout=1000000") == 2, [a for a in args if a.startswith("--timeout")]
    assert not [a for a in args if "e+" in a]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # Rendered twice in one map, the last wins: the pods no longer match the selector.
        (
            ["operator.labels.app\\.kubernetes\\.io/instance=other"],
            "operator.labels.app.kubernetes.io/instance: the chart sets",
        ),
        (["operator.labels.helm\\.sh/chart=x"], "operator.labels.helm.sh/chart: the chart sets"),
        (["operator.labels.team=a b c"], "/operator/labels/team"),
        (["operator.labels.bad key!=x"], "invalid propertyName 'bad key!'"),
        (["operator.labels.team=" + "x" * 64], "/operator/labels/team"),
        (["operator.nodeSelector.pool=a b"], "/operator/nodeSelector/pool"),
    ],
)
def test_labels_the_api_server_would_refuse_fail_the_render(flags: list[str], expected: str) -> None:
    assert expected in render_error(flags)


def test_labels_of_ones_own_render_on_every_object() -> None:
    objs = render(["operator.labels.team=ml", "operator.labels.example\\.com/owner=a_b-c.d"])
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "ml"
    assert deployment["metadata"]["labels"]["example.com/owner"] == "a_b-c.d"


@pytest.mark.parametrize(("delay", "grace"), [(None, 30), (0, 30), (7, 32), (40.5, 66)])
def test_the_grace_period_covers_the_webhooks_shutdown_delay_and_its_drain(delay: float | None, grace: int) -> None:
    # SIGTERM: /readyz fails for shutdownDelay seconds, then reviews in flight get up to 20 s; the
    # kubelet's default 30 s would SIGKILL a webhook told to wait 40 s before it closed.
    values = {} if delay is None else {"webhook": {"shutdownDelay": delay}}
    pod = one(render(values), "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace


@pytest.mark.parametrize(
    "flags",
    [
        ["webhook.clientAuth.caBundle=QUJD"],  # base64 of "ABC"
        [
            "webhook.certificates.mode=secret",
            "webhook.certificates.secret.name=s",
            "webhook.certificates.secret.caBundle=QUJD",
        ],
    ],
    ids=["clientAuth", "secret"],
)
def test_a_ca_bundle_that_is_not_a_pem_certificate_is_refused(flags: list[str]) -> None:
    # The schema checks only base64: kube-apiserver (or the webhook) would trust nothing with it.
    assert "is not a base64-encoded PEM certificate" in render_error(flags)
    good = [f.replace("QUJD", CA_BUNDLE) for f in flags]
    assert render(good)
