"""conftest.py - fixtures every test module of python/tests gets without importing them."""
import os

import pytest

from _flexcli import BIN


@pytest.fixture
def flexbin():
    """The flexcheck binary (FLEXCHECK_BIN); the test is skipped without it."""
    if not BIN:
        pytest.skip("FLEXCHECK_BIN is not set (make test sets it)")
    path = os.path.abspath(BIN)
    assert os.access(path, os.X_OK), f"FLEXCHECK_BIN={path} is not an executable"
    return path
