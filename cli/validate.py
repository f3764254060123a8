"""``gpucluster validate -f FILE``: check GPUCluster manifests and print them defaulted."""

from __future__ import annotations

import argparse
import json
import sys

from gpucluster.api.validation import validate_gpucluster
from gpucluster.cli import Subparsers
from gpucluster.errors import EXIT_OK, EXIT_USAGE
from gpucluster.manifests import dump_yaml_stream, load_objects


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate GPUCluster manifests and print them with defaults applied",
        description=(
            "Validate GPUCluster manifests against the nvidia.com/v1alpha1 schema. Prints the "
            "defaulted objects (exit 0), or one line per problem with its field path (exit 2)."
        ),
    )
    parser.add_argument("-f", "--filename", required=True, metavar="FILE", help="manifest file, or - for stdin")
    parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    parser.set_defaults(func=run)


# Every line on stderr carries the command's name, as the CLI's input errors do.
PREFIX = "gpucluster validate"


def run(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.filename == "-" else args.filename
    objects = load_objects(args.filename)
    if not objects:
        print(f"{PREFIX}: {source}: no objects found", file=sys.stderr)
        return EXIT_USAGE
    defaulted = []
    failed = False
    for index, obj in enumerate(objects, start=1):
        where = source if len(objects) == 1 else f"{source} (document {index})"
        result = validate_gpucluster(obj)
        for warning in result.warnings:
            print(f"{PREFIX}: {where}: warning: {warning}", file=sys.stderr)
        for problem in result.problems:
            print(f"{PREFIX}: {where}: {problem}", file=sys.stderr)
        if result.ok and result.obj is not None:
            defaulted.append(result.obj.to_dict())
        else:
            failed = True
    if failed:
        return EXIT_USAGE
    if args.output == "json":
        print(json.dumps(defaulted[0] if len(defaulted) == 1 else defaulted, indent=2))
    else:
        sys.stdout.write(dump_yaml_stream(defaulted))
    return EXIT_OK
