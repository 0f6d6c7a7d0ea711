"""One ``specchat serve`` on the default model for the client libraries' tests (each file skips where its library
is not installed; the test extra installs them all)."""

from __future__ import annotations

import pytest
from server_process import ServerProcess


@pytest.fixture(scope="session")
def server(data_dir, int4_dir):
    with ServerProcess() as process:
        yield process
