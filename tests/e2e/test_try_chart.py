"""``make try-chart`` as a user runs it: installed, ready, then Ctrl-C. It used to end in a
segmentation fault (exit 139, in the interpreter's final garbage collection) and to leave its
kubeconfig, naming a sandbox that no longer runs, in the checkout."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.e2e.chart_install import KUBECTL

REPO = Path(__file__).resolve().parents[2]


def test_ctrl_c_stops_cleanly_and_leaves_no_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "sandbox.kubeconfig"
    # Ctrl-C as a terminal sends it: the suite may run as a background job, whose children inherit
    # an ignored SIGINT (POSIX), and Python then installs no KeyboardInterrupt handler at all.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.try_chart", "--kubeconfig-out", str(kubeconfig)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    seen: list[str] = []
    waiting = threading.Event()

    def drain() -> None:
        # Read everything, the stop's output too: a full pipe would block the process it waits for.
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C to stop" in line:
                waiting.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert waiting.wait(240), "".join(seen[-20:])
        ready = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "get", "gpucluster", "gpu-cluster"],
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        assert ready.returncode == 0, ready.stderr
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)
    # What the stop printed is in the message (a stop that hangs dumps every thread's stack).
    assert code == 0, "".join(seen[-60:])
    assert not kubeconfig.exists()
