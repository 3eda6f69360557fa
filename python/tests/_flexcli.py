"""_flexcli.py - the C command line as the tests reach it: the `flexbin` fixture (the binary
make test builds, FLEXCHECK_BIN) and run(), shared by the test modules that call flexcheck."""
import os
import subprocess

import pytest


@pytest.fixture
def flexbin():
    path = os.environ.get("FLEXCHECK_BIN")
    if not path:
        pytest.skip("FLEXCHECK_BIN is not set (make python-tests sets it)")
    path = os.path.abspath(path)
    assert os.access(path, os.X_OK), f"FLEXCHECK_BIN={path} is not an executable"
    return path


def run(flexbin, *args):
    """(exit status, stdout, stderr) of flexcheck with args, single-threaded OpenBLAS."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([flexbin, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr
