"""A spec that sets only ``version`` rolls the operator's default image to that version."""

from __future__ import annotations

import pytest

from gpucluster.api.validation import validate_gpucluster
from gpucluster.controller.operands import ClusterFacts, RenderError, render
from tests.controller.helpers import ENV, NAMESPACE, UID, cluster, container, kubelet_plugin, manifest


def plugin_image(env: dict[str, str], version: str) -> str:
    facts = ClusterFacts(namespace=NAMESPACE, env=env, owner_uid=UID)
    objs = render(cluster({"draDriver": {"version": version}}, with_driver_image=False), facts)
    image: str = container(kubelet_plugin(objs), "gpus")["image"]
    return image


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        ("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.1"),
        ("registry.local:5000/mirror/k8s-dra-driver-gpu@sha256:" + "a" * 64, "registry.local:5000/mirror/k8s-dra-driver-gpu:v25.12.1"),
    ],
)  # fmt: skip
def test_version_alone_keeps_the_default_repository_and_image(default: str, expected: str) -> None:
    assert plugin_image({**ENV, "DRA_DRIVER_IMAGE": default}, "v25.12.1") == expected


def test_version_alone_without_a_default_image_names_the_missing_fields() -> None:
    with pytest.raises(RenderError, match=r"spec\.draDriver\.repository, spec\.draDriver\.image and"):
        plugin_image(dict(ENV), "v25.12.1")


def test_an_invalid_version_alone_is_refused_with_the_field() -> None:
    refused = validate_gpucluster(manifest({"draDriver": {"version": "bad tag!"}}, with_driver_image=False))
    assert [(p.path, p.message) for p in refused.problems] == [
        (
            "spec.draDriver.version",
            'Invalid value: "bad tag!": must be an image tag (letters, digits, _ . -; at most 128) or a sha256: digest',
        )
    ]
    model = cluster(with_driver_image=False)
    model.spec.draDriver.version = "bad tag!"  # a model that skipped validation: the renderer refuses it too
    facts = ClusterFacts(
        namespace=NAMESPACE, env={**ENV, "DRA_DRIVER_IMAGE": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"}
    )
    with pytest.raises(RenderError, match=r"spec\.draDriver\.version"):
        render(model, facts)
