"""``gpucluster migrate`` as users run it: files, stdin, directories, --check, exit codes, the report."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from tests.migrate.conftest import EXPECTED, INPUT, Main


def test_file_to_stdout_with_report_on_stderr(gpucluster: Main, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpucluster("migrate", "-f", str(INPUT / "batch.yaml")) == 0
    out, err = capsys.readouterr()
    assert out == (EXPECTED / "batch.yaml").read_text()
    source = str(INPUT / "batch.yaml")
    assert f"{source}: migrated Job research/finetune (spec.template): 4 devices per pod (gpu.nvidia.com=4)" in err
    assert "  container train: nvidia.com/gpu 4 -> claim gpu-0 (template gpucluster-gpu-4-6351168bde)" in err
    assert f"{source}: created ResourceClaimTemplate research/gpucluster-gpu-4-6351168bde" in err
    assert (
        f"{source}: not migrated: CronJob research/nightly-eval (spec.jobTemplate.spec.template): "
        "container half: nvidia.com/gpu request 1 differs from limit 2; container left unchanged"
    ) in err
    assert err.splitlines()[-1] == (
        "gpucluster migrate: 3 workloads migrated (9 devices per pod in total), 2 ResourceClaimTemplates created, "
        "3 GPU requests not migrated; 1 of 1 file changed"
    )


def test_stdin_to_output_file(gpucluster: Main, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((INPUT / "kubeflow.yaml").read_text()))
    target = tmp_path / "out.yaml"
    assert gpucluster("migrate", "-f", "-", "-o", str(target)) == 0
    assert target.read_text() == (EXPECTED / "kubeflow.yaml").read_text()


def test_file_into_an_existing_directory(gpucluster: Main, tmp_path: Path) -> None:
    assert gpucluster("migrate", "-f", str(INPUT / "pod.json"), "-o", str(tmp_path)) == 0
    assert (tmp_path / "pod.json").read_text() == (EXPECTED / "pod.json").read_text()


def test_check_exit_codes_and_nothing_written(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    copy = tmp_path / "workloads.yaml"
    shutil.copy(INPUT / "workloads.yaml", copy)
    before = copy.read_text()
    assert gpucluster("migrate", "-f", str(copy), "--check") == 1
    out, err = capsys.readouterr()
    assert copy.read_text() == before
    assert f"would migrate {copy}: Deployment ml/triton (spec.template): 1 device per pod (gpu.nvidia.com=1)" in out
    assert f"would create {copy}: ResourceClaimTemplate ml/gpucluster-gpu-1-18c4435f83" in out
    assert "apiVersion" not in out  # no manifest in check mode
    assert "to migrate" in err.splitlines()[-1]

    migrated = tmp_path / "migrated.yaml"
    migrated.write_text((EXPECTED / "workloads.yaml").read_text())
    assert gpucluster("migrate", "-f", str(migrated), "--check") == 0
    out, _ = capsys.readouterr()
    assert out == ""


def test_check_fails_on_requests_that_need_manual_migration(
    gpucluster: Main, capsys: pytest.CaptureFixture[str]
) -> None:
    # Everything migratable is migrated, but fractional, mismatched and unknown requests remain.
    assert gpucluster("migrate", "-f", str(EXPECTED / "batch.yaml"), "--check") == 1
    out, _ = capsys.readouterr()
    assert "needs manual migration" in out and "would migrate" not in out


def test_directory_mode_mirrors_the_tree(gpucluster: Main, tmp_path: Path) -> None:
    source = tmp_path / "manifests"
    (source / "apps" / "inference").mkdir(parents=True)
    (source / ".git").mkdir()
    shutil.copy(INPUT / "workloads.yaml", source / "apps" / "inference" / "workloads.yaml")
    shutil.copy(INPUT / "list.json", source / "list.json")
    (source / "README.md").write_text("not a manifest\n")
    (source / "plain.yml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    (source / ".git" / "gpu.yaml").write_text("kind: Pod\n")
    out = tmp_path / "out"
    assert gpucluster("migrate", "-f", str(source), "-o", str(out)) == 0
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == ["apps/inference/workloads.yaml", "list.json", "plain.yml"]
    assert (out / "apps/inference/workloads.yaml").read_text() == (EXPECTED / "workloads.yaml").read_text()
    assert (out / "list.json").read_text() == (EXPECTED / "list.json").read_text()
    assert (out / "plain.yml").read_text() == (source / "plain.yml").read_text()
    assert (source / "apps/inference/workloads.yaml").read_text() == (INPUT / "workloads.yaml").read_text()


def test_golden_tree_round_trip(gpucluster: Main, tmp_path: Path) -> None:
    assert gpucluster("migrate", "-f", str(INPUT), "-o", str(tmp_path / "out")) == 0
    for expected in EXPECTED.iterdir():
        assert (tmp_path / "out" / expected.name).read_text() == expected.read_text(), expected.name
    assert gpucluster("migrate", "-f", str(INPUT), "--check") == 1


def test_directory_needs_an_output_outside_it(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "manifests"
    source.mkdir()
    shutil.copy(INPUT / "pod.json", source / "pod.json")
    assert gpucluster("migrate", "-f", str(source)) == 2
    assert "give -o DIR" in capsys.readouterr().err
    assert gpucluster("migrate", "-f", str(source), "-o", str(source / "migrated")) == 2
    assert "must be outside" in capsys.readouterr().err
    assert gpucluster("migrate", "-f", str(source), "-o", str(source)) == 2
    assert not (source / "migrated").exists()


def test_directory_output_that_holds_the_source_is_refused(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # -f tree/src -o tree mirrors src/src/x.yaml onto src/x.yaml: a source file of the user's.
    source = tmp_path / "src"
    (source / "src").mkdir(parents=True)
    shutil.copy(INPUT / "workloads.yaml", source / "x.yaml")
    (source / "src" / "x.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inner}\n")
    before = (source / "x.yaml").read_text()
    assert gpucluster("migrate", "-f", str(source), "-o", str(tmp_path)) == 2
    assert "must be outside" in capsys.readouterr().err
    assert (source / "x.yaml").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_bad_yaml_exits_2_naming_file_and_line(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n name: b\n")
    assert gpucluster("migrate", "-f", str(bad)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"gpucluster migrate: {bad}:8:")
    assert "invalid YAML" in err and len(err.strip().splitlines()) == 1


def bad_tree(tmp_path: Path) -> Path:
    """Two good manifests and four bad ones: YAML syntax, a duplicate key, invalid JSON, not UTF-8."""
    source = tmp_path / "manifests"
    (source / "sub").mkdir(parents=True)
    shutil.copy(INPUT / "pod.json", source / "a.json")
    (source / "b.yaml").write_text("kind: Pod\nspec: {containers: [}\n")
    (source / "sub" / "c.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n")
    (source / "sub" / "d.json").write_text('{"kind": "Pod",}\n')
    (source / "sub" / "e.yml").write_bytes(b"kind: Pod\nmetadata: {name: \xff}\n")
    shutil.copy(INPUT / "workloads.yaml", source / "sub" / "workloads.yaml")
    return source


BAD = ("b.yaml", "sub/c.yaml", "sub/d.json", "sub/e.yml")


def test_bad_files_in_a_directory_are_all_reported_and_the_rest_is_migrated(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = bad_tree(tmp_path)
    out = tmp_path / "out"
    assert gpucluster("migrate", "-f", str(source), "-o", str(out)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith(f"gpucluster migrate: {source}")]
    assert [line.split(": ")[1].split(":")[0] for line in errors] == [str(source / name) for name in BAD]
    assert f"gpucluster migrate: {source / 'b.yaml'}:2:" in err
    assert f"gpucluster migrate: {source / 'sub/c.yaml'}:5:" in err and "duplicate" in err
    assert f"gpucluster migrate: {source / 'sub/d.json'}:1:" in err and "invalid JSON" in err
    assert f"gpucluster migrate: {source / 'sub/e.yml'}: not UTF-8" in err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "gpucluster migrate: 4 files not migrated (cannot be read or parsed, listed above)"
    assert err.splitlines()[-2].endswith("; 2 of 2 files changed")
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == ["a.json", "sub/workloads.yaml"]
    assert (out / "a.json").read_text() == (EXPECTED / "pod.json").read_text()
    assert (out / "sub/workloads.yaml").read_text() == (EXPECTED / "workloads.yaml").read_text()


def test_check_of_a_directory_with_bad_files_checks_the_rest_and_exits_2(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = bad_tree(tmp_path)
    assert gpucluster("migrate", "-f", str(source), "--check") == 2
    out, err = capsys.readouterr()
    assert f"would migrate {source / 'sub/workloads.yaml'}: Deployment ml/triton" in out
    for name in BAD:
        assert f"gpucluster migrate: {source / name}:" in err
    # Only bad files, nothing to migrate: still 2, never 0.
    for name in ("a.json", "sub/workloads.yaml"):
        (source / name).unlink()
    assert gpucluster("migrate", "-f", str(source), "--check") == 2


def test_missing_file_exits_2(gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert gpucluster("migrate", "-f", str(tmp_path / "nope.yaml")) == 2
    assert "no such file" in capsys.readouterr().err


def test_in_place_for_an_explicit_file(gpucluster: Main, tmp_path: Path) -> None:
    target = tmp_path / "pod.json"
    shutil.copy(INPUT / "pod.json", target)
    assert gpucluster("migrate", "-f", str(target), "-o", str(target)) == 0
    assert target.read_text() == (EXPECTED / "pod.json").read_text()


def test_an_empty_filename_and_check_with_an_output_are_usage_errors(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # -f "" read the current directory (Path("") is "."); --check silently ignored -o.
    assert gpucluster("migrate", "-f", "") == 2
    assert "-f: give a file" in capsys.readouterr().err
    assert gpucluster("migrate", "-f", str(INPUT / "batch.yaml"), "-o", "") == 2
    assert "-o: give a file or a directory" in capsys.readouterr().err
    target = tmp_path / "out.yaml"
    assert gpucluster("migrate", "-f", str(INPUT / "batch.yaml"), "--check", "-o", str(target)) == 2
    assert "--check writes nothing" in capsys.readouterr().err
    assert not target.exists()
