"""Every webhook test fails when an admission rule raises (see :mod:`tests.webhook.rulecrash`)."""

from __future__ import annotations

import pytest

from tests.webhook.rulecrash import register_marker, rules_never_crash

__all__ = ["rules_never_crash"]


def pytest_configure(config: pytest.Config) -> None:
    register_marker(config)
