"""``make try-chart``: install the chart with real Helm into a fresh sandbox (the operator as its
own pods, RBAC enforced) and keep it running for kubectl until Ctrl-C. The harness that installs
it is the end-to-end tests' own (``tests/e2e/chart_install.py``), so what a user tries is what the
tests check."""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
import traceback
from pathlib import Path

from tests.chart.helm import DOCS_PREINSTALLED
from tests.e2e.chart_install import NAMESPACE, RECIPES, RELEASE, Cluster


def _serve(args: argparse.Namespace) -> int:
    cluster = Cluster(nodes=args.nodes, kubeconfig=Path(args.kubeconfig_out).resolve())
    recipe = RECIPES[args.recipe]
    try:
        cluster.prepare(recipe)
        started = time.monotonic()
        cluster.install(recipe, wait="watcher")
        print(f"helm install ({recipe.name}) done in {time.monotonic() - started:.0f}s; waiting for the GPUCluster")
        cluster.wait_ready()
        print(f"GPUCluster ready {time.monotonic() - started:.0f}s after the install started")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print(
            f"kubectl get gpucluster; kubectl get pods -n {NAMESPACE}; kubectl logs -n {NAMESPACE} deploy/{RELEASE}-gpucluster -c controller"
        )
        print("Ctrl-C to stop")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        # A stop that hangs says where (every thread's stack) and ends the process, never waits forever.
        faulthandler.dump_traceback_later(90, exit=True)
        try:
            cluster.close()
        finally:
            # It names a sandbox that no longer runs: leave nothing of it in the checkout.
            Path(cluster.kubeconfig).unlink(missing_ok=True)
        faulthandler.cancel_dump_traceback_later()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Install the chart with real Helm into a fresh sandbox and keep it running."
    )
    parser.add_argument("--recipe", choices=sorted(RECIPES), default=DOCS_PREINSTALLED.name)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--kubeconfig-out", default="sandbox.kubeconfig")
    return _serve(parser.parse_args(argv))


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:  # a failed stop must still end the process (see below), saying why
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: helm-python-sdk's Go runtime crashed with SIGSEGV in the interpreter's final
    # garbage collection after Ctrl-C (3 of 3 runs under make). Everything is closed by now, and
    # an interpreter shutdown would also wait for worker threads a slow stop left behind.
    os._exit(code)
