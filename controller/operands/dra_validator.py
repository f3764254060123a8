"""state-dra-validation: ``nvidia-dra-validator``, proof that the DRA driver serves GPUs on a node.

Its pod consumes a claim for one GPU (adminAccess: it never takes a GPU away from workloads), so
it cannot start until the DRA driver published the node's GPUs and the scheduler allocated one.
The container then runs ``nvidia-smi -L`` (injected with the GPU through CDI) and, only when that
lists a GPU, writes a file the readiness probe checks: the pod is Ready exactly when a GPU was
allocated and works.
"""

from __future__ import annotations

from gpucluster.api import gpucluster as gc
from gpucluster.controller.operands.common import (
    STATE_DRA_VALIDATION,
    VALIDATOR_IMAGE_ENV,
    ClusterFacts,
    Ctx,
    Obj,
    admin_claim_template,
    detached,
    prune,
    resources,
)
from gpucluster.controller.operands.dra_driver import driver_image

APP = "nvidia-dra-validator"
NAME = "nvidia-dra-validator"
CLAIM_TEMPLATE = "nvidia-dra-validator-gpu"
CLAIM = "validation-gpu"
NODE_SELECTOR = {"nvidia.com/gpu.deploy.dra-validator": "true"}
STATUS_DIR = "/run/nvidia-dra-validator"
VALIDATED_FILE = f"{STATUS_DIR}/validated"

VALIDATOR_SCRIPT = """\
# Ready only after a GPU was allocated to this pod and nvidia-smi -L lists it.
set -u
rm -f "$VALIDATED_FILE"
if ! gpus=$(nvidia-smi -L); then
  echo "nvidia-dra-validator: nvidia-smi -L failed on the allocated GPU" >&2
  exit 1
fi
echo "$gpus"
case "$gpus" in
  *GPU*) ;;
  *) echo "nvidia-dra-validator: nvidia-smi -L listed no GPU" >&2; exit 1 ;;
esac
touch "$VALIDATED_FILE"
echo "nvidia-dra-validator: the DRA driver allocated a working GPU"
# Hold the pod Ready; stop promptly (and take the sleeper along) when the pod is deleted.
pid=
trap 'kill $pid 2>/dev/null; exit 0' TERM INT
while true; do
  sleep 3600 &
  pid=$!
  wait $pid
done
"""


def validator_image(cluster: gc.GPUCluster, facts: ClusterFacts) -> str:
    """``VALIDATOR_IMAGE`` (the GPU Operator image, as upstream), else the DRA driver image:
    the check needs only a POSIX shell, as nvidia-smi comes with the GPU through CDI."""
    return facts.env.get(VALIDATOR_IMAGE_ENV) or driver_image(cluster, facts)


def render_dra_validator(cluster: gc.GPUCluster, facts: ClusterFacts) -> list[Obj]:
    """Objects of the DRA validator in apply order. Always enabled, as the gpus capability is."""
    ctx = Ctx(cluster, facts, STATE_DRA_VALIDATION, APP)
    spec = cluster.spec.draDriver
    image = validator_image(cluster, facts)
    objs: list[Obj] = [
        ctx.service_account(NAME),
        admin_claim_template(ctx, CLAIM_TEMPLATE, CLAIM, all_devices=False),
    ]
    if facts.openshift:
        objs.append(
            ctx.scc(
                NAME,
                [NAME],
                description="Access for the NVIDIA DRA validator.",
                host_network=False,
                host_pid=False,
                host_ports=False,
            )
        )
    container = prune(
        {
            "name": NAME,
            "image": image,
            "imagePullPolicy": spec.imagePullPolicy,
            "command": ["sh", "-c", VALIDATOR_SCRIPT],
            "env": [{"name": "VALIDATED_FILE", "value": VALIDATED_FILE}],
            "readinessProbe": {"exec": {"command": ["cat", VALIDATED_FILE]}, "periodSeconds": 5},
            "resources": resources(None, [CLAIM]),
            "volumeMounts": [{"name": "status", "mountPath": STATUS_DIR}],
        }
    )
    pod = ctx.pod_spec(
        service_account=NAME,
        # It never talks to the API server.
        automount_token=False,
        node_selector=NODE_SELECTOR,
        image_pull_secrets=spec.imagePullSecrets,
        resource_claims=[{"name": CLAIM, "resourceClaimTemplateName": CLAIM_TEMPLATE}],
        containers=[container],
        volumes=[{"name": "status", "emptyDir": {}}],
    )
    objs.append(ctx.daemonset(NAME, pod, component="validator", default_max_unavailable="100%"))
    return detached(objs)
