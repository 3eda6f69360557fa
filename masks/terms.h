/*
 * terms.h - the score terms of docs/semantics.md section 7: logit soft-capping (Gemma 2) and
 * attention sinks (gpt-oss). They change the scores, never the mask, so they live beside
 * MASK_PARAMS rather than in it (a block mask never depends on them), and like MASK_PARAMS
 * they are spelled once: fixture attributes, CLI options, case ids, printouts and report
 * columns loop over score_term_table.
 *
 *   softcap  c > 0: the scaled score s becomes c * tanh(s / c) before masking and softmax
 *            (0 = off). Applied in fp32 on the fp32 score by the kernels, in double by the
 *            oracle.
 *   sinks    [Hq] logits, one per query head, unscaled and uncapped, with no value: the row's
 *            softmax runs over its allowed scores plus the sink and drops the sink's share.
 *            A row with no allowed key has output 0 and LSE = the sink (finite).
 */
#ifndef FLEXCHECK_MASK_TERMS_H
#define FLEXCHECK_MASK_TERMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/fc.h"
#include "masks/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest soft-cap accepted: far beyond any model's (Gemma 2: 50, Grok: 30) yet small enough
 * that s / c and c * tanh(...) stay exact-range floats. */
#define TERMS_MAX_SOFTCAP 1e6
/* Largest |sink| accepted: a sink is a logit; e^(sink - m) must not overflow double's or
 * float's range arithmetic when m is a score. */
#define TERMS_MAX_SINK 1e4

/* The names (fixture attribute / dataset, CLI option, report column): score_term_table holds
 * them, and the report's column table, which needs compile-time constants, uses these. */
#define TERM_SOFTCAP_NAME "softcap"
#define TERM_SINKS_NAME "sinks"

typedef struct score_terms {
    double softcap;      /* c > 0, 0 = off */
    const float *sinks;  /* [Hq] or NULL = off; not owned (like q/k/v, the caller's array) */
} score_terms;

/* One entry per term, in the order every tool prints them. */
typedef enum score_term { TERM_SOFTCAP = 0, TERM_SINKS = 1, TERM_COUNT = 2 } score_term;

typedef struct score_term_info {
    const char *name;  /* fixture attribute / dataset, JSON key, repro printout ("softcap") */
    const char *opt;   /* CLI option (--opt) and report column ("softcap", "sinks") */
    const char *label; /* short printout ("cap") */
    const char *tag;   /* case-id fragment when on ("sc50", "sk") */
    const char *help;  /* one line for --help */
} score_term_info;

extern const score_term_info score_term_table[TERM_COUNT];

/* 1 iff any term is on (fixtures: schema version 2). */
int terms_used(const score_terms *t);
/* The term as one number, what report columns and case ids show: the cap (0 off); sinks 1 on,
 * 0 off. */
double terms_value(const score_terms *t, score_term i);
/* The sink of head h, or -inf when sinks are off (e^-inf = 0: no sink). */
double terms_sink(const score_terms *t, int32_t h);

/* softcap finite and in [0, TERMS_MAX_SOFTCAP]; each of the hq sinks finite with |sink| <=
 * TERMS_MAX_SINK. The message names the field (and the head) and its value. */
fc_status terms_check(const score_terms *t, int32_t hq, fc_err *err);

/* The text forms (mask_text styles; appended by the callers after the mask's text):
 *   MASK_TEXT_LABEL_EQ  " cap=50 sinks=on"         check's case lines ("" when both off)
 *   MASK_TEXT_LABEL     " cap 50 sinks on"
 *   MASK_TEXT_NAME      ", softcap 50, sinks [-5, 10]"   repro (the sinks' range)
 *   MASK_TEXT_ID        "sc50sk"                 gate case ids ("" when both off)
 *   MASK_TEXT_JSON      "" (the JSON printouts are of block masks, which terms never change)
 * Always terminated; truncated to cap. Off terms are left out. */
void terms_text(char *buf, size_t cap, const score_terms *t, int32_t hq, mask_text style);
/* MASK_TEXT_ID from the values alone (a case described before its sinks are drawn). */
void terms_id(char *buf, size_t cap, double softcap, int sinks);

#ifdef __cplusplus
}
#endif

#endif
