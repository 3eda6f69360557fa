"""`flexcheck export`: the gate's matrix as fixture files an outside producer fills with its
outputs, judged by `flexcheck check`. Runs only with FLEXCHECK_BIN (make test sets it).

The "producer" here returns the float64 oracle the export stored, rounded to float32: a kernel
that is right to float32 precision. It is judged, never trusted: `check` recomputes the oracle
itself before judging it.
"""
import glob
import os

import h5py
import numpy as np
import pytest

from flexcheck import add_tested, list_cases, read_case, round_to
from _flexcli import flexcheck as run, needs_bin

pytestmark = needs_bin


def export(tmp_path, name, *args):
    out = str(tmp_path / name)
    rc, text, err = run("export", "--quick", "--out", out, *args)
    assert rc == 0, text + err
    return out, sorted(glob.glob(os.path.join(out, "*.h5")))


def txt(v):
    """Our C writer stores fixed-length strings, which h5py reads as bytes."""
    return v.decode() if isinstance(v, bytes) else v


def ids(*args):
    rc, text, err = run("gate", "--quick", "--list", *args)
    assert rc == 0, err
    return text.split()


def test_one_file_per_case_with_the_gates_ids(tmp_path):
    out, files = export(tmp_path, "m2", "--filter", "m2-numeric")
    want = ids("--filter", "m2-numeric")
    assert [os.path.basename(f)[:-3] for f in files] == sorted(want)
    for f in files:
        with h5py.File(f, "r") as h:
            for name, g in h["cases"].items():
                assert txt(g.attrs["case_id"]) == os.path.basename(f)[:-3]
                assert txt(g.attrs["gate_check"]) == "numeric"
                assert "block_mask" in g and "out" in g and "lse" in g


def test_shards_partition_the_export(tmp_path):
    _, whole = export(tmp_path, "all", "--filter", "m4-")
    _, s1 = export(tmp_path, "s1", "--filter", "m4-", "--shard", "1/2")
    _, s2 = export(tmp_path, "s2", "--filter", "m4-", "--shard", "2/2")
    names = lambda fs: [os.path.basename(f) for f in fs]
    assert sorted(names(s1) + names(s2)) == names(whole)
    assert not set(names(s1)) & set(names(s2))


def test_a_layout_case_is_a_layout_file_of_its_layers(tmp_path):
    _, files = export(tmp_path, "m6", "--filter", "m6-layout-f32")
    assert len(files) == 1
    with h5py.File(files[0], "r") as h:
        assert txt(h.attrs["layout"]) == "gemma3"
        layers = sorted(h["cases"])
        assert layers[0] == "layer00" and len(layers) >= 2
        assert txt(h["cases/layer01"].attrs["case_id"]).endswith("@L01")


def fill_correct(path, label="ref32"):
    for name in list_cases(path):
        c = read_case(path, name)
        add_tested(path, name, label, c.out.astype(np.float32), producer="the oracle in float32",
                   lse=c.lse.astype(np.float32))


def test_window_edge_outputs_are_paired(tmp_path):
    _, files = export(tmp_path, "we", "--filter", "m4-window-edge-f32")
    assert len(files) == 1
    f = files[0]
    assert list_cases(f) == ["float32", "float32@W+1", "float32@W-1"]
    fill_correct(f)
    rc, text, err = run("check", f)
    assert rc == 0, text + err
    assert "3 outputs under test: 3 passed, 0 failed" in text, text

    # A producer that ignores the window change: its W+1 output is its W output.
    w = read_case(f, "float32")
    add_tested(f, "float32@W+1", "stuck", w.out.astype(np.float32), producer="stuck window",
               lse=w.lse.astype(np.float32))
    add_tested(f, "float32", "stuck", w.out.astype(np.float32), producer="stuck window",
               lse=w.lse.astype(np.float32))
    wm = read_case(f, "float32@W-1")
    add_tested(f, "float32@W-1", "stuck", wm.out.astype(np.float32), producer="stuck window",
               lse=wm.lse.astype(np.float32))
    rc, text, err = run("check", f, "--report", str(tmp_path / "rep"))
    assert rc == 1, text + err
    assert "window-edge" in text and "float32 tested/stuck" in text, text
    csv = (tmp_path / "rep" / "rows.csv").read_text()
    assert ",fail,window-edge," in csv
    assert "m4-window-edge-f32" in csv  # rows carry the gate's case ids


def test_check_runs_a_layout_files_layers_through_shared_metadata(tmp_path):
    _, files = export(tmp_path, "m6", "--filter", "m6-layout-f32")
    f = files[0]
    # One block-mask build per run of consecutive layers with the same mask terms.
    masks = []
    with h5py.File(f, "r") as h:
        for name in sorted(h["cases"]):
            a = h["cases"][name].attrs
            masks.append((int(a["causal"]), int(a["sliding_window"]), int(a["chunk_size"])))
    builds = 1 + sum(1 for a, b in zip(masks, masks[1:]) if a != b)
    assert builds >= 2, masks  # the test needs a layout that changes the mask
    rc, text, err = run("check", "--backend", "emu", "--kernel", "1", f, "--report",
                        str(tmp_path / "rep"))
    assert rc == 0, text + err
    assert f"through one shared metadata object: {builds} block-mask builds" in text, text
    csv = (tmp_path / "rep" / "rows.csv").read_text().splitlines()
    shared = [ln for ln in csv if ",shared,emu," in ln]
    assert len(shared) == len(masks) and all(",pass," in ln for ln in shared), csv[:3]


def test_a_decode_case_comes_with_its_dense_slice(tmp_path):
    _, files = export(tmp_path, "dec", "--filter", "m4-decode-f16")
    f = files[0]
    assert list_cases(f) == ["float16", "float16@slice"]
    w, s = read_case(f, "float16"), read_case(f, "float16@slice")
    W = w.window
    lk = w.k.shape[2]
    assert s.k.shape[2] == min(W, lk) and s.window == 0 and not s.causal
    assert np.array_equal(s.k, w.k[:, :, lk - min(W, lk):, :]) and np.array_equal(s.q, w.q)
    # Dense attention over the last W keys is the windowed row: the two oracles agree.
    assert np.allclose(s.out, w.out, rtol=1e-12, atol=1e-12)
    assert txt(h5py.File(f, "r")["cases/float16@slice"].attrs["case_id"]).endswith("@slice")


def test_shards_checked_apart_merge_to_the_unsharded_totals(tmp_path):
    import json
    rows = {}
    for name, shard in (("all", None), ("s1", "1/2"), ("s2", "2/2")):
        args = ["--filter", "m4-"] + (["--shard", shard] if shard else [])
        d, files = export(tmp_path, "cases-" + name, *args)
        rc, text, err = run("check", "--backend", "emu", "--kernel", "1", "--quiet",
                            "--report", str(tmp_path / ("rep-" + name)), *files)
        assert rc == 0, text + err
    rc, text, err = run("report", "merge", str(tmp_path / "rep-s1"), str(tmp_path / "rep-s2"),
                        "--out", str(tmp_path / "merged"))
    assert rc == 0, text + err
    for name in ("rep-all", "merged"):
        with open(tmp_path / name / "rows.json") as f:
            rows[name] = json.load(f)
    for key in ("rows_total", "pass", "fail", "error", "skip", "outside"):
        assert rows["merged"][key] == rows["rep-all"][key], key
    assert rows["rep-all"]["rows_total"] > 0
    ids = lambda r: sorted((x["case_id"], x["builder"]) for x in r["rows"])
    assert ids(rows["merged"]) == ids(rows["rep-all"])
    # The same check run twice is refused, naming it.
    rc, text, err = run("report", "merge", str(tmp_path / "rep-s1"), str(tmp_path / "rep-s1"),
                        "--out", str(tmp_path / "twice"))
    assert rc == 2 and err.strip(), text + err


def test_layout_files_carry_each_layers_score_terms_and_scale(tmp_path):
    # gpt-oss: sinks on every layer, drawn per layer; the default scale. Gemma 2 27b: the cap
    # and query_pre_attn_scalar^-0.5 on every layer. Both judged with the kernel, layer by layer.
    _, oss = export(tmp_path, "oss", "--filter", "gpt-oss-20b")
    _, g27 = export(tmp_path, "g27", "--filter", "gemma2-27b")
    assert len(oss) == 2 and len(g27) == 1
    for f in oss:
        with h5py.File(f, "r") as h:
            assert txt(h.attrs["layout"]) == "gpt-oss-20b"
            sinks = []
            for name in sorted(h["cases"]):
                g = h["cases"][name]
                assert "softcap" not in g.attrs or g.attrs["softcap"] == 0
                assert g.attrs["scale"] == pytest.approx(g["q"].shape[-1] ** -0.5, rel=1e-15)
                assert g["sinks"].shape == (g["q"].shape[1],)
                sinks.append(tuple(np.asarray(g["sinks"])))
            assert len(set(sinks)) == len(sinks), "each layer its own sinks"
    with h5py.File(g27[0], "r") as h:
        for name in sorted(h["cases"]):
            g = h["cases"][name]
            assert g.attrs["softcap"] == 50 and "sinks" not in g
            assert g.attrs["scale"] == pytest.approx(144 ** -0.5, rel=1e-15)
    for f in oss + g27:
        rc, text, err = run("check", "--backend", "emu", "--kernel", "1", f)
        assert rc == 0, text + err
        assert "through one shared metadata object" in text, text


def _allowed(c, lq, lk):
    """[Lq, Lk] allowed keys of a dense case, from the mask's definition (docs/semantics.md):
    queries aligned to the end of the keys, causal, sliding window, chunks."""
    tq = np.arange(lq)[:, None] + (lk - lq)
    tk = np.arange(lk)[None, :]
    ok = np.ones((lq, lk), bool)
    if c.causal:
        ok &= tk <= tq
    if c.window:
        ok &= np.abs(tq - tk) < c.window
    if c.chunk:
        ok &= tq // c.chunk == tk // c.chunk
    return ok


def _designed_output(c, model):
    """The designed case's output in float32 as a kernel computes it, with P rounded to the
    case's dtype as FlexAttention's tiled kernels do (rnd(exp(s - m)) then / sum), as its eager
    path does (rnd(P) normalised), or not at all (fp32)."""
    q, k, v = (np.asarray(a, np.float32) for a in (c.q, c.k, c.v))
    b, hq, lq, _ = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    ok = _allowed(c, lq, lk)
    rnd = lambda x: np.asarray(round_to(x, c.dtype), np.float32)
    o = np.zeros((b, hq, lq, v.shape[3]), np.float32)
    for bi in range(b):
        for h in range(hq):
            g = h // (hq // hkv)
            s = (q[bi, h] @ k[bi, g].T) * np.float32(c.scale)
            s = np.where(ok, s, -np.inf).astype(np.float32)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m, dtype=np.float32)
            l = p.sum(axis=1, keepdims=True, dtype=np.float32)
            if model == "tiled":
                o[bi, h] = (rnd(p) @ v[bi, g]) / l
            elif model == "eager":
                o[bi, h] = rnd(p / l) @ v[bi, g]
            else:
                o[bi, h] = (p / l) @ v[bi, g]
    return rnd(o)


def test_p_round_design_judges_a_producers_claimed_rounding_of_p(tmp_path):
    # The p-round check's designed run travels as "<dtype>@design". A producer that claims
    # FlexAttention's rounding of P (attribute rounding = "flexattention") is held to it: either
    # of FlexAttention's paths passes, P kept in fp32 fails under p-round. A producer that does
    # not claim it is not: P kept in fp32 is closer to the oracle, passes every gate, and the
    # rule's finding is a note under its line.
    _, files = export(tmp_path, "pr", "--filter", "m4-p-round")
    assert len(files) >= 2
    for f in files:
        design = [n for n in list_cases(f) if n.endswith("@design")]
        assert len(design) == 1, list_cases(f)
        c = read_case(f, design[0])
        assert c.scale == 1.0 and not c.packed
        for model in ("tiled", "eager", "fp32"):
            o = _designed_output(c, model).astype(np.float32)
            add_tested(f, design[0], model, o, producer=f"P {model}", rounding="flexattention")
            add_tested(f, design[0], model + "-unclaimed", o, producer=f"P {model}")
        # Right rounding, wrong rows: every 16th query row set to 7. p-round's rule looks at some
        # elements only; H1 still judges every one on a design (only H2 is set aside).
        wrong = _designed_output(c, "tiled").astype(np.float32)
        wrong[:, :, 1::16, :] = 7.0
        add_tested(f, design[0], "wrongrows", wrong, producer="right P, wrong rows",
                   rounding="flexattention")
        rc, text, err = run("check", f, "--report", str(tmp_path / "rep"))
        assert rc == 1, text + err
        lines = text.splitlines()
        at = {m: next(i for i, ln in enumerate(lines) if f"@design tested/{m} " in ln)
              for m in ("tiled", "eager", "fp32", "wrongrows", "tiled-unclaimed",
                        "eager-unclaimed", "fp32-unclaimed")}
        line = {m: lines[i] for m, i in at.items()}
        assert line["wrongrows"].startswith("FAIL") and "H1" in line["wrongrows"], text
        assert line["tiled"].startswith("PASS"), line["tiled"]
        assert line["eager"].startswith("PASS"), line["eager"]
        assert line["fp32"].startswith("FAIL") and "p-round: " in line["fp32"], line["fp32"]
        for m in ("tiled", "eager", "fp32"):
            u = line[m + "-unclaimed"]
            assert u.startswith("PASS"), u
            note = lines[at[m + "-unclaimed"] + 1]
            if m == "fp32":  # the rule's finding, as a note
                assert note.startswith("    note: p-round (not claimed; the producer does not "
                                       "say it rounds P as FlexAttention does): "), note
            else:
                assert not note.startswith("    note: p-round"), note
        csv = (tmp_path / "rep" / "rows.csv").read_text()
        assert ",fail,p-round," in csv and "@design" in csv


def test_a_rounding_profile_other_than_flexattention_is_refused(tmp_path):
    _, files = export(tmp_path, "pr", "--filter", "m4-p-round")
    f = files[0]
    name = list_cases(f)[0]
    c = read_case(f, name)
    with pytest.raises(ValueError, match="rounding 'flex': None or one of flexattention"):
        add_tested(f, name, "x", c.out.astype(np.float32), producer="p", rounding="flex")
    add_tested(f, name, "x", c.out.astype(np.float32), producer="p", rounding="flexattention")
    with h5py.File(f, "r+") as h:
        h[f"cases/{name}/tested/x"].attrs["rounding"] = "fp32-p"
    rc, text, err = run("check", f)
    assert rc == 2, text + err
    errs = [ln for ln in err.splitlines() if ln]
    assert len(errs) == 1 and 'attribute rounding = "fp32-p": the one profile is ' \
        '"flexattention"' in errs[0], err