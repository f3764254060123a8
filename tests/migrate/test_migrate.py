"""``gpucluster.migrate``: golden manifests, idempotence, byte-for-byte preservation, workload shapes.

The golden inputs under ``golden/input`` follow the public shapes of each kind (apps/v1, batch/v1,
Kubeflow PyTorchJob/MPIJob/TrainJob, Argo Workflow, KServe InferenceService/ServingRuntime);
``golden/expected`` holds what migrate makes of them. ``GPUCLUSTER_UPDATE_GOLDEN=1`` rewrites the
expected files (review the diff before committing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.migrate import MigrateResult, migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from gpucluster.translate import translate_pod_spec
from tests.migrate.conftest import EXPECTED, INPUT

GOLDEN_NAMES = sorted(p.name for p in INPUT.iterdir() if p.is_file())
ANNOTATION = WEBHOOK_CONFIG.annotation


def migrate(text: str, source: str = "test.yaml", **kwargs: Any) -> MigrateResult:
    return migrate_text(text, source, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL, **kwargs)


def load_all(text: str) -> list[Any]:
    if text.lstrip().startswith("{"):
        return [json.loads(text)]
    return [d for d in yaml.safe_load_all(text) if d is not None]


def by_name(docs: list[Any], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        items = doc.get("items", []) if str(doc.get("kind", "")).endswith("List") else [doc]
        for item in items:
            if item.get("kind") == kind and item["metadata"].get("name", item["metadata"].get("generateName")) == name:
                return dict(item)
    raise AssertionError(f"{kind} {name} not found")


# ----------------------------------------------------------------------------- golden


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden(name: str) -> None:
    source = INPUT / name
    result = migrate(source.read_text(), str(source), json_input=True if name.endswith(".json") else None)
    expected = EXPECTED / name
    if os.environ.get("GPUCLUSTER_UPDATE_GOLDEN"):
        expected.write_text(result.text)
    assert result.text == expected.read_text()
    assert result.changed


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_migrating_twice_is_migrating_once(name: str) -> None:
    once = (EXPECTED / name).read_text()
    again = migrate(once, name)
    assert again.text == once
    assert not again.changed
    assert not again.migrated and not again.created


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_output_parses_and_every_pod_spec_is_what_the_webhook_makes(name: str) -> None:
    """Each migrated pod template is exactly translate_pod_spec of the original one."""
    before = load_all((INPUT / name).read_text())
    after = load_all((EXPECTED / name).read_text())
    templates = {
        (t["metadata"].get("namespace"), t["metadata"]["name"]): t
        for doc in after
        for t in (doc.get("items", []) if doc.get("kind") == "List" else [doc])
        if t.get("kind") == "ResourceClaimTemplate"
    }
    compared = 0
    for old, new in _pod_templates(before, after):
        namespace = old[0]
        translation = translate_pod_spec(
            old[1]["spec"], namespace=namespace, existing_annotations=old[1].get("annotations"), config=WEBHOOK_CONFIG
        )
        if not translation.changed or old[1]["labels"].get(TRANSLATE_LABEL) == "false":
            assert new[1]["spec"] == old[1]["spec"]  # left alone, as the webhook leaves it
            continue
        compared += 1
        assert new[1]["spec"] != old[1]["spec"]
        assert new[1]["spec"] == translation.pod_spec
        assert new[1]["annotations"][ANNOTATION] == translation.annotations[ANNOTATION]
        for template in translation.templates:
            assert (namespace, template["metadata"]["name"]) in templates
    if _pod_templates(before, before):
        assert compared, f"{name}: no pod template of the golden file is translated"


def _pod_templates(before: list[Any], after: list[Any]) -> list[tuple[Any, Any]]:
    """(namespace, {spec, annotations}) pairs of the generic pod templates (apps/batch/core/kubeflow)."""
    pairs = []
    after_objects = [
        o for d in after for o in (d.get("items", []) if d.get("kind") == "List" else [d]) if o.get("kind")
    ]
    for obj in [o for d in before for o in (d.get("items", []) if d.get("kind") == "List" else [d])]:
        twin = next(
            a
            for a in after_objects
            if a.get("kind") == obj.get("kind") and a.get("metadata", {}).get("name") == obj["metadata"].get("name")
        )
        for path in _template_paths(obj):
            old, new = _at(obj, path), _at(twin, path)
            ns = obj["metadata"].get("namespace")
            pairs.append(
                (
                    (
                        ns,
                        {
                            "spec": old["spec"],
                            "annotations": (old.get("metadata") or {}).get("annotations"),
                            "labels": (old.get("metadata") or {}).get("labels") or {},
                        },
                    ),
                    (ns, {"spec": new["spec"], "annotations": (new.get("metadata") or {}).get("annotations") or {}}),
                )
            )
    return pairs


def _template_paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if obj.get("kind") == "Pod" and path == ():
        return [()]
    found = []
    node = _at(obj, path) if path else obj
    if isinstance(node, dict):
        if path and isinstance(node.get("spec"), dict) and isinstance(node["spec"].get("containers"), list):
            return [path]
        for key, value in node.items():
            if isinstance(value, dict | list):
                found += _template_paths(obj, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, dict | list):
                found += _template_paths(obj, (*path, index))
    return found


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


# ----------------------------------------------------------------------------- preservation


def test_untouched_documents_and_comments_are_kept_byte_for_byte() -> None:
    text = (INPUT / "workloads.yaml").read_text()
    out = migrate(text).text
    chunks = text.split("\n---\n")
    namespace, configmap, _, service, *_ = chunks
    for untouched in (namespace, configmap + "\n", "\n" + service + "\n"):
        assert untouched in out
    for comment in ("# Applied with: kubectl apply -f workloads.yaml", 'EPOCHS: "10"   # keep quoted'):
        assert comment in out
    assert "# keeps the device plugin's GPU" in out  # the opted-out ReplicaSet is untouched
    assert "- name: gpu-0   # one A100 per replica" in out  # a removed request's comment goes to its claim
    assert out.startswith("# Inference and training workloads of the ml team.\n")


def test_text_without_gpu_requests_comes_back_identical() -> None:
    text = (
        "# odd formatting stays\n"
        "apiVersion:   apps/v1\n"
        "kind: Deployment\n"
        "metadata: {name: web,   namespace: default}\n"
        "spec:\n"
        "    template:\n"
        "        spec:\n"
        "            containers:\n"
        "              -   name: web\n"
        "                  image: 'nginx'   # quoted\n"
        "...\n"
        "---\n"
        "--- \n"
        "# empty document above\n"
    )
    result = migrate(text)
    assert result.text == text
    assert not result.changed and not result.workloads and not result.needs_migration


def test_changed_document_keeps_comments_blank_lines_and_style() -> None:
    text = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer   # trailing comment on a kept line
  namespace: ml
spec:
  template:
    metadata:
      creationTimestamp: null
    spec:
      containers:
        - name: cuda
          image: "nvcr.io/nvidia/cuda:12.6.2-base-ubi9"   # double quotes kept
          args: [train, --fast]
          resources:
            limits:
              nvidia.com/gpu: 2
              # more GPUs later

          env:
            - name: MODE
              value: 'fast'
      # volumes of the trainer
      volumes: []

# the end of the trainer
"""
    out = migrate(text).text
    assert "  name: trainer   # trailing comment on a kept line\n" in out
    assert 'image: "nvcr.io/nvidia/cuda:12.6.2-base-ubi9"   # double quotes kept' in out
    assert "args: [train, --fast]" in out
    assert "value: 'fast'" in out
    assert "creationTimestamp: null" in out
    assert "# more GPUs later\n\n          env:" in out
    assert "      # volumes of the trainer\n      volumes: []\n" in out
    assert out.endswith("\n# the end of the trainer\n")
    assert "          resources:\n            claims:\n              - name: gpu-0\n" in out  # indented sequences kept
    docs = load_all(out)
    assert docs[1]["spec"]["template"]["spec"]["resourceClaims"][0]["name"] == "gpu-0"


# ----------------------------------------------------------------------------- templates


def test_templates_come_once_per_namespace_before_their_first_user() -> None:
    deployment = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: NAME, namespace: NS}
spec:
  template:
    spec:
      containers:
      - name: c
        image: x
        resources:
          limits: {nvidia.com/gpu: 1}
"""
    text = "---\n".join(
        deployment.replace("NAME", name).replace("NS", ns) for name, ns in (("a", "one"), ("b", "one"), ("c", "two"))
    )
    result = migrate(text)
    kinds = [(d["kind"], d["metadata"].get("namespace")) for d in load_all(result.text)]
    assert kinds == [
        ("ResourceClaimTemplate", "one"),
        ("Deployment", "one"),
        ("Deployment", "one"),
        ("ResourceClaimTemplate", "two"),
        ("Deployment", "two"),
    ]
    assert result.created == ["one/gpucluster-gpu-1-18c4435f83", "two/gpucluster-gpu-1-18c4435f83"]


def test_template_already_in_the_input_is_not_added_again() -> None:
    result = migrate((INPUT / "exported.yaml").read_text())
    assert result.created == ["vision/gpucluster-gpu-2-cc238abfcd"]
    names = [(d["kind"], d["metadata"].get("name")) for d in load_all(result.text)]
    assert names.count(("ResourceClaimTemplate", "gpucluster-gpu-1-18c4435f83")) == 1


def test_workload_without_namespace_gets_templates_without_namespace() -> None:
    result = migrate((INPUT / "batch.yaml").read_text())
    smoke = load_all(result.text)
    template = by_name(smoke, "ResourceClaimTemplate", "gpucluster-gpu-1-18c4435f83")
    assert "namespace" not in template["metadata"]
    assert "gpucluster-gpu-1-18c4435f83" in result.created


def test_single_json_object_becomes_a_list_with_its_templates_first() -> None:
    result = migrate((INPUT / "pod.json").read_text(), "pod.json", json_input=True)
    out = json.loads(result.text)
    assert out["kind"] == "List"
    assert [i["kind"] for i in out["items"]] == ["ResourceClaimTemplate", "Pod"]
    assert result.text.startswith('{\n    "apiVersion"')  # the input's indentation
    assert result.text.endswith("}\n")


def test_json_list_gets_templates_as_items() -> None:
    result = migrate((INPUT / "list.json").read_text(), "list.json")
    items = json.loads(result.text)["items"]
    assert [i["kind"] for i in items] == ["ConfigMap", "ResourceClaimTemplate", "Deployment"]


# ----------------------------------------------------------------------------- report


def test_report_lists_migrated_workloads_gpus_templates_and_problems() -> None:
    result = migrate((INPUT / "batch.yaml").read_text(), "batch.yaml")
    migrated = {w.obj: w for w in result.migrated}
    assert set(migrated) == {"Job research/finetune", "CronJob research/nightly-eval", "Pod smoke-test"}
    assert migrated["Job research/finetune"].devices == {"gpu.nvidia.com": 4}
    assert migrated["Job research/finetune"].where == "spec.template"
    assert migrated["CronJob research/nightly-eval"].where == "spec.jobTemplate.spec.template"
    problems = [p for _, p in result.problems]
    assert any("request 1 differs from limit 2" in p for p in problems)
    assert any("500m is not a whole number" in p for p in problems)
    assert any("nvidia.com/gpu.shared is not a resource gpucluster translates" in p for p in problems)
    assert not any("hostdev" in p for p in problems)  # the Network Operator's resources are not ours
    assert result.needs_migration


def test_gpu_requests_outside_pod_templates_are_reported() -> None:
    kubeflow = migrate((INPUT / "kubeflow.yaml").read_text())
    assert kubeflow.unhandled == [
        "TrainJob kubeflow-user/llama-sft spec.trainer.resourcesPerNode.limits: nvidia.com/gpu outside a pod "
        "template gpucluster can rewrite; left as it is"
    ]
    kserve = migrate((INPUT / "kserve.yaml").read_text())
    assert [u.split(":")[0] for u in kserve.unhandled] == [
        "ServingRuntime serving/vllm-runtime spec.containers[0].resources.limits"
    ]
    embedded = migrate(
        "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec:\n"
        '  podSpecPatch: \'{"containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}\'\n'
        "  templates: []\n"
    )
    assert embedded.unhandled and "spec.podSpecPatch" in embedded.unhandled[0]


def test_opted_out_template_is_left_alone_with_a_note() -> None:
    result = migrate((INPUT / "workloads.yaml").read_text())
    notebook = next(w for w in result.workloads if w.obj == "ReplicaSet ml/notebook")
    assert not notebook.migrated and not notebook.problems
    assert notebook.notes == ["opted out (pod label gpucluster.nvidia.com/translate=false); left as it is"]


def test_already_translated_template_with_new_requests_is_a_problem() -> None:
    text = """\
apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    gpucluster.nvidia.com/translated-from: '{"containers": {"c": {"nvidia.com/gpu": "1"}}}'
spec:
  containers:
  - name: c
    image: x
    resources:
      limits:
        nvidia.com/gpu: 1
"""
    result = migrate(text)
    assert result.text == text
    assert result.problems and "already translated" in result.problems[0][1]


# ----------------------------------------------------------------------------- custom resources


def test_argo_claims_go_to_pod_spec_patch_and_annotation_to_template_metadata() -> None:
    docs = load_all((EXPECTED / "argo.yaml").read_text())
    workflow = by_name(docs, "Workflow", "train-eval-")
    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    train = templates["train"]
    assert json.loads(train["podSpecPatch"]) == {
        "resourceClaims": [{"name": "gpu-0", "resourceClaimTemplateName": "gpucluster-gpu-4-6351168bde"}]
    }
    assert train["container"]["resources"] == {"claims": [{"name": "gpu-0"}]}
    assert train["metadata"]["labels"] == {"stage": "train"}
    assert json.loads(train["metadata"]["annotations"][ANNOTATION]) == {"containers": {"main": {"nvidia.com/gpu": "4"}}}
    evaluate = yaml.safe_load(templates["evaluate"]["podSpecPatch"])  # a YAML patch stays YAML, extended
    assert evaluate["containers"] == [{"name": "main", "resources": {"limits": {"memory": "32Gi"}}}]
    assert evaluate["resourceClaims"][0]["resourceClaimTemplateName"] == "gpucluster-gpu-1-18c4435f83"
    assert "import torch" in templates["evaluate"]["script"]["source"]
    assert templates["multi"]["containerSet"]["containers"][0]["resources"] == {"claims": [{"name": "gpu-0"}]}
    sweep = migrate((INPUT / "argo.yaml").read_text())
    problem = next(p for w, p in sweep.problems if "sweep" in w.where)
    assert "podSpecPatch sets nvidia.com/gpu" in problem
    assert templates["sweep"]["podSpecPatch"].startswith('{"containers":[{"name":"main"')


def test_argo_existing_json_patch_is_extended_and_its_claims_are_respected() -> None:
    text = """\
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: t, namespace: argo}
spec:
  templates:
  - name: a
    podSpecPatch: '{"resourceClaims":[{"name":"gpu-0","resourceClaimName":"shared"}]}'
    container:
      image: x
      resources: {limits: {nvidia.com/gpu: 1}}
  - name: b
    podSpecPatch: '{"hostNetwork":true}'
    container:
      image: x
      resources: {limits: {nvidia.com/gpu: 1}}
"""
    result = migrate(text)
    docs = load_all(result.text)
    a = docs[-1]["spec"]["templates"][0]  # gpu-0 is the patch's: the translation takes gpu-1
    assert [c["name"] for c in json.loads(a["podSpecPatch"])["resourceClaims"]] == ["gpu-0", "gpu-1"]
    assert a["container"]["resources"] == {"claims": [{"name": "gpu-1"}]}
    b = docs[-1]["spec"]["templates"][1]
    assert json.loads(b["podSpecPatch"]) == {
        "hostNetwork": True,
        "resourceClaims": [{"name": "gpu-0", "resourceClaimTemplateName": "gpucluster-gpu-1-18c4435f83"}],
    }


def test_cluster_workflow_template_gets_a_note_about_namespaces() -> None:
    text = """\
apiVersion: argoproj.io/v1alpha1
kind: ClusterWorkflowTemplate
metadata: {name: gpu-step}
spec:
  templates:
  - name: step
    script:
      image: x
      source: print(1)
      resources: {limits: {nvidia.com/gpu: 1}}
"""
    result = migrate(text)
    (workload,) = result.migrated
    assert any("every such namespace" in n and "gpucluster-gpu-1-18c4435f83" in n for n in workload.notes)
    assert result.created == []  # the controller provisions them where the pods run


def test_kserve_framework_container_and_component_fields() -> None:
    docs = load_all((EXPECTED / "kserve.yaml").read_text())
    predictor = by_name(docs, "InferenceService", "llama3-8b")["spec"]["predictor"]
    assert predictor["model"]["resources"]["claims"] == [{"name": "gpu-0"}]
    assert "nvidia.com/gpu" not in predictor["model"]["resources"]["limits"]
    assert "name" not in predictor["model"]  # KServe names it kserve-container itself
    assert predictor["resourceClaims"] == [
        {"name": "gpu-0", "resourceClaimTemplateName": "gpucluster-gpu-1-18c4435f83"}
    ]
    assert json.loads(predictor["annotations"][ANNOTATION]) == {
        "containers": {"kserve-container": {"nvidia.com/gpu": "1"}}
    }
    custom = by_name(docs, "InferenceService", "custom-embedder")["spec"]
    assert custom["predictor"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith("gpucluster-mig-3g-40gb-1-")
    assert "resourceClaims" not in custom["transformer"]


def test_kserve_worker_spec_is_its_own_pod_spec() -> None:
    text = """\
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata: {name: big, namespace: serving}
spec:
  predictor:
    model:
      modelFormat: {name: huggingface}
      resources: {limits: {nvidia.com/gpu: 8}}
    workerSpec:
      tensorParallelSize: 8
      containers:
      - name: worker-container
        resources: {limits: {nvidia.com/gpu: 8}}
"""
    result = migrate(text)
    assert [w.where for w in result.migrated] == ["spec.predictor", "spec.predictor.workerSpec"]
    worker = load_all(result.text)[-1]["spec"]["predictor"]["workerSpec"]
    assert worker["resourceClaims"][0]["name"] == "gpu-0"
    assert worker["containers"][0]["resources"] == {"claims": [{"name": "gpu-0"}]}


def test_generic_custom_resource_pod_templates_are_found_structurally() -> None:
    text = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: ray, namespace: ray}
spec:
  headGroupSpec:
    template:
      spec:
        containers: [{name: head, image: rayproject/ray:2.35.0}]
  workerGroupSpecs:
  - groupName: gpu
    template:
      spec:
        containers:
        - name: worker
          image: rayproject/ray:2.35.0-gpu
          resources: {limits: {nvidia.com/gpu: 1}}
"""
    result = migrate(text)
    assert [w.where for w in result.migrated] == ["spec.workerGroupSpecs[0].template"]
    worker = load_all(result.text)[-1]["spec"]["workerGroupSpecs"][0]["template"]
    assert worker["metadata"]["annotations"][ANNOTATION]
    assert list(worker) == ["metadata", "spec"]  # metadata goes before spec


def test_top_level_spec_containers_of_other_kinds_is_not_a_pod_spec() -> None:
    result = migrate((INPUT / "kserve.yaml").read_text())
    runtime = by_name(load_all(result.text), "ServingRuntime", "vllm-runtime")
    assert runtime["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert "resourceClaims" not in runtime["spec"]


# ----------------------------------------------------------------------------- errors


def test_bad_yaml_names_the_file_and_line() -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nspec: [unclosed\n"
    with pytest.raises(InputError, match=r"^bad\.yaml:8:1: invalid YAML: "):
        migrate(text, "bad.yaml")


def test_duplicate_key_is_an_error_with_its_line() -> None:
    text = "---\n# c\napiVersion: v1\nkind: Pod\nkind: Pod\n"
    with pytest.raises(InputError, match=r"^dup\.yaml:5:\d+: invalid YAML: .*duplicate"):
        migrate(text, "dup.yaml")


def test_bad_json_names_the_file_and_line() -> None:
    with pytest.raises(InputError, match=r"^x\.json:3:1: invalid JSON: "):
        migrate('{\n  "a": 1,\n}\n', "x.json", json_input=True)


def test_scalar_and_non_object_documents_are_left_alone(tmp_path: Path) -> None:
    text = "just a string\n---\n- a\n- b\n"
    assert migrate(text).text == text
    assert migrate("[1, 2]", json_input=True).text == "[1, 2]"
    # GPU names that are not a request's key: a comment, a node label, a string.
    playbook = "# hosts with nvidia.com/gpu: 8\n- hosts: gpu\n  vars: {selector: {nvidia.com/gpu.product: A100}}\n"
    playbook += "---\n'nvidia.com/gpu: 1'\n"
    assert migrate(playbook).text == playbook


_pod_list = """\
- apiVersion: v1
  kind: Pod
  metadata: {name: p}
  spec:
    containers:
    - name: c
      image: x
      resources: {limits: {nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize(
    ("text", "json_input", "message"),
    [
        (_pod_list, None, "m.yaml: document 1 is a list, expected a Kubernetes object (it holds a GPU resource request)"),
        ("kind: ConfigMap\n---\n" + _pod_list, None, "m.yaml: document 2 is a list"),
        (
            "apiVersion: v1\nkind: List\nitems: [a, {kind: Pod, spec: {containers: [{resources: {limits: {nvidia.com/mig-1g.10gb: 1}}}]}}]\n",
            None,
            "m.yaml: document 1 (List): items[0] is not an object",
        ),
        ('[{"kind": "Pod", "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}]', True,
         "m.yaml: document 1 is a list"),
    ],
)  # fmt: skip
def test_documents_that_are_not_objects_and_hold_a_gpu_request_are_refused(
    text: str, json_input: bool | None, message: str
) -> None:
    # Passed over, a GPU request in them would go unreported and --check would say nothing is left.
    with pytest.raises(InputError) as caught:
        migrate_text(text, "m.yaml", json_input=json_input)
    assert str(caught.value).startswith(message)


def test_yaml_anchors_inside_a_pod_spec_block_migration_but_shared_labels_do_not() -> None:
    text = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: shared}
spec:
  selector:
    matchLabels: &labels
      app: a
  template:
    metadata:
      labels: *labels
    spec:
      containers:
      - name: x
        image: x
        resources: &res
          limits:
            nvidia.com/gpu: 1
      - name: y
        image: x
        resources: *res
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: labels-only}
spec:
  selector:
    matchLabels: &labels
      app: b
  template:
    metadata:
      labels: *labels
    spec:
      containers:
      - name: x
        image: x
        resources:
          limits:
            nvidia.com/gpu: 1
"""
    result = migrate(text)
    assert [w.obj for w in result.migrated] == ["Deployment labels-only"]
    assert [(w.obj, p) for w, p in result.problems] == [
        ("Deployment shared", "uses YAML anchors, aliases or merge keys; expand them, then migrate")
    ]
    assert result.text.startswith(text.split("---\n")[0])  # the aliased document is untouched
    assert "      labels: *labels\n      annotations:\n" in result.text


def test_json_with_a_duplicate_key_is_refused() -> None:
    # Which of the two GPU counts a reader keeps is not the user's choice to leave to it.
    text = '{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpu": "4"}}}]}}'
    with pytest.raises(InputError) as caught:
        migrate_text(text, "p.json")
    assert str(caught.value) == 'p.json: invalid JSON: duplicate key "nvidia.com/gpu" in an object'
