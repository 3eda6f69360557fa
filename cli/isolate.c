/* isolate.c - each input file read and judged in a forked child (isolate.h). */
/* MAP_ANONYMOUS and wait4 (the peak resident set of the child) are not POSIX. */
#define _DEFAULT_SOURCE
#include <cblas.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/isolate.h"
#include "fixtures/fix.h"

/* A sanitizer's shadow memory is reserved before main(): no address-space limit can hold it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ISO_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ISO_SANITIZED 1
#endif
#endif
#ifndef ISO_SANITIZED
#define ISO_SANITIZED 0
#endif

struct cli_iso_chan {
    int fd;             /* the pipe's write end in a child; -1 in this process (buffered) */
    unsigned char *buf; /* in this process: what was sent */
    size_t len, cap;
    uint64_t sent;      /* bytes sent, for the trailer */
    int failed;
};

/* The page the child and the parent share: what the child was doing when it died. */
typedef struct iso_shared {
    volatile int phase;
    volatile int memory;     /* a fatal signal found the address space (nearly) exhausted */
    volatile char tmp[1100]; /* a temporary file the child made, "" when none */
    volatile char watch[192]; /* the libhdf5 step under way (fix_watch_hook), "" when none */
    volatile unsigned watch_seconds;
} iso_shared;

/* Closes what the child sent; the parent checks magic, status and length. */
typedef struct iso_trailer {
    char magic[8];
    int32_t status;
    int32_t pad;
    uint64_t sent;
} iso_trailer;

static const char ISO_MAGIC[8] = {'f', 'c', 'i', 's', 'o', '-', '1', '\n'};

static iso_shared *g_shared; /* set in a child only */
static size_t g_limit;       /* the limit in force in this child, 0 when none */
static int g_data_limit;

int cli_iso_enabled(void)
{
    const char *s = getenv("FLEXCHECK_NO_FORK");
    return !(s && *s && strcmp(s, "0") != 0);
}

void cli_iso_set_phase(cli_iso_phase phase)
{
    if (g_shared)
        g_shared->phase = (int)phase;
}

void cli_iso_note_tmp(const char *tmp)
{
    if (!g_shared)
        return;
    size_t n = tmp ? strlen(tmp) : 0;
    if (n >= sizeof g_shared->tmp)
        n = 0; /* cannot be recorded whole: record nothing rather than a wrong name */
    /* The first byte last: a name cut by a crash mid-copy reads as "". */
    g_shared->tmp[0] = '\0';
    for (size_t i = 1; i < n; i++)
        g_shared->tmp[i] = tmp[i];
    g_shared->tmp[n] = '\0';
    if (n)
        g_shared->tmp[0] = tmp[0];
}

static int write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int cli_iso_send(cli_iso_chan *ch, const void *buf, size_t n)
{
    if (ch->failed)
        return -1;
    if (ch->fd >= 0) {
        if (write_all(ch->fd, buf, n)) {
            ch->failed = 1;
            return -1;
        }
    } else {
        if (ch->len + n > ch->cap) {
            size_t cap = ch->cap ? ch->cap : 4096;
            while (cap < ch->len + n)
                cap *= 2;
            unsigned char *b = realloc(ch->buf, cap);
            if (!b) {
                ch->failed = 1;
                return -1;
            }
            ch->buf = b;
            ch->cap = cap;
        }
        memcpy(ch->buf + ch->len, buf, n);
        ch->len += n;
    }
    ch->sent += n;
    return 0;
}

void cli_iso_bytes_text(size_t n, char *buf, size_t cap)
{
    static const char *const unit[] = {"TiB", "GiB", "MiB", "KiB"};
    for (int i = 0; i < 4; i++) {
        size_t u = (size_t)1 << (10 * (4 - i));
        if (n >= u && n % u == 0) {
            fc_fmt(buf, cap, "%zu %s", n / u, unit[i]);
            return;
        }
    }
    if (n >= ((size_t)1 << 30))
        fc_fmt(buf, cap, "%.1f GiB", (double)n / (double)((size_t)1 << 30));
    else
        fc_fmt(buf, cap, "%zu bytes", n);
}

static const char *limit_kind(int data_limit)
{
    return data_limit ? "data-segment" : "address-space";
}

/* A fatal signal under the limit: if even a small reservation fails now, the child died of the
 * limit (libhdf5 and others dereference what a failed malloc returned), and the parent says so.
 * Then the default action, with the same signal. */
#define ISO_PROBE ((size_t)128 << 20)
static void on_fatal_signal(int sig)
{
    void *p = mmap(NULL, ISO_PROBE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                   0);
    if (p == MAP_FAILED)
        g_shared->memory = 1;
    else
        munmap(p, ISO_PROBE);
    signal(sig, SIG_DFL);
    raise(sig); /* blocked until the handler returns: then the default action */
}

/* OpenBLAS takes its work buffers (128 MiB of address space each) on first use and, when that
 * fails, retries forever (0.3.21, memory.c): a child near its limit would hang instead of
 * failing. One gemm large enough for OpenBLAS's threaded path before the limit leaves the
 * buffers it needs in its table, reused by every later call of the child. */
static void warm_blas(void)
{
    enum { N = 128 };
    static double a[N * N], c[N * N];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0, a, N, a, N, 0.0, c, N);
}

/* The limit, in the child. Best effort: a hard limit lower than asked stays the limit. */
static void apply_limit(const cli_iso *iso)
{
    if (!iso || ISO_SANITIZED || iso->max_memory == 0)
        return;
    warm_blas();
    int res = iso->data_limit ? RLIMIT_DATA : RLIMIT_AS;
    struct rlimit rl;
    if (getrlimit(res, &rl) != 0)
        return;
    rlim_t want = (rlim_t)iso->max_memory;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
        want = rl.rlim_max;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
        return; /* already tighter */
    rl.rlim_cur = want;
    if (setrlimit(res, &rl) != 0)
        return;
    g_limit = (size_t)want;
    g_data_limit = iso->data_limit;
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        sigaction(fatal[i], &sa, NULL);
}

const char *cli_iso_errmsg(fc_status st, const char *msg, char *buf, size_t cap)
{
    /* A message that names the budget already (the reader's, when libhdf5 could not
     * allocate) says what this would add. */
    if (st != FC_ENOMEM || g_limit == 0 || strstr(msg, "(--max-memory)"))
        return msg;
    char lim[32];
    cli_iso_bytes_text(g_limit, lim, sizeof lim);
    static const char oom[] = "out of memory";
    size_t n = strlen(msg), k = sizeof oom - 1;
    if (n >= k && !strcmp(msg + n - k, oom)) /* "...: out of memory" says it twice otherwise */
        fc_fmt(buf, cap, "%.*sran out of its %s %s limit (--max-memory)", (int)(n - k), msg, lim,
               limit_kind(g_data_limit));
    else
        fc_fmt(buf, cap, "%s: ran out of its %s %s limit (--max-memory)", msg, lim,
               limit_kind(g_data_limit));
    return buf;
}

/* The readers' libhdf5 steps (fixtures/fix.h): each armed with an alarm, whose default action
 * ends the child; the step is recorded first, so the parent can name it. */
static void watch_hook(const char *what, unsigned seconds)
{
    if (!what) {
        alarm(0);
        g_shared->watch[0] = '\0';
        return;
    }
    size_t n = strlen(what);
    if (n >= sizeof g_shared->watch)
        n = sizeof g_shared->watch - 1;
    for (size_t i = 0; i < n; i++)
        g_shared->watch[i] = what[i];
    g_shared->watch[n] = '\0';
    g_shared->watch_seconds = seconds;
    alarm(seconds);
}

fc_status cli_iso_watch_env(fc_err *err)
{
    const char *s = getenv("FLEXCHECK_HDF5_TIMEOUT");
    if (!s || !*s) /* set empty: as unset */
        return FC_OK;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || errno || s[0] < '0' || s[0] > '9' || v < 1 || v > (1ul << 30))
        return fc_errf(err, FC_EINVAL, "FLEXCHECK_HDF5_TIMEOUT='%.40s': whole seconds from 1 to "
                       "%lu", s, 1ul << 30);
    fix_watch_seconds = (unsigned)v;
    return FC_OK;
}

/* In a child: every libhdf5 step armed (SIGALRM's default action ends the child). */
static void watch_setup(void)
{
    signal(SIGALRM, SIG_DFL);
    fix_watch_hook = watch_hook;
}

/* The fixture writers name each temporary file they make here (fixtures/fix.h). */
static void note_tmp_hook(const char *tmp)
{
    cli_iso_note_tmp(tmp);
}

static fc_status run_here(cli_iso_fn fn, void *arg, cli_iso_result *res, fc_err *err)
{
    cli_iso_chan ch = {.fd = -1};
    res->status = fn(arg, &ch);
    if (ch.failed) {
        free(ch.buf);
        return fc_errf(err, FC_ENOMEM, "out of memory for a child's result");
    }
    res->finished = 1;
    res->exit_status = 0;
    res->data = ch.buf;
    res->len = ch.len;
    return FC_OK;
}

/* Everything from fd until end of file, into res->data. */
static int read_all(int fd, cli_iso_result *res)
{
    size_t cap = 0;
    int oom = 0;
    unsigned char scratch[4096];
    for (;;) {
        if (!oom && res->len == cap) {
            size_t ncap = cap ? 2 * cap : 16384;
            unsigned char *b = realloc(res->data, ncap);
            if (b) {
                res->data = b;
                cap = ncap;
            } else {
                oom = 1; /* keep draining, so the child is never blocked on a full pipe */
            }
        }
        unsigned char *dst = oom ? scratch : res->data + res->len;
        size_t room = oom ? sizeof scratch : cap - res->len;
        ssize_t n = read(fd, dst, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (!oom)
            res->len += (size_t)n;
    }
    return oom ? -1 : 0;
}

fc_status cli_isolated(const cli_iso *iso, cli_iso_fn fn, void *arg, cli_iso_result *res,
                       fc_err *err)
{
    memset(res, 0, sizeof *res);
    res->exit_status = -1;
    if (!cli_iso_enabled())
        return run_here(fn, arg, res, err);
    int pfd[2];
    if (pipe(pfd) != 0)
        return fc_errf(err, FC_EIO, "cannot make a pipe for the child: %s", strerror(errno));
    iso_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
    if (sh == MAP_FAILED) {
        close(pfd[0]);
        close(pfd[1]);
        return fc_errf(err, FC_ENOMEM, "cannot map a page shared with the child: %s",
                       strerror(errno));
    }
    memset((void *)sh, 0, sizeof *sh);
    fflush(stdout); /* the child inherits these buffers: empty, nothing is printed twice */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pfd[0]);
        close(pfd[1]);
        munmap(sh, sizeof *sh);
        return fc_errf(err, FC_EIO, "cannot fork a child to read the file: %s", strerror(e));
    }
    if (pid == 0) { /* the child: never returns */
        close(pfd[0]);
        g_shared = sh;
        fix_tmp_hook = note_tmp_hook;
        watch_setup();
        apply_limit(iso);
        cli_iso_chan ch = {.fd = pfd[1]};
        int st = fn(arg, &ch);
        iso_trailer t;
        memset(&t, 0, sizeof t);
        memcpy(t.magic, ISO_MAGIC, sizeof t.magic);
        t.status = st;
        t.sent = ch.sent;
        if (!ch.failed)
            write_all(pfd[1], &t, sizeof t);
        close(pfd[1]);
        /* exit, not _exit: stdio is flushed and atexit handlers run (libhdf5's, and a
         * sanitizer's leak check, which then sets the exit status). */
        exit(0);
    }
    close(pfd[1]);
    int oom = read_all(pfd[0], res);
    close(pfd[0]);
    int wst = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &wst, 0, &ru) < 0 && errno == EINTR)
        ;
    res->phase = (cli_iso_phase)sh->phase;
    int starved = sh->memory;
    char tmp[sizeof sh->tmp];
    for (size_t i = 0; i < sizeof tmp; i++)
        tmp[i] = sh->tmp[i];
    tmp[sizeof tmp - 1] = '\0';
    if (WIFSIGNALED(wst))
        res->signal = WTERMSIG(wst);
    else if (WIFEXITED(wst))
        res->exit_status = WEXITSTATUS(wst);
    if (res->signal == SIGALRM && sh->watch[0]) { /* the watchdog: nothing else arms alarms */
        for (size_t i = 0; i < sizeof res->hung; i++)
            res->hung[i] = sh->watch[i];
        res->hung[sizeof res->hung - 1] = '\0';
        res->hung_seconds = sh->watch_seconds;
    }
    munmap(sh, sizeof *sh);
    switch (res->signal) {
    case SIGPIPE: /* whoever reads our output went away */
    case SIGINT:  /* the run was interrupted or stopped, not by the file: the same for us */
    case SIGTERM:
    case SIGHUP:
    case SIGQUIT:
        signal(res->signal, SIG_DFL);
        raise(res->signal);
        break;
    default:
        break;
    }
    iso_trailer t;
    if (!oom && res->len >= sizeof t) {
        memcpy(&t, res->data + res->len - sizeof t, sizeof t);
        if (!memcmp(t.magic, ISO_MAGIC, sizeof t.magic) && t.sent == res->len - sizeof t) {
            res->finished = 1;
            res->status = t.status;
            res->len -= sizeof t;
        }
    }
    if (!res->finished) {
        size_t limit = iso && !ISO_SANITIZED ? iso->max_memory : 0;
        size_t peak = (size_t)ru.ru_maxrss * 1024; /* KiB */
        res->memory = res->signal == SIGKILL || starved || (limit && peak >= limit / 10 * 9);
        if (tmp[0]) /* a temporary file the child did not get to rename or remove */
            unlink(tmp);
    }
    if (oom) {
        free(res->data);
        res->data = NULL;
        res->len = 0;
        return fc_errf(err, FC_ENOMEM, "out of memory for a child's result");
    }
    return FC_OK;
}

void cli_iso_result_free(cli_iso_result *res)
{
    free(res->data);
    res->data = NULL;
    res->len = 0;
}

void cli_iso_describe(const cli_iso *iso, const char *file, const cli_iso_result *res,
                      char *buf, size_t cap)
{
    char how[64], lim[32];
    if (res->signal)
        fc_fmt(how, sizeof how, "signal %d", res->signal);
    else
        fc_fmt(how, sizeof how, "exit status %d before finishing", res->exit_status);
    cli_iso_bytes_text(iso ? iso->max_memory : 0, lim, sizeof lim);
    const char *doing = res->phase == CLI_ISO_READING ? "reading" : "checking";
    if (res->finished && res->exit_status != 0)
        fc_fmt(buf, cap, "%s: the process that checked it exited with status %d after "
               "finishing (a sanitizer's report above?)", file, res->exit_status);
    else if (res->finished)
        fc_fmt(buf, cap, "%s: the child's result did not come back whole", file);
    else if (res->hung[0])
        fc_fmt(buf, cap, "%s: libhdf5 did not return from %s within %u s (stopped): a corrupt "
               "or hostile file, or storage slower than that (FLEXCHECK_HDF5_TIMEOUT=SECONDS)",
               file, res->hung, res->hung_seconds);
    else if (res->memory)
        fc_fmt(buf, cap, "%s: ran out of its %s %s limit %s it (%s; --max-memory): corrupt or "
               "hostile file, or too large for the limit", file, lim,
               limit_kind(iso && iso->data_limit), doing, how);
    else if (res->phase == CLI_ISO_READING)
        fc_fmt(buf, cap, "%s: the HDF5 library crashed reading it (%s): corrupt or hostile file",
               file, how);
    else
        fc_fmt(buf, cap, "%s: flexcheck crashed checking it, after reading it whole (%s): a bug, "
               "please report it with the file", file, how);
}

/* ---- the CUDA probe ---- */

typedef struct probe_out {
    int ok;
    fc_err err;
} probe_out;

static int probe(void *arg, cli_iso_chan *ch)
{
    probe_out p;
    memset(&p, 0, sizeof p);
    p.ok = gpu_backend_available(*(const gpu_backend *)arg, &p.err);
    return cli_iso_send(ch, &p, sizeof p) ? 2 : 0;
}

int cli_backend_available(gpu_backend b, fc_err *err)
{
    if (b == GPU_BACKEND_EMU || !cli_iso_enabled())
        return gpu_backend_available(b, err);
    cli_iso_result res;
    if (cli_isolated(NULL, probe, &b, &res, err))
        return 0;
    probe_out p;
    int ok = 0;
    if (res.finished && res.len == sizeof p) {
        memcpy(&p, res.data, sizeof p);
        ok = p.ok;
        if (!ok && err)
            *err = p.err;
    } else if (res.signal) {
        fc_errf(err, FC_EUNSUP, "the CUDA probe crashed (signal %d)", res.signal);
    } else {
        fc_errf(err, FC_EUNSUP, "the CUDA probe exited with status %d before answering",
                res.exit_status);
    }
    cli_iso_result_free(&res);
    return ok;
}
