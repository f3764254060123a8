"""state-dcgm: the standalone NVIDIA DCGM hostengine (off by default).

When it is on, DCGM Exporter connects to it through the ``nvidia-dcgm`` Service instead of
running its embedded hostengine. The hostengine gets administrative access to every GPU of its
node through a DRA claim rather than through the nvidia runtime class.
"""

from __future__ import annotations

from gpucluster.api import gpucluster as gc
from gpucluster.controller.operands.common import (
    DCGM_IMAGE_ENV,
    READ,
    STATE_DCGM,
    ClusterFacts,
    Ctx,
    Obj,
    RenderError,
    admin_claim_template,
    detached,
    merge_env,
    prune,
    resolve_image,
    resources,
    rule,
)

APP = "nvidia-dcgm"
NAME = "nvidia-dcgm"
CLAIM_TEMPLATE = "nvidia-dcgm-admin"
CLAIM = "admin-gpus"
PORT = 5555
NODE_SELECTOR = {"nvidia.com/gpu.deploy.dcgm": "true"}
# What DCGM Exporter puts in DCGM_REMOTE_HOSTENGINE_INFO: the Service below, in the same namespace.
REMOTE_HOSTENGINE = f"{NAME}:{PORT}"


def dcgm_enabled(cluster: gc.GPUCluster) -> bool:
    return cluster.spec.dcgm.enabled


def render_dcgm(cluster: gc.GPUCluster, facts: ClusterFacts) -> list[Obj]:
    """Objects of the standalone DCGM hostengine in apply order; none when it is disabled."""
    if not dcgm_enabled(cluster):
        return []
    ctx = Ctx(cluster, facts, STATE_DCGM, APP)
    spec = cluster.spec.dcgm
    image = resolve_image("spec.dcgm", "DCGM", spec.repository, spec.image, spec.version, DCGM_IMAGE_ENV, facts.env)
    if spec.hostNetwork and spec.hostPort != PORT:
        raise RenderError(
            "spec.dcgm.hostPort",
            f"Invalid value: {spec.hostPort}: must be {PORT} when spec.dcgm.hostNetwork is true "
            "(on the host network the host port is the hostengine's port)",
        )

    objs: list[Obj] = [
        ctx.service_account(NAME),
        ctx.role(NAME, [rule(["resource.k8s.io"], ["resourceclaims"], READ)]),
        ctx.binding("RoleBinding", NAME, NAME, NAME),
        admin_claim_template(ctx, CLAIM_TEMPLATE, CLAIM, all_devices=True),
    ]
    objs += ctx.dcgm_scc(NAME, "Privileged and host access for the standalone NVIDIA DCGM hostengine.", host_pid=False)
    objs.append(_service(ctx))
    objs.append(_daemonset(ctx, image))
    return detached(objs)


def _service(ctx: Ctx) -> Obj:
    # Local: each exporter talks to the hostengine of its own node.
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ctx.meta(NAME, extra_labels={"app": NAME}),
        "spec": {
            "type": "ClusterIP",
            "internalTrafficPolicy": "Local",
            "selector": {"app": NAME},
            "ports": [{"name": "dcgm", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def _daemonset(ctx: Ctx, image: str) -> Obj:
    spec = ctx.cluster.spec.dcgm
    container = prune(
        {
            "name": "nvidia-dcgm-ctr",
            "image": image,
            "imagePullPolicy": spec.imagePullPolicy,
            "args": list(spec.args) if spec.args else None,
            "env": merge_env([], spec.env) or None,
            "ports": [{"name": "dcgm", "containerPort": PORT, "hostPort": spec.hostPort, "protocol": "TCP"}],
            "livenessProbe": {"tcpSocket": {"port": PORT}, "initialDelaySeconds": 15},
            "readinessProbe": {"tcpSocket": {"port": PORT}, "initialDelaySeconds": 15},
            "resources": resources(spec.resources, [CLAIM]),
            "securityContext": {"privileged": True},
        }
    )
    pod = ctx.pod_spec(
        service_account=NAME,
        node_selector=NODE_SELECTOR,
        image_pull_secrets=spec.imagePullSecrets,
        host_network=bool(spec.hostNetwork),
        resource_claims=[{"name": CLAIM, "resourceClaimTemplateName": CLAIM_TEMPLATE}],
        containers=[container],
    )
    return ctx.daemonset(NAME, pod, component="hostengine")
