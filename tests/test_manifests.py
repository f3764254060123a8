"""The one loader: YAML or JSON, streams, List objects, and one-line errors naming the file."""

from __future__ import annotations

import io
import json
import re
import sys
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
        # JSON readers keep the last of two equal keys; Kubernetes' strict decoding refuses them.
        ('{"kind": "A", "kind": "B"}', 'bad.yaml: invalid JSON: duplicate key "kind" in an object'),
        ('\ufeff[{"a": {"x": 1, "y": 2, "x": 3}}]', 'bad.yaml: invalid JSON: duplicate key "x" in an object'),
        ('{"kind": "A", "k\\u0069nd": "B"}', 'bad.yaml: invalid JSON: duplicate key "kind" in an object'),
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


# --- The fast YAML builder (libyaml events straight to dicts) -------------------------------------

_DUMP_ITEM = """\
- apiVersion: v1
  kind: Node
  metadata:
    name: node-{i}
    creationTimestamp: 2025-10-01T00:00:00Z
    labels:
      nvidia.com/gpu.present: 'true'
      nvidia.com/gpu.count: '8'
  spec: {{}}
  status:
    capacity: {{cpu: '224', pods: 110}}
"""


def _dump(nodes: int) -> str:
    return "apiVersion: v1\nkind: List\nitems:\n" + "".join(_DUMP_ITEM.format(i=i) for i in range(nodes))


def test_kubectl_dumps_take_the_fast_builder_with_the_full_loaders_scalars() -> None:
    from gpucluster.manifests import _fast_documents

    text = (
        "a: yes\nb: off\nc: ~\nd:\ne: 0x1F\nf: 1_000\ng: 1:30\nh: 1.5e+3\ni: .inf\nj: 2024-01-01\n"
        "k: 2024-01-01T00:00:00Z\nl: '1'\nm: |\n  two\n  lines\nn: [1, 'a', {b: c}]\n1: int key\n"
    )
    [doc] = _fast_documents(text)  # no fallback: this raises if the builder gave up
    assert doc == {
        "a": True, "b": False, "c": None, "d": None, "e": 31, "f": 1000, "g": 90, "h": 1500.0,
        "i": float("inf"), "j": "2024-01-01", "k": "2024-01-01T00:00:00Z", "l": "1", "m": "two\nlines\n",
        "n": [1, "a", {"b": "c"}], 1: "int key",
    }  # fmt: skip
    [dump] = _fast_documents(_dump(2))
    assert dump["items"][1]["metadata"]["creationTimestamp"] == "2025-10-01T00:00:00Z"
    assert dump["items"][1]["status"]["capacity"] == {"cpu": "224", "pods": 110}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &x {b: 1}\nc: *x\n", {"a": {"b": 1}, "c": {"b": 1}}),
        ("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n", {"base": {"x": 1}, "d": {"x": 1, "y": 2}}),
        ("a: !!str 123\n", {"a": "123"}),
    ],
)
def test_anchors_merge_keys_and_tags_go_to_the_full_loader(text: str, expected: object) -> None:
    from gpucluster.manifests import _fast_documents, _Unusual

    with pytest.raises(_Unusual):
        _fast_documents(text)
    assert load_objects_from_text(text, "x.yaml") == [expected]


def test_duplicate_key_inside_a_list_item_names_file_and_both_lines() -> None:
    text = _dump(3).replace("    name: node-2\n", "    name: node-2\n    name: again\n")
    with pytest.raises(InputError) as err:
        load_objects_from_text(text, "dump.yaml")
    line = text.splitlines().index("    name: again") + 1
    assert (
        str(err.value) == f"dump.yaml:{line}:5: invalid YAML: duplicate key 'name' (first defined on line {line - 1})"
    )


def test_complex_keys_and_deep_nesting_are_one_line_errors_not_tracebacks() -> None:
    with pytest.raises(InputError, match=r"^x.yaml:1:3: invalid YAML: found unhashable key$"):
        load_objects_from_text("? [1, 2]\n: v\n", "x.yaml")
    # Deeper than the interpreter's recursion limit, whatever another test set it to.
    deep = "a:\n" + "".join("  " * i + "- b:\n" for i in range(1, sys.getrecursionlimit() + 100))
    # Python's recursion limit or libyaml's nesting limit, whichever comes first: one line either way.
    one_line = r"^x.yaml(:\d+:\d+)?: invalid YAML: (nested too deeply|exceeded maximum nesting depth)$"
    with pytest.raises(InputError, match=one_line):
        load_objects_from_text(deep, "x.yaml")


def test_repeated_strings_of_a_dump_are_shared() -> None:
    a, b = load_objects_from_text(_dump(2), "d.yaml")
    assert a["metadata"]["labels"]["nvidia.com/gpu.present"] is b["metadata"]["labels"]["nvidia.com/gpu.present"]
    assert a["metadata"]["creationTimestamp"] is b["metadata"]["creationTimestamp"]


def test_loading_a_dump_never_holds_a_node_graph() -> None:
    import gc
    import tracemalloc

    text = _dump(300)
    gc.collect()
    tracemalloc.start()
    try:
        objects = load_objects_from_text(text, "d.yaml")
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(objects) == 300
    # Composing the whole document first peaks at about 5x what the dicts keep.
    assert peak < 1.5 * retained, (peak, retained)


def test_bad_scalars_and_control_characters_are_one_line_errors_with_their_place() -> None:
    with pytest.raises(InputError, match=r"^x.yaml: invalid YAML: .*base 16"):
        load_objects_from_text("a: 0x_\n", "x.yaml")
    with pytest.raises(InputError) as found:
        load_objects_from_text('kind: x\nb: 1\na: "\x07"\n', "x.yaml")
    assert (
        str(found.value)
        == "x.yaml:3:5: invalid YAML: unacceptable character #x0007: control characters are not allowed"
    )


def test_json_with_a_byte_order_mark_is_read_as_json() -> None:
    [obj] = load_objects_from_text('\ufeff{"kind": "x", "a": 1.0e5}', "x.json")
    assert obj == {"kind": "x", "a": 100000.0}  # a JSON number, not the YAML 1.1 string "1.0e5"


def test_json_without_duplicate_keys_loads_as_before() -> None:
    # Equal keys in different objects, and a key equal to a value, are not duplicates.
    text = '{"kind": "List", "items": [{"kind": "A", "a": "kind"}, {"kind": "B", "a": {"a": 1}}]}'
    assert load_objects_from_text(text, "ok.json") == [{"kind": "A", "a": "kind"}, {"kind": "B", "a": {"a": 1}}]


@pytest.mark.parametrize("anchors", [False, True])  # the fast path, and the full loader's
def test_integers_beyond_64_bits_are_floats_in_yaml_as_in_json(anchors: bool) -> None:
    # As orjson reads JSON and Kubernetes' YAML-to-JSON decoding reads YAML: no Kubernetes object
    # holds an integer beyond 64 bits, so none may be decided on as one (a selector saying
    # index > 2^63-1 matched).
    values = ["99999999999999999999999", "18446744073709551615", "-9223372036854775809", "-9223372036854775808"]
    yaml_text = "".join(f"v{i}: {v}\n" for i, v in enumerate(values)) + ("a: &x 1\nb: *x\n" if anchors else "")
    json_text = "{" + ", ".join(f'"v{i}": {v}' for i, v in enumerate(values)) + "}"
    [from_yaml] = load_objects_from_text(yaml_text, "n.yaml")
    [from_json] = load_objects_from_text(json_text, "n.json")
    assert {k: v for k, v in from_yaml.items() if k.startswith("v")} == from_json
    assert [type(from_json[f"v{i}"]) for i in range(4)] == [float, int, float, int]


def test_json_objects_one_after_another_are_a_stream() -> None:
    # As jq -c writes them and kubectl reads them; YAML refused them ("expected <document start>").
    text = (
        '\ufeff{"kind": "A"}\n{"kind": "List", "items": [{"kind": "B"}]} {"kind": "C", "n": 99999999999999999999999}\n'
    )
    assert load_objects_from_text(text, "s.json") == [{"kind": "A"}, {"kind": "B"}, {"kind": "C", "n": 1e23}]
    with pytest.raises(InputError, match=re.escape('s.json: invalid JSON: duplicate key "kind"')):
        load_objects_from_text('{"kind": "A"}\n{"kind": "B", "kind": "C"}\n', "s.json")
    with pytest.raises(InputError, match=re.escape("s.json: document 2 is a list")):
        load_objects_from_text('{"kind": "A"}\n[{"kind": "B"}]\n', "s.json")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 3000 + "]" * 3000, "invalid YAML: exceeded maximum nesting depth"),  # the stream splitter recursed
        ('{"a": NaN}\n{"b": 1}\n', "invalid YAML"),  # the splitter takes NaN, orjson does not
        ('{"a": "\\ud800"}\n{"b": 1}\n', "invalid YAML"),
        ("a: 1" + "0" * 400 + "\n", "invalid YAML: integer of 401 digits is out of range"),
        ("[" * 1000 + '{"a": 1, "a": 2}' + "]" * 1000, 'invalid JSON: duplicate key "a" in an object'),
    ],
)
def test_inputs_at_the_readers_limits_are_one_line_errors(text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        load_objects_from_text(text, "x.json")
    assert expected in str(err.value) and "\n" not in str(err.value)
