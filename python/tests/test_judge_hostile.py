"""flexcheck.judge / assert_attention_close against a hostile caller (issue 35): every argument
checked the way write_case checks its own (integers exact and never wrapped to 32 bits,
booleans only booleans, numbers only numbers, arrays by kind and byte order), every refusal
naming the argument, the spellings engines use for "no window" understood, an output outside
the contract failing unless allowed, the worst element a NaN when there is one, a budget, and
Ctrl-C raising KeyboardInterrupt while the C call runs. Skipped (visibly) without the shared
library, as test_judge.py is; its brute-force numpy attention is the thing under test here too.
"""
import decimal
import fractions
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import flexcheck
from test_judge import WHY, attention, inputs

pytestmark = pytest.mark.skipif(WHY is not None, reason=f"{WHY}")


def right(seed=0, **mask):
    """(q, k, v, out, lse): the brute-force attention of float16 inputs, rounded as a float16
    kernel would store it."""
    q, k, v = inputs(seed)
    o, lse = attention(q, k, v, **mask)
    return q, k, v, o.astype(np.float16), lse.astype(np.float32)


# ---- integers exact, never wrapped; the spellings of "no window" ----

@pytest.mark.parametrize("what,value", [
    ("window", 2**32 + 16), ("window", 2**64), ("window", 2**31), ("window", 16.5),
    ("window", "16"), ("window", b"16"), ("window", True), ("window", np.float64(16)),
    ("window", [16]), ("window", (255, 0)), ("window", -2), ("window", np.bool_(True)),
    ("chunk", 2**64), ("chunk", 2**32 + 8), ("chunk", 8.0), ("chunk", "8"), ("chunk", -1),
    ("chunk", False), ("chunk", np.uint64(2**63)),
])
def test_window_and_chunk_are_exact_integers_never_wrapped(what, value):
    q, k, v, o, _ = right()
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, o, **{what: value})
    assert str(e.value).startswith(f"{what} = "), str(e.value)
    assert "must be" in str(e.value) and ("no window" if what == "window" else "no chunking") \
        in str(e.value), str(e.value)


@pytest.mark.parametrize("off", [None, 0, -1, np.int64(-1), np.int32(0)])
def test_none_zero_and_minus_one_mean_no_window(off):
    # vLLM's sliding_window=None, FlashAttention's window_size=(-1, -1), flexcheck's 0: one
    # answer, the output without a window passing and one with a window failing.
    q, k, v, o, lse = right(1, causal=True)
    assert flexcheck.judge(q, k, v, o, lse, causal=True, window=off).passed
    _, _, _, o16, _ = right(1, causal=True, window=16)
    assert flexcheck.judge(q, k, v, o16, causal=True, window=off).failed
    assert flexcheck.judge(q, k, v, o16, causal=True, window=np.int16(16)).passed


@pytest.mark.parametrize("off", [None, 0, np.uint8(0)])
def test_none_and_zero_mean_no_chunking(off):
    q, k, v, o, lse = right(2, causal=True)
    assert flexcheck.judge(q, k, v, o, lse, causal=True, chunk=off).passed


# ---- booleans only booleans ----

@pytest.mark.parametrize("value", ["False", "True", "", None, 2, -1, 0.5, 1.0, np.float64(1),
                                   [True], b"1", np.array([True, False])])
def test_causal_takes_booleans_only(value):
    q, k, v, o, _ = right()
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, o, causal=value)
    assert str(e.value).startswith(f"causal = {value!r}: must be True/False or 0/1"), \
        str(e.value)


@pytest.mark.parametrize("value", [True, np.True_, 1, np.int64(1)])
def test_causal_true_spelled_as_numpy_or_one(value):
    q, k, v, o, lse = right(3, causal=True)
    assert flexcheck.judge(q, k, v, o, lse, causal=value).passed


# ---- numbers only numbers ----

@pytest.mark.parametrize("value", ["0.17", b"0.17", True, np.True_, [0.17], np.array([0.1, 0.2]),
                                   1j, object()])
def test_scale_takes_numbers_only(value):
    q, k, v, o, _ = right()
    with pytest.raises(ValueError) as e:
        flexcheck.judge(q, k, v, o, scale=value)
    assert str(e.value).startswith("scale: ") and "is not a number" in str(e.value), \
        str(e.value)


@pytest.mark.parametrize("value", [0.25, np.float32(0.25), fractions.Fraction(1, 4),
                                   decimal.Decimal("0.25"), np.array(0.25)])
def test_scale_as_any_real_number(value):
    q, k, v = inputs(4)
    o, lse = attention(q, k, v, scale=0.25)
    vd = flexcheck.judge(q, k, v, o.astype(np.float16), lse.astype(np.float32), scale=value)
    assert vd.passed, str(vd)


# ---- dtypes by kind and byte order ----

def test_a_big_endian_array_is_converted_never_misread():
    q, k, v, o, lse = right(5, causal=True)
    native = flexcheck.judge(q, k, v, o, lse.astype(np.float16), causal=True)
    assert str(native).startswith("PASS output float16: "), str(native)
    assert "LSE stored as float16" in str(native)
    big = [x.astype(x.dtype.newbyteorder(">")) for x in (q, k, v, o, lse.astype(np.float16))]
    assert not any(x.dtype.isnative for x in big)
    swapped = flexcheck.judge(*big[:4], big[4], causal=True)
    assert str(swapped) == str(native)
    # float32 data big-endian: a float32 problem, as its native twin
    q32, k32, v32 = (x.astype(">f4") for x in (q, k, v))
    vd = flexcheck.judge(q32, k32, v32, o.astype(">f4"), causal=True)
    assert str(vd) == str(flexcheck.judge(q.astype(np.float32), k.astype(np.float32),
                                          v.astype(np.float32), o.astype(np.float32),
                                          causal=True))
    assert str(vd).startswith("PASS output float32") or str(vd).startswith("FAIL output float32")


# ---- every refusal names its argument ----

QKV = inputs(6)
Q, K, V = QKV


@pytest.mark.parametrize("kw,name", [
    (dict(window="abc"), "window"), (dict(window=[1]), "window"), (dict(window=object()), "window"),
    (dict(chunk="x"), "chunk"), (dict(chunk=1.5), "chunk"),
    (dict(causal=np.array([True, False])), "causal"), (dict(causal="yes"), "causal"),
    (dict(scale="x"), "scale"), (dict(scale=[1.0]), "scale"),
    (dict(softcap="30"), "softcap"), (dict(softcap=-1.0), "softcap"),
    (dict(softcap=True), "softcap"),
    (dict(sinks=[1.0, 2.0]), "sinks"), (dict(sinks="x"), "sinks"),
    (dict(sinks=np.full(8, 0.1)), "sinks"),
    (dict(dtype="float8"), "dtype"), (dict(dtype=np.float16), "dtype"),
    (dict(q=None), "q"), (dict(q="abc"), "q"), (dict(q=Q.astype(np.int32)), "q"),
    (dict(q=Q.astype(np.complex64)), "q"), (dict(k=K.astype(bool)), "k"),
    (dict(v=np.full(V.shape, 0.1)), "v"),
    (dict(out=None), "out"), (dict(out="x"), "out"),
    (dict(out=np.zeros((1, 8, 64, 32), bool)), "out"),
    (dict(out=np.zeros((1, 8, 64, 32), np.uint16)), "out"),
    (dict(lse="x"), "lse"), (dict(lse=np.zeros((1, 8, 64), np.int64)), "lse"),
    (dict(cu_seqlens_q=[0, 64]), "cu_seqlens_q"),
    (dict(max_work=0), "max_work"), (dict(max_work="1e12"), "max_work"),
    (dict(max_work=True), "max_work"), (dict(max_work=1.5), "max_work"),
    (dict(max_memory=-1), "max_memory"), (dict(max_memory=2**64), "max_memory"),
    # shapes the library cannot run: the limit named, at the arguments they come from
    (dict(q=np.zeros((1, 8, 64, 2000), np.float16), k=np.zeros((1, 2, 64, 2000), np.float16)),
     "q, k, v shapes: set_shape: D = 2000, must be at most 1024"),
    (dict(q=np.broadcast_to(np.float16(0), (1, 8, 2**32 + 16, 32))),
     "q: Lq = 4294967312: must be at most 2147483647"),
])
def test_every_refusal_names_its_argument(kw, name):
    args = dict(q=Q, k=K, v=V, out=np.zeros((1, 8, 64, 32), np.float16))
    args.update(kw)
    with pytest.raises(ValueError) as e:
        flexcheck.judge(**args)
    assert str(e.value).startswith(name), str(e.value)


# ---- outside the contract fails unless allowed ----

def outside_case():
    """float16 scores near -1.8e9 (two coordinates of +-60000 at scale 1/4), past what float32
    resolves: no baseline holds the rows (outside the contract), and an all-zero output gets
    through every gate that runs."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 2, 16, 16)).astype(np.float16)
    k = rng.standard_normal((1, 2, 16, 16)).astype(np.float16)
    q[..., :2], k[..., :2] = 60000, -60000
    v = rng.standard_normal((1, 2, 16, 16)).astype(np.float16)
    return q, k, v, np.zeros((1, 2, 16, 16), np.float16)


def test_an_all_zero_output_fails_where_only_the_float16_baseline_overflows():
    # float16 scores near -65536: the float16 baseline overflows, the float32-score one holds
    # the rows and judges them (docs/tolerance.md "When the baseline drowns"): zeros fail.
    rng = np.random.default_rng(7)
    q = np.full((1, 2, 16, 16), 128, np.float16)
    k = (-128 - rng.integers(0, 4, (1, 2, 16, 16))).astype(np.float16)
    v = rng.standard_normal((1, 2, 16, 16)).astype(np.float16)
    vd = flexcheck.judge(q, k, v, np.zeros((1, 2, 16, 16), np.float16))
    assert not vd.passed and not vd.outside, str(vd)
    with pytest.raises(AssertionError):
        flexcheck.assert_attention_close(q, k, v, out=np.zeros((1, 2, 16, 16), np.float16))


def test_assert_attention_close_fails_an_output_outside_the_contract():
    q, k, v, zeros = outside_case()
    assert flexcheck.judge(q, k, v, zeros).outside
    with pytest.raises(AssertionError) as e:
        flexcheck.assert_attention_close(q, k, v, out=zeros)
    assert "outside the contract" in str(e.value) and "allow_outside=True" in str(e.value)
    assert "OUTSIDE output float16" in str(e.value)
    assert flexcheck.assert_attention_close(q, k, v, out=zeros, allow_outside=True).outside
    with pytest.raises(ValueError, match=r"^allow_outside = 'yes': must be True/False or 0/1"):
        flexcheck.assert_attention_close(q, k, v, out=zeros, allow_outside="yes")


def test_strict_still_works_and_says_it_is_deprecated():
    q, k, v, zeros = outside_case()
    with pytest.warns(DeprecationWarning, match="allow_outside"):
        with pytest.raises(AssertionError):
            flexcheck.assert_attention_close(q, k, v, out=zeros, strict=True)
    with pytest.warns(DeprecationWarning):
        assert flexcheck.assert_attention_close(q, k, v, out=zeros, strict=False).outside
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match="disagree"):
            flexcheck.assert_attention_close(q, k, v, out=zeros, strict=True, allow_outside=True)
        with pytest.raises(ValueError, match="^strict = None"):
            flexcheck.assert_attention_close(q, k, v, out=zeros, strict=None)


# ---- the worst element ----

@pytest.mark.parametrize("planted", [np.nan, np.inf])
def test_the_worst_element_is_the_nan_then_the_infinity(planted):
    q, k, v, o, lse = right(8)
    o = o.copy()
    o[0, 1, 3, 5] += 100  # a large finite error elsewhere
    o[0, 6, 40, 7] = planted
    (where, err) = flexcheck.judge(q, k, v, o, lse).worst
    assert where == (0, 6, 40, 7), where
    assert (np.isnan(err) if np.isnan(planted) else err == np.inf), err


# ---- a budget, as the CLI's ----

def test_a_problem_over_the_work_budget_is_refused_before_any_copy():
    # 2^18 tokens, 8 heads, D 64: 7e13 multiply-adds. Broadcast views cost no memory, and the
    # refusal comes before any conversion would make them real.
    big = np.broadcast_to(np.float16(0), (1, 8, 2**18, 64))
    t0 = time.monotonic()
    with pytest.raises(ValueError) as e:
        flexcheck.judge(big, big, big, big)
    assert time.monotonic() - t0 < 30  # no conversion of 2^27 elements, no oracle
    assert str(e.value) == (
        "judge: budget: B 1, Hq 8, Lq 262144, Lk 262144, D 64, Dv 64 need about 7.04e+13 "
        "multiply-adds, over the work budget max_work = 1.1e+12 (1099511627776): raise max_work "
        "to judge it, or judge a sample of rows (rows)")


def test_max_work_and_max_memory_bound_a_judge_and_raise_it():
    q, k, v, o, lse = right(9)
    work = 8 * 64 * 64 * 64  # B * Hq * Lq * Lk * (D + Dv)
    assert flexcheck.judge(q, k, v, o, lse, max_work=work).passed
    # 64 bits through ctypes: 2^32 + work - 1 cut to 32 bits would be work - 1, refused
    assert flexcheck.judge(q, k, v, o, lse, max_work=2**32 + work - 1).passed
    with pytest.raises(ValueError, match=rf"over the work budget max_work = .*\({work - 1}\): "
                                         r"raise max_work"):
        flexcheck.judge(q, k, v, o, lse, max_work=work - 1)
    with pytest.raises(ValueError, match=r"over the memory budget max_memory = .*\(1000 bytes\): "
                                         r"raise max_memory"):
        flexcheck.judge(q, k, v, o, lse, max_memory=1000)
    assert flexcheck.judge(q, k, v, o, lse, max_memory=2**30).passed


# ---- Ctrl-C ----

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import flexcheck
    rng = np.random.default_rng(0)
    # float32, B 1, Hq 8, L 16384, D 64, dense: 2.7e11 multiply-adds for the oracle alone,
    # over a minute on one core; v = 0 so that the zero output is right (no diagnosis).
    q = rng.standard_normal((1, 8, 16384, 64)).astype(np.float32)
    k = rng.standard_normal((1, 8, 16384, 64)).astype(np.float32)
    v = np.zeros((1, 8, 16384, 64), np.float32)
    print("judging", flush=True)
    try:
        flexcheck.judge(q, k, v, v[:, :, :, :])
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        small = np.zeros((1, 1, 4, 16), np.float32)
        print("then:", flexcheck.judge(small, small, small, small).outcome, flush=True)
        sys.exit(3)
    print("finished", flush=True)
""")


def test_ctrl_c_raises_keyboard_interrupt_while_the_c_call_runs():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline() == "judging\n", child.stderr.read()
        time.sleep(2)  # the inputs converted, the C call under way
        child.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        # Generous: the judge alone runs for minutes; the interrupt takes well under a second.
        out, err = child.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 3, (child.returncode, out, err)
    assert out == "KeyboardInterrupt\nthen: pass\n", (out, err)
    assert took < 30, took
    print(f"Ctrl-C to exit: {took:.2f} s")


# ---- write_case, whose checks judge borrows: the same holes closed there ----

def test_write_case_reads_a_big_endian_float16_case_as_float16(tmp_path):
    q, k, v = (x.astype(">f2") for x in inputs(10))
    flexcheck.write_case(tmp_path / "be.h5", "c", q, k, v)
    c = flexcheck.read_case(tmp_path / "be.h5", "c")
    assert c.dtype == "float16" and c.q.dtype == np.float16
    assert np.array_equal(c.q, q.astype(np.float16))


@pytest.mark.parametrize("kw,says", [
    (dict(causal=1.0), "causal = 1.0: must be True/False or 0/1"),
    (dict(causal="False"), "causal = 'False': must be True/False or 0/1"),
    (dict(window=True), "window: True is not an integer"),
    # numpy's own repr of its bool: "True" under numpy 1, "np.True_" under numpy 2.
    (dict(chunk=np.True_), f"chunk: {np.True_!r} is not an integer"),
    (dict(scale="0.5"), "scale: '0.5' is not a number"),
    (dict(scale=True), "scale: True is not a number"),
    (dict(cu_seqlens_q=np.array([0, 2**64 - 1, 64], np.uint64),
          cu_seqlens_k=np.array([0, 2**64 - 1, 64], np.uint64)),
     "cu_seqlens_q: value 18446744073709551615 at index 1: past int32"),
])
def test_write_case_refuses_what_judge_refuses(tmp_path, kw, says):
    q, k, v = inputs(11)
    if "cu_seqlens_q" in kw:
        q, k, v = (x[0].transpose(1, 0, 2) for x in (q, k, v))  # packed [T, H, D]
    with pytest.raises(ValueError) as e:
        flexcheck.write_case(tmp_path / "x.h5", "c", q, k, v, **kw)
    assert says in str(e.value), str(e.value)
    assert not (tmp_path / "x.h5").exists()
