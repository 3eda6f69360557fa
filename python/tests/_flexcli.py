"""_flexcli.py - the C command line as the test modules reach it: BIN (FLEXCHECK_BIN, the binary
make test builds), needs_bin (skip without it), run() / flexcheck(), schema_of() and snapshot().
The `flexbin` fixture is conftest.py's."""
import os
import subprocess

import h5py
import numpy as np

import pytest

BIN = os.environ.get("FLEXCHECK_BIN")
needs_bin = pytest.mark.skipif(not BIN, reason="FLEXCHECK_BIN is not set (make test sets it)")


def _no_lib():
    """Why libflexcheck.so cannot be loaded, or None."""
    from flexcheck.judging import library_version
    try:
        library_version()
        return None
    except RuntimeError as e:  # no libflexcheck.so: the reason is the skip's
        return str(e)


NO_LIB = _no_lib()
needs_lib = pytest.mark.skipif(NO_LIB is not None, reason=f"{NO_LIB}")


def run(flexbin, *args):
    """(exit status, stdout, stderr) of flexcheck with args, single-threaded OpenBLAS."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([flexbin, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def flexcheck(*args):
    """run() of BIN, for modules marked needs_bin."""
    return run(BIN, *args)


def schema_of(path):
    """A fixture file's schema attribute as str (the C writer stores bytes, h5py writes str)."""
    with h5py.File(path, "r") as f:
        v = f.attrs["schema"]
    return v.decode() if isinstance(v, bytes) else str(v)


def snapshot(folder):
    """Every file of folder with its bytes: a refused write must change nothing, and leave no
    temporary file."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as fh:
            out[name] = fh.read()
    return out


RTOL = 1e-10  # FIX_CHECK_RTOL (fixtures/fix.h): how close check holds a stored oracle


def within_bar(new, old):
    """check's own bar for a stored oracle (|new - old| <= RTOL (|old| + max|old|), -inf
    exactly), with old, the committed and trusted values, as the reference."""
    if new.shape != old.shape:
        return False
    inf = np.isinf(old) | np.isinf(new)
    if not np.array_equal(new[inf], old[inf]):
        return False
    o, n = old[~inf], new[~inf]
    if o.size == 0:
        return True
    scale = np.max(np.abs(o))
    with np.errstate(all="ignore"):
        err = np.abs(n - o) / (np.abs(o) + scale) if scale > 0 else np.abs(n - o)
    return bool(np.all(err <= RTOL))  # NaN fails
