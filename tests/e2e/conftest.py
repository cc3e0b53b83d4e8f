"""A module-wide server on the embedded demo model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Server


@pytest.fixture(scope="package")
def server() -> Iterator[Server]:
    srv = Server("--max-batch", "32").wait_ready()
    yield srv
    srv.stop()
