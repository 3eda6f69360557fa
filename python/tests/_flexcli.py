"""_flexcli.py - what the test modules share: the C command line as the tests reach it (the
`flexbin` fixture, the binary make test builds, FLEXCHECK_BIN, and run()) and snapshot()."""
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


def snapshot(folder):
    """Every file of folder with its bytes: a refused write must change nothing, and leave no
    temporary file."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as fh:
            out[name] = fh.read()
    return out
