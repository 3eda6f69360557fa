/*
 * emut_check.c - the emu self-tests' checks: each primitive's result against its documented
 * meaning (CUDA C++ Programming Guide, PTX ISA), computed here independently of the emulator.
 * Shared by tests/test_emu.c (emu build), tests/test_emu_gpu.c (-DEMUT_CUDA, native build)
 * and the sanitizer driver emut_main.c, so the ASan and race builds run the same kernels.
 *
 *   cc -std=c11 -I. -c tests/emu/emut_check.c [-DEMUT_CUDA]
 */
#include "tests/emu/emut.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_SUCCESS 0
#define CUDA_INVALID_VALUE 1
#define CUDA_LAUNCH_FAILURE 719

static int failf(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return 1;
}
#define CALL(expr)                                                                   \
    do {                                                                             \
        int e_ = (expr);                                                             \
        if (e_ != 0)                                                                 \
            return failf(why, n, "%s returned CUDA error %d", #expr, e_);            \
    } while (0)

/* ---- independent references for binary16 / bfloat16 (double arithmetic, RNE) ---- */
static unsigned short ref_round(float f, int mbits, int emax, int emin, unsigned inf)
{
    if (isnan(f))
        return 0x7fff;
    unsigned sign = signbit(f) ? 0x8000u : 0;
    double a = fabs((double)f);
    if (isinf(f))
        return (unsigned short)(sign | inf);
    if (a < ldexp(1.0, emin))   /* subnormal: multiples of 2^(emin - mbits) */
        return (unsigned short)(sign | (unsigned)nearbyint(ldexp(a, mbits - emin)));
    int ex;
    frexp(a, &ex);
    int e = ex - 1;
    double m = nearbyint(ldexp(a, mbits - e));
    if (m == ldexp(1.0, mbits + 1)) {
        m /= 2;
        e++;
    }
    if (e > emax)
        return (unsigned short)(sign | inf);
    return (unsigned short)(sign | (unsigned)(e + emax) << mbits | ((unsigned)m - (1u << mbits)));
}
static unsigned short ref_f2h(float f) { return ref_round(f, 10, 15, -14, 0x7c00u); }
static unsigned short ref_f2bf(float f) { return ref_round(f, 7, 127, -126, 0x7f80u); }
static double ref_h2d(unsigned short h)
{
    int e = h >> 10 & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}
static float bits_f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static unsigned f_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }

/* ---- indices ---- */
static int check_indices(char *why, size_t n)
{
    static const struct { int gx, gy, gz, bx, by, bz; } cases[] = {
        {1, 1, 1, 1, 1, 1}, {3, 2, 2, 7, 3, 2}, {2, 1, 1, 1024, 1, 1}, {1, 1, 3, 4, 4, 4},
        {5, 1, 1, 33, 1, 1}, {2, 3, 1, 16, 1, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int gx = cases[c].gx, gy = cases[c].gy, gz = cases[c].gz, bx = cases[c].bx, by = cases[c].by, bz = cases[c].bz;
        size_t nt = (size_t)gx * gy * gz * bx * by * bz;
        unsigned *out = malloc(nt * 12 * sizeof *out);
        CALL(EMUT(emut_indices)(gx, gy, gz, bx, by, bz, out));
        size_t i = 0;
        for (int z = 0; z < gz; z++) for (int y = 0; y < gy; y++) for (int x = 0; x < gx; x++)
        for (int tz = 0; tz < bz; tz++) for (int ty = 0; ty < by; ty++) for (int tx = 0; tx < bx; tx++, i++) {
            unsigned want[12] = {(unsigned)tx, (unsigned)ty, (unsigned)tz, (unsigned)x, (unsigned)y, (unsigned)z,
                                 (unsigned)bx, (unsigned)by, (unsigned)bz, (unsigned)gx, (unsigned)gy, (unsigned)gz};
            if (memcmp(want, out + 12 * i, sizeof want) != 0) {
                free(out);
                return failf(why, n, "grid (%d,%d,%d) block (%d,%d,%d): thread (%d,%d,%d) of block (%d,%d,%d) saw wrong indices",
                             gx, gy, gz, bx, by, bz, tx, ty, tz, x, y, z);
            }
        }
        free(out);
    }
    return 0;
}

/* ---- __syncthreads, _count, _and, _or ---- */
static int check_barrier(char *why, size_t n)
{
    static const int sizes[] = {32, 64, 100, 256, 1024, 5, 6};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int nt = sizes[c];
        int *out = malloc((size_t)nt * 4 * sizeof *out);
        CALL(EMUT(emut_barrier)(nt, out));
        for (int t = 0; t < nt; t++) {
            int want[4] = {3 * ((t + 1) % nt) + 1, (nt + 2) / 3, nt <= 5, 1};
            for (int k = 0; k < 4; k++)
                if (out[4 * t + k] != want[k]) {
                    int got = out[4 * t + k];
                    free(out);
                    return failf(why, n, "block of %d: thread %d %s = %d, want %d", nt, t,
                                 (const char *[]){"neighbour after __syncthreads", "__syncthreads_count", "__syncthreads_and",
                                                  "__syncthreads_or"}[k], got, want[k]);
                }
        }
        free(out);
    }
    return 0;
}

static int check_reduce(char *why, size_t n)
{
    static const int sizes[] = {64, 256, 1024};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int nt = sizes[c];
        int *in = malloc((size_t)nt * 8 * sizeof *in);
        long long out[8], want[8] = {0};
        for (int i = 0; i < nt * 8; i++) {
            in[i] = (int)((i * 2654435761u) >> 7) - (1 << 23);
            want[i / nt] += in[i];
        }
        CALL(EMUT(emut_reduce)(nt, in, out));
        free(in);
        for (int b = 0; b < 8; b++)
            if (out[b] != want[b])
                return failf(why, n, "tree reduction, %d threads, block %d: %lld, want %lld", nt, b, out[b], want[b]);
    }
    return 0;
}

/* ---- shuffles: source lane per the CUDA Programming Guide's description of each ---- */
static int shfl_src(int op, int lane, int arg, int width)
{
    int base = lane / width * width;
    switch (op) {
    case EMUT_SHFL_UP: return lane - base >= arg ? lane - arg : lane;
    case EMUT_SHFL_DOWN: return lane - base + arg < width ? lane + arg : lane;
    case EMUT_SHFL_XOR: { int s = lane ^ arg; return s >= base + width ? lane : s; }
    default: return base + arg % width;
    }
}
static unsigned long long shfl_value(int type, int l)
{
    unsigned long long u = 0;
    switch (type) {
    case EMUT_T_INT: return (unsigned)(7 * l + 3);
    case EMUT_T_FLOAT: return f_bits(l + 0.5f);
    case EMUT_T_DOUBLE: { double d = l * 1e10 + 0.25; memcpy(&u, &d, 8); return u; }
    case EMUT_T_LL: return ((unsigned long long)l << 40) | (unsigned)l;
    case EMUT_T_HALF: return ref_f2h(l * 0.5f);
    case EMUT_T_HALF2: return ref_f2h((float)l) | (unsigned)ref_f2h((float)-l) << 16;
    case EMUT_T_BF16: return ref_f2bf(l * 2.0f);
    default: return ref_f2bf((float)l) | (unsigned)ref_f2bf(l + 100.0f) << 16;
    }
}
static int check_shfl(char *why, size_t n)
{
    static const struct { int arg, width; } cases[] = {
        {0, 32}, {5, 32}, {31, 32}, {37, 32}, {1, 32}, {16, 32}, {3, 8}, {2, 16}, {1, 4}, {7, 8}, {0, 1}, {1, 2}, {9, 16},
    };
    static const char *ops[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync"};
    for (int op = 0; op < 4; op++)
        for (int type = 0; type < EMUT_T_COUNT; type++)
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                int arg = cases[c].arg, width = cases[c].width;
                if (op != EMUT_SHFL_IDX && arg >= 32)
                    continue;
                unsigned long long out[32];
                CALL(EMUT(emut_shfl)(op, type, arg, width, out));
                for (int l = 0; l < 32; l++) {
                    unsigned long long want = shfl_value(type, shfl_src(op, l, arg, width));
                    if (out[l] != want)
                        return failf(why, n, "%s type %d arg %d width %d: lane %d got 0x%llx, want 0x%llx (lane %d's)",
                                     ops[op], type, arg, width, l, out[l], want, shfl_src(op, l, arg, width));
                }
            }
    return 0;
}

/* ---- votes and reductions, partial masks included ---- */
static int check_vote(char *why, size_t n)
{
    static const unsigned masks[] = {0xffffffffu, 0x0000ffffu, 0xf0f0f0f0u, 0x1u, 0x80000001u};
    static const unsigned preds[] = {0, 0xffffffffu, 0x12345678u, 0x80000001u};
    static const char *what[] = {"__ballot_sync", "__any_sync", "__all_sync", "__reduce_add_sync", "__reduce_min_sync",
                                 "__reduce_max_sync", "__match_any_sync", "__reduce_or_sync"};
    for (size_t a = 0; a < sizeof masks / sizeof masks[0]; a++)
        for (size_t b = 0; b < sizeof preds / sizeof preds[0]; b++) {
            unsigned mask = masks[a], pred = preds[b], out[32 * 8];
            CALL(EMUT(emut_vote)(mask, pred, out));
            unsigned sum = 0, mx = 0, orr = 0;
            int mn = 1 << 30;
            for (int l = 0; l < 32; l++)
                if (mask >> l & 1) {
                    sum += (unsigned)l;
                    mn = 100 - l < mn ? 100 - l : mn;
                    mx = (unsigned)(l * 3 % 7) > mx ? (unsigned)(l * 3 % 7) : mx;
                    orr |= 1u << (l % 8);
                }
            for (int l = 0; l < 32; l++) {
                unsigned want[8];
                if (!(mask >> l & 1)) {
                    for (int k = 0; k < 8; k++) want[k] = 0xffffffffu;   /* never written */
                } else {
                    unsigned match = 0;
                    for (int k = 0; k < 32; k++)
                        if ((mask >> k & 1) && k % 3 == l % 3)
                            match |= 1u << k;
                    want[0] = pred & mask; want[1] = (pred & mask) != 0; want[2] = (pred & mask) == mask;
                    want[3] = sum; want[4] = (unsigned)mn; want[5] = mx; want[6] = match; want[7] = orr;
                }
                for (int k = 0; k < 8; k++)
                    if (out[8 * l + k] != want[k])
                        return failf(why, n, "mask 0x%08x pred 0x%08x: lane %d %s = 0x%x, want 0x%x", mask, pred, l, what[k],
                                     out[8 * l + k], want[k]);
            }
        }
    return 0;
}

static int check_syncwarp(char *why, size_t n)
{
    int out[192];
    CALL(EMUT(emut_syncwarp)(out));
    for (int w = 0; w < 2; w++)
        for (int r = 0; r < 3; r++)
            for (int l = 0; l < 32; l++)
                if (out[96 * w + 32 * r + l] != (31 - l) * (31 - l) + r)
                    return failf(why, n, "__syncwarp exchange: warp %d round %d lane %d read %d, want %d", w, r, l,
                                 out[96 * w + 32 * r + l], (31 - l) * (31 - l) + r);
    return 0;
}

/* ---- a warp-wide instruction: every lane's result computed once for the warp (emu only) ---- */
static int check_warp_exec(char *why, size_t n)
{
    enum { ROUNDS = 3 };
    int out[64 * ROUNDS], calls[2];
    CALL(EMUT(emut_warp_exec)(ROUNDS, out, calls));
    for (int w = 0; w < 2; w++) {
        if (calls[w] != ROUNDS)
            return failf(why, n, "emu_warp_exec: warp %d ran the instruction %d times in %d rounds", w, calls[w], ROUNDS);
        for (int r = 0; r < ROUNDS; r++)
            for (int l = 0; l < 32; l++) {
                const int want = (31 - l) * (31 - l) + 100 * r + 10000 * w;
                if (out[(w * ROUNDS + r) * 32 + l] != want)
                    return failf(why, n, "emu_warp_exec: warp %d round %d lane %d got %d, want %d (its mirror lane's input)",
                                 w, r, l, out[(w * ROUNDS + r) * 32 + l], want);
            }
    }
    return 0;
}

/* ---- dynamic shared memory and its limits ---- */
static int check_dynsmem(char *why, size_t n)
{
    int optin = EMUT(emut_smem_optin)();
    if (optin < 48 * 1024)
        return failf(why, n, "opt-in shared memory limit %d is below 48 KiB", optin);
    const struct { int bytes, attr, want; } cases[] = {
        {1024, 0, CUDA_SUCCESS},
        {48 * 1024, 0, CUDA_SUCCESS},
        {48 * 1024 + 4, 0, CUDA_INVALID_VALUE},           /* > 48 KiB needs the attribute */
        {100 * 1024, 100 * 1024, CUDA_SUCCESS},
        {100 * 1024 + 4, 100 * 1024, CUDA_INVALID_VALUE},  /* above what the attribute allowed */
        {optin, optin, CUDA_SUCCESS},
        {optin + 4, optin + 4, CUDA_INVALID_VALUE},        /* the architecture's maximum */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int out[256], e = EMUT(emut_dynsmem)(cases[c].bytes, cases[c].attr, out);
        if (e != cases[c].want)
            return failf(why, n, "%d dynamic bytes, attribute %d: error %d, want %d", cases[c].bytes, cases[c].attr, e,
                         cases[c].want);
        if (e != 0)
            continue;
        int nints = cases[c].bytes / 4;
        for (int t = 0; t < 256; t++) {
            long long s = 0;
            for (int i = nints - 1 - t; i >= 0; i -= 256)
                s += 2 * i + 1;
            if (out[t] != (int)s)
                return failf(why, n, "%d dynamic bytes: thread %d summed %d, want %d", cases[c].bytes, t, out[t], (int)s);
        }
    }
    return 0;
}

/* ---- launch configurations the hardware rejects ----
 * Through cudaLaunchKernelEx (GPU_LAUNCH) a block or grid out of range is cudaErrorInvalidValue:
 * an H200 with CUDA 13.0 (driver 580) answered so for a block of 1025 threads, where the
 * runtime's <<<>>> path documents cudaErrorInvalidConfiguration. Every mismatch is listed, so
 * that one run on a GPU shows them all. */
static int check_launch_limits(char *why, size_t n)
{
    enum { BAD = CUDA_INVALID_VALUE };
    static const struct { int bx, by, bz, gx, gy, gz, smem, attr, want; } cases[] = {
        {1024, 1, 1, 1, 1, 1, 0, -1, CUDA_SUCCESS},
        {1025, 1, 1, 1, 1, 1, 0, -1, BAD},
        {32, 32, 1, 1, 1, 1, 0, -1, CUDA_SUCCESS},
        {32, 32, 2, 1, 1, 1, 0, -1, BAD},
        {1, 1, 64, 1, 1, 1, 0, -1, CUDA_SUCCESS},
        {1, 1, 65, 1, 1, 1, 0, -1, BAD},
        {1, 1025, 1, 1, 1, 1, 0, -1, BAD},
        {0, 1, 1, 1, 1, 1, 0, -1, BAD},
        {1, 1, 1, 0, 1, 1, 0, -1, BAD},
        {1, 1, 1, 1, 65535, 1, 0, -1, CUDA_SUCCESS},
        {1, 1, 1, 1, 65536, 1, 0, -1, BAD},
        {1, 1, 1, 1, 1, 65536, 0, -1, BAD},
        {32, 1, 1, 1, 1, 1, 49152, -1, CUDA_SUCCESS},
        {32, 1, 1, 1, 1, 1, 49153, -1, CUDA_INVALID_VALUE},
        {32, 1, 1, 1, 1, 1, 65536, 65536, CUDA_SUCCESS},
        {32, 1, 1, 1, 1, 1, 0, -5, CUDA_INVALID_VALUE},   /* negative attribute */
    };
    size_t used = 0;
    int bad = 0;
    why[0] = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int e = EMUT(emut_launch)(cases[c].bx, cases[c].by, cases[c].bz, cases[c].gx, cases[c].gy, cases[c].gz, cases[c].smem,
                                  cases[c].attr);
        if (e == cases[c].want)
            continue;
        bad = 1;
        if (used < n)
            used += (size_t)snprintf(why + used, n - used, "%sblock (%d,%d,%d) grid (%d,%d,%d) smem %d attr %d: error %d, want %d",
                                     used ? "; " : "", cases[c].bx, cases[c].by, cases[c].bz, cases[c].gx, cases[c].gy,
                                     cases[c].gz, cases[c].smem, cases[c].attr, e, cases[c].want);
    }
    return bad;
}

static int check_atomics(char *why, size_t n)
{
    int nb = 64, nt = 128, N = nb * nt, io[4];
    float fo;
    unsigned uo[4];
    CALL(EMUT(emut_atomics)(nb, nt, io, &fo, uo));
    int iw[4] = {N, N - 1, -(N - 1), -2 * N};
    unsigned uw[4] = {(unsigned)N % 1000u, 3u * (unsigned)N, 0xffffffffu, 7u};
    for (int k = 0; k < 4; k++)
        if (io[k] != iw[k])
            return failf(why, n, "int atomic %d over %d threads: %d, want %d", k, N, io[k], iw[k]);
    if (fo != 0.5f * N)
        return failf(why, n, "atomicAdd(float) over %d threads: %g, want %g", N, fo, 0.5 * N);
    for (int k = 0; k < 4; k++)
        if (uo[k] != uw[k])
            return failf(why, n, "unsigned atomic %d (inc/cas/or/exch) over %d threads: %u, want %u", k, N, uo[k], uw[k]);
    return 0;
}

/* ---- fast math within the Programming Guide's error bounds ---- */
static double ulp_err(float got, double want)
{
    if (isnan(got) || isnan(want))
        return isnan(got) && isnan(want) ? 0 : INFINITY;
    if (isinf(want) || isinf(got))
        return (double)got == want ? 0 : INFINITY;
    float w = (float)want;
    double ulp = fabs((double)nextafterf(fabsf(w), INFINITY) - fabs((double)w));
    return fabs((double)got - want) / ulp;
}
static int check_fastmath(char *why, size_t n)
{
    enum { N = 20000 };
    static float x[N], out[N];
    static const char *names[] = {"expf", "exp2f", "__expf", "__logf", "rsqrtf", "__fdividef"};
    for (int fn = 0; fn < EMUT_F_COUNT; fn++) {
        for (int i = 0; i < N; i++) {
            double u = (i + 0.5) / N;
            switch (fn) {
            case EMUT_F_FAST_LOGF: case EMUT_F_RSQRTF: case EMUT_F_FDIVIDEF: x[i] = (float)ldexp(1.0 + u, (i % 80) - 40); break;
            default: x[i] = (float)(-80 + 160 * u); break;
            }
        }
        CALL(EMUT(emut_fastmath)(fn, N, x, out));
        for (int i = 0; i < N; i++) {
            double v = x[i], want, tol, err;
            switch (fn) {
            case EMUT_F_EXPF: want = exp(v); tol = 2; break;
            case EMUT_F_EXP2F: want = exp2(v); tol = 2; break;
            case EMUT_F_FAST_EXPF: want = exp(v); tol = 2 + floor(fabs(1.16 * v)); break;
            case EMUT_F_RSQRTF: want = 1 / sqrt(v); tol = 2; break;
            case EMUT_F_FDIVIDEF: want = 1 / v; tol = 2; break;
            default: want = log(v); tol = 3; break;
            }
            if (want < 1.2e-38 && want > -1.2e-38 && fn != EMUT_F_FAST_LOGF)
                continue;   /* the fast paths flush denormals; the bounds exclude them */
            if (fn == EMUT_F_FAST_LOGF && v >= 0.5 && v <= 2) {
                err = fabs(out[i] - want);   /* absolute bound 2^-21.41 in [0.5, 2] */
                if (!(err <= ldexp(1.0, -21)))
                    return failf(why, n, "__logf(%a) = %a, want %a (abs err %g)", v, out[i], want, err);
                continue;
            }
            err = ulp_err(out[i], want);
            if (!(err <= tol))
                return failf(why, n, "%s(%a) = %a, want %a: %.1f ulp, bound %.0f", names[fn], v, out[i], want, err, tol);
        }
    }
    return 0;
}

/* ---- half / bf16 conversions: independent RNE reference, and the toolkit's own host code ---- */
static int check_convert(char *why, size_t n)
{
    size_t N = 65536 + (1u << 20);
    float *x = malloc(N * sizeof *x), *hb = malloc(N * sizeof *hb), *bb = malloc(N * sizeof *bb);
    unsigned short *h = malloc(N * 2), *b = malloc(N * 2), *hin = malloc(N * 2);
    for (size_t i = 0; i < N; i++) {
        if (i < 65536) {   /* every half, its neighbours and halfway points */
            double v = ref_h2d((unsigned short)i);
            x[i] = isnan(v) ? NAN : (float)(v * (1 + ((i & 3) == 1 ? 0x1p-11 : (i & 3) == 2 ? -0x1p-11 : 0)));
        } else {           /* floats across the whole bit space */
            x[i] = bits_f((unsigned)((i - 65536) * 4093u + 0x9e37u));
        }
        hin[i] = (unsigned short)i;
    }
    int e = EMUT(emut_convert)((int)N, x, h, b, hin, hb, bb);
    int ref = emut_ref_available(), bad = 0;
    if (e)
        bad = failf(why, n, "emut_convert returned CUDA error %d", e);
    for (size_t i = 0; i < N && !bad; i++) {
        if (h[i] != ref_f2h(x[i]))
            bad = failf(why, n, "__float2half_rn(%a) = 0x%04x, want 0x%04x", x[i], h[i], ref_f2h(x[i]));
        else if (b[i] != ref_f2bf(x[i]))
            bad = failf(why, n, "__float2bfloat16_rn(%a) = 0x%04x, want 0x%04x", x[i], b[i], ref_f2bf(x[i]));
        else if (ref && (h[i] != emut_ref_f2h(x[i]) || b[i] != emut_ref_f2bf(x[i])))
            bad = failf(why, n, "conversion of %a differs from the CUDA toolkit's host code", x[i]);
        else if (!(hb[i] == (float)ref_h2d(hin[i]) || (isnan(hb[i]) && isnan(ref_h2d(hin[i])))))
            bad = failf(why, n, "__half2float(0x%04x) = %a", hin[i], hb[i]);
        else if (f_bits(bb[i]) != (unsigned)hin[i] << 16)
            bad = failf(why, n, "__bfloat162float(0x%04x) = %a", hin[i], bb[i]);
    }
    free(x); free(hb); free(bb); free(h); free(b); free(hin);
    return bad;
}

/* ---- misuse is stopped with an error, and the next launch works (emu only) ---- */
static int check_misuse(char *why, size_t n)
{
    static const char *names[] = {"deadlock", "shuffle width 3", "mask names an exited lane", "lanes disagree on the mask",
                                  "lanes at different warp-wide instructions", "warp-wide instruction without lane 7",
                                  "__trap"};
    _Static_assert(sizeof names / sizeof names[0] == EMUT_MISUSE_COUNT, "a name per misuse");
    fprintf(stderr, "emut misuse: the emu errors reported next are expected\n");
    for (int w = 0; w < EMUT_MISUSE_COUNT; w++) {
        int e = EMUT(emut_misuse)(w);
        if (e != CUDA_LAUNCH_FAILURE)
            return failf(why, n, "%s: launch returned %d, want %d (launch failure)", names[w], e, CUDA_LAUNCH_FAILURE);
        int out[4 * 64];
        CALL(EMUT(emut_barrier)(64, out));
    }
    return 0;
}

/* ---- the small flash-attention kernel against a naive float64 softmax(QK^T/8)V ---- */
static int check_attention(char *why, size_t n)
{
    static const struct { int s, h; } cases[] = {{64, 1}, {200, 2}, {130, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int s = cases[c].s, h = cases[c].h;
        size_t N = (size_t)h * s * 64;
        float *q = malloc(N * 4), *k = malloc(N * 4), *v = malloc(N * 4), *o = malloc(N * 4);
        double *sc = malloc((size_t)s * sizeof *sc);
        for (size_t i = 0; i < N; i++) {
            q[i] = (float)(((i * 2654435761u) >> 8) % 2001) / 1000.0f - 1.0f;
            k[i] = (float)(((i * 40503u + 7) >> 3) % 1999) / 1000.0f - 1.0f;
            v[i] = (float)(((i * 97u + 13) >> 2) % 2003) / 1000.0f - 1.0f;
        }
        int e = EMUT(emut_attention)(s, h, q, k, v, o), bad = 0;
        if (e)
            bad = failf(why, n, "emut_attention(s=%d) returned CUDA error %d", s, e);
        for (int hh = 0; hh < h && !bad; hh++)
            for (int i = 0; i < s && !bad; i++) {
                const float *qi = q + ((size_t)hh * s + i) * 64;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < s; j++) {
                    const float *kj = k + ((size_t)hh * s + j) * 64;
                    double d = 0;
                    for (int x = 0; x < 64; x++)
                        d += (double)qi[x] * kj[x];
                    sc[j] = d / 8;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < s; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int x = 0; x < 64 && !bad; x++) {
                    double want = 0;
                    for (int j = 0; j < s; j++)
                        want += sc[j] * v[((size_t)hh * s + j) * 64 + x];
                    want /= sum;
                    float got = o[((size_t)hh * s + i) * 64 + x];
                    if (!(fabs(got - want) <= 1e-5 + 1e-4 * fabs(want)))
                        bad = failf(why, n, "attention s=%d h=%d row %d dim %d: %g, want %g", s, hh, i, x, got, want);
                }
            }
        free(q); free(k); free(v); free(o); free(sc);
        if (bad)
            return 1;
    }
    return 0;
}

static int check_planted_clean(char *why, size_t n)
{
    CALL(EMUT(emut_planted)("clean"));
    return 0;
}

const struct emut_check emut_checks[] = {
    {"indices", check_indices, 0},
    {"barrier", check_barrier, 0},
    {"reduce", check_reduce, 0},
    {"shfl", check_shfl, 0},
    {"vote", check_vote, 0},
    {"syncwarp", check_syncwarp, 0},
    {"warp_exec", check_warp_exec, 1},
    {"dynsmem", check_dynsmem, 0},
    {"launch_limits", check_launch_limits, 0},
    {"atomics", check_atomics, 0},
    {"fastmath", check_fastmath, 0},
    {"convert", check_convert, 0},
    {"attention", check_attention, 0},
    {"misuse", check_misuse, 1},
    {"planted_clean", check_planted_clean, 0},
};
const int emut_nchecks = (int)(sizeof emut_checks / sizeof emut_checks[0]);

int emut_run_check(const char *name, char *why, size_t n)
{
    for (int i = 0; i < emut_nchecks; i++)
        if (!strcmp(emut_checks[i].name, name))
            return emut_checks[i].fn(why, n);
    return failf(why, n, "no check named %s", name);
}
