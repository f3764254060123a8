"""A rule that raises is answered like any other (a warning under ``failurePolicy: Ignore``), so a
test asserting "allowed" or "no patch" would still pass with the rule broken. The fixture
:func:`rules_never_crash` (autouse in ``tests/webhook`` and ``tests/migrate``) fails such a test
instead; a test of the failure path itself is marked ``@pytest.mark.rule_crash``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpucluster.webhook import admission


def register_marker(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule_crash: the test makes an admission rule raise on purpose")


@pytest.fixture(autouse=True)
def rules_never_crash(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("rule_crash"):
        yield
        return
    crashes: list[str] = []
    answer_failure = admission._failed

    def failed(hook: admission.Hook, req: admission.AdmissionRequest, exc: Exception) -> admission.Verdict:
        crashes.append(f"{hook.name} raised {exc!r}")
        return answer_failure(hook, req, exc)

    monkeypatch.setattr(admission, "_failed", failed)
    yield
    assert not crashes, f"an admission rule raised during the test: {crashes}"
