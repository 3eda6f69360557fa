/*
 * hyps_length.c - the diagnosis's length hypotheses (diag.h; issue 36 item 5): bugs that start
 * at an index of a long context. Same rule as hyps.c (one setup each, listed in hyps.c's
 * table); apart because each needs an index (K, R, S) that the case does not give: it is FITTED
 * to where the failing rows start (diag_onset, computed by diag_run.c from the truth's bounds).
 *
 *   keys dropped from K    a row uses only keys j < K (its other keys as the mask says)
 *   keys wrapped at K      key j >= K is read as key j - K (its K and V; the mask sees j)
 *   ring cache of R        a row sees only its last R keys (window R on a causal mask)
 *   split-K merge, base 2  keys [0, S) and [S, Lk) softmaxed apart, the two partial results
 *                          merged with weights 2^LSE_i instead of e^LSE_i, the merged LSE
 *                          log2(sum 2^LSE_i) (diag_eval.c computes it)
 *
 * The fit: on a sample the onset is known only to lie between the last judged passing token lo
 * and the first failing one hi; the index lies in the interval of values that change row hi and
 * no row up to lo (for K: (kmax(lo), kmax(hi)], kmax a row's last allowed key; for R: [n(lo),
 * n(hi)), n a row's allowed keys). The index is that interval's only value, or its only named
 * value (a threshold of attn_thresholds or a power of two); with none or several the hypothesis
 * does not apply (no guess). Then the claims test it as any other: every failing row explained,
 * DIAG_CLOSER times closer than the truth, no passing row contradicting it; a tie with a
 * hypothesis needing no fitted index goes to that one (diag_claims.c diag_pick_closest).
 * Dense cases without an explicit mask only (a packed batch's onsets differ per sequence, and an
 * explicit mask's rows per head).
 */
#include <stdlib.h>
#include <string.h>

#include "diag/diag_internal.h"

/* ---- named thresholds ------------------------------------------------------------------ */

static int32_t query_rows(const diag_in *in)
{
    return in->bm ? in->bm->q_block_size : 0; /* 0: attn_thresholds' default */
}

int diag_threshold_name(char *buf, size_t cap, const diag_in *in, int64_t t)
{
    attn_threshold th[ATTN_MAX_THRESHOLDS];
    int n = attn_thresholds(in->jc->prob, query_rows(in), th);
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n; i++)
        if (th[i].at == t) {
            fc_fmt(buf, cap, "%s", th[i].what);
            return 1;
        }
    for (int e = 4; e <= 30; e++)
        if (t == (int64_t)1 << e) {
            fc_fmt(buf, cap, "2^%d", e);
            return 1;
        }
    return 0;
}

/* The named values (attn_thresholds and the powers of two 2^4 .. 2^30) in [lo, hi], distinct,
 * in increasing order, into v[cap]; how many (counted past cap too). */
static int named_in(const diag_in *in, int64_t lo, int64_t hi, int64_t *v, int cap)
{
    attn_threshold th[ATTN_MAX_THRESHOLDS];
    int n = attn_thresholds(in->jc->prob, query_rows(in), th), count = 0;
    int64_t last = lo - 1;
    for (;;) { /* the next named value above `last`, until past hi */
        int64_t next = INT64_MAX;
        for (int i = 0; i < n; i++)
            if (th[i].at > last && th[i].at < next)
                next = th[i].at;
        for (int e = 4; e <= 30; e++)
            if (((int64_t)1 << e) > last && ((int64_t)1 << e) < next)
                next = (int64_t)1 << e;
        if (next > hi)
            return count;
        if (count < cap)
            v[count] = next;
        count++;
        last = next;
    }
}

int diag_thresholds_in(char *buf, size_t cap, const diag_in *in, int64_t lo, int64_t hi)
{
    int64_t v[8];
    int n = named_in(in, lo + 1, hi, v, 8), shown = n < 8 ? n : 8;
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < shown; i++) {
        char name[128];
        diag_threshold_name(name, sizeof name, in, v[i]);
        size_t len = strlen(buf);
        fc_fmt(buf + len, cap - len, "%s%s", i ? "; " : "", name);
    }
    return n;
}

/* ---- the fit ----------------------------------------------------------------------------- */

/* The least index a length hypothesis is fitted to: they are bugs of long contexts (split-K
 * merges from 2^10 keys, caches and index types of thousands), and on short rows a fitted
 * index would only echo the window and key-count hypotheses of hyps.c. */
#define LENGTH_MIN_INDEX 1024

/* The index in [lo, hi] (at least LENGTH_MIN_INDEX): its only value or its only named one; 1
 * and *at, name (the named value's words or "") when there is one, 0 otherwise. */
static int fit_index(const diag_in *in, int64_t lo, int64_t hi, int64_t *at, char *name,
                     size_t cap)
{
    int64_t v[2];
    if (lo < LENGTH_MIN_INDEX)
        lo = LENGTH_MIN_INDEX;
    if (lo > hi)
        return 0;
    if (lo == hi)
        *at = lo;
    else if (named_in(in, lo, hi, v, 2) == 1)
        *at = v[0];
    else
        return 0;
    diag_threshold_name(name, cap, in, *at);
    return 1;
}

/* The truth's keys of query token tq: [*k0, *k1). */
static void truth_range(const diag_in *in, int32_t tq, int32_t *k0, int32_t *k1)
{
    const attn_problem *p = in->jc->prob;
    mask_token_range(p->mask, seq_info_view(&p->seq), tq, k0, k1);
}

/* Whether a length hypothesis can be fitted: a dense case whose failing rows start past its
 * first token, a row with keys at the onset, and no explicit mask (a row's keys would differ
 * per batch entry and head, and the fit reads the families' range of one row for all). */
static int onset_usable(const diag_in *in, const diag_alt *a)
{
    const attn_problem *p = in->jc->prob;
    if (!a->onset || a->onset->hi <= 0 || p->seq.packed || p->seq.lk < 2 || p->xmask.bits)
        return 0;
    int32_t k0, k1;
    truth_range(in, a->onset->hi, &k0, &k1);
    return k1 > k0;
}

/* K, a key index: the values that change row hi (a key of it at or past K) and no judged row
 * before it, (kmax(lo), kmax(hi)]. */
static int fit_key_index(const diag_in *in, const diag_alt *a, int64_t *k, char *name,
                         size_t cap)
{
    int32_t k0, k1, l0 = 0, l1 = 0;
    if (!onset_usable(in, a))
        return 0;
    truth_range(in, a->onset->hi, &k0, &k1);
    if (a->onset->lo >= 0)
        truth_range(in, a->onset->lo, &l0, &l1);
    int64_t last_lo = l1 > l0 ? (int64_t)l1 - 1 : -1;
    return fit_index(in, last_lo + 1 > 1 ? last_lo + 1 : 1, (int64_t)k1 - 1, k, name, cap);
}

/* A key-index hypothesis's setup: the index fitted (fit_key_index, inside Lk) into *field and
 * the title "<what> K = 65536, 2^16 (...): <rule> (K fitted to the failing rows' onset)". */
static int key_index_setup(const diag_in *in, diag_alt *a, int32_t *field, const char *letter,
                           const char *what, const char *rule)
{
    int64_t at;
    char name[128];
    if (!fit_key_index(in, a, &at, name, sizeof name) || at >= in->jc->prob->seq.lk)
        return 0;
    *field = (int32_t)at;
    a->fitted = 1;
    fc_fmt(a->title, sizeof a->title, "%s %s = %lld%s%s: %s (%s fitted to the failing rows' "
           "onset)", what, letter, (long long)at, name[0] ? ", " : "", name, rule, letter);
    return 1;
}

/* ---- the hypotheses ---------------------------------------------------------------------- */

/* Keys from K on dropped: a row uses only keys j < K (a key count or a cache capped at K). */
static void keys_dropped_fn(const diag_alt *a, const diag_key *k, uint8_t *allowed)
{
    diag_keys_mask(a, k, allowed);
    for (int32_t tk = a->key_end; tk < k->p->seq.lk; tk++)
        allowed[tk] = 0;
}

int diag_keys_dropped(const diag_in *in, diag_alt *a)
{
    a->keys = keys_dropped_fn;
    return key_index_setup(in, a, &a->key_end, "K", "keys dropped from",
                           "a row uses only keys j < K");
}

int diag_keys_wrapped(const diag_in *in, diag_alt *a)
{
    return key_index_setup(in, a, &a->key_wrap, "K", "keys wrapped at",
                           "key j >= K read as key j - K");
}

/* A ring cache of R keys on a causal mask: window R (on top of a longer window, or of none).
 * R: the values that change row hi (more than R keys) and no judged row before it, [n(lo),
 * n(hi)). */
int diag_ring_cache(const diag_in *in, diag_alt *a)
{
    int32_t k0, k1, l0 = 0, l1 = 1, W = a->mask.sliding_window;
    int64_t R;
    char name[128];
    if (!a->mask.causal || !onset_usable(in, a))
        return 0;
    truth_range(in, a->onset->hi, &k0, &k1);
    if (a->onset->lo >= 0)
        truth_range(in, a->onset->lo, &l0, &l1);
    int64_t nlo = l1 - l0 > 1 ? l1 - l0 : 1;
    if (!fit_index(in, nlo, (int64_t)(k1 - k0) - 1, &R, name, sizeof name) ||
        (W > 0 && R >= W) || R > INT32_MAX)
        return 0;
    a->mask.sliding_window = (int32_t)R;
    a->fitted = 1;
    fc_fmt(a->title, sizeof a->title, "a ring cache of R = %lld keys%s%s: each row sees only its "
           "last R keys (R fitted to the failing rows' onset)", (long long)R, name[0] ? ", " : "",
           name);
    return 1;
}

/* A split-K merge in base 2 at S: only where the split cuts some row (S inside a row's keys). */
int diag_merge_base2(const diag_in *in, diag_alt *a)
{
    return key_index_setup(in, a, &a->split_at, "S", "a split-K merge in base 2 at",
                           "keys [0, S) and [S, Lk) merged with weights 2^LSE_i instead of "
                           "e^LSE_i and the LSE log2 of their sum");
}
