"""The webhook bench's 5,000-shape loads are what its rows say: pods that share answers (each
its own env, image, memory amount, index; or containers named for the pod too), and pods each a
new translation. Every pod of them is translated, with no warning."""

from __future__ import annotations

import json

import pytest

from bench import bench_webhook as bench
from gpucluster.webhook.cached_answers import answer_key
from tests.webhook.served import fresh


@pytest.mark.parametrize(
    ("load", "keys"), [({}, 5), ({"names": True}, 5), ({"counts": True}, bench.SHAPES)], ids=["shared", "names", "new"]
)
def test_each_load_has_the_keys_its_row_says(load: dict[str, bool], keys: int) -> None:
    bodies = bench._distinct_bodies(**load)
    assert len(set(bodies)) == bench.SHAPES
    found = [answer_key(b) for b in bodies]
    assert all(k is not None for k in found)
    assert len({k.key for k in found if k is not None}) == keys
    for body in bodies[:: bench.SHAPES // 50]:
        response = fresh(body).response["response"]
        assert "patch" in response and "warnings" not in response, json.loads(body)["request"]["name"]
