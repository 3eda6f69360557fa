"""flexcheck._engine - what every engine runner repeats, once (private).

A runner (flexcheck.ort_attention, flexcheck.openvino_attention, flexcheck.torch_sdpa,
flexcheck.torch_flex, flexcheck.ggml_attention) supplies an adapter: one call that takes a
case (fixtures.read_case) and returns what the engine computed from its stored inputs, or
raises

  - NotExpressible(reason): the engine's interface has no way to state the case (a chunked
    mask for an op that has only a causal window, ...); counted, named on stderr, never an
    error and never a pass;
  - Refused(words): the engine was asked and declined, in its own words (an execution
    provider with no kernel for the dtype, a frontend that rejects an attribute); counted
    and named the same way;
  - anything else: an error of the run (counted, named, exit 1; the other cases still run).

This module owns the rest: finding the fixture files, --dtype, the label and the producer
string, reading each case, storing the engine's output under tested/<label> through
add_tested (the verdict is `flexcheck check`'s; nothing here computes attention), one line per
file on stdout, one summary line, and the exit status: 0 every selected case was stored,
refused or not expressible; 1 some case could not be run or stored; 2 bad arguments or no
fixture file (one line, before the engine is imported). flexcheck.vllm_flex subclasses Run
instead: its file() runs a layout file's layers as one batch, the core does the rest.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from .fixtures import DTYPES, add_tested, list_cases, read_case

FIXTURE_SUFFIXES = (".h5", ".hdf5")
LABEL_MAX = 64


class NotExpressible(Exception):
    """A case the engine's interface cannot state (not a refusal, not a failure)."""


class Refused(Exception):
    """The engine declined the case; str() is its own words."""


@dataclasses.dataclass
class Result:
    """What the engine returned for one case, stored as it is (never patched). notes: what the
    producer string adds for this case (how a term was handed over, no LSE, ...)."""
    out: object
    lse: object = None
    out_rerun: object = None
    block_mask: object = None
    notes: Tuple[str, ...] = ()
    rounding: Optional[str] = None
    encoding: Optional[str] = None   # "bfloat16" for uint16 bit patterns


def bits_encoding(out) -> Optional[str]:
    """A Result's encoding for an output as a runner holds it: "bfloat16" for a numpy uint16
    array (bfloat16 bit patterns: numpy has no bfloat16), else None (stored as it is)."""
    return "bfloat16" if isinstance(out, np.ndarray) and out.dtype == np.uint16 else None


def _signal_text(status: int) -> str:
    """How a child that a signal ended is named in an error: "signal 11, SIGSEGV"."""
    n = os.WTERMSIG(status)
    try:
        name = signal.Signals(n).name
    except ValueError:
        name = "unknown"
    return f"signal {n}, {name}"

def sanitize_label(text: str) -> str:
    """text in the tested-label charset [A-Za-z0-9._-]: every run of other characters becomes
    one '-', cut to 64 characters, never ending in '-' where it was cut or replaced."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:LABEL_MAX].strip("-")
    if not s:
        raise ValueError(f"label {text!r}: nothing left of it in [A-Za-z0-9._-]")
    return s


def discover(paths: Sequence[str]) -> List[str]:
    """The fixture files named by paths: a file as given, a directory searched recursively for
    *.h5 / *.hdf5 (hidden names skipped: the package's temporary files), sorted; each file once.
    ValueError for a path that does not exist."""
    files: List[str] = []
    seen = set()
    for p in paths:
        if os.path.isdir(p):
            found = []
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(root, n) for n in sorted(names)
                          if n.endswith(FIXTURE_SUFFIXES) and not n.startswith(".")]
        elif os.path.isfile(p):
            found = [p]
        else:
            raise ValueError(f"{p}: no such file or directory")
        for f in found:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                files.append(f)
    return files


def parse_dtypes(values: Optional[Iterable[str]]) -> Optional[Tuple[str, ...]]:
    """--dtype values (repeatable, each comma-separated) as a tuple of DTYPES; None: all."""
    if not values:
        return None
    out: List[str] = []
    for v in values:
        for t in v.split(","):
            t = t.strip()
            if t not in DTYPES:
                raise ValueError(f"--dtype {t!r}: must be one of {', '.join(DTYPES)}")
            if t not in out:
                out.append(t)
    return tuple(out)


def first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0].strip() if s else type(e).__name__


KEYS = ("cases", "stored", "skipped", "refused", "inexpressible", "errors")


class Counts(dict):
    def __init__(self):
        super().__init__((k, 0) for k in KEYS)

    def add(self, other: "Counts") -> None:
        for k in KEYS:
            self[k] += other[k]

    def text(self, engine: str) -> str:
        return (f"{self['cases']} cases, {self['stored']} stored, {self['skipped']} skipped "
                f"(dtype), {self['refused']} refused by {engine}, {self['inexpressible']} not "
                f"expressible in {engine}, {self['errors']} errors")


@dataclasses.dataclass
class Run:
    """One runner's run: prog (the message prefix), engine (its name in the counts: "ONNX
    Runtime"), label, producer (engine, version, op, device, Python), adapter (case ->
    Result)."""
    prog: str
    engine: str
    label: str
    producer: str
    adapter: Callable[[object], Result]
    dtypes: Optional[Tuple[str, ...]] = None
    overwrite: bool = False
    isolate: Optional[Callable[[], Callable[[object], Result]]] = None  # see _isolated
    out: Optional[TextIO] = None   # None: sys.stdout / sys.stderr as they are when printing
    err: Optional[TextIO] = None

    def __post_init__(self):
        self._out, self._err = self.out, self.err

    @property
    def o(self) -> TextIO:
        return self._out or sys.stdout

    @property
    def e(self) -> TextIO:
        return self._err or sys.stderr

    def case(self, path: str, name: str, counts: Counts) -> None:
        case = read_case(path, name)
        if self.dtypes and case.dtype not in self.dtypes:
            counts["skipped"] += 1
            return
        if self.label in case.tested and not self.overwrite:  # before spending the engine's time
            raise ValueError(f"tested/{self.label} exists; refusing to overwrite (--overwrite)")
        try:
            r = self.adapter(case)
        except NotExpressible as e:
            counts["inexpressible"] += 1
            print(f"{self.prog}: {path}: case {name}: not expressible in {self.engine}: {e}",
                  file=self.e)
            return
        except Refused as e:
            counts["refused"] += 1
            print(f"{self.prog}: {path}: case {name}: refused by {self.engine}: {e}",
                  file=self.e)
            return
        producer = self.producer + "".join(f", {n}" for n in r.notes)
        add_tested(path, name, self.label, r.out, producer=producer, lse=r.lse,
                   out_rerun=r.out_rerun, block_mask=r.block_mask, overwrite=self.overwrite,
                   rounding=r.rounding, encoding=r.encoding)
        counts["stored"] += 1

    def file(self, path: str, only: Optional[Sequence[str]] = None, report=None) -> Counts:
        """Every case of the file (or those named by only); report(name, its Counts) after
        each, for _child."""
        if self.isolate is not None:
            return self._isolated(path)
        counts = Counts()
        names = list_cases(path) if only is None else list(only)
        for name in names:
            one = Counts()
            one["cases"] += 1
            try:
                self.case(path, name, one)
            except Exception as e:  # the engine failed, or reading/writing the file did
                one["errors"] += 1
                print(f"{self.prog}: {path}: case {name}: {type(e).__name__}: {first_line(e)}",
                      file=self.e)
            counts.add(one)
            if report is not None:
                report(name, one)
        return counts

    def _isolated(self, path: str) -> Counts:
        """The file's cases in child processes that build the engine themselves
        (self.isolate() returns the adapter), so that an engine that crashes the process (a
        segmentation fault in its native code) costs one case, not the run. The child
        reports each case as it finishes; when it dies of a signal, the first case it had not
        finished is the one that killed it (counted as an error, named with the signal) and
        the cases after it go to a new child."""
        counts = Counts()
        todo = list_cases(path)
        while todo:
            done, sig = self._child(path, todo)
            for c in done.values():
                counts.add(c)
            if sig is None:
                break
            at = next(i for i, n in enumerate(todo) if n not in done)
            counts["cases"] += 1
            counts["errors"] += 1
            print(f"{self.prog}: {path}: case {todo[at]}: the engine crashed the process "
                  f"({sig})", file=self.e, flush=True)
            todo = todo[at + 1:]
        return counts

    def _child(self, path: str, names: Sequence[str]):
        """({case: Counts} of the cases a forked child finished, None or the signal that
        killed it). The child writes one pickled record per case to a pipe as it goes."""
        import pickle
        for f in (sys.stdout, sys.stderr):
            f.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                self.adapter, self.isolate = self.isolate(), None
                with os.fdopen(w, "wb", buffering=0) as pipe:
                    def report(name, c):
                        pipe.write(pickle.dumps((name, dict(c))))
                    self.file(path, names, report)
            except BaseException as e:  # noqa: BLE001 - the engine could not be built
                print(f"{self.prog}: {path}: {type(e).__name__}: {first_line(e)}",
                      file=self.e)
                code = 1
            for f in (sys.stdout, sys.stderr):
                f.flush()
            os._exit(code)
        os.close(w)
        done: Dict[str, Counts] = {}
        with os.fdopen(r, "rb") as f:
            while True:
                try:
                    name, c = pickle.load(f)
                except EOFError:
                    break
                done[name] = Counts()
                done[name].update(c)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            return done, _signal_text(status)
        if os.WEXITSTATUS(status) != 0 and len(done) < len(names):
            raise RuntimeError(f"the engine's process exited with status "
                               f"{os.WEXITSTATUS(status)}")
        return done, None

    def files(self, files: Sequence[str]) -> int:
        """Every case of every file; the per-file lines, the summary line; the exit status."""
        print(f"{self.prog}: {len(files)} files -> tested/{self.label} ({self.producer})",
              file=self.o, flush=True)
        totals = Counts()
        t_all = time.monotonic()
        for path in files:
            t0 = time.monotonic()
            try:
                counts = self.file(path)
            except Exception as e:  # not HDF5, no /cases: flexcheck check says why in full
                print(f"{self.prog}: {path}: cannot list cases: {first_line(e)}", file=self.e)
                print(f"ERROR {path}: not read", file=self.o, flush=True)
                totals["errors"] += 1
                continue
            totals.add(counts)
            print(f"{'ok' if counts['errors'] == 0 else 'ERROR'} {path}: "
                  f"{counts.text(self.engine)} ({time.monotonic() - t0:.1f} s)",
                  file=self.o, flush=True)
        print(f"{self.prog}: {len(files)} files, {totals.text(self.engine)}, under "
              f"tested/{self.label} in {time.monotonic() - t_all:.1f} s", file=self.o,
              flush=True)
        return 1 if totals["errors"] else 0


def in_child(fn, run=None):
    """(fn(), None) computed in a forked child process and sent back pickled, or (None, a
    description of the signal) when the child died of one. The parent must not hold the
    engine's threads: it forks before importing the engine. An exception in fn is the
    child's to print; it comes back as the counts fn would have made of it (fn handles its
    own errors) or, uncaught, as a RuntimeError here."""
    import pickle
    for f in (sys.stdout, sys.stderr):
        f.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, leave without running the parent's cleanup
        os.close(r)
        code = 0
        try:
            data = pickle.dumps(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            data = pickle.dumps(("error", f"{type(e).__name__}: {first_line(e)}"))
            code = 1
        with os.fdopen(w, "wb") as f:
            f.write(data)
        for f in (sys.stdout, sys.stderr):
            f.flush()
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return None, _signal_text(status)
    kind, value = pickle.loads(data)
    if kind == "error":
        raise RuntimeError(value)
    return value, None


def start(make: Callable[[], object], info: Callable[[object], object], isolate: bool,
          engine=None, preload: Optional[Callable[[], None]] = None):
    """(info(engine), engine) for the run: the engine built here by make() (or the one
    given), or, with isolate, built in a forked child only (in_child), whose info comes back,
    and engine None (the children of Run._isolated build their own). preload (the engine
    class's, where it has one) imports the engine's modules here first, so that no child pays
    for the import. RuntimeError when the child dies of a signal; ImportError without the
    engine."""
    if not isolate:
        engine = engine or make()
        return info(engine), engine
    if preload is not None:
        preload()
    got, sig = in_child(lambda: info(make()))
    if sig:
        raise RuntimeError(f"the engine killed the process ({sig}) while starting")
    return got, None


def add_negative_control(ap, handed: str = "the engine") -> None:
    """--window-offset N: the runner hands `handed` W + N instead of W, a control the gate must
    fail naming the window (a runner that cannot fail is caught)."""
    ap.add_argument("--window-offset", type=int, default=0, metavar="N",
                    help=f"negative control: hand {handed} W + N (the gate must fail)")


def add_common_args(ap, label_default: str = "the engine's name and version") -> None:
    """The options every runner takes (label_default: what --help says the label defaults to)."""
    ap.add_argument("paths", nargs="+", metavar="PATH",
                    help="fixture files, or directories searched for *.h5 / *.hdf5")
    ap.add_argument("--dtype", action="append", metavar="T[,T]",
                    help="only cases of these dtypes (float32, float16, bfloat16; repeatable)")
    ap.add_argument("--label", help=f"the tested label (default: {label_default}), sanitized "
                                    f"to [A-Za-z0-9._-]")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace an output already stored under the label")


def files_and_dtypes(prog: str, a, err: Optional[TextIO] = None):
    """(files, dtypes) of the parsed common arguments, or None after one line on err (exit 2).
    A runner's --threads, where it has one, is held to >= 1 here too."""
    try:
        if a.label is not None:
            sanitize_label(a.label)
        if getattr(a, "threads", None) is not None and a.threads < 1:  # runners with --threads
            raise ValueError(f"--threads {a.threads}: must be >= 1")
        dtypes = parse_dtypes(a.dtype)
        files = discover(a.paths)
        if not files:
            raise ValueError(f"no fixture file (*.h5, *.hdf5) under {' '.join(a.paths)}")
    except ValueError as e:
        print(f"{prog}: {e}", file=err or sys.stderr)
        return None
    return files, dtypes


def run_variants(prog: str, engine: str, a, files: Sequence[str], dtypes, names: Sequence[str],
                 default_label: Callable[[str], str], describe: Callable[[str], str],
                 adapter_of: Callable[[str], Callable[[object], Result]]) -> int:
    """Each variant of one engine (a backend, an implementation) over the files, one Run each:
    label --label (suffixed -NAME when several run) or default_label(name), producer
    describe(name) with the negative control named (a.window_offset); the worst exit status."""
    status = 0
    for name in names:
        if a.label:
            label = sanitize_label(a.label + ("" if len(names) == 1 else f"-{name}"))
        else:
            label = sanitize_label(default_label(name))
        producer = describe(name)
        if a.window_offset:
            producer += f", NEGATIVE CONTROL: W + {a.window_offset} handed over"
        run = Run(prog=prog, engine=engine, label=label, producer=producer,
                  adapter=adapter_of(name), dtypes=dtypes, overwrite=a.overwrite)
        status = max(status, run.files(files))
    return status
