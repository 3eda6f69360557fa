/*
 * test_long.c - the M7 long group (docs/matrix.md): present in the full matrix alone, with the
 * lengths, windows and shapes issue 36 asks for (each computed from its definition or from the
 * model layouts of masks/layout.c, not copied from the table); the emu rule that runs the
 * windowed cases and skips the dense ones with a reason; kernel 2 on the emu passing a
 * 65,537-token windowed case with no false alarm; and export writing an M7 case that check
 * judges. The whole group runs in `flexcheck gate --full` (measured in docs/matrix.md).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ci/gate.h"
#include "ci/gate_case.h"
#include "masks/layout.h"
#include "test_tmpdir.h"

TEST_TMPDIR("longtest")
#include "test_cli_run.h"

static gate_case *matrix(gate_size size, int *n)
{
    gate_case *c;
    fc_err err;
    cr_assert_eq(gate_matrix(size, 1, &c, n, NULL, &err), FC_OK, "%s", err.msg);
    return c;
}

static int is_long(const gate_case *c)
{
    return !strcmp(c->group, "M7");
}

/* Layer `l`'s mask of a model layout, unscaled: the window the real model uses. */
static mask_params model_mask(const char *layout, int32_t l)
{
    layout_layer layers[LAYOUT_MAX_LAYERS];
    int32_t n;
    fc_err err;
    cr_assert_eq(layout_get(layout, l + 1, 1, layers, LAYOUT_MAX_LAYERS, &n, &err), FC_OK, "%s",
                 err.msg);
    cr_assert(!layers[l].global, "%s layer %d is global", layout, (int)l);
    return layers[l].mask;
}

/* The M7 case (not a layout's) with this mask, of at least min_len queries and sinks as asked;
 * NULL when none. */
static const gate_case *with_mask(const gate_case *c, int n, mask_params m, int32_t min_len,
                                  int sinks)
{
    for (int i = 0; i < n; i++)
        if (is_long(&c[i]) && !c[i].layout[0] && c[i].gp.mask.causal == m.causal &&
            c[i].gp.mask.sliding_window == m.sliding_window && !c[i].gp.mask.chunk_size &&
            c[i].gp.lq >= min_len && c[i].gp.sinks == sinks)
            return &c[i];
    return NULL;
}

/* Case c (one dtype) run by kernel 2 on the emu, as the gate runs it: its one row. */
static rep_row emu_row(const gate_case *c)
{
    gate_opts o = {.run = {.kernel = 2}, .backends = {GPU_BACKEND_EMU}, .nbackends = 1};
    gate_rows rows = {0};
    fc_err err;
    cr_assert_eq(gate_run_case(c, &o, &rows, &err), FC_OK, "%s: %s", c->id, err.msg);
    cr_assert_eq(rows.n, 1, "%s: %zu rows", c->id, rows.n);
    rep_row r = rows.v[0];
    gate_rows_free(&rows);
    return r;
}

Test(long_group, is_in_the_full_matrix_alone)
{
    for (int size = GATE_QUICK; size <= GATE_FULL; size++) {
        int n, nlong = 0;
        gate_case *c = matrix((gate_size)size, &n);
        char why[REP_WHY_LEN];
        for (int i = 0; i < n; i++) {
            nlong += is_long(&c[i]);
            /* the emu's limit never touches the gate CI runs */
            if (size < GATE_FULL)
                cr_assert(!gate_emu_skips(&c[i].gp, why, sizeof why), "%s: %s", c[i].id, why);
        }
        if (size < GATE_FULL)
            cr_assert_eq(nlong, 0, "%s matrix holds %d M7 cases", gate_size_name((gate_size)size), nlong);
        else
            cr_assert_geq(nlong, 10, "full matrix holds %d M7 cases", nlong);
        free(c);
    }
}

Test(long_group, holds_the_lengths_windows_and_shapes_asked_for)
{
    int n;
    gate_case *c = matrix(GATE_FULL, &n);
    int32_t past_sq = 1; /* the first L with L^2 > 2^31 (a mask's L^2 index overflows) */
    while ((int64_t)past_sq * past_sq <= (int64_t)1 << 31)
        past_sq++;
    const int32_t lens[] = {1 << 17, (1 << 16) + 1, past_sq + 1, (1 << 17) - 1};
    cr_assert_eq(past_sq + 1, 46342);
    for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) {
        int dense = 0; /* causal, no window: the GPU's and export's */
        for (int i = 0; i < n; i++)
            dense += is_long(&c[i]) && !c[i].gp.nseq && !c[i].layout[0] &&
                     c[i].gp.lq == lens[j] && c[i].gp.lk == lens[j] && c[i].gp.mask.causal &&
                     !c[i].gp.mask.sliding_window && !c[i].gp.mask.chunk_size;
        cr_assert_eq(dense, 1, "length %d: %d dense causal cases", (int)lens[j], dense);
    }
    /* The real models' windows, at 32k tokens and more: Gemma 3 4b's local layers, Mistral's,
     * gpt-oss's (with its sinks) and ModernBERT's bidirectional one. */
    cr_assert(with_mask(c, n, model_mask("gemma3-4b", 0), 1 << 17, 0), "no Gemma 3 1024 case");
    cr_assert(with_mask(c, n, model_mask("mistral", 0), 1 << 15, 0), "no Mistral 4096 case");
    cr_assert(with_mask(c, n, model_mask("gpt-oss-20b", 0), 1 << 16, 1), "no gpt-oss case");
    mask_params mb = model_mask("modernbert", 1);
    cr_assert(!mb.causal && mb.sliding_window == 65);
    cr_assert(with_mask(c, n, mb, 1 << 16, 0), "no ModernBERT case");
    int layout = 0, decode = 0, packed64k = 0;
    for (int i = 0; i < n; i++) {
        const gate_case *k = &c[i];
        if (!is_long(k))
            continue;
        if (k->layout[0] && !strncmp(k->layout, "gemma3", 6) && k->gp.lq == 1 << 17) {
            /* local and global layers, a local one after a global one */
            layout_layer l[LAYOUT_MAX_LAYERS];
            int32_t nl;
            fc_err err;
            cr_assert_eq(layout_get(k->layout, k->nlayers, k->scale_div, l, LAYOUT_MAX_LAYERS,
                                    &nl, &err), FC_OK, "%s", err.msg);
            for (int32_t j = 1; j < nl; j++)
                layout += l[j - 1].global && !l[j].global;
        }
        for (int32_t s = 0; s < k->gp.nseq; s++) {
            int32_t q = k->gp.cu_q[s + 1] - k->gp.cu_q[s], kk = k->gp.cu_k[s + 1] - k->gp.cu_k[s];
            decode += q == 1 && kk >= 1 << 17;
            packed64k += q >= 1 << 16 && k->gp.nseq > 1;
        }
    }
    cr_assert_geq(layout, 1, "no Gemma 3 layout at 128k with a local layer after a global one");
    cr_assert_geq(decode, 1, "no decode row against a 128k cache");
    cr_assert_geq(packed64k, 1, "no packed batch holding a 64k sequence");
    free(c);
}

/* Every windowed long case runs on the emu (issue 36: kernel 2 runs them there in --full); the
 * dense 128k ones do not, and their row says why and where they run. */
Test(long_group, the_emu_runs_the_windowed_cases_and_skips_the_dense_ones_saying_why)
{
    int n;
    gate_case *c = matrix(GATE_FULL, &n);
    char why[REP_WHY_LEN];
    const gate_case *dense = NULL;
    for (int i = 0; i < n; i++) {
        if (!is_long(&c[i]) || c[i].layout[0])
            continue;
        if (c[i].gp.mask.sliding_window)
            cr_assert(!gate_emu_skips(&c[i].gp, why, sizeof why), "%s: %s", c[i].id, why);
        else if (c[i].gp.lq == 1 << 17)
            dense = &c[i];
    }
    cr_assert(dense, "no dense 131,072-token case");
    rep_row r = emu_row(dense);
    cr_assert_eq(r.outcome, REP_ROW_SKIP, "%s: %s", dense->id, r.reason);
    cr_assert(strstr(r.reason, "not run on the emu") && strstr(r.reason, "gpu backend"), "%s",
              r.reason);
    free(c);
}

/* Kernel 2 on the emu, every row of the 65,537-token ModernBERT case (bidirectional W 65, one
 * token past 2^16): no false alarm on a correct long output. 14 s alone on this 2-core machine,
 * about 30 s under a load of 6 to 10. */
Test(long_group, kernel_2_on_the_emu_passes_a_windowed_case_past_2_16)
{
    int n;
    gate_case *c = matrix(GATE_FULL, &n);
    const gate_case *mb = with_mask(c, n, model_mask("modernbert", 1), (1 << 16) + 1, 0);
    cr_assert(mb && mb->gp.lq == (1 << 16) + 1, "no 65,537-token ModernBERT case");
    rep_row r = emu_row(mb);
    cr_assert_eq(r.outcome, REP_ROW_PASS, "%s: %s", mb->id, r.reason);
    cr_assert_eq(r.lq, (1 << 16) + 1);
    free(c);
}

TestSuite(long_export, .init = make_dir, .fini = remove_dir);

/* export --full writes an M7 case (the decode rows against 128k keys: three query rows) and
 * check confirms its oracle; the default export has no M7 case. */
Test(long_export, export_full_writes_a_long_case_that_check_confirms)
{
    int n;
    gate_case *c = matrix(GATE_FULL, &n);
    const char *id = NULL;
    for (int i = 0; i < n && !id; i++)
        if (is_long(&c[i]) && c[i].gp.nseq && c[i].gp.lq == c[i].gp.nseq)
            id = c[i].id;
    cr_assert(id, "no decode case in M7");
    run_out r;
    run_cli(&r, "export --filter m7- --out %s/none", dir);
    cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
    cr_assert(strstr(r.err, "no case of the default matrix matches --filter 'm7-'"), "%s",
              r.err);
    run_cli(&r, "export --full --filter %s --out %s", id, dir);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "1 files, 1 fixture cases"), "%s", r.out);
    run_cli(&r, "check %s/%s.h5", dir, id);
    cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "PASS ") && strstr(r.out, "oracle confirmed in 1"), "%s", r.out);
    free(c);
}
