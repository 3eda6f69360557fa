/*
 * rep_file.c - report files written atomically: each goes to a temporary file in the target
 * directory (same filesystem) and is renamed over the final name only once complete and
 * flushed, so a CI system never reads half a report, and a failed run leaves the previous
 * report intact. rep_write_all does it for the whole set at once (see there).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reports/rep_internal.h"

int (*rep_rename)(const char *from, const char *to) = rename;

/* The set's files, each with what flexcheck writes at its start: a file of one of these names
 * that does not begin so (an input named rows.csv, someone's own summary.md) is not a previous
 * report, and is never replaced. */
static const struct {
    const char *name;
    rep_writer w;
    const char *sign;
} files[] = {
    {REP_FILE_MD, rep_write_markdown, "# flexcheck tolerance report\n"},
    {REP_FILE_JSON, rep_write_json, "{\"run\": "},
    {REP_FILE_CSV, rep_write_csv, "case_id,"},
    {REP_FILE_JUNIT, rep_write_junit, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                                      "<testsuites name=\"flexcheck\" "},
    {REP_FILE_HTML, rep_write_html, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                                    "<meta charset=\"utf-8\">\n"
                                    "<title>flexcheck tolerance report</title>"},
};
enum { NFILES = sizeof files / sizeof files[0] };

/* Each file of the set that dir already holds is a regular file flexcheck wrote (a previous
 * report, which a new run replaces); anything else under one of those names is refused. */
static fc_status check_previous(const char *dir, fc_err *err)
{
    fc_status st = FC_OK;
    for (size_t i = 0; i < NFILES && st == FC_OK; i++) {
        size_t cap = strlen(dir) + strlen(files[i].name) + 2, n = strlen(files[i].sign);
        char *path = malloc(cap), head[256];
        if (!path)
            return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
        snprintf(path, cap, "%s/%s", dir, files[i].name);
        struct stat sb;
        FILE *f = NULL;
        if (lstat(path, &sb) != 0) {
            if (errno != ENOENT)
                st = fc_errf(err, FC_EIO, "report directory %s: %s: %s", dir, files[i].name,
                             strerror(errno));
        } else if (!S_ISREG(sb.st_mode)) {
            st = fc_errf(err, FC_EINVAL, "report directory %s: %s is not a regular file; not "
                         "replaced (choose another directory)", dir, files[i].name);
        } else if (!(f = fopen(path, "rb")) || fread(head, 1, n, f) != n ||
                   memcmp(head, files[i].sign, n)) {
            st = fc_errf(err, FC_EINVAL, "report directory %s: %s is not a flexcheck report; "
                         "not replaced (choose another directory)", dir, files[i].name);
        }
        if (f)
            fclose(f);
        free(path);
    }
    return st;
}

/* mkdir -p: every missing component, each allowed to appear concurrently (EEXIST). */
static fc_status make_dirs(const char *dir, fc_err *err)
{
    size_t len = strlen(dir);
    char *p = malloc(len + 1);
    if (!p)
        return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
    memcpy(p, dir, len + 1);
    fc_status st = FC_OK;
    for (size_t i = 1; i <= len && st == FC_OK; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        struct stat sb;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            st = fc_errf(err, FC_EIO, "report directory %s: cannot create %s: %s", dir, p,
                         strerror(errno));
        else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = fc_errf(err, FC_EIO, "report directory %s: %s is not a directory", dir, p);
        p[i] = c;
    }
    free(p);
    return st;
}

/* Writes dir/name's content to a new temporary file in dir (*tmp, heap), complete and synced.
 * On failure nothing is left behind. */
static fc_status write_temp(const char *dir, const char *name, rep_writer w, const rep_set *set,
                            char **tmp, fc_err *err)
{
    size_t cap = strlen(dir) + strlen(name) + 16;
    fc_status st = FC_OK;
    *tmp = malloc(cap);
    if (!*tmp)
        return fc_errf(err, FC_ENOMEM, "report file %s: out of memory", name);
    snprintf(*tmp, cap, "%s/.%s.XXXXXX", dir, name);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        st = fc_errf(err, FC_EIO, "report file %s/%s: cannot create a temporary file: %s", dir,
                     name, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return st;
    }
    /* mkstemp makes the file private (0600); a report is for everyone to read. */
    (void)fchmod(fd, 0644);
    FILE *f = fdopen(fd, "w");
    if (!f) {
        st = fc_errf(err, FC_EIO, "report file %s/%s: %s", dir, name, strerror(errno));
        close(fd);
    } else {
        st = w(f, set, err);
        if (st == FC_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
            st = fc_errf(err, FC_EIO, "report file %s/%s: write failed: %s", dir, name,
                         strerror(errno));
        if (fclose(f) != 0 && st == FC_OK)
            st = fc_errf(err, FC_EIO, "report file %s/%s: close failed: %s", dir, name,
                         strerror(errno));
    }
    if (st != FC_OK) {
        unlink(*tmp);
        free(*tmp);
        *tmp = NULL;
    }
    return st;
}

fc_status rep_dir_check(const char *dir, fc_err *err)
{
    if (!dir || !*dir)
        return fc_errf(err, FC_EINVAL, "report directory: empty name");
    fc_status st = make_dirs(dir, err);
    if (st == FC_OK)
        st = check_previous(dir, err);
    if (st != FC_OK)
        return st;
    size_t cap = strlen(dir) + 32;
    char *probe = malloc(cap);
    if (!probe)
        return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
    snprintf(probe, cap, "%s/.write-test.XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        st = fc_errf(err, FC_EIO, "report directory %s: not writable: %s", dir, strerror(errno));
    else {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return st;
}

/* The set as a unit: every file is written to a temporary in dir first; only when all of them
 * are complete are they renamed over the previous set, one after the other with SIGINT and
 * SIGTERM held back, so an interrupted or failed run leaves the previous report whole, a
 * signal cannot strand a temporary, and a reader sees a mixed set only for the instants
 * between renames (or if a rename itself fails, which the message then says). */
fc_status rep_write_all(const char *dir, const rep_set *set, fc_err *err)
{
    if (!dir || !*dir)
        return fc_errf(err, FC_EINVAL, "report directory: empty name");
    fc_status st = make_dirs(dir, err);
    if (st == FC_OK)
        st = check_previous(dir, err);
    if (st != FC_OK)
        return st;
    sigset_t hold, old;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigprocmask(SIG_BLOCK, &hold, &old);
    char *tmp[NFILES] = {0};
    for (size_t i = 0; i < NFILES && st == FC_OK; i++)
        st = write_temp(dir, files[i].name, files[i].w, set, &tmp[i], err);
    size_t renamed = 0;
    for (size_t i = 0; i < NFILES && st == FC_OK; i++, renamed++) {
        size_t cap = strlen(dir) + strlen(files[i].name) + 2;
        char *final = malloc(cap);
        if (!final) {
            st = fc_errf(err, FC_ENOMEM, "report: out of memory");
            break;
        }
        snprintf(final, cap, "%s/%s", dir, files[i].name);
        if (rep_rename(tmp[i], final) != 0)
            st = fc_errf(err, FC_EIO, "report %s: renaming %s into place failed (%s): %zu of "
                         "%d files are this run's, the rest the previous run's", dir,
                         files[i].name, strerror(errno), renamed, (int)NFILES);
        else
            tmp[i][0] = 0; /* renamed: nothing to remove */
        free(final);
    }
    for (size_t i = 0; i < NFILES; i++) {
        if (tmp[i] && tmp[i][0])
            unlink(tmp[i]);
        free(tmp[i]);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return st;
}
