"""``gpucluster admit -f review.json``: answer an AdmissionReview offline, exactly as the webhook would."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import jsonpatch
import orjson

from gpucluster.cli import Subparsers
from gpucluster.clusterstate import ClusterState
from gpucluster.errors import EXIT_NEGATIVE, EXIT_OK, InputError
from gpucluster.manifests import check_json_keys, load_objects, looks_like_json, parse_documents, read_text
from gpucluster.policy import TRANSLATION_MODES, Settings
from gpucluster.webhook.admission import admit_request, hooks
from gpucluster.webhook.review import AdmissionRequest, ReviewDecodeError, decode_patch, decode_review


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "admit",
        help="answer an AdmissionReview offline, as the webhook would",
        description=(
            "Run the webhook's rules on an AdmissionReview: mutating rules first, then validating rules on "
            'the mutated object, as the API server chains them. Prints {"response", "patchedObject", "creates"} (creates: the ResourceClaimTemplates the translated pod refers to, which the controller provisions once the pod exists; empty for a dryRun review). '
            "Exit 0 allowed, 1 denied, 2 bad input."
        ),
    )
    parser.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="AdmissionReview, JSON or YAML, - for stdin"
    )
    parser.add_argument("--cluster", metavar="FILE", help="cluster objects the rules read (YAML/JSON stream or List)")
    parser.add_argument("--translation-mode", choices=TRANSLATION_MODES, default="auto")
    parser.add_argument("--operator-namespace", default="gpu-operator")
    parser.add_argument("-o", "--output", choices=["json"], default="json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.filename == "-" else args.filename
    text = read_text(args.filename).removeprefix("\ufeff")
    written_as_json = looks_like_json(text)
    if written_as_json:
        check_json_keys(text, source)
    try:
        request = decode_review(text)
    except ReviewDecodeError as exc:
        try:  # YAML, flow style ({apiVersion: ...}) included
            request = _review_from_yaml(text, source)
        except InputError:
            if written_as_json:
                raise InputError(f"{source}: {exc}") from None  # the JSON reader's error says where
            raise
    cluster = ClusterState.from_objects(load_objects(args.cluster) if args.cluster else [])
    settings = Settings(translation_mode=args.translation_mode, operator_namespace=args.operator_namespace)

    mutated = admit_request(request, path="mutate", cluster=cluster, settings=settings)
    answer = mutated
    patched = None
    ops = decode_patch(mutated.response)
    if ops and request.obj is not None:
        patched = jsonpatch.apply_patch(request.obj, ops)
    if mutated.verdict.allowed and (request.group, request.kind) in hooks("validate"):
        after = request if patched is None else replace(request, obj=patched)
        validated = admit_request(after, path="validate", cluster=cluster, settings=settings)
        if not validated.verdict.allowed or (request.group, request.kind) not in hooks("mutate"):
            answer = validated
    out = {"response": answer.response, "patchedObject": patched, "creates": mutated.creates}
    print(json.dumps(out, indent=2))
    return EXIT_OK if answer.verdict.allowed else EXIT_NEGATIVE


def _review_from_yaml(text: str, source: str) -> AdmissionRequest:
    """A review written in YAML (as every command reads its input): one document, decoded as the
    same review in JSON would be."""
    documents = parse_documents(text, source)
    if len(documents) != 1:
        raise InputError(f"{source}: an AdmissionReview is one document, found {len(documents)}")
    try:
        return decode_review(orjson.dumps(documents[0]))
    except TypeError as exc:  # a value JSON cannot hold, such as an integer beyond 64 bits
        raise InputError(f"{source}: {exc}") from None
    except ReviewDecodeError as exc:
        raise InputError(f"{source}: {exc}") from None
