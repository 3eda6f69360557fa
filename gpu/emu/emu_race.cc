/*
 * emu_race.cc - shared-memory race checker of the emu backend's race build.
 *
 *   g++ -DEMU_RACE -fsanitize=thread -include gpu/emu/emu.h -Igpu/emu/include -c k.cu   (kernels)
 *   g++ -DEMU_RACE -c gpu/emu/emu_runtime.cc gpu/emu/emu_race.cc                     (no -fsanitize)
 *   link WITHOUT -fsanitize=thread: this file implements the __tsan_* hooks the compiler
 *   inserted, and only looks at addresses inside the emulated shared memory.
 *
 * Shadow state per 2-byte granule (the narrowest element a kernel shares: half/bf16) of static
 * and dynamic shared memory, tagged with the barrier epoch: a counter bumped at every
 * __syncthreads and every block start, so state from an earlier interval is simply stale.
 * Within one interval, two accesses from different threads, at least one a write, race unless
 * both threads are in one warp and a full-warp collective (__syncwarp, shuffle, vote, a warp-wide
 * instruction such as the mma and ldmatrix twins) completed between them; each warp counts its
 * completed full-mask collectives (wseq).
 *   - the last write: (epoch, thread, wseq, pc);
 *   - per warp, the two latest reads by different threads: a later write by thread t must be
 *     ordered after every read by another thread, and the latest such read in a warp is one of
 *     the two (reads from other warps in the same interval race with it regardless).
 * Reported: file and line of both accesses (addr2line on the -g info), thread coordinates,
 * the byte offset. Each pair of code locations once; a launch with races fails.
 * Limits: partial-mask collectives do not order (conservative); 1-byte accesses are
 * treated as their whole granule; atomics are not checked (they run out of line).
 */
#include "gpu/emu/emu.h"
#include "gpu/emu/emu_internal.h"

#include <dlfcn.h>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

extern "C" {
extern char __start_emu_shared[] __attribute__((weak));
extern char __stop_emu_shared[] __attribute__((weak));
}

namespace {

struct acc {
    const void *pc;
    uint32_t epoch;   /* 0: none */
    uint32_t wseq;
    int32_t tid;
};

struct region {
    uintptr_t lo = 0, size = 0;
    int nwarps = 0;
    std::vector<acc> w;   /* per granule */
    std::vector<acc> r;   /* per granule, per warp, 2 slots */
    void shape(uintptr_t l, uintptr_t s, int nw)
    {
        size_t g = (s + 1) / 2;
        if (lo != l || size != s || nwarps != nw || w.size() != g) {
            lo = l;
            size = s;
            nwarps = nw;
            w.assign(g, acc{nullptr, 0, 0, -1});
            r.assign(g * (size_t)nw * 2, acc{nullptr, 0, 0, -1});
        }
    }
};

struct state {
    bool on = false;
    uint32_t epoch = 1;
    int tid = 0, warp = 0;
    dim3 bdim;
    uint3 bidx;
    std::vector<uint32_t> wseq;   /* per warp, completed full-mask collectives */
    region dyn, stat;
    long races = 0;
    std::set<std::pair<const void *, const void *>> seen;
} S;

/* "`name`+off" for an address in the static shared section: the kernels' __shared__ statics
 * are local symbols of the executable, which nm lists (dladdr sees exported symbols only). */
std::string static_name(uintptr_t addr)
{
    static std::map<uintptr_t, std::string> syms;   /* link-time address -> demangled name */
    static bool loaded = false;
    Dl_info di;
    if (!dladdr((void *)addr, &di) || !di.dli_fbase)
        return "";
    uintptr_t base = (uintptr_t)di.dli_fbase, lo = (uintptr_t)__start_emu_shared - base, hi = (uintptr_t)__stop_emu_shared - base;
    if (!loaded) {
        loaded = true;
        char exe[4096], cmd[4200], line[1024];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (k <= 0)
            return "";
        exe[k] = 0;
        snprintf(cmd, sizeof cmd, "nm -C --defined-only '%s' 2>/dev/null", exe);
        if (FILE *f = popen(cmd, "r")) {
            while (fgets(line, sizeof line, f)) {
                unsigned long a;
                char type, name[900];
                if (sscanf(line, "%lx %c %899[^\n]", &a, &type, name) == 3 && a >= lo && a < hi)
                    syms[a] = name;
            }
            pclose(f);
        }
    }
    /* A non-PIE executable is mapped at its link address. */
    uintptr_t off = addr - base;
    auto it = syms.upper_bound(off);
    if (it == syms.begin())
        it = syms.upper_bound(addr), off = addr;
    if (it == syms.begin())
        return "";
    --it;
    return "`" + it->second + "`+" + std::to_string(off - it->first);
}

void coords(int tid, char *buf, size_t n)
{
    unsigned x = (unsigned)tid % S.bdim.x, y = (unsigned)tid / S.bdim.x % S.bdim.y,
             z = (unsigned)tid / (S.bdim.x * S.bdim.y);
    snprintf(buf, n, "(%u,%u,%u)", x, y, z);
}

void report(const acc &prev, bool prev_write, const void *pc, bool write, const region &rg, uintptr_t addr)
{
    S.races++;
    if (!S.seen.insert(std::make_pair(prev.pc, pc)).second || S.seen.size() > 20)
        return;
    char a[48], b[48];
    coords(prev.tid, a, sizeof a);
    coords(S.tid, b, sizeof b);
    std::string where = &rg == &S.dyn ? "" : static_name(addr);
    fprintf(stderr,
            "emu race: %s shared memory, byte %lu%s%s, block (%u,%u,%u):\n"
            "  %-5s by thread %s at %s\n"
            "  %-5s by thread %s at %s\n"
            "  not ordered by __syncthreads()%s\n",
            &rg == &S.dyn ? "dynamic" : "static", (unsigned long)(addr - rg.lo), where.empty() ? "" : " = ",
            where.c_str(), S.bidx.x, S.bidx.y, S.bidx.z,
            prev_write ? "write" : "read", a, emu::rt::describe_pc(prev.pc).c_str(), write ? "write" : "read", b,
            emu::rt::describe_pc(pc).c_str(),
            prev.tid / 32 == S.tid / 32 ? " or a full-warp __syncwarp()/collective (same warp)" : "");
}

inline bool ordered(const acc &a)
{
    /* Older epoch: a __syncthreads (or another block) intervened. Same warp: a full-mask
     * collective completed after a. */
    return a.epoch != S.epoch || (a.tid / 32 == S.warp && a.wseq < S.wseq[(size_t)S.warp]);
}

void access(region &rg, uintptr_t addr, size_t size, bool write, const void *pc)
{
    uintptr_t off = addr - rg.lo, end = off + size;
    if (end > rg.size)
        end = rg.size;
    acc cur{pc, S.epoch, S.wseq[(size_t)S.warp], S.tid};
    for (uintptr_t g = off / 2; g * 2 < end; g++) {
        acc &w = rg.w[g];
        acc *r = &rg.r[g * (size_t)rg.nwarps * 2];
        if (w.epoch == S.epoch && w.tid != S.tid && !ordered(w)) {
            report(w, true, pc, write, rg, rg.lo + g * 2);
            continue;
        }
        if (write) {
            bool raced = false;
            for (int k = 0; k < rg.nwarps * 2 && !raced; k++)
                if (r[k].epoch == S.epoch && r[k].tid != S.tid && !ordered(r[k])) {
                    report(r[k], false, pc, true, rg, rg.lo + g * 2);
                    raced = true;
                }
            w = cur;
        } else {
            acc *mine = &r[S.warp * 2];
            if (mine[0].epoch == S.epoch && mine[0].tid == S.tid) {
                mine[0] = cur;
            } else {
                mine[1] = mine[0].epoch == S.epoch ? mine[0] : acc{nullptr, 0, 0, -1};
                mine[0] = cur;
            }
        }
    }
}

inline void check(const void *p, size_t size, bool write, const void *pc)
{
    if (!S.on)
        return;
    uintptr_t a = (uintptr_t)p;
    if (a - S.dyn.lo < S.dyn.size)
        access(S.dyn, a, size, write, pc);
    else if (a - S.stat.lo < S.stat.size)
        access(S.stat, a, size, write, pc);
}

} // namespace

void emu::race::block_begin(unsigned char *dyn, size_t dyn_size, dim3 block_dim, uint3 block_idx)
{
    int nw = (int)((block_dim.x * block_dim.y * block_dim.z + 31) / 32);
    S.dyn.shape((uintptr_t)dyn, dyn_size, nw);
    uintptr_t slo = (uintptr_t)__start_emu_shared, shi = (uintptr_t)__stop_emu_shared;
    S.stat.shape(slo, slo && shi > slo ? shi - slo : 0, nw);
    S.bdim = block_dim;
    S.bidx = block_idx;
    S.wseq.assign((size_t)nw, 1);
    S.epoch++;
    S.on = true;
}
void emu::race::set_thread(int tid, int warp) { S.tid = tid; S.warp = warp; }
void emu::race::barrier() { S.epoch++; }
void emu::race::warp_sync(int warp, unsigned mask)
{
    if (mask == 0xffffffffu || (warp == (int)S.wseq.size() - 1 && mask == ~0u >> (32 - (int)((S.bdim.x * S.bdim.y * S.bdim.z - 1) % 32 + 1))))
        S.wseq[(size_t)warp]++;
}
long emu::race::take_count()
{
    long n = S.races;
    S.races = 0;
    S.on = false;
    return n;
}

/* ---- the hooks -fsanitize=thread inserts (GCC and Clang names) ---- */
#define RA __builtin_return_address(0)
#define EMU_TSAN_RW(N)                                                                         \
    extern "C" void __tsan_read##N(void *p) { check(p, N, false, RA); }                       \
    extern "C" void __tsan_write##N(void *p) { check(p, N, true, RA); }                       \
    extern "C" void __tsan_unaligned_read##N(void *p) { check(p, N, false, RA); }             \
    extern "C" void __tsan_unaligned_write##N(void *p) { check(p, N, true, RA); }             \
    extern "C" void __tsan_volatile_read##N(void *p) { check(p, N, false, RA); }              \
    extern "C" void __tsan_volatile_write##N(void *p) { check(p, N, true, RA); }              \
    extern "C" void __tsan_unaligned_volatile_read##N(void *p) { check(p, N, false, RA); }    \
    extern "C" void __tsan_unaligned_volatile_write##N(void *p) { check(p, N, true, RA); }
EMU_TSAN_RW(1)
EMU_TSAN_RW(2)
EMU_TSAN_RW(4)
EMU_TSAN_RW(8)
EMU_TSAN_RW(16)
extern "C" void __tsan_read_range(void *p, unsigned long n) { check(p, n, false, RA); }
extern "C" void __tsan_write_range(void *p, unsigned long n) { check(p, n, true, RA); }
extern "C" void __tsan_func_entry(void *) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_init() {}
extern "C" void __tsan_vptr_update(void **, void *) {}
extern "C" void __tsan_vptr_read(void **) {}
extern "C" void __tsan_ignore_thread_begin() {}
extern "C" void __tsan_ignore_thread_end() {}
