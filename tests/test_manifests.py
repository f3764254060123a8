"""The one loader: YAML or JSON, streams, List objects, and one-line errors naming the file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpucluster.errors import InputError
from gpucluster.manifests import dump_yaml_stream, load_objects, load_objects_from_text


def test_multi_document_yaml_stream_keeps_order_and_skips_empty_documents() -> None:
    text = "---\nkind: A\n---\n---\n# only a comment\n---\nkind: B\n...\n"
    assert [o["kind"] for o in load_objects_from_text(text, "s.yaml")] == ["A", "B"]


def test_list_objects_are_expanded() -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [{"kind": "A"}, {"kind": "B"}]})
    assert [o["kind"] for o in load_objects_from_text(text, "l.json")] == ["A", "B"]
    typed = "kind: ResourceSliceList\nitems:\n- kind: ResourceSlice\n"
    assert load_objects_from_text(typed, "l.yaml") == [{"kind": "ResourceSlice"}]


def test_json_and_flow_yaml() -> None:
    assert load_objects_from_text('{"kind": "A", "n": 1}', "a.json") == [{"kind": "A", "n": 1}]
    assert load_objects_from_text("{kind: A, n: 1}", "a.yaml") == [{"kind": "A", "n": 1}]


def test_timestamps_stay_strings_as_kubernetes_keeps_them() -> None:
    [obj] = load_objects_from_text("metadata:\n  creationTimestamp: 2026-11-30T04:00:00Z\n", "t.yaml")
    assert obj["metadata"]["creationTimestamp"] == "2026-11-30T04:00:00Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1\n", "bad.yaml:2:1: invalid YAML"),
        ("a: 1\na: 2\n", "bad.yaml:2:1: invalid YAML: duplicate key 'a' (first defined on line 1)"),
        ("- 1\n- 2\n", "bad.yaml: document 1 is a list, expected a Kubernetes object"),
        ("kind: A\n---\njust a string\n", "bad.yaml: document 2 is a str"),
        ("kind: PodList\nitems: 3\n", "bad.yaml: document 1 (PodList): items must be a list"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        load_objects_from_text(text, "bad.yaml")
    message = str(err.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_files_and_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("kind: A\n")
    assert load_objects(str(path)) == [{"kind": "A"}]
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: B\n"))
    assert load_objects("-") == [{"kind": "B"}]
    with pytest.raises(InputError, match="no such file"):
        load_objects(str(tmp_path / "missing.yaml"))
    with pytest.raises(InputError, match="is a directory"):
        load_objects(str(tmp_path))
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="not UTF-8"):
        load_objects(str(binary))


def test_dump_round_trips() -> None:
    objects = [{"kind": "A", "spec": {"b": [1, 2], "a": "x"}}, {"kind": "B"}]
    assert load_objects_from_text(dump_yaml_stream(objects), "rt") == objects
