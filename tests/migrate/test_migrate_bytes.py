"""Outside the GPU requests and the blocks a migration adds, every line of a changed
document is kept byte for byte, on the whole corpus of this directory (the golden inputs, the
ecosystem manifests of the tests, and the published manifests under ``corpus/``).

The comparison is textual and does not use the migration's code: from the input, the lines that
set a GPU resource (``nvidia.com/gpu: 1``, ``nvidia.com/mig-1g.10gb: 1``, in block or flow style)
are removed; from the output, the added blocks (``claims``, ``resourceClaims``, the
``gpucluster.nvidia.com/...`` annotations and label, Argo ``podSpecPatch``) and the added
ResourceClaimTemplate documents. On both sides a ``limits``/``requests``/``resources``/
``annotations``/``labels``/``metadata`` header left without content goes too (the migration
removes an emptied ``limits``), and an Argo ``podSpecPatch`` (which the migration extends) is
left out of the comparison. What remains must be identical."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.migrate import migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from tests.migrate import test_ecosystem, test_migrate, test_migrate_check, test_migrate_operators
from tests.migrate.conftest import INPUT

CORPUS = Path(__file__).resolve().parent / "corpus"

_GPU_LINE = re.compile(r"""^\s*(?:-\s+)?["']?nvidia\.com/(?:gpu|mig-[\w.+-]+)["']?\s*:""")
_GPU_ENTRY = re.compile(r"""["']?nvidia\.com/(?:gpu|mig-[\w.+-]+)["']?\s*:\s*[^,}\s]+(?:,\s*)?""")
_EMPTY_FLOW = re.compile(r"^\s*(?:-\s+)?\w+\s*:\s*\{\s*\}\s*$")
_ADDED_KEY = re.compile(
    r"""^\s*(?:-\s+)?(?:(?:resource)?[cC]laims|podSpecPatch|["']?gpucluster\.nvidia\.com/[\w.-]+["']?)\s*:"""
)
_FLOW_CLAIMS = re.compile(r"\b(?:resourceClaims|claims)\s*:\s*[\[{]")
_HEADER = re.compile(r"^\s*(?:-\s+)?(?:limits|requests|resources|annotations|labels|metadata)\s*:\s*(?:#.*)?$")
_SEPARATOR = re.compile(r"^---(?:\s|$)")


def _key_column(line: str) -> int:
    match = re.match(r"^(\s*(?:-\s+)*)", line)
    return len(match.group(1)) if match else 0


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int) -> int:
    """The end of the block that the key on ``lines[start]`` opens (its nested lines)."""
    column = _key_column(lines[start])
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if not line.strip():
            end += 1
            continue
        if _indent(line) > column or (_indent(line) == column and line.lstrip().startswith("- ")):
            end += 1
            continue
        break
    # Trailing blank lines belong to what follows.
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _drop_blocks(lines: list[str], pattern: re.Pattern[str]) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if pattern.search(line):
            index = _block_end(lines, index) if re.search(r":\s*[|>]?[-+]?\s*(?:#.*)?$", line) else index + 1
            continue
        out.append(line)
        index += 1
    return out


def _drop_empty_headers(lines: list[str]) -> list[str]:
    """Headers whose block holds nothing but blank and comment lines go, with those lines."""
    while True:
        for index, line in enumerate(lines):
            end = _block_end(lines, index) if _HEADER.match(line) else 0
            if end and all(not x.strip() or x.lstrip().startswith("#") for x in lines[index + 1 : end]):
                lines = lines[:index] + lines[end:]
                break
        else:
            return lines


def _without_gpus(text: str) -> list[str]:
    """The lines of ``text`` without the GPU requests: block entries go, flow entries are cut."""
    out = []
    for line in text.splitlines(keepends=True):
        if _GPU_LINE.search(line):
            continue
        if "{" in line and _GPU_ENTRY.search(line):
            line = re.sub(r",\s*}", "}", _GPU_ENTRY.sub("", line))
            if _EMPTY_FLOW.match(line):
                continue
        out.append(line)
    return out


def kept_input(text: str) -> list[str]:
    lines = _without_gpus(text)
    return _drop_empty_headers(_drop_blocks(lines, re.compile(r"^\s*(?:-\s+)?podSpecPatch\s*:")))


def kept_output(text: str) -> list[str]:
    lines = [line for line in _without_gpus(text) if not _FLOW_CLAIMS.search(line)]
    return _drop_empty_headers(_drop_blocks(lines, _ADDED_KEY))


def documents(text: str) -> list[str]:
    docs: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if _SEPARATOR.match(line):
            docs.append([])
        else:
            docs[-1].append(line)
    return ["".join(d) for d in docs if "".join(d).strip()]


def _is_added_template(doc: str, originals: list[str]) -> bool:
    try:
        data: Any = yaml.safe_load(doc)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and data.get("kind") == "ResourceClaimTemplate" and doc not in originals


def corpus() -> list[tuple[str, str]]:
    found = [(f"golden/input/{p.name}", p.read_text()) for p in sorted(INPUT.glob("*.yaml"))]
    found += [(f"corpus/{p.name}", p.read_text()) for p in sorted(CORPUS.glob("*.yaml"))]
    for module in (test_ecosystem, test_migrate, test_migrate_check, test_migrate_operators):
        for name, value in sorted(vars(module).items()):
            if name.isupper() and isinstance(value, str) and "apiVersion:" in value and "nvidia.com/" in value:
                found.append((f"{module.__name__.rsplit('.', 1)[-1]}.{name}", value))
    return found


CASES = corpus()


def changed_documents(text: str) -> list[tuple[int, str, str]]:
    """(number, input, output) of each document the migration changed."""
    result = migrate_text(text, "corpus.yaml", config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL)
    before = documents(text)
    after = [d for d in documents(result.text) if not _is_added_template(d, before)]
    assert len(after) == len(before), "documents added or lost"
    return [(n, a, b) for n, (a, b) in enumerate(zip(before, after, strict=True), 1) if a != b]


def test_the_corpus_is_large_enough() -> None:
    changed = [doc for _, text in CASES for doc in changed_documents(text)]
    lines = sum(len(kept_input(a)) for _, a, _ in changed)
    assert len(CASES) >= 20 and len(changed) >= 25 and lines >= 1000, (len(CASES), len(changed), lines)


@pytest.mark.parametrize(("case", "text"), CASES, ids=[c for c, _ in CASES])
def test_untouched_lines_of_changed_documents_are_kept_byte_for_byte(case: str, text: str) -> None:
    for number, before, after in changed_documents(text):
        key = f"{case}#{number}"
        expected, got = kept_input(before), kept_output(after)
        diff = "".join(difflib.unified_diff(expected, got, "input (kept lines)", "output (kept lines)"))
        assert expected == got, f"{key}: lines outside the GPU requests changed:\n{diff}"


@pytest.mark.parametrize(("case", "text"), CASES, ids=[c for c, _ in CASES])
def test_migrating_the_corpus_twice_is_migrating_once(case: str, text: str) -> None:
    once = migrate_text(text, case, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL).text
    assert migrate_text(once, case, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL).text == once


# The three styles the corpus found rewritten, each alone.
STYLES = {
    "folded double-quoted scalar": """\
apiVersion: v1
kind: Pod
metadata:
  name: leader
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:latest
      command:
        - sh
        - -c
        - "bash multi-node-serving.sh leader --ray_cluster_size=$(LWS_GROUP_SIZE);
           python3 -m vllm.entrypoints.openai.api_server --port 8080 --tensor-parallel-size 8"
      resources:
        limits:
          nvidia.com/gpu: "8"
""",
    "lines of spaces only": """\
apiVersion: v1
kind: Pod
metadata:
  name: nim
spec:
      \n  tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
        \n  containers:
    - name: nim
      image: nvcr.io/nim/nvidia/llm-nim:1.14
      resources:
        limits:
          nvidia.com/gpu: 1
""",
    "key after an indented sequence": """\
apiVersion: v1
kind: Pod
metadata:
  name: tf
spec:
  containers:
  - name: tf
    image: tensorflow/tensorflow:2.13.0-gpu
    resources:
        limits:
          nvidia.com/gpu: "1"
          memory: 30Gi
  volumes:
    - name: cache
      emptyDir: {}
""",
    "an anchor nothing refers to": """\
x-common: &common
  image: x
apiVersion: batch/v1
kind: Job
metadata:
  name: j
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: a
          image: x
          resources:
            limits:
              nvidia.com/gpu: 1
""",
    "CRLF line ends": "apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: p\r\nspec:\r\n  containers:\r\n"
    "  - name: c\r\n    image: x\r\n    resources:\r\n      limits:\r\n        nvidia.com/gpu: 1\r\n",
    "long lines, flow sequences over lines, block and quoted scalars": f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: big
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{{"a": "{"x" * 6000}"}}'
spec:
  template:
    spec:
      containers:
      - name: c
        image: x
        args: ["--a", "--b",
               "--c"]
        env:
        - name: SCRIPT
          value: |-
            line one
              indented two

            after blank
        - name: Q
          value: 'it''s quoted'
        resources:
          limits:
            # GPUs
            nvidia.com/gpu: 2   # two
            cpu: 4
          requests: {{nvidia.com/gpu: 2, cpu: 4}}
""",
}


@pytest.mark.parametrize("style", STYLES)
def test_each_style_keeps_its_lines(style: str) -> None:
    text = STYLES[style]
    ((_, before, after),) = changed_documents(text)
    assert kept_output(after) == kept_input(before)
    assert "claims:" in after and "resourceClaims:" in after
