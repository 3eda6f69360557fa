/*
 * emu_runtime.cc - the emu backend's runtime: fibers, barriers, warp collectives, launches,
 * and the host API subset of gpu/emu/emu.h.
 *
 *   g++ -std=c++17 -O2 -g -Igpu/emu -c gpu/emu/emu_runtime.cc   (+ -lboost_context -lpthread)
 *   -DEMU_ASAN: ASan build (blocks run serially, exact-size dynamic shared memory, fiber
 *               stack switches announced to ASan). -DEMU_RACE: race-check build (serial, calls
 *               gpu/emu/emu_race.cc). Kernels and runtime must be built with the same mode.
 *
 * Model. One launch = a job of blocks; a pool of OS threads (EMU_THREADS, default nproc) takes
 * blocks off an atomic counter. A block's threads are fibers (Boost.Context) on that OS
 * thread, run round-robin by a scheduler loop; a fiber runs until it reaches a barrier, a warp
 * collective or its end. The last arriver at a barrier completes it (computes the vote,
 * shuffle or count for everyone) and carries on without a switch, so a sync point costs one
 * switch out and one back per waiting thread. Exited threads count as arrived at
 * __syncthreads (what sm_70+ does); a warp collective naming an exited lane is an error.
 * When no fiber can run but some are alive, the block is deadlocked: reported, not hung.
 */
#include "gpu/emu/emu.h"
#include "gpu/emu/emu_internal.h"

#include <boost/context/fiber.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <elf.h>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace bctx = boost::context;

EMU_TLS uint3 threadIdx, blockIdx, blockDim, gridDim;
EMU_TLS unsigned char *emu_dyn_smem;

using namespace emu;

namespace {

#if defined(EMU_ASAN) || defined(EMU_RACE)
const bool serial_blocks = true;   /* static __shared__ variables are process-wide statics */
#else
const bool serial_blocks = false;
#endif

/* ---- the emulated device ---- */
struct arch_limits { int major, minor; size_t smem_optin; const char *name; };
arch_limits device_arch()
{
    static arch_limits a = [] {
        const char *e = getenv("EMU_ARCH");
        int v = e ? atoi(e) : 80;
        switch (v) {
        case 86: return arch_limits{8, 6, 101376, "flexcheck emu (sm_86)"};
        case 89: return arch_limits{8, 9, 101376, "flexcheck emu (sm_89)"};
        case 90: return arch_limits{9, 0, 232448, "flexcheck emu (sm_90)"};
        default: return arch_limits{8, 0, 166912, "flexcheck emu (sm_80)"};
        }
    }();
    return a;
}
const size_t smem_default_max = 48 * 1024;

thread_local cudaError_t last_error = cudaSuccess;
/* An error raised while a kernel ran. The launch returns it at once (launches are synchronous
 * here); like the GPU, the next synchronisation reports it too, once. */
thread_local cudaError_t exec_error = cudaSuccess;
cudaError_t fail(cudaError_t e) { last_error = e; return e; }

/* ---- fibers and blocks ---- */
enum { T_RUN, T_BAR, T_WARP, T_DONE };

struct ethread {
    bctx::fiber f, back;
    uint3 idx;
    int state, lane, warp, linear;
    int wop, warg, wwidth;
    unsigned wmask;
    unsigned long long wval, wres;
    warp_fn wexec;   /* W_EXEC: the instruction this lane is at */
    const void *pc;
    void *stack_lo;
    size_t stack_size;
    void *asan_fake;
};
struct ewarp { unsigned exist, live, waiting; };

struct job;
struct worker {
    char *stacks = nullptr;
    size_t stack_size = 0;
    int nstacks = 0;
    std::vector<ethread> t;
    std::vector<ewarp> w;
    unsigned char *smem = nullptr;
    size_t smem_cap = 0;
    ethread *cur = nullptr;
    job *j = nullptr;
    uint3 bidx;
    int n = 0, live = 0, arrived = 0, bar_op = 0, bar_acc = 0, bar_res = 0;
    const void *bar_pc = nullptr;
    bool failed = false;
    const void *sched_stack_lo = nullptr;
    size_t sched_stack_size = 0;
    void *sched_fake = nullptr;
};
thread_local worker *tls_worker = nullptr;

struct job {
    void (*body)(const void *);
    const void *ctx;
    const void *kernel;
    dim3 grid, block;
    size_t smem;
    unsigned long long nblocks;
    std::atomic<unsigned long long> next{0};
    std::atomic<int> failed{0};
    cudaError_t err = cudaSuccess;
};

/* Unwinds a fiber whose kernel hit an error; caught in the fiber's entry function. */
struct kernel_abort {};

size_t stack_bytes()
{
    static size_t s = [] {
        const char *e = getenv("EMU_STACK_KB");
        size_t kb = e ? (size_t)atol(e) : 0;
#if defined(EMU_ASAN)
        if (kb == 0) kb = 1024;   /* redzones make frames several times larger */
#else
        if (kb == 0) kb = 256;
#endif
        return kb * 1024;
    }();
    return s;
}

/* One mapping per worker, a guard page under each stack so an overflow faults at once
 * instead of corrupting the neighbour. Kept for the life of the thread. */
void ensure_stacks(worker *w, int n)
{
    if (w->nstacks >= n)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), sz = (stack_bytes() + page - 1) / page * page + page;
    if (w->stacks)
        munmap(w->stacks, w->stack_size * (size_t)w->nstacks);
    void *m = mmap(nullptr, sz * (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "emu: cannot map %d fiber stacks of %zu bytes\n", n, sz);
        abort();
    }
    for (int i = 0; i < n; i++)
        mprotect((char *)m + sz * (size_t)i, page, PROT_NONE);
    w->stacks = (char *)m;
    w->stack_size = sz;
    w->nstacks = n;
    w->t.resize((size_t)n);
}

struct no_dealloc {
    void deallocate(bctx::stack_context &) noexcept {}
};

inline void asan_enter(worker *w, ethread *t)
{
#if defined(EMU_ASAN)
    __sanitizer_start_switch_fiber(&w->sched_fake, t->stack_lo, t->stack_size);
#else
    (void)w; (void)t;
#endif
}
inline void asan_back_in_scheduler(worker *w)
{
#if defined(EMU_ASAN)
    __sanitizer_finish_switch_fiber(w->sched_fake, nullptr, nullptr);
#else
    (void)w;
#endif
}
inline void asan_leave(worker *w, ethread *t, bool exiting)
{
#if defined(EMU_ASAN)
    __sanitizer_start_switch_fiber(exiting ? nullptr : &t->asan_fake, w->sched_stack_lo, w->sched_stack_size);
#else
    (void)w; (void)t; (void)exiting;
#endif
}
inline void asan_in_fiber(worker *w, ethread *t, bool first)
{
#if defined(EMU_ASAN)
    if (first)
        __sanitizer_finish_switch_fiber(nullptr, &w->sched_stack_lo, &w->sched_stack_size);
    else
        __sanitizer_finish_switch_fiber(t->asan_fake, nullptr, nullptr);
#else
    (void)w; (void)t; (void)first;
#endif
}

/* Suspends the running fiber. Inlined, as is warp_arrive: a resumed fiber returns through every
 * frame of its suspension, and after a switch each of those returns is mispredicted (the CPU's
 * return stack holds the calls of the fiber that ran before), so every frame saved here counts
 * in a kernel that switches a few times per mma. */
#define EMU_INLINE inline __attribute__((always_inline))
EMU_INLINE void yield(worker *w, ethread *t)
{
    asan_leave(w, t, false);
    t->back = std::move(t->back).resume();
    asan_in_fiber(w, t, false);
    if (w->failed)   /* the block is being abandoned: unwind this thread (see run_block) */
        throw kernel_abort();
}

std::mutex report_mu;

/* Prints one error for the launch (the first one wins the error code) and marks it failed. */
void launch_error(job *j, cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void launch_error(job *j, cudaError_t e, const char *fmt, ...)
{
    std::lock_guard<std::mutex> lk(report_mu);
    va_list ap;
    va_start(ap, fmt);
    /* +1: describe_pc steps back one byte from a return address; this is a function start. */
    fprintf(stderr, "emu: kernel %s: ", emu::rt::describe_pc((const char *)j->kernel + 1).c_str());
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (j->failed.fetch_add(1) == 0)
        j->err = e;
}

/* An error raised by the running thread: report it with the thread's coordinates and unwind. */
[[noreturn]] void thread_error(const void *pc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void thread_error(const void *pc, const char *fmt, ...)
{
    worker *w = tls_worker;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint3 b = w->bidx, t = w->cur->idx;
    launch_error(w->j, cudaErrorLaunchFailure, "block (%u,%u,%u) thread (%u,%u,%u): %s at %s", b.x, b.y, b.z,
                 t.x, t.y, t.z, msg, emu::rt::describe_pc(pc).c_str());
    w->failed = true;
    throw kernel_abort();
}

void release_barrier(worker *w)
{
    w->bar_res = w->bar_acc;
    w->arrived = 0;
    for (int i = 0; i < w->n; i++)
        if (w->t[(size_t)i].state == T_BAR)
            w->t[(size_t)i].state = T_RUN;
#if defined(EMU_RACE)
    emu::race::barrier();
#endif
}

void thread_exit(worker *w, ethread *t)
{
    t->state = T_DONE;
    w->live--;
    ewarp &wp = w->w[(size_t)t->warp];
    unsigned me = 1u << t->lane;
    wp.live &= ~me;
    if (w->arrived > 0 && w->arrived == w->live)
        release_barrier(w);
    /* A collective that names this lane can never complete now. */
    for (int l = 0; l < 32; l++) {
        if (!(wp.waiting >> l & 1))
            continue;
        ethread &o = w->t[(size_t)(t->warp * 32 + l)];
        if (o.wmask & me) {
            uint3 b = w->bidx;
            launch_error(w->j, cudaErrorLaunchFailure,
                         "block (%u,%u,%u): thread (%u,%u,%u) exited while lane %d waits for it in a warp collective (mask 0x%08x) at %s",
                         b.x, b.y, b.z, t->idx.x, t->idx.y, t->idx.z, l, o.wmask, emu::rt::describe_pc(o.pc).c_str());
            w->failed = true;
            return;
        }
    }
}

void fiber_main(worker *w, ethread *t)
{
    asan_in_fiber(w, t, true);
    try {
        if (w->failed)
            throw kernel_abort();
        w->j->body(w->j->ctx);
    } catch (const kernel_abort &) {
        t->state = T_DONE;
        asan_leave(w, t, true);
        return;
    }
    thread_exit(w, t);
    asan_leave(w, t, true);
}

void deadlock_report(worker *w)
{
    std::string s;
    int shown = 0;
    for (int i = 0; i < w->n && shown < 6; i++) {
        ethread &t = w->t[(size_t)i];
        if (t.state != T_BAR && t.state != T_WARP)
            continue;
        char buf[160];
        if (t.state == T_BAR)
            snprintf(buf, sizeof buf, "\n  thread (%u,%u,%u) waits at __syncthreads at ", t.idx.x, t.idx.y, t.idx.z);
        else
            snprintf(buf, sizeof buf, "\n  thread (%u,%u,%u) waits in a warp collective (mask 0x%08x) at ", t.idx.x,
                     t.idx.y, t.idx.z, t.wmask);
        s += buf;
        s += emu::rt::describe_pc(t.pc);
        shown++;
    }
    uint3 b = w->bidx;
    launch_error(w->j, cudaErrorLaunchFailure, "block (%u,%u,%u) deadlocked: %d of %d threads alive, none can run:%s",
                 b.x, b.y, b.z, w->live, w->n, s.c_str());
}

void run_block(worker *w, job *j, unsigned long long lin)
{
    dim3 bd = j->block;
    uint3 bidx;
    bidx.x = (unsigned)(lin % j->grid.x);
    bidx.y = (unsigned)(lin / j->grid.x % j->grid.y);
    bidx.z = (unsigned)(lin / ((unsigned long long)j->grid.x * j->grid.y));
    int n = (int)(bd.x * bd.y * bd.z);
    ensure_stacks(w, n);
    w->j = j;
    w->bidx = bidx;
    w->n = n;
    w->live = n;
    w->arrived = 0;
    w->failed = false;
    blockIdx = bidx;
    blockDim = uint3{bd.x, bd.y, bd.z};
    gridDim = uint3{j->grid.x, j->grid.y, j->grid.z};

#if defined(EMU_ASAN)
    /* Exact size, so the first byte past the end is ASan's redzone. */
    unsigned char *smem = nullptr;
    if (posix_memalign((void **)&smem, 128, j->smem ? j->smem : 1) != 0)
        abort();
    emu_dyn_smem = smem;
#else
    if (w->smem_cap < j->smem || !w->smem) {
        free(w->smem);
        w->smem_cap = j->smem > 4096 ? j->smem : 4096;
        if (posix_memalign((void **)&w->smem, 128, w->smem_cap) != 0)
            abort();
    }
    emu_dyn_smem = w->smem;
#endif
#if defined(EMU_RACE)
    emu::race::block_begin(emu_dyn_smem, j->smem, bd, bidx);
#endif

    int nw = (n + 31) / 32;
    w->w.assign((size_t)nw, ewarp{0, 0, 0});
    for (int i = 0; i < n; i++) {
        ethread *t = &w->t[(size_t)i];
        t->idx.x = (unsigned)i % bd.x;
        t->idx.y = (unsigned)i / bd.x % bd.y;
        t->idx.z = (unsigned)i / (bd.x * bd.y);
        t->state = T_RUN;
        t->linear = i;
        t->lane = i % 32;
        t->warp = i / 32;
        t->pc = nullptr;
        w->w[(size_t)t->warp].exist |= 1u << t->lane;
        char *lo = w->stacks + w->stack_size * (size_t)i + (size_t)sysconf(_SC_PAGESIZE);
        size_t size = w->stack_size - (size_t)sysconf(_SC_PAGESIZE);
        t->stack_lo = lo;
        t->stack_size = size;
        bctx::stack_context sc;
        sc.sp = lo + size;
        sc.size = size;
        t->f = bctx::fiber(std::allocator_arg, bctx::preallocated(sc.sp, sc.size, sc), no_dealloc(),
                           [w, t](bctx::fiber &&back) {
                               t->back = std::move(back);
                               fiber_main(w, t);
                               return std::move(t->back);
                           });
    }
    for (int k = 0; k < nw; k++)
        w->w[(size_t)k].live = w->w[(size_t)k].exist;

    while (w->live > 0 && !w->failed) {
        int ran = 0;
        for (int i = 0; i < n && !w->failed; i++) {
            ethread *t = &w->t[(size_t)i];
            if (t->state != T_RUN)
                continue;
            w->cur = t;
            threadIdx = t->idx;
#if defined(EMU_RACE)
            emu::race::set_thread(t->linear, t->warp);
#endif
            asan_enter(w, t);
            t->f = std::move(t->f).resume();
            asan_back_in_scheduler(w);
            ran++;
        }
        if (!ran && w->live > 0 && !w->failed) {
            deadlock_report(w);
            w->failed = true;
        }
    }
    if (w->failed) {
        /* Resume every fiber not finished; with w->failed set, each unwinds itself through
         * kernel_abort (yield, fiber_main) on a properly announced stack, rather than through
         * Boost's forced unwinding, which ASan could not follow. */
        for (int i = 0; i < n; i++) {
            ethread *t = &w->t[(size_t)i];
            if (!t->f)
                continue;
            w->cur = t;
            threadIdx = t->idx;
            asan_enter(w, t);
            t->f = std::move(t->f).resume();
            asan_back_in_scheduler(w);
        }
    }
    w->cur = nullptr;
#if defined(EMU_ASAN)
    free(smem);
    emu_dyn_smem = nullptr;
#endif
}

worker *get_worker()
{
    if (!tls_worker)
        tls_worker = new worker();   /* lives as long as its OS thread; stacks are reused */
    return tls_worker;
}

void run_blocks(job *j)
{
    worker *w = get_worker();
    for (;;) {
        if (j->failed.load())
            break;
        unsigned long long b = j->next.fetch_add(1);
        if (b >= j->nblocks)
            break;
        run_block(w, j, b);
    }
}

/* ---- the pool of OS threads ---- */
struct pool_t {
    std::mutex mu;
    std::condition_variable cv, done;
    int nthreads = 0, want = 0, active = 0;
    unsigned long long gen = 0;
    job *j = nullptr;
};
/* Never destroyed: its threads wait on it forever, and glibc hangs destroying a condition
 * variable that has waiters at exit. */
pool_t &pool = *new pool_t();

void pool_main(int idx)
{
    unsigned long long seen = 0;
    for (;;) {
        job *j;
        {
            std::unique_lock<std::mutex> lk(pool.mu);
            pool.cv.wait(lk, [&] { return pool.gen != seen; });
            seen = pool.gen;
            if (idx >= pool.want)
                continue;
            j = pool.j;
        }
        run_blocks(j);
        std::lock_guard<std::mutex> lk(pool.mu);
        if (--pool.active == 0)
            pool.done.notify_all();
    }
}

int os_threads()
{
    static int n = [] {
        const char *e = getenv("EMU_THREADS");
        long v = e ? atol(e) : sysconf(_SC_NPROCESSORS_ONLN);
        return (int)(v < 1 ? 1 : v > 256 ? 256 : v);
    }();
    return serial_blocks ? 1 : n;
}

std::mutex launch_mu, attr_mu, alloc_mu;
std::map<const void *, int> kernel_max_dyn_smem;
std::map<uintptr_t, size_t> allocations;

/* [p, p+n) inside one cudaMalloc allocation? */
bool is_device_range(const void *p, size_t n)
{
    std::lock_guard<std::mutex> lk(alloc_mu);
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin())
        return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

} // namespace

/* ============================ device side ============================ */

int emu::rt::bar(int op, int pred)
{
    const void *pc = __builtin_return_address(0);
    worker *w = tls_worker;
    ethread *t = w->cur;
    if (w->arrived == 0) {
        w->bar_op = op;
        w->bar_acc = op == BAR_AND ? 1 : 0;
        w->bar_pc = pc;
    } else if (op != w->bar_op) {
        thread_error(pc, "this barrier's kind differs from the one other threads wait at (%s)",
                     describe_pc(w->bar_pc).c_str());
    }
    switch (op) {
    case BAR_COUNT: w->bar_acc += pred != 0; break;
    case BAR_AND: w->bar_acc &= pred != 0; break;
    case BAR_OR: w->bar_acc |= pred != 0; break;
    default: break;
    }
    t->pc = pc;
    if (++w->arrived == w->live) {
        release_barrier(w);
        return w->bar_res;
    }
    t->state = T_BAR;
    yield(w, t);
    return w->bar_res;
}

static void warp_complete(worker *w, ethread *self, unsigned mask)
{
    int base = self->warp * 32, op = self->wop;
    ewarp &wp = w->w[(size_t)self->warp];
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1))
            continue;
        ethread &o = w->t[(size_t)(base + l)];
        if (o.wop != op || o.wmask != mask || o.wexec != self->wexec)
            thread_error(self->pc, "lanes named by mask 0x%08x disagree: lane %d is in another collective or has mask 0x%08x, at %s",
                         mask, l, o.wmask, emu::rt::describe_pc(o.pc).c_str());
    }
    unsigned long long acc = 0;
    switch (op) {
    case W_BALLOT:
        for (int l = 0; l < 32; l++)
            if ((mask >> l & 1) && w->t[(size_t)(base + l)].wval)
                acc |= 1ull << l;
        break;
    case W_RED_ADD: case W_RED_AND: case W_RED_OR: case W_RED_XOR:
    case W_RED_MIN_U: case W_RED_MAX_U: case W_RED_MIN_S: case W_RED_MAX_S: {
        bool first = true;
        unsigned r = 0;
        for (int l = 0; l < 32; l++) {
            if (!(mask >> l & 1))
                continue;
            unsigned v = (unsigned)w->t[(size_t)(base + l)].wval;
            if (first) { r = v; first = false; continue; }
            switch (op) {
            case W_RED_ADD: r += v; break;
            case W_RED_AND: r &= v; break;
            case W_RED_OR: r |= v; break;
            case W_RED_XOR: r ^= v; break;
            case W_RED_MIN_U: r = v < r ? v : r; break;
            case W_RED_MAX_U: r = v > r ? v : r; break;
            case W_RED_MIN_S: r = (int)v < (int)r ? v : r; break;
            case W_RED_MAX_S: r = (int)v > (int)r ? v : r; break;
            }
        }
        acc = r;
        break;
    }
    case W_EXEC: {
        void *lanes[32];
        for (int l = 0; l < 32; l++)
            lanes[l] = (void *)(uintptr_t)w->t[(size_t)(base + l)].wval;
        self->wexec(lanes);
        break;
    }
    default: break;
    }
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1))
            continue;
        ethread &o = w->t[(size_t)(base + l)];
        switch (op) {
        case W_SHFL_IDX: case W_SHFL_UP: case W_SHFL_DOWN: case W_SHFL_XOR: {
            /* PTX shfl.sync: c = ((32 - width) << 8) | clamp, clamp 0 for up and 31 otherwise. */
            int segmask = (32 - o.wwidth) & 31, b = o.warg & 31, j = 0;
            int maxlane = (l & segmask) | ((op == W_SHFL_UP ? 0 : 31) & ~segmask), minlane = l & segmask;
            bool ok;
            switch (op) {
            case W_SHFL_UP: j = l - o.warg; ok = j >= maxlane; break;
            case W_SHFL_DOWN: j = l + o.warg; ok = j <= maxlane; break;
            case W_SHFL_XOR: j = l ^ b; ok = j <= maxlane; break;
            default: j = minlane | (b & ~segmask); ok = j <= maxlane; break;
            }
            if (!ok)
                j = l;
            if (!(mask >> j & 1))
                thread_error(o.pc, "lane %d's shuffle reads lane %d, which is not in mask 0x%08x", l, j, mask);
            o.wres = w->t[(size_t)(base + j)].wval;
            break;
        }
        case W_MATCH_ANY: {
            unsigned m = 0;
            for (int k = 0; k < 32; k++)
                if ((mask >> k & 1) && (unsigned)w->t[(size_t)(base + k)].wval == (unsigned)o.wval)
                    m |= 1u << k;
            o.wres = m;
            break;
        }
        default: o.wres = acc; break;
        }
        if (&o != self)
            o.state = T_RUN;
    }
    wp.waiting &= ~mask;
#if defined(EMU_RACE)
    emu::race::warp_sync(self->warp, mask);
#endif
}

/* The calling lane arrives at a warp collective: the last lane of mask to arrive completes it
 * for all, the others wait. pc is the collective's call site in the kernel. */
static EMU_INLINE unsigned long long warp_arrive(const void *pc, int op, unsigned mask, unsigned long long v,
                                                 int arg, int width, warp_fn exec)
{
    worker *w = tls_worker;
    ethread *t = w->cur;
    ewarp &wp = w->w[(size_t)t->warp];
    unsigned me = 1u << t->lane;
    if (!(mask & me))
        thread_error(pc, "calling lane %d is not in mask 0x%08x", t->lane, mask);
    if (mask & ~wp.exist)
        thread_error(pc, "mask 0x%08x names lanes that do not exist in this warp (0x%08x)", mask, wp.exist);
    if (mask & ~wp.live)
        thread_error(pc, "mask 0x%08x names lanes that have exited (live 0x%08x)", mask, wp.live);
    t->wop = op;
    t->wmask = mask;
    t->wval = v;
    t->warg = arg;
    t->wwidth = width;
    t->wexec = exec;
    t->pc = pc;
    wp.waiting |= me;
    if ((wp.waiting & mask) == mask) {
        warp_complete(w, t, mask);
        return t->wres;
    }
    t->state = T_WARP;
    yield(w, t);
    return t->wres;
}

unsigned long long emu::rt::warp(int op, unsigned mask, unsigned long long v, int arg, int width)
{
    const void *pc = __builtin_return_address(0);
    if (op == W_ACTIVEMASK)
        return tls_worker->w[(size_t)tls_worker->cur->warp].live;
    if (op >= W_SHFL_IDX && op <= W_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1))))
        thread_error(pc, "shuffle width %d is not a power of two in [1, 32]", width);
    return warp_arrive(pc, op, mask, v, arg, width, nullptr);
}

/* The whole warp, as the .sync.aligned instructions the twins stand for require. */
void emu::rt::warp_exec(warp_fn exec, void *operands)
{
    warp_arrive(__builtin_return_address(0), W_EXEC, 0xffffffffu, (unsigned long long)(uintptr_t)operands, 0, 32,
                exec);
}

int emu::rt::require_fma()
{
#if defined(__x86_64__)
    __builtin_cpu_init(); /* this runs from static initialisers, maybe before libgcc's own */
    static const bool ok = __builtin_cpu_supports("fma");
    if (!ok) {
        fprintf(stderr, "emu: the emulated kernels were built for a CPU with the fma instruction and this one has none; "
                        "rebuild them here (make clean; make) or with EMU_ISA= for any x86-64\n");
        exit(2);
    }
#endif
    return 1;
}

void emu::rt::trap(const char *why)
{
    thread_error(__builtin_return_address(0), "%s", why);
}

/* ---- atomics ---- */
#define EMU_ATOMIC_INT(T)                                                                                        \
    T emu::rt::atomic_add(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }                    \
    T emu::rt::atomic_exch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }                  \
    T emu::rt::atomic_and(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }                    \
    T emu::rt::atomic_or(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }                      \
    T emu::rt::atomic_xor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }                    \
    T emu::rt::atomic_cas(T *p, T c, T v) { __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return c; }
EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned)
EMU_ATOMIC_INT(unsigned long long)
#undef EMU_ATOMIC_INT
unsigned short emu::rt::atomic_cas(unsigned short *p, unsigned short c, unsigned short v)
{
    __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return c;
}
template <class T, class F> static T cas_loop(T *p, F f)
{
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
#define EMU_ATOMIC_MINMAX(T)                                                                       \
    T emu::rt::atomic_min(T *p, T v) { return cas_loop(p, [v](T o) { return v < o ? v : o; }); } \
    T emu::rt::atomic_max(T *p, T v) { return cas_loop(p, [v](T o) { return v > o ? v : o; }); }
EMU_ATOMIC_MINMAX(int)
EMU_ATOMIC_MINMAX(unsigned)
EMU_ATOMIC_MINMAX(long long)
EMU_ATOMIC_MINMAX(unsigned long long)
#undef EMU_ATOMIC_MINMAX
template <class T, class U> static T fp_cas_add(T *p, T v)
{
    U *q = reinterpret_cast<U *>(p), old = __atomic_load_n(q, __ATOMIC_RELAXED), nw;
    T f;
    do {
        std::memcpy(&f, &old, sizeof f);
        f += v;
        std::memcpy(&nw, &f, sizeof f);
    } while (!__atomic_compare_exchange_n(q, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    std::memcpy(&f, &old, sizeof f);
    return f;
}
float emu::rt::atomic_add(float *p, float v) { return fp_cas_add<float, unsigned>(p, v); }
double emu::rt::atomic_add(double *p, double v) { return fp_cas_add<double, unsigned long long>(p, v); }
float emu::rt::atomic_exch(float *p, float v)
{
    unsigned u, r;
    std::memcpy(&u, &v, 4);
    r = __atomic_exchange_n(reinterpret_cast<unsigned *>(p), u, __ATOMIC_RELAXED);
    float f;
    std::memcpy(&f, &r, 4);
    return f;
}
/* atomicInc/Dec wrap at v, as the PTX atom.inc/dec do. */
unsigned emu::rt::atomic_inc(unsigned *p, unsigned v) { return cas_loop(p, [v](unsigned o) { return o >= v ? 0u : o + 1; }); }
unsigned emu::rt::atomic_dec(unsigned *p, unsigned v) { return cas_loop(p, [v](unsigned o) { return (o == 0 || o > v) ? v : o - 1; }); }

/* ============================ launch ============================ */

cudaError_t emu::rt::set_error(cudaError_t e) { return fail(e); }

cudaError_t emu::rt::func_set_attribute(const void *kernel, cudaFuncAttribute a, int v)
{
    if (!kernel)
        return fail(cudaErrorInvalidDeviceFunction);
    if (a == cudaFuncAttributePreferredSharedMemoryCarveout)
        return (v < -1 || v > 100) ? fail(cudaErrorInvalidValue) : cudaSuccess;
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return fail(cudaErrorInvalidValue);
    if (v < 0 || (size_t)v > device_arch().smem_optin)
        return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(attr_mu);
    kernel_max_dyn_smem[kernel] = v;
    return cudaSuccess;
}

static size_t max_dyn_smem(const void *kernel)
{
    std::lock_guard<std::mutex> lk(attr_mu);
    auto it = kernel_max_dyn_smem.find(kernel);
    return it == kernel_max_dyn_smem.end() ? smem_default_max : (size_t)it->second;
}

cudaError_t emu::rt::func_get_attributes(cudaFuncAttributes *fa, const void *kernel)
{
    if (!fa || !kernel)
        return fail(cudaErrorInvalidValue);
    std::memset(fa, 0, sizeof *fa);
    fa->maxThreadsPerBlock = 1024;
    fa->maxDynamicSharedSizeBytes = (int)max_dyn_smem(kernel);
    fa->ptxVersion = fa->binaryVersion = device_arch().major * 10 + device_arch().minor;
    return cudaSuccess;
}

cudaError_t emu::rt::launch(const void *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t, void (*body)(const void *),
                            const void *ctx, cudaError_t bad_config)
{
    /* The checks of a real launch (CUDA C Programming Guide, "Compute Capabilities" table):
     * block <= 1024 threads, x,y <= 1024, z <= 64; grid x < 2^31, y,z <= 65535; dynamic shared
     * memory <= 48 KiB unless the kernel opted in to more. A block or grid out of range answers
     * bad_config, which depends on the entry point (emu.h). Not modelled: static __shared__
     * counts against the same 48 KiB on the GPU (static + dynamic), which the emu cannot see
     * before a block runs; emu.h says so to kernel authors. */
    if (!kernel)
        return fail(cudaErrorInvalidDeviceFunction);
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
        return fail(bad_config);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        return fail(bad_config);
    if (smem > max_dyn_smem(kernel))
        return fail(cudaErrorInvalidValue);
    if (tls_worker && tls_worker->cur)
        return fail(cudaErrorNotSupported);   /* a launch from inside a kernel */

    std::lock_guard<std::mutex> lk(launch_mu);
    job j;
    j.body = body;
    j.ctx = ctx;
    j.kernel = kernel;
    j.grid = grid;
    j.block = block;
    j.smem = smem;
    j.nblocks = (unsigned long long)grid.x * grid.y * grid.z;
    int nw = os_threads();
    if ((unsigned long long)nw > j.nblocks)
        nw = (int)j.nblocks;
    if (nw > 1) {
        std::unique_lock<std::mutex> pl(pool.mu);
        while (pool.nthreads < nw - 1) {
            std::thread(pool_main, pool.nthreads).detach();
            pool.nthreads++;
        }
        pool.j = &j;
        pool.want = nw - 1;
        pool.active = nw - 1;
        pool.gen++;
        pool.cv.notify_all();
    }
    run_blocks(&j);
    if (nw > 1) {
        std::unique_lock<std::mutex> pl(pool.mu);
        pool.done.wait(pl, [] { return pool.active == 0; });
    }
#if defined(EMU_RACE)
    long races = emu::race::take_count();
    if (races > 0 && j.err == cudaSuccess)
        j.err = cudaErrorLaunchFailure;
#endif
    if (j.err != cudaSuccess)
        exec_error = j.err;
    return j.err == cudaSuccess ? cudaSuccess : fail(j.err);
}

/* ============================ host API ============================ */

cudaError_t cudaMalloc(void **p, size_t n)
{
    if (!p)
        return fail(cudaErrorInvalidValue);
    void *m = nullptr;
    if (posix_memalign(&m, 256, n ? n : 1) != 0)   /* cudaMalloc's 256-byte alignment */
        return fail(cudaErrorMemoryAllocation);
    /* Fresh device memory reads as NaN (0xff bytes), so an output the kernel forgot to write
     * fails every comparison instead of passing as a lucky 0. */
    std::memset(m, 0xff, n);
    std::lock_guard<std::mutex> lk(alloc_mu);
    allocations[(uintptr_t)m] = n;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(alloc_mu);
        auto it = allocations.find((uintptr_t)p);
        if (it == allocations.end())
            return fail(cudaErrorInvalidValue);
        allocations.erase(it);
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
    if (!p)
        return fail(cudaErrorInvalidValue);
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((unsigned)kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    /* A direction that names host memory as device memory, or a range that leaves its
     * allocation, is refused as the driver refuses it. */
    if ((dd && !is_device_range(dst, n)) || (sd && !is_device_range(src, n)))
        return fail(cudaErrorInvalidValue);
    std::memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t)
{
    return cudaMemcpy(dst, src, n, kind);
}
cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    if (!is_device_range(p, n))
        return fail(cudaErrorInvalidValue);
    std::memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { return cudaMemset(p, v, n); }

/* Launches run to completion before they return: synchronisation only reports. */
cudaError_t cudaDeviceSynchronize() { cudaError_t e = exec_error; exec_error = cudaSuccess; return e; }
cudaError_t cudaDeviceReset() { last_error = exec_error = cudaSuccess; return cudaSuccess; }
cudaError_t cudaGetLastError() { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return last_error; }

static const struct { cudaError_t e; const char *name, *str; } error_table[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorAssert, "cudaErrorAssert", "device-side assert triggered"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure (emu: see the report on stderr)"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported (by the emu backend)"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};
const char *cudaGetErrorString(cudaError_t e)
{
    for (const auto &r : error_table)
        if (r.e == e)
            return r.str;
    return "unrecognized error code";
}
const char *cudaGetErrorName(cudaError_t e)
{
    for (const auto &r : error_table)
        if (r.e == e)
            return r.name;
    return "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int *n) { if (!n) return fail(cudaErrorInvalidValue); *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { if (!d) return fail(cudaErrorInvalidValue); *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (!p)
        return fail(cudaErrorInvalidValue);
    if (d != 0)
        return fail(cudaErrorInvalidDevice);
    arch_limits a = device_arch();
    std::memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", a.name);
    p->totalGlobalMem = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    p->sharedMemPerBlock = smem_default_max;
    p->sharedMemPerBlockOptin = a.smem_optin;
    p->sharedMemPerMultiprocessor = a.smem_optin + 1024;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->major = a.major;
    p->minor = a.minor;
    p->multiProcessorCount = os_threads();
    p->l2CacheSize = 40 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    cudaDeviceProp p;
    if (!v)
        return fail(cudaErrorInvalidValue);
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess)
        return e;
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *v = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

struct CUstream_st { int unused; };
struct CUevent_st { double ms; };
cudaError_t cudaStreamCreate(cudaStream_t *s) { if (!s) return fail(cudaErrorInvalidValue); *s = new CUstream_st(); return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }

/* Events keep the wall time they were recorded at, so host-side timing code still works. */
cudaError_t cudaEventCreate(cudaEvent_t *e) { if (!e) return fail(cudaErrorInvalidValue); *e = new CUevent_st(); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t)
{
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->ms = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : fail(cudaErrorInvalidResourceHandle); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!ms || !a || !b)
        return fail(cudaErrorInvalidValue);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }

/* ============================ symbolizer ============================ */

std::string emu::rt::describe_pc(const void *pc)
{
    static std::mutex mu;
    static std::map<const void *, std::string> cache;
    std::lock_guard<std::mutex> lk(mu);
    auto it = cache.find(pc);
    if (it != cache.end())
        return it->second;
    char buf[1024];
    snprintf(buf, sizeof buf, "pc %p", pc);
    std::string out = buf;
    Dl_info di;
    if (pc && dladdr(pc, &di) && di.dli_fbase) {
        const Elf64_Ehdr *eh = (const Elf64_Ehdr *)di.dli_fbase;
        /* A return address points after the call; step back into it for the line. */
        uintptr_t addr = (uintptr_t)pc - 1;
        if (eh->e_type != ET_EXEC)
            addr -= (uintptr_t)di.dli_fbase;
        /* The main program's dli_fname is argv[0]-like; addr2line needs a real path (a
         * "/proc/self/exe" would name addr2line itself). */
        std::string mod = di.dli_fname ? di.dli_fname : "";
        if (mod.empty() || mod[0] != '/' || access(mod.c_str(), R_OK) != 0) {
            char exe[4096];
            ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
            mod = k > 0 ? std::string(exe, (size_t)k) : mod;
        }
        snprintf(buf, sizeof buf, "%s+0x%lx", mod.c_str(), (unsigned long)addr);
        out = buf;
        snprintf(buf, sizeof buf, "addr2line -C -f -i -e '%s' 0x%lx 2>/dev/null", mod.c_str(), (unsigned long)addr);
        if (FILE *f = popen(buf, "r")) {
            char fn[512], line[512];
            std::string first, rest;
            while (fgets(fn, sizeof fn, f) && fgets(line, sizeof line, f)) {
                fn[strcspn(fn, "\n")] = 0;
                line[strcspn(line, "\n")] = 0;
                if (strncmp(line, "??", 2) == 0)
                    continue;
                const char *base = strrchr(line, '/');
                base = base ? base + 1 : line;
                /* Frames inside the emu's own headers say nothing about the kernel. */
                if (!strncmp(base, "emu.h", 5) || !strncmp(base, "emu_fp16.h", 10) || !strncmp(base, "emu_compat.h", 12))
                    continue;
                std::string one = std::string(base) + " (" + fn + ")";
                if (first.empty())
                    first = one;
                else
                    rest = one;
            }
            pclose(f);
            if (!first.empty())
                out = rest.empty() ? first : first + ", inlined into " + rest;
        }
    }
    cache[pc] = out;
    return out;
}
