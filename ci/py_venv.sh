#!/bin/sh
# ci/py_venv.sh VENV "MODULE..." PIP_ARG... - a fresh virtual environment at VENV with PIP_ARGs
# plus numpy and h5py installed, then one line naming the versions of MODULEs (imported: a
# broken install fails here, not in the first run). The body of ci/torch_venv.sh and
# ci/vllm_venv.sh, which name what goes in. The flexcheck package itself is never installed:
# its runners run from the tree (PYTHONPATH=python), so they are always this checkout's.
#
# The venv is made by Debian's python3 (PYTHON3 overrides), without system site packages;
# Debian ships venv support as python3-venv, installed here when missing (as
# ci/install-deps.sh does: root, or sudo). What pip prints goes to stderr with -q; the
# environment (VLLM_TARGET_DEVICE, ...) is the caller's, for pip and for the import.
set -eu
[ $# -ge 3 ] || { echo "usage: ci/py_venv.sh VENV \"MODULE...\" PIP_ARG..." >&2; exit 2; }
venv=$1
modules=$2
shift 2
who=${PY_VENV_NAME:-ci/py_venv.sh}
PY=${PYTHON3:-python3}
[ -x /usr/bin/python3 ] && [ -z "${PYTHON3:-}" ] && PY=/usr/bin/python3

if ! "$PY" -c "import ensurepip, venv" 2>/dev/null; then
    echo "$who: installing python3-venv" >&2
    SUDO=""
    if [ "$(id -u)" != "0" ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "$who: need root (or sudo) to install python3-venv" >&2; exit 2; }
        SUDO=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

rm -rf "$venv"
"$PY" -m venv "$venv"
echo "$who: pip install $* numpy h5py into $venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" numpy h5py
# Each module's __version__, then Python's: "torch 2.15.0 numpy 2.3.1 h5py 3.14.0 Python 3.11.2"
# shellcheck disable=SC2086  # one MODULE a word
"$venv/bin/python" - "$who" $modules numpy h5py <<'PYEOF'
import importlib, sys
who, names = sys.argv[1], sys.argv[2:]
vers = [f"{n} {importlib.import_module(n).__version__}" for n in names]
print(f"{who}: " + " ".join(vers) + f" Python {sys.version.split()[0]}")
PYEOF
