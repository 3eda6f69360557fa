/*
 * isolate.h - each input file read and judged in a forked child (check, repro, fill).
 *
 * libhdf5 (1.10.8, Debian 12's) has memory errors of its own on corrupt files: a hostile
 * fixture can crash it inside H5Aexists or H5Aread, where no validation of ours can step in, or
 * make it (or our reader) ask for more memory than the machine has. So every file is opened in a
 * child process under an address-space limit (RLIMIT_AS, --max-memory, by default
 * fix_default_case_bytes(): the lesser of 16 GiB and half of the machine's memory); a child
 * that dies becomes one line naming the file ("FILE: the HDF5 library crashed reading it
 * (signal 11): corrupt or hostile file"), the file counts as rejected (exit 2), and the next
 * file is read in a fresh child.
 *
 * The child writes its lines straight to the inherited stdout/stderr (the parent flushes its own
 * before the fork and waits for the child, so lines keep their order) and sends what the parent
 * needs back (check's tallies and report rows, repro's and fill's exit status) through a pipe,
 * closed by a trailer: a child that did not write the trailer did not finish, whatever its exit
 * status says (an ASan report exits 1).
 *
 * FLEXCHECK_NO_FORK=1 in the environment runs the same code in the process itself, with no
 * limit (a debugging aid: a debugger or a profiler then sees the whole run; also how the
 * overhead of isolation is measured).
 *
 * libhdf5 can also loop forever on a corrupt file (fixtures/fix.h, fix_watch_hook): the child
 * watches each step of reading (an alarm per step, FIX_WATCH_SECONDS or FLEXCHECK_HDF5_TIMEOUT
 * seconds, more for large datasets) and dies of SIGALRM when one outruns it: one line, "FILE:
 * libhdf5 did not return from reading /cases/c0 (...) within 30 s (stopped): a corrupt or
 * hostile file, or storage slower than that (...)".
 *
 * Where the limit is not RLIMIT_AS: under the CUDA backend the child limits RLIMIT_DATA instead
 * (the CUDA driver reserves address space far beyond any memory, which RLIMIT_AS would refuse),
 * and a sanitizer build applies no limit (ASan's shadow takes terabytes of address space before
 * main() runs).
 */
#ifndef FLEXCHECK_CLI_ISOLATE_H
#define FLEXCHECK_CLI_ISOLATE_H

#include <stddef.h>

#include "base/fc.h"
#include "fixtures/fix.h"
#include "gpu/gpu.h"

#define CLI_ISO_DEFAULT_MAX_MEMORY ((size_t)fix_default_case_bytes())

/* How a command isolates its files. */
typedef struct cli_iso {
    size_t max_memory; /* the child's limit in bytes (--max-memory), and a case's memory budget */
    int data_limit;    /* 1: RLIMIT_DATA instead of RLIMIT_AS (the CUDA backend) */
    size_t max_work;   /* a case's work budget in multiply-adds (--max-work); 0: the default */
} cli_iso;

/* The budgets a file's cases are held to (fixtures/fix.h): the same memory figure as the
 * child's address-space limit, so a case that would hit the limit is refused with the figure
 * before it is read, and the work budget. */
static inline fix_budget cli_iso_budget(const cli_iso *iso)
{
    fix_budget b = {.max_bytes = iso->max_memory, .max_work = iso->max_work};
    return b;
}

/* What the child was doing, for the message when it dies. */
typedef enum cli_iso_phase {
    CLI_ISO_READING = 0, /* opening and validating the file: libhdf5's parser at work */
    CLI_ISO_JUDGING = 1, /* the file was read whole; reference, kernel, judge */
} cli_iso_phase;

/* The child's end: what it sends the parent. */
typedef struct cli_iso_chan cli_iso_chan;
/* Sends n bytes; -1 when the pipe failed (the parent then sees no trailer). */
int cli_iso_send(cli_iso_chan *ch, const void *buf, size_t n);
/* Records what the child is doing (in a page shared with the parent, so that it survives a
 * crash); nothing outside a child. */
void cli_iso_set_phase(cli_iso_phase phase);
/* Records a temporary file the child created (NULL: none), removed by the parent if the child
 * dies before it is renamed into place. */
void cli_iso_note_tmp(const char *tmp);

/* The child's work: returns its status (an exit status, for repro and fill). */
/* (A child killed by SIGPIPE, SIGINT, SIGTERM, SIGHUP or SIGQUIT was not killed by its file:
 * the output's reader went away, or the run was stopped. cli_isolated then dies of the same
 * signal itself.) */
typedef int (*cli_iso_fn)(void *arg, cli_iso_chan *ch);

typedef struct cli_iso_result {
    int finished;            /* 1: fn returned and everything it sent came back */
    int status;              /* fn's return value when finished */
    int signal;              /* the signal that killed the child, 0 if none */
    int exit_status;         /* its exit status otherwise (-1 when killed) */
    int memory;              /* it died of the memory limit (SIGKILL, or its peak resident set
                              * reached the limit) */
    cli_iso_phase phase;     /* what it was doing */
    char hung[192];          /* killed by the libhdf5 watchdog: the step it outran, else "" */
    unsigned hung_seconds;   /* that step's allowance */
    unsigned char *data;     /* what fn sent, in order (free with cli_iso_result_free) */
    size_t len;
} cli_iso_result;

/* FLEXCHECK_HDF5_TIMEOUT (whole seconds, 1 to 2^30), when set and not empty, as the allowance
 * of each libhdf5 step in a child (fix_watch_seconds); FC_EINVAL naming the value otherwise.
 * main() calls it before any command. */
fc_status cli_iso_watch_env(fc_err *err);

/* 0 when FLEXCHECK_NO_FORK=1 is set, else 1. */
int cli_iso_enabled(void);

/* Runs fn(arg, ch) in a forked child under iso's limit, or in this process when isolation is
 * off. FC_OK with *res filled (finished or not), or an error when the child could not be
 * started (err says why). */
fc_status cli_isolated(const cli_iso *iso, cli_iso_fn fn, void *arg, cli_iso_result *res,
                       fc_err *err);
void cli_iso_result_free(cli_iso_result *res);

/* The one line for a child that did not finish (res->finished == 0) or finished but exited
 * non-zero (a sanitizer's report at exit): "FILE: the HDF5 library crashed reading it (signal
 * 11): corrupt or hostile file", "FILE: ran out of its 16 GiB address-space limit ...". */
void cli_iso_describe(const cli_iso *iso, const char *file, const cli_iso_result *res,
                      char *buf, size_t cap);

/* A message of the child's own for status st: when st is FC_ENOMEM and a limit is in force, msg
 * says so ("...: ran out of its 16 GiB address-space limit (--max-memory)"); otherwise msg. */
const char *cli_iso_errmsg(fc_status st, const char *msg, char *buf, size_t cap);

/* "16 GiB", "512 MiB", "1000 bytes". */
void cli_iso_bytes_text(size_t n, char *buf, size_t cap);

/* gpu_backend_available without touching CUDA in this process: the CUDA probe runs in a forked
 * child (CUDA does not survive a fork, and the children that judge the files must be the first
 * to initialise it). Directly when isolation is off or for the emu. */
int cli_backend_available(gpu_backend b, fc_err *err);

#endif
