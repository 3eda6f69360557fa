/*
 * rep_row.c - report rows (rep.h): filling one from a verdict, and the column table that the
 * CSV and JSON writers and the JSON reader share, so their columns can never drift apart.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "reports/rep_internal.h"

#define FIELD_SIZE(type, field) sizeof(((type *)0)->field)
#define COL(name, kind) {#name, kind, offsetof(rep_row, name), FIELD_SIZE(rep_row, name)}

const rep_col rep_cols[] = {
    COL(case_id, REP_COL_STR),    COL(group, REP_COL_STR),     COL(b, REP_COL_I32),
    COL(hq, REP_COL_I32),         COL(hkv, REP_COL_I32),       COL(lq, REP_COL_I32),
    COL(lk, REP_COL_I32),         COL(d, REP_COL_I32),         COL(dv, REP_COL_I32),
    COL(nseq, REP_COL_I32),
    /* one column per mask term, named as its CLI option ("window") */
#define MASK_COL(field, name, opt, ...)                                                        \
    {opt, REP_COL_I32, offsetof(rep_row, mask.field), FIELD_SIZE(rep_row, mask.field)},
    MASK_PARAMS(MASK_COL)
#undef MASK_COL
    /* the score terms, named as their CLI options (masks/terms.h) */
    {TERM_SOFTCAP_NAME, REP_COL_F64, offsetof(rep_row, softcap), FIELD_SIZE(rep_row, softcap)},
    {TERM_SINKS_NAME, REP_COL_I32, offsetof(rep_row, sinks), FIELD_SIZE(rep_row, sinks)},
    COL(q_block, REP_COL_I32),    COL(kv_block, REP_COL_I32),  COL(builder, REP_COL_STR),
    COL(backend, REP_COL_STR),    COL(producer, REP_COL_STR),
    COL(kernel, REP_COL_I32),     COL(dtype, REP_COL_DTYPE),
    COL(max_err, REP_COL_F64),
    COL(mean_err, REP_COL_F64),   COL(rmse, REP_COL_F64),      COL(nmse, REP_COL_F64),
    COL(e_lp_max, REP_COL_F64),   COL(h1_ratio, REP_COL_F64),  COL(floor, REP_COL_F64),
    COL(lse_err, REP_COL_F64),    COL(s1, REP_COL_F64),        COL(s2, REP_COL_F64),
    COL(degenerate, REP_COL_I32),
    COL(nan_count, REP_COL_U64),  COL(inf_count, REP_COL_U64), COL(empty_rows, REP_COL_U64),
    COL(outcome, REP_COL_OUTCOME), COL(first_fail, REP_COL_GATE), COL(gates, REP_COL_STR),
    COL(reason, REP_COL_STR),     COL(explained, REP_COL_STR),
};
const size_t rep_ncols = sizeof rep_cols / sizeof rep_cols[0];

rep_val rep_col_value(const rep_col *c, const void *base, char *buf, size_t cap)
{
    const char *p = (const char *)base + c->off;
    switch (c->kind) {
    case REP_COL_STR:
        snprintf(buf, cap, "%s", p);
        return REP_VAL_TEXT;
    case REP_COL_I32: {
        int32_t x;
        memcpy(&x, p, sizeof x);
        snprintf(buf, cap, "%ld", (long)x);
        return REP_VAL_NUMBER;
    }
    case REP_COL_U64: {
        uint64_t x;
        memcpy(&x, p, sizeof x);
        snprintf(buf, cap, "%llu", (unsigned long long)x);
        return REP_VAL_NUMBER;
    }
    case REP_COL_F64: {
        double x;
        memcpy(&x, p, sizeof x);
        if (isnan(x)) {
            snprintf(buf, cap, "nan");
            return REP_VAL_NONE;
        }
        if (isinf(x)) {
            snprintf(buf, cap, "%s", x > 0 ? "inf" : "-inf");
            return REP_VAL_TEXT;
        }
        if (x == 0 && signbit(x)) /* "-0" would read back as the integer 0 */
            snprintf(buf, cap, "-0.0");
        else
            snprintf(buf, cap, "%.17g", x);
        return REP_VAL_NUMBER;
    }
    case REP_COL_DTYPE: {
        fc_dtype dt;
        memcpy(&dt, p, sizeof dt);
        snprintf(buf, cap, "%s", fc_dtype_name(dt));
        return REP_VAL_TEXT;
    }
    case REP_COL_OUTCOME: {
        rep_outcome o;
        memcpy(&o, p, sizeof o);
        snprintf(buf, cap, "%s", rep_outcome_name(o));
        return REP_VAL_TEXT;
    }
    case REP_COL_GATE:
        snprintf(buf, cap, "%s", p);
        return *p ? REP_VAL_TEXT : REP_VAL_NONE;
    case REP_COL_SEED: {
        int64_t x;
        memcpy(&x, p, sizeof x);
        snprintf(buf, cap, "%lld", (long long)x);
        return x >= 0 ? REP_VAL_NUMBER : REP_VAL_NONE;
    }
    }
    buf[0] = 0;
    return REP_VAL_NONE;
}

void rep_set_str(char *dst, size_t cap, const char *src)
{
    if (!cap)
        return;
    snprintf(dst, cap, "%s", src ? src : "");
}

const char *rep_outcome_name(rep_outcome o)
{
    switch (o) {
    case REP_ROW_PASS: return "pass";
    case REP_ROW_FAIL: return "fail";
    case REP_ROW_ERROR: return "error";
    case REP_ROW_SKIP: return "skip";
    case REP_ROW_OUTSIDE: return "outside-contract";
    }
    return "?";
}

void rep_row_set_verdict(rep_row *row, const rep_verdict *v)
{
    static const char state_char[] = {[REP_NOT_RUN] = '-', [REP_PASS] = 'P', [REP_FAIL] = 'F'};
    row->dtype = v->dtype;
    row->max_err = v->max_err;
    row->mean_err = v->mean_err;
    row->rmse = v->rmse;
    row->nmse = v->nmse;
    row->e_lp_max = v->e_lp_max;
    row->h1_ratio = v->h1_ratio;
    row->floor = v->floor;
    row->lse_err = v->lse_err;
    row->s1 = v->s1;
    row->s2 = v->s2;
    row->degenerate = v->degenerate;
    if (v->unscaled) /* the baseline overflowed: nothing was measured against it (missing) */
        row->max_err = row->mean_err = row->rmse = row->nmse = row->e_lp_max = row->h1_ratio =
            row->floor = row->s1 = row->s2 = NAN;
    row->nan_count = v->nan_count;
    row->inf_count = v->inf_count;
    row->empty_rows = v->empty_rows;
    row->outcome = v->pass ? REP_ROW_PASS : v->outside ? REP_ROW_OUTSIDE : REP_ROW_FAIL;
    rep_set_str(row->first_fail, sizeof row->first_fail,
                v->first_fail >= 0 ? rep_gate_name((rep_gate)v->first_fail) : "");
    for (int g = 0; g < REP_NGATES; g++)
        row->gates[g] = (unsigned)v->gate[g] <= REP_FAIL ? state_char[v->gate[g]] : '?';
    row->gates[REP_NGATES] = 0;
    rep_set_str(row->reason, sizeof row->reason, rep_verdict_reason(v));
}

int rep_row_judged(const rep_row *row)
{
    return row->outcome == REP_ROW_PASS || row->outcome == REP_ROW_FAIL;
}

/* Metrics of a row nobody judged are NaN, which every writer shows as missing. */
static void set_unjudged(rep_row *row, rep_outcome o, const char *msg)
{
    row->max_err = row->mean_err = row->rmse = row->nmse = NAN;
    row->e_lp_max = row->h1_ratio = row->floor = row->lse_err = row->s1 = row->s2 = NAN;
    row->nan_count = row->inf_count = row->empty_rows = 0;
    row->degenerate = 0;
    row->outcome = o;
    row->first_fail[0] = 0;
    memset(row->gates, '-', REP_NGATES);
    row->gates[REP_NGATES] = 0;
    rep_set_str(row->reason, sizeof row->reason, msg);
}

void rep_row_set_error(rep_row *row, const char *msg)
{
    set_unjudged(row, REP_ROW_ERROR, msg);
}

void rep_row_set_skip(rep_row *row, const char *msg)
{
    set_unjudged(row, REP_ROW_SKIP, msg);
}

void rep_row_backend_label(const rep_row *row, char out[REP_NAME_LEN])
{
    char buf[REP_NAME_LEN + 24];
    if (row->kernel > 0)
        snprintf(buf, sizeof buf, "%s kernel %d", row->backend, (int)row->kernel);
    else
        snprintf(buf, sizeof buf, "%s", row->backend);
    size_t n = strlen(buf); /* truncates on purpose: labels are short */
    n = n < REP_NAME_LEN ? n : REP_NAME_LEN - 1;
    memcpy(out, buf, n);
    out[n] = '\0';
}

int rep_row_failed(const rep_row *row)
{
    return row->outcome == REP_ROW_FAIL || row->outcome == REP_ROW_ERROR;
}

int rep_row_fails(const rep_row *row, int strict)
{
    return rep_row_failed(row) || (strict && row->outcome == REP_ROW_OUTSIDE);
}
