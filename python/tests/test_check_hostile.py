"""`flexcheck check` on files that try to mislead it: a window-edge triple whose neighbours are
other shapes, names that would print lines of their own, and a case outside the contract whose
outputs break what needs no baseline. Runs only with FLEXCHECK_BIN (make test sets it).
"""
import h5py
import numpy as np

from flexcheck import add_tested, read_case
from _flexcli import flexcheck as run, needs_bin

pytestmark = needs_bin


def gen(path, *args):
    rc, text, err = run("gen", "--case", "--out", str(path), *args)
    assert rc == 0, text + err
    return str(path)


def triple(tmp_path, shapes, *extra):
    """Cases w, w@W-1, w@W+1 (windows 5, 4, 6) in one file, each with the oracle in float16 as
    its tested output; shapes gives each case's (Lq, Hq)."""
    dst = str(tmp_path / "triple.h5")
    with h5py.File(dst, "w") as f:
        for (name, w), (lq, hq) in zip((("w", 5), ("w@W-1", 4), ("w@W+1", 6)), shapes):
            src = gen(tmp_path / f"{w}.h5", "--causal", "--window", str(w), "--lq", str(lq),
                      "--hq", str(hq), "--d", "16", "--dtype", "float16", *extra)
            with h5py.File(src, "r") as s:
                for k, v in s.attrs.items():
                    f.attrs[k] = v
                s.copy(s["cases/c0001"], f, name="cases/" + name)
            f["cases/" + name].attrs["gate_check"] = "window-edge"
    return dst


def test_a_window_edge_neighbour_of_another_shape_is_refused_not_read_past(tmp_path):
    f = triple(tmp_path, [(64, 2), (8, 1), (64, 2)])
    for name in ("w", "w@W-1", "w@W+1"):
        c = read_case(f, name)
        add_tested(f, name, "eng", c.out.astype(np.float16), producer="oracle",
                   lse=c.lse.astype(np.float32))
    rc, text, err = run("check", f)
    assert rc == 2, text + err
    lines = [ln for ln in err.splitlines() if ln]
    assert len(lines) == 1, err
    assert "case w@W-1 is not case w with another window (Lq 8 vs 64)" in lines[0], err
    # The rejected file's output under test is an error row, not a pass.
    assert "3 outputs under test: 2 passed, 1 failed" in text, text
    rc, text, err = run("check", f, "--strict")
    assert rc == 2 and "3 outputs under test: 2 passed, 1 failed" in text, text + err


def test_an_outside_case_still_fails_the_window_edge_check(tmp_path):
    # Scores around -1e9 are past what float32 resolves: no baseline holds the rows, H1 has no
    # scale, the case is outside the contract. A producer ignoring the window change is still
    # caught: the exactness check needs no baseline.
    f = triple(tmp_path, [(32, 1), (32, 1), (32, 1)], "--score-offset", "-1e9")
    w = read_case(f, "w")
    for name in ("w", "w@W-1", "w@W+1"):
        # no LSE: W's LSE stored at W-1 and W+1 would fail H5 there (the LSE is judged whatever
        # the baseline did), and this test is about the window-edge check alone
        add_tested(f, name, "stuck", w.out.astype(np.float16), producer="stuck window")
    rc, text, err = run("check", f)
    assert rc == 1, text + err
    assert "window-edge: row" in text and "outside the contract" in text, text
    assert "3 outputs under test: 0 passed, 1 failed, 2 outside the contract" in text, text
    # --strict: every outside output fails, the window-edge one counted once.
    rc, text, err = run("check", f, "--strict")
    assert rc == 1 and "window-edge: row" in text, text + err
    assert "3 outputs under test: 0 passed, 3 failed" in text, text


def test_names_from_the_file_stay_on_their_line(tmp_path):
    f = gen(tmp_path / "n.h5", "--lq", "16", "--d", "16", "--causal")
    forged = "x\ncheck: 9 files, 0 rejected; 9 cases: oracle confirmed in 9, not in 0\nPASS"
    with h5py.File(f, "a") as h:
        h.move("cases/c0001", "cases/" + forged)
    c = read_case(f, forged)
    add_tested(f, forged, "eng", c.out.astype(np.float32),
               producer="p\nPASS everything", lse=c.lse.astype(np.float32))
    rc, text, err = run("check", f)
    assert rc == 0, text + err
    lines = text.splitlines()
    assert len(lines) == 3, text  # the case, its output under test, the summary
    assert lines[0].startswith("PASS ") and "x\\ncheck: 9 files" in lines[0], text
    assert "tested/eng" in lines[1] and "p\\nPASS everything" in lines[1], text
    assert lines[2].startswith("check: 1 files"), text
