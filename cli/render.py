"""``gpucluster render -f FILE [--namespace NS]``: the operand objects of a GPUCluster, offline.

Prints what the controller would apply for the GPUCluster in FILE, as a YAML stream in apply
order. Offline, the facts the controller learns from the cluster are assumed: the operator's
image variables (DRA_DRIVER_IMAGE, DCGM_EXPORTER_IMAGE, DCGM_IMAGE, VALIDATOR_IMAGE) come from
this process's environment, else from the chart's defaults as the chart gives them to the
operator (stderr says which), the ServiceMonitor CRD is taken as served (a ServiceMonitor the CR
asks for is shown), the cluster is not OpenShift, and owner references are set only when the
file carries ``metadata.uid``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from gpucluster.api.validation import validate_gpucluster
from gpucluster.chart import operand_images
from gpucluster.cli import Subparsers
from gpucluster.controller.operands import DEFAULT_NAMESPACE, ClusterFacts, render
from gpucluster.errors import EXIT_OK, InputError
from gpucluster.manifests import dump_yaml_stream, load_objects

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print the operand objects a GPUCluster deploys, as a YAML stream",
        description=(
            "Render the objects the controller applies for a GPUCluster (DRA driver, DCGM, DCGM "
            "Exporter, DRA validator), in apply order. Operand images missing from the GPUCluster "
            "come from DRA_DRIVER_IMAGE, DCGM_EXPORTER_IMAGE, DCGM_IMAGE and VALIDATOR_IMAGE in the "
            "environment, else from the chart's defaults (named on stderr). Bad input exits 2 with "
            "the field path."
        ),
    )
    parser.add_argument("-f", "--filename", required=True, metavar="FILE", help="GPUCluster manifest, or - for stdin")
    parser.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        metavar="NS",
        help=f"operator namespace the namespaced operands go to (default {DEFAULT_NAMESPACE})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.filename == "-" else args.filename
    objects = load_objects(args.filename)
    if len(objects) != 1:
        found = "no objects" if not objects else f"{len(objects)} objects"
        raise InputError(f"{source}: expected one GPUCluster (it is a singleton), found {found}")
    result = validate_gpucluster(objects[0])
    for warning in result.warnings:
        print(f"{source}: warning: {warning}", file=sys.stderr)
    if not result.ok or result.obj is None:
        raise InputError(f"{source}: " + "; ".join(str(problem) for problem in result.problems))
    namespace: str = args.namespace
    if not _DNS_LABEL.match(namespace) or len(namespace) > 63:
        raise InputError(f'--namespace: Invalid value: "{namespace}": must be a DNS label (lowercase, digits, -)')
    defaults = {k: v for k, v in operand_images().items() if not os.environ.get(k)}
    if defaults:
        used = ", ".join(f"{k}={v}" for k, v in sorted(defaults.items()))
        print(f"gpucluster render: images the GPUCluster does not name come from the chart's defaults: {used}",
              file=sys.stderr)  # fmt: skip
    # An image variable set but empty is unset: the default the line above names is the one used.
    facts = ClusterFacts.from_environ({**os.environ, **defaults}, namespace=namespace, service_monitor_crd=True)
    try:
        rendered = render(result.obj, facts)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    sys.stdout.write(dump_yaml_stream(rendered))
    return EXIT_OK
