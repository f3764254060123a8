"""``gpucluster render``: gpucluster/commands/render.py, through its own parser."""

from __future__ import annotations

import argparse
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpucluster.cli import render
from gpucluster.errors import EXIT_OK, InputError
from tests.controller.helpers import DRIVER_REF, EXPORTER_REF, VALIDATOR_REF

GOOD = """\
apiVersion: nvidia.com/v1alpha1
kind: GPUCluster
metadata:
  name: gpu-cluster
  uid: 0a0b0c0d-1111-2222-3333-444455556666
spec:
  draDriver:
    repository: nvcr.io/nvidia
    image: k8s-dra-driver-gpu
    version: v25.8.0
    featureGates: {MPSSupport: true}
  dcgmExporter:
    serviceMonitor: {enabled: true}
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpucluster")
    render.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["render", *argv])


@pytest.fixture(autouse=True)
def operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DRA_DRIVER_IMAGE", "DCGM_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DCGM_EXPORTER_IMAGE", EXPORTER_REF)
    monkeypatch.setenv("VALIDATOR_IMAGE", VALIDATOR_REF)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpucluster.yaml"
    path.write_text(text)
    return str(path)


def test_render_prints_a_valid_yaml_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("-f", write(tmp_path, GOOD), "--namespace", "nvidia-gpu")
    assert args.func is render.run
    assert render.run(args) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("---\n")
    objs = list(yaml.safe_load_all(out))
    assert objs[0]["kind"] == "ServiceAccount"
    assert {o["metadata"].get("namespace", "nvidia-gpu") for o in objs} == {"nvidia-gpu"}
    assert {o["metadata"]["ownerReferences"][0]["uid"] for o in objs} == {"0a0b0c0d-1111-2222-3333-444455556666"}
    # Offline, a ServiceMonitor the CR asks for is shown.
    assert [o["kind"] for o in objs].count("ServiceMonitor") == 1
    plugin = next(o for o in objs if o["metadata"]["name"] == "nvidia-dra-driver-kubelet-plugin")
    assert plugin["spec"]["template"]["spec"]["containers"][0]["image"] == DRIVER_REF
    for obj in objs:
        if obj["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(obj, "1.34", strict=True)


def test_render_is_byte_identical_across_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    render.run(parse("-f", path))
    first = capsys.readouterr().out
    render.run(parse("-f", path))
    assert capsys.readouterr().out == first


def test_image_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRA_DRIVER_IMAGE", "registry.example.com/dra-driver:v9")
    text = "apiVersion: nvidia.com/v1alpha1\nkind: GPUCluster\nmetadata: {name: gpu-cluster}\n"
    assert render.run(parse("-f", write(tmp_path, text))) == EXIT_OK
    assert "image: registry.example.com/dra-driver:v9" in capsys.readouterr().out


def test_an_unusable_image_variable_is_exit_2_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "apiVersion: nvidia.com/v1alpha1\nkind: GPUCluster\nmetadata: {name: gpu-cluster}\n"
    path = write(tmp_path, text)
    monkeypatch.setenv("DRA_DRIVER_IMAGE", "Not A Reference")
    with pytest.raises(InputError) as info:
        render.run(parse("-f", path))
    assert info.value.exit_code == 2
    assert str(info.value).startswith(f"{path}: spec.draDriver.version: no image for the DRA driver")
    assert "\n" not in str(info.value)


def test_bad_field_is_exit_2_naming_the_path(tmp_path: Path) -> None:
    text = GOOD.replace("featureGates: {MPSSupport: true}", "featureGates: {MPSSupport: 'yes'}")
    with pytest.raises(InputError, match=r"spec\.draDriver\.featureGates\.MPSSupport: Invalid value"):
        render.run(parse("-f", write(tmp_path, text)))


def test_bad_image_version_is_exit_2(tmp_path: Path) -> None:
    text = GOOD.replace("version: v25.8.0", "version: 'sha256:nothex'")
    with pytest.raises(InputError, match=r"spec\.draDriver\.version: Invalid value"):
        render.run(parse("-f", write(tmp_path, text)))


def test_not_the_singleton_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"metadata\.name"):
        render.run(parse("-f", write(tmp_path, GOOD.replace("name: gpu-cluster", "name: other"))))


def test_one_gpucluster_only(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected one GPUCluster"):
        render.run(parse("-f", write(tmp_path, GOOD + "---\n" + GOOD)))
    with pytest.raises(InputError, match="no objects"):
        render.run(parse("-f", write(tmp_path, "")))


def test_bad_namespace(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--namespace"):
        render.run(parse("-f", write(tmp_path, GOOD), "--namespace", "Bad_NS"))


def test_unknown_fields_warn_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("  dcgmExporter:", "  bogus: 1\n  dcgmExporter:")
    assert render.run(parse("-f", write(tmp_path, text))) == EXIT_OK
    assert 'warning: unknown field "spec.bogus"' in capsys.readouterr().err


def test_images_the_gpucluster_does_not_name_come_from_the_charts_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`render -f examples/gpucluster.yaml` used to exit 2 ("no image for the DRA driver") unless
    the image variables were set, while `gpucluster run` accepts the same file."""
    for name in ("DRA_DRIVER_IMAGE", "DCGM_IMAGE", "DCGM_EXPORTER_IMAGE", "VALIDATOR_IMAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DRA_DRIVER_IMAGE", "")  # set but empty: unset, the default named is the one used
    example = Path(__file__).resolve().parents[2] / "examples" / "gpucluster.yaml"
    assert render.run(parse("-f", str(example))) == EXIT_OK
    out, err = capsys.readouterr()
    values = yaml.safe_load((Path(__file__).resolve().parents[2] / "charts/gpucluster/values.yaml").read_text())
    driver = values["gpuCluster"]["draDriver"]
    wanted = f"{driver['repository']}/{driver['image']}:{driver['version']}"
    images = {c["image"] for d in yaml.safe_load_all(out) if d and d["kind"] == "DaemonSet"
              for c in d["spec"]["template"]["spec"]["containers"]}  # fmt: skip
    assert wanted in images
    assert err.startswith("gpucluster render: images the GPUCluster does not name come from the chart's defaults: ")
    assert f"DRA_DRIVER_IMAGE={wanted}" in err
    # What the environment names wins, and is not reported as a default.
    monkeypatch.setenv("DRA_DRIVER_IMAGE", "registry.example.com/dra/driver:v9")
    assert render.run(parse("-f", str(example))) == EXIT_OK
    out, err = capsys.readouterr()
    assert "registry.example.com/dra/driver:v9" in out and "DRA_DRIVER_IMAGE=" not in err
