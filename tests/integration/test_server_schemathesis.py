"""Property-based run of the served OpenAPI description (schemathesis) against a live server
on 127.0.0.1 over a seeded SQLite index: no 5xx, statuses, content types and bodies as
documented, invalid parameters rejected. Bounded: a few examples per operation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from neffcache.index import open_index
from tests.support.live_server import serve_in_thread
from tests.support.ops_seed import seed_demo


@pytest.fixture(scope="module")
def live_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("schemathesis") / "index.db"
    with open_index(f"sqlite:///{path}", auto_upgrade=True) as ix:
        seed_demo(ix)
        with serve_in_thread(ix) as base:
            yield base


@pytest.fixture(scope="module")
def api_schema(live_base: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{live_base}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_description(case: schemathesis.Case) -> None:
    case.call_and_validate(timeout=10)
