"""The `flexcheck` console command of an installed package: it runs the C command the package
brought along (flexcheck/_bin/flexcheck, put there by python/setup.py; in a wheel repaired by
auditwheel its RPATH finds the libraries bundled in flexcheck.libs/), as the cmake and ninja
wheels run theirs.

The process is replaced (os.execv), not wrapped: the arguments, standard streams, signals and
exit status are the binary's own, and Ctrl-C reaches it directly. Its argv[0] is the name the
command was run by, which the reports record as the command line.
"""
import os
import sys
from typing import List, Optional, Tuple


def binary_paths() -> Tuple[str, str]:
    """Where the flexcheck binary may be: the package's own copy (flexcheck/_bin/flexcheck),
    and, for the package run from a checkout's tree (PYTHONPATH=python), that checkout's
    build/flexcheck."""
    here = os.path.dirname(os.path.abspath(__file__))
    return (os.path.join(here, "_bin", "flexcheck"),
            os.path.join(os.path.dirname(os.path.dirname(here)), "build", "flexcheck"))


def is_command(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def bundled_binary() -> Optional[str]:
    """The first of binary_paths() that is there; None when neither is (a package installed
    with FLEXCHECK_NO_LIB=1)."""
    return next((p for p in binary_paths() if is_command(p)), None)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv if argv is None else argv
    binary = bundled_binary()
    if binary is None:
        sys.stderr.write("flexcheck: this install of the flexcheck package holds no flexcheck "
                         "command (flexcheck/_bin/flexcheck is absent: installed with "
                         "FLEXCHECK_NO_LIB=1?); install the flexcheck wheel, or build it with "
                         "`make` in a flexcheck checkout\n")
        return 2
    name = os.path.basename(args[0]) if args and args[0] else "flexcheck"
    try:
        os.execv(binary, [name] + list(args[1:]))
    except OSError as e:  # execv returns only by raising: a shell's 126, cannot execute
        sys.stderr.write(f"flexcheck: cannot run {binary}: {e.strerror}\n")
    return 126


if __name__ == "__main__":
    sys.exit(main())
