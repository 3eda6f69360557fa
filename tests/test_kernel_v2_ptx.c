/*
 * test_kernel_v2_ptx.c - the PTX wrappers of gpu/ptx.cuh (mma.sync m16n8k16 f16/bf16, ldmatrix
 * .x4 and .x4.trans, cp.async with zero-fill) against the PTX ISA's documented fragment
 * layouts and a scalar product, on random fragments:
 *   - the CPU twin (emu build): exactly the documented layout, and for mma bitwise the
 *     sequential fp32 sum of exact products it is written as;
 *   - the instruction (nvcc build) when a CUDA device is present, else skipped with the reason:
 *     the same layouts exactly, mma within the error bound of any fp32 summation order (the
 *     ISA leaves the tensor core's order and intermediate precision unspecified).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures/fix.h"
#include "gpu/gpu.h"
#include "base/lowp.h"
#include "tests/v2/v2t.h"

typedef int (*mma_fn)(int, const float *, const float *, const float *, float *);
typedef int (*ldm_fn)(int, const uint16_t *, const int *, const int *, uint32_t *);
typedef int (*cpa_fn)(int, const uint32_t *, const int *, uint32_t *);

typedef struct backend_fns {
    const char *name;
    int exact; /* the twin: bitwise the documented sequential sum */
    mma_fn mma;
    ldm_fn ldm;
    cpa_fn cpa;
} backend_fns;

static const backend_fns EMU = {"emu twin", 1, v2t_mma_emu, v2t_ldmatrix_emu, v2t_cp_async_emu};

static float rnd(fix_rng *r, fc_dtype dt, double scale)
{
    return fc_round((float)(scale * fix_rng_normal(r)), dt);
}

static void check_mma(const backend_fns *be)
{
    static const fc_dtype dts[2] = {FC_F16, FC_BF16};
    fix_rng r;
    fix_rng_seed(&r, 0x6d6d61u);
    for (int it = 0; it < 48; it++) {
        const int dsel = it >= 40 ? 1 : it & 1;
        const fc_dtype dt = dts[dsel];
        float a[256], b[128], c[128], d[128];
        /* mixed magnitudes so the summation order matters; some exact zeros. The bf16 rounds
         * 36..39 have products and sums below fp32's normal range, where only fmaf semantics
         * give the documented bits (the twin's slow path); subnormal handling inside the
         * tensor core is not pinned by the ISA, so the hardware skips them. The rounds from 40
         * on (bf16) scale each row of A and column of B by its own power of two in 2^-90 ..
         * 2^90, with an infinity in one row and one column, so one product mixes rows the twin
         * sums plainly, in double and by fmaf (ptx.cuh, mma_class); the hardware skips them
         * too. */
        const int tiny = dt == FC_BF16 && it >= 36 && it < 40, wide = it >= 40;
        if ((tiny || wide) && !be->exact)
            continue;
        for (int i = 0; i < 256; i++) {
            const double scale = tiny ? 1e-25 : wide ? ldexp(1.0, (i / 16 * 37 + it * 11) % 181 - 90)
                                      : it % 3 ? 1.0 : 64.0;
            a[i] = (it % 5 == 4 && i % 7 == 0) ? 0.0f : rnd(&r, dt, scale);
        }
        for (int i = 0; i < 128; i++) {
            b[i] = rnd(&r, dt, tiny ? 1e-20 : wide ? ldexp(1.0, (i % 8 * 53 + it * 7) % 181 - 90) : 1.0);
            c[i] = (float)fix_rng_normal(&r) * (tiny ? 1e-44f : 1.0f);
        }
        if (wide) {
            a[16 * (it % 16) + 3] = INFINITY;
            b[8 * 5 + it % 8] = -INFINITY;
        }
        cr_assert_eq(be->mma(dsel, a, b, c, d), 0, "%s: mma launch", be->name);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                float seq = c[m * 8 + n];
                double ex = c[m * 8 + n], mag = fabs(c[m * 8 + n]);
                for (int k = 0; k < 16; k++) {
                    seq = fmaf(a[m * 16 + k], b[k * 8 + n], seq);
                    ex += (double)a[m * 16 + k] * b[k * 8 + n];
                    mag += fabs((double)a[m * 16 + k] * b[k * 8 + n]);
                }
                const float got = d[m * 8 + n];
                /* 16 additions, each within one fp32 rounding of the magnitude of the terms */
                const double bound = 17.0 * ldexp(1.0, -24) * mag;
                cr_assert(tiny || wide || fabs(got - ex) <= bound,
                          "%s %s it %d: D[%d][%d] = %.9g, exact %.17g, bound %.3g",
                          be->name, fc_dtype_name(dt), it, m, n, got, ex, bound);
                if (be->exact)
                    cr_assert(memcmp(&got, &seq, sizeof got) == 0,
                              "%s %s it %d: D[%d][%d] = %.9g, sequential fp32 sum %.9g", be->name,
                              fc_dtype_name(dt), it, m, n, got, seq);
            }
    }
}

static void check_ldmatrix(const backend_fns *be)
{
    uint16_t m[32 * 32];
    for (int i = 0; i < 32 * 32; i++)
        m[i] = (uint16_t)(i * 7 + 3); /* every element distinct */
    fix_rng r;
    fix_rng_seed(&r, 0x1d6du);
    for (int it = 0; it < 20; it++) {
        int row[32], col[32];
        for (int l = 0; l < 32; l++)
            row[l] = l;
        for (int l = 31; l > 0; l--) { /* any row to any lane */
            int j = (int)(fix_rng_u64(&r) % (uint64_t)(l + 1)), x = row[l];
            row[l] = row[j];
            row[j] = x;
        }
        for (int l = 0; l < 32; l++)
            col[l] = 8 * (int)(fix_rng_u64(&r) % 4);
        for (int trans = 0; trans < 2; trans++) {
            uint32_t out[128];
            cr_assert_eq(be->ldm(trans, m, row, col, out), 0, "%s: ldmatrix launch", be->name);
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                for (int i = 0; i < 4; i++) {
                    uint32_t want;
                    if (!trans) { /* M_i[g][2t], M_i[g][2t+1]; row g of M_i from lane 8i + g */
                        const int src = 8 * i + g;
                        want = (uint32_t)m[row[src] * 32 + col[src] + 2 * t] |
                               (uint32_t)m[row[src] * 32 + col[src] + 2 * t + 1] << 16;
                    } else { /* M_i[2t][g], M_i[2t+1][g] */
                        const int s0 = 8 * i + 2 * t, s1 = s0 + 1;
                        want = (uint32_t)m[row[s0] * 32 + col[s0] + g] |
                               (uint32_t)m[row[s1] * 32 + col[s1] + g] << 16;
                    }
                    cr_assert_eq(out[lane * 4 + i], want,
                                 "%s ldmatrix%s it %d: lane %d r[%d] = 0x%08x, layout says 0x%08x",
                                 be->name, trans ? ".trans" : "", it, lane, i, out[lane * 4 + i], want);
                }
            }
        }
    }
}

static void check_cp_async(const backend_fns *be)
{
    enum { N = 50 };
    uint32_t src[4 * N], dst[4 * N];
    int pred[N];
    fix_rng r;
    fix_rng_seed(&r, 0xc9u);
    for (int i = 0; i < 4 * N; i++)
        src[i] = (uint32_t)fix_rng_u64(&r) | 1u; /* never 0 */
    for (int i = 0; i < N; i++)
        pred[i] = (int)(fix_rng_u64(&r) % 3 != 0);
    cr_assert_eq(be->cpa(N, src, pred, dst), 0, "%s: cp.async launch", be->name);
    for (int i = 0; i < 4 * N; i++)
        cr_assert_eq(dst[i], pred[i / 4] ? src[i] : 0u, "%s cp.async: word %d (chunk %d, pred %d)",
                     be->name, i, i / 4, pred[i / 4]);
}

Test(ptx_twin, mma_m16n8k16_matches_the_fragment_layout_and_the_scalar_product) { check_mma(&EMU); }
Test(ptx_twin, ldmatrix_x4_and_trans_match_the_fragment_layout) { check_ldmatrix(&EMU); }
Test(ptx_twin, cp_async_copies_or_zero_fills_each_chunk) { check_cp_async(&EMU); }

/* ---- the instructions themselves, when a GPU is at hand ---- */

#ifdef V2T_HAVE_CUDA
static const backend_fns CUDA = {"tensor core", 0, v2t_mma_cuda, v2t_ldmatrix_cuda,
                                 v2t_cp_async_cuda};
static void need_gpu(void)
{
    fc_err err;
    if (!gpu_backend_available(GPU_BACKEND_CUDA, &err))
        cr_skip_test("no GPU: %s", err.msg);
}
Test(ptx_hw, mma_m16n8k16_matches_the_fragment_layout_and_the_scalar_product)
{
    need_gpu();
    check_mma(&CUDA);
}
Test(ptx_hw, ldmatrix_x4_and_trans_match_the_fragment_layout)
{
    need_gpu();
    check_ldmatrix(&CUDA);
}
Test(ptx_hw, cp_async_copies_or_zero_fills_each_chunk)
{
    need_gpu();
    check_cp_async(&CUDA);
}
#else
Test(ptx_hw, instructions_need_an_nvcc_build)
{
    cr_skip_test("this build has no nvcc: the PTX wrappers are checked on their CPU twins only");
}
#endif
