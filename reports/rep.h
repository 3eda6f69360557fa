/*
 * rep.h - the tolerance report of docs/tolerance.md "Report": one row per case, dtype and
 * backend, and the writers that turn a run's rows into files a CI system and a kernel author
 * read: a Markdown summary, JSON and CSV rows, JUnit XML and one self-contained HTML page with
 * inline SVG charts (no external asset; one inline script sorts its rows table).
 *
 * rep_write_all() writes every file into a directory as one unit (a fresh directory beside it,
 * switched in with one rename), so a reader never sees half a report or a mix of two. The
 * rep_write_* writers take an open FILE* (tests, stdout). Every format
 * names the run that made it (rep_run). rows.json holds everything the other files are written
 * from, so rep_read_json() reads a report set back and rep_merge() combines the shards of one
 * gate run, or several check runs, into one (`flexcheck report merge`).
 */
#ifndef FLEXCHECK_REP_H
#define FLEXCHECK_REP_H

#include <stdint.h>
#include <stdio.h>

#include "base/fc.h"
#include "masks/mask.h"
#include "reports/tol.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REP_ID_LEN 128
#define REP_NAME_LEN 80 /* fits "tested/" and a 64-character label */
#define REP_TEXT_LEN 256

/* A skipped row is a case the run could not do on purpose (a backend without that feature):
 * it fails nothing, but every report lists it so the gap stays visible. */
typedef enum rep_outcome {
    REP_ROW_PASS = 0,
    REP_ROW_FAIL = 1,
    REP_ROW_ERROR = 2,
    REP_ROW_SKIP = 3,
    REP_ROW_OUTSIDE = 4, /* outside the contract (docs/tolerance.md): the baseline overflowed,
                          * so H1/H2 have no scale, and nothing that ran failed; counted apart,
                          * never a kernel failure unless the run is --strict */
} rep_outcome;

/* One report row. No pointers, so rows copy and sort freely (and suit Criterion parameters).
 * Strings are NUL-terminated; writers escape them for each format. */
typedef struct rep_row {
    char case_id[REP_ID_LEN];  /* the matrix's stable id, the same across dtypes */
    char group[REP_NAME_LEN];  /* matrix group ("M1", ...): JUnit classname */
    int32_t b, hq, hkv, lq, lk, d, dv;
    int32_t nseq;                  /* sequences per batch entry: 1 dense, R packed (then b is
                                    * 1); 0 for a row with no case (a file that did not read) */
    mask_params mask;              /* columns named by MASK_PARAMS (masks/mask.h) */
    double softcap;                /* the score terms (masks/terms.h): the cap, 0 off */
    int32_t sinks;                 /* 1: the case has per-head sinks */
    int32_t q_block, kv_block;
    char builder[REP_NAME_LEN], backend[REP_NAME_LEN];
    char producer[REP_TEXT_LEN];   /* who produced the output judged: "" for our own kernel
                                    * runs, a tested output's producer attribute otherwise */
    int32_t kernel;                /* kernel version that ran (0: none, e.g. the reference) */
    fc_dtype dtype;
    double max_err, mean_err, rmse, nmse, e_lp_max, h1_ratio, floor, lse_err, s1, s2;
    int32_t degenerate;            /* H1 was element-wise (degenerate baseline) */
    uint64_t nan_count, inf_count, empty_rows;
    rep_outcome outcome;
    char first_fail[REP_NAME_LEN]; /* the first failing gate ("H1") or exactness check, "" */
    char gates[REP_NGATES + 1];    /* per gate in rep_gate order: P pass, F fail, - not run */
    char reason[REP_WHY_LEN];      /* one line: the first failing gate's, "pass", or the error */
    char explained[REP_WHY_LEN];   /* the diagnosis of a failed row (diag/): which bug explains
                                    * most of its failing rows; "" when not diagnosed */
} rep_row;

/* Copies the verdict's metrics, gates and reason into row (the identity fields are the
 * caller's). */
void rep_row_set_verdict(rep_row *row, const rep_verdict *v);
/* Marks a row that could not be judged (rep_evaluate or the run itself failed). */
void rep_row_set_error(rep_row *row, const char *msg);
/* Marks a row skipped on purpose; msg says why. */
void rep_row_set_skip(rep_row *row, const char *msg);
/* 1 for a passed or failed row: one whose metrics mean something. */
int rep_row_judged(const rep_row *row);
/* What ran the row, as summaries group and show it: "emu kernel 2", or the backend alone when
 * no kernel version applies. */
void rep_row_backend_label(const rep_row *row, char out[REP_NAME_LEN]);
/* "pass", "fail", "error", "skip", "outside-contract". */
const char *rep_outcome_name(rep_outcome o);
/* Safe copy into a fixed field: truncates, always terminates. */
void rep_set_str(char *dst, size_t cap, const char *src);

/* An exactness check that rows may name as their failing gate, with the title the summaries
 * show after the hard gates. */
typedef struct rep_check {
    const char *name, *title;
} rep_check;

#define REP_CMD_LEN 2048 /* a run's command line; a longer one is cut and ends in " ..." */
#define REP_DIR_LEN 1024 /* a merged part's report directory */

/* Which run made a report, so that a report can be told apart from another and shards can be
 * checked to belong together before they are merged. A merged report's identity is the merge's
 * own (time, id, command line) over what the parts share (version, commit, matrix, seed,
 * filter), shard 1/1, and the parts' identities as its parts. */
typedef struct rep_run {
    char time[REP_NAME_LEN];     /* UTC, ISO 8601 to the second: "2026-11-29T10:04:05Z" */
    char id[REP_NAME_LEN];       /* 16 random hex digits, new for every run: two runs with the
                                  * same command in the same second are still two runs */
    char version[REP_NAME_LEN];  /* flexcheck's version (base/version.h) */
    char commit[REP_NAME_LEN];   /* the git commit it was built from, or "unknown" */
    char command[REP_CMD_LEN];   /* argv joined, each argument shell-quoted where needed */
    char matrix[REP_NAME_LEN];   /* "quick", "default", "full"; "check" for a check run */
    int64_t seed;                /* the matrix seed; -1: none (a check run) */
    int32_t shard_i, shard_n;    /* the I-th of N parts (1 <= I <= N); 1/1 for a whole run */
    char filter[REP_TEXT_LEN];   /* the gate's --filter, "" for none */
    char backends[REP_NAME_LEN]; /* what ran the kernel: "emu", "emu+gpu"; "" for none (a check
                                  * of the reference and stored outputs only) */
    int32_t kernel;              /* the kernel version those backends ran; 0 with none */
    int32_t strict;              /* 1: rows outside the contract fail (--strict), in every
                                  * report written and every merge of it */
    char dir[REP_DIR_LEN];       /* a merged part: the report directory it was read from */
    const struct rep_run *parts; /* a merged report: the runs merged (none of them merged in
                                  * turn: a merged part contributes its parts); else NULL */
    size_t nparts;
} rep_run;

/* What a report is written from: the rows, the exactness checks of the run that made them in
 * the order they are listed, and the run's identity (NULL: written without one, and then not
 * mergeable). The runner gives the checks (reports know no producer). */
typedef struct rep_set {
    const rep_row *rows;
    size_t n;
    const rep_check *checks;
    size_t nchecks;
    const rep_run *run;
} rep_set;

/* What a run covered, as the summaries show it: "quick matrix, seed 1, shard 2/4, filter
 * 'm1-*'", "check run"; a merged report's ends in ", merged from N runs". */
void rep_run_scope(char *buf, size_t cap, const rep_run *run);

/* ---- reading a report back (rep_read.c) ---------------------------------------------------- */

/* An exactness check read back: the storage rep_check's pointers point into. */
typedef struct rep_check_text {
    char name[REP_NAME_LEN], title[REP_TEXT_LEN];
} rep_check_text;

/* A report set read back from its rows.json: everything its other files are written from. */
typedef struct rep_report {
    rep_row *rows;
    size_t n;
    rep_check *checks;          /* name and title point into check_text */
    rep_check_text *check_text;
    size_t nchecks;
    rep_run run;                /* run.parts points into parts */
    rep_run *parts;
} rep_report;

/* Reads path (a rows.json) into *out, which the caller frees with rep_report_free (also after
 * an error). The file is taken as hostile: anything that does not parse, a field missing or of
 * the wrong type, a string longer than its field, a number out of its field's range, a total
 * that is not the count of its rows: FC_EINVAL with one line naming the file and the field
 * (FC_EIO when it cannot be read, FC_ENOMEM). Nothing is truncated or guessed. */
fc_status rep_read_json(const char *path, rep_report *out, fc_err *err);
void rep_report_free(rep_report *r);

/* Every row of r (read from path, which the messages name) holds what flexcheck's writers can
 * produce: the shape, mask, terms, block sizes and kernel (0, or the run's, at most
 * max_kernel: GPU_MAX_KERNEL, which reports do not see) of a real case and run, and a verdict
 * that agrees with its gates and metrics (a pass has H1's ratio <= 1, ...; rep_read.c lists the
 * rules and where each comes from). FC_EINVAL with one line naming the file, the row and the
 * field otherwise. `report merge` holds each input to it before merging. */
fc_status rep_report_check(const rep_report *r, const char *path, int32_t max_kernel,
                           fc_err *err);

/* Merges n reports read back (each with run.dir set to the directory it came from) into *out,
 * freed with rep_report_free (also after an error). They must belong together: the same matrix,
 * version, commit, seed, filter and shard count N, and then either gate shards 1..N each once
 * (rows put back in the unsharded run's order) or check runs, none twice (rows in the order
 * given). The merged identity is what they share, shard 1/1, self's time, id and command line
 * (the merge's own), and the runs merged as its parts (a merged input contributes its parts); the
 * checks are every input's, each once. FC_EINVAL with one line naming the directories and the
 * field when they do not belong together, FC_ENOMEM. */
fc_status rep_merge(const rep_report *in, size_t n, const rep_run *self, rep_report *out,
                    fc_err *err);

/* Writers: FC_OK, or FC_EIO when the stream reports an error, FC_ENOMEM. */
fc_status rep_write_markdown(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_json(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_csv(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_junit(FILE *f, const rep_set *set, fc_err *err);
fc_status rep_write_html(FILE *f, const rep_set *set, fc_err *err);

typedef fc_status (*rep_writer)(FILE *f, const rep_set *set, fc_err *err);

/* The file names rep_write_all uses. */
#define REP_FILE_MD "summary.md"
#define REP_FILE_JSON "rows.json"
#define REP_FILE_CSV "rows.csv"
#define REP_FILE_JUNIT "junit.xml"
#define REP_FILE_HTML "report.html"

/* Every format into dir, as one unit (rep_file.c says how): the set is written into a fresh
 * directory beside dir and switched in with one rename, so a reader sees the previous set or
 * this one, whole, whatever stops the writer (SIGKILL included); the next run clears what a
 * stopped writer left. The other files dir holds are kept (hard-linked into the new set); a
 * directory or special file in it, or a file under one of the set's names that flexcheck did
 * not write (not a regular file, or not starting as flexcheck starts it: an input, someone's own
 * summary.md), is refused, nothing replaced. Files and directories get the modes the umask
 * allows (a replaced dir keeps its own). Missing parents are made, and removed again when the
 * write fails: a failure leaves dir as it was and nothing of this run. */
fc_status rep_write_all(const char *dir, const rep_set *set, fc_err *err);
/* dir checked as rep_write_all will find it (what it holds, where it is), a stopped writer's
 * leftovers cleared first, and its parent (or the nearest ancestor that exists) shown writable
 * by a probe made and removed; nothing else is made: for commands to refuse a report directory
 * before any work rather than after it, without leaving one behind. */
fc_status rep_dir_check(const char *dir, fc_err *err);
/* Test hooks. rep_write_step, when set, runs before each step of rep_write_all or rep_dir_check
 * that changes the filesystem, numbered from 1 in each call; nonzero makes that step fail (EIO),
 * and a test can raise SIGKILL from it to stop the writer there. rep_renameat2 is the
 * renameat2(2) the switch uses (a test takes RENAME_EXCHANGE away with it). */
extern int (*rep_write_step)(int step);
extern int (*rep_renameat2)(int from_dir, const char *from, int to_dir, const char *to,
                            unsigned flags);
/* 1 iff the row counts as a gate failure (fail or error). */
int rep_row_failed(const rep_row *row);
/* The same for a run with --strict, where outside-contract rows fail too. */
int rep_row_fails(const rep_row *row, int strict);

#ifdef __cplusplus
}
#endif

#endif
