/*
 * rep_file.c - report files written atomically: each goes to a temporary file in the target
 * directory (same filesystem) and is renamed over the final name only once complete and
 * flushed, so a CI system never reads half a report, and a failed run leaves the previous
 * report intact.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reports/rep_internal.h"

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

fc_status rep_write_file(const char *dir, const char *name, rep_writer w, const rep_set *set,
                         fc_err *err)
{
    if (!dir || !*dir || !name || !*name || strchr(name, '/'))
        return fc_errf(err, FC_EINVAL, "report file: need a directory and a plain file name");
    fc_status st = make_dirs(dir, err);
    if (st != FC_OK)
        return st;
    size_t cap = strlen(dir) + strlen(name) + 16;
    char *final = malloc(cap), *tmp = malloc(cap);
    FILE *f = NULL;
    int fd = -1;
    if (!final || !tmp) {
        st = fc_errf(err, FC_ENOMEM, "report file %s: out of memory", name);
        goto cleanup;
    }
    snprintf(final, cap, "%s/%s", dir, name);
    snprintf(tmp, cap, "%s/.%s.XXXXXX", dir, name);
    fd = mkstemp(tmp);
    if (fd < 0) {
        st = fc_errf(err, FC_EIO, "report file %s: cannot create a temporary file: %s", final,
                     strerror(errno));
        goto cleanup;
    }
    /* mkstemp makes the file private (0600); a report is for everyone to read. */
    (void)fchmod(fd, 0644);
    f = fdopen(fd, "w");
    if (!f) {
        st = fc_errf(err, FC_EIO, "report file %s: %s", final, strerror(errno));
        close(fd);
        unlink(tmp);
        goto cleanup;
    }
    st = w(f, set, err);
    if (st == FC_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = fc_errf(err, FC_EIO, "report file %s: write failed: %s", final, strerror(errno));
    if (fclose(f) != 0 && st == FC_OK)
        st = fc_errf(err, FC_EIO, "report file %s: close failed: %s", final, strerror(errno));
    if (st == FC_OK && rename(tmp, final) != 0)
        st = fc_errf(err, FC_EIO, "report file %s: rename failed: %s", final, strerror(errno));
    if (st != FC_OK)
        unlink(tmp);
cleanup:
    free(final);
    free(tmp);
    return st;
}

fc_status rep_write_all(const char *dir, const rep_set *set, fc_err *err)
{
    static const struct {
        const char *name;
        rep_writer w;
    } files[] = {
        {REP_FILE_MD, rep_write_markdown}, {REP_FILE_JSON, rep_write_json},
        {REP_FILE_CSV, rep_write_csv},     {REP_FILE_JUNIT, rep_write_junit},
        {REP_FILE_HTML, rep_write_html},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        fc_status st = rep_write_file(dir, files[i].name, files[i].w, set, err);
        if (st != FC_OK)
            return st;
    }
    return FC_OK;
}
