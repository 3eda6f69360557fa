/*
 * rep_file.c - a report set written as one unit (rep.h, rep_write_all): whoever reads the report
 * directory R sees the previous set or the new one, each whole, never a mix, whatever stops
 * the writer (SIGKILL and a power cut included); what a stopped writer left behind is cleared by
 * the next run; a run that fails leaves R as it was and no directory of its own.
 *
 * 1. The set is written into a fresh directory beside R (same parent, so the same filesystem),
 *    named `.NAME.rep-new.PID.XXXXXXXX` (NAME: R's last component; PID: the writer's; 8 random
 *    hex digits), made with mkdir(0777) and its files with open(O_CREAT | O_EXCL, 0666): the
 *    umask decides the modes (nothing forces 0644: a `umask 077` run's reports stay private;
 *    mkstemp's 0600 would need an fchmod that reads the umask, which threads can race). Every
 *    file is flushed and fsynced, then the directory.
 * 2. What else R holds comes along: every other regular file or symbolic link in R is hard-linked
 *    into the new directory under its name (no copy; the same file, so nothing of it changes).
 *    R may hold no directory or special file besides (refused before any work, one line): a
 *    directory cannot be linked, and moving it out of R for the switch would take it away from
 *    its readers. Hidden temporaries of an older flexcheck (`.rows.json.AbC123`, its
 *    `.write-test.` probes: half-written files of a killed run) are not carried.
 * 3. The switch is one rename: renameat2(RENAME_EXCHANGE) swaps the new directory with R (R
 *    exists), renameat2(RENAME_NOREPLACE) puts it in place (R does not). The previous set is then
 *    under the temporary name and is taken apart (dissolve): its report files are removed; a
 *    file that R holds too (the same inode under the same name: one carried over) is unlinked
 *    there, R keeping it; anything else, which someone put into R while the set was written, is
 *    moved into R, never deleted (left where it is when R already has that name).
 * 4. A filesystem without RENAME_EXCHANGE or RENAME_NOREPLACE (EINVAL, ENOSYS): R is renamed to
 *    `.NAME.rep-old.PID.XXXXXXXX`, then the new set to R, then the old one taken apart. Between
 *    those two renames R is missing: a reader then finds no report (never a mixed one), and a
 *    writer killed there leaves the previous set under the rep-old name, which the next run
 *    renames back to R before anything else.
 * 5. Leftovers: a `.NAME.rep-new.PID.*` or `.NAME.rep-old.PID.*` beside R whose PID is not alive
 *    (kill(PID, 0): ESRCH) and which no process holds locked is a dead writer's: the next
 *    rep_dir_check or rep_write_all into R puts a rep-old back as R where R is missing and takes
 *    the others apart as in 3. A writer holds flock(LOCK_EX) on its directory from its mkdir on,
 *    so a live writer in another PID namespace that shares the directory (a container) is not
 *    mistaken for a dead one; one of this PID namespace is alive by its PID.
 * 6. R is refused with one line, before any work (rep_dir_check) and again by the writer, when a
 *    file under one of the set's names is not flexcheck's (not a regular file, or not beginning
 *    as flexcheck begins it: someone's own summary.md, an input named rows.csv), when R holds a
 *    directory or special file (2), when R is a mount point (it cannot be renamed) and when its
 *    last component is "." or "..". A symbolic link R is followed: the directory it points to is
 *    replaced, the link stays. A replaced R keeps its permission bits (copied onto the new
 *    directory: someone opened it up or closed it down on purpose); a new R gets the umask's.
 * 7. Parent directories that R needs are made (mkdir -p) by rep_write_all only, and removed again
 *    when the write fails; rep_dir_check makes nothing, so a failing check --report or gate
 *    leaves no empty report directory. SIGINT and SIGTERM are held while the writer works, so
 *    it can clear its own temporary when it fails; SIGKILL needs no holding, R being whole at
 *    every instant.
 *
 * Test hooks (rep.h): rep_write_step runs before every step that changes the filesystem, so a
 * test can stop (SIGKILL) or fail the writer at each one; rep_renameat2 is the rename the switch
 * uses, so a test can take RENAME_EXCHANGE away.
 */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE, RENAME_NOREPLACE (glibc 2.28) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reports/rep_internal.h"

static int renameat2_libc(int from_dir, const char *from, int to_dir, const char *to,
                          unsigned flags)
{
    return renameat2(from_dir, from, to_dir, to, flags);
}

int (*rep_renameat2)(int, const char *, int, const char *, unsigned) = renameat2_libc;
int (*rep_write_step)(int step) = NULL;

/* The steps of one rep_write_all or rep_dir_check call, counted for rep_write_step. */
static int steps;

/* Before each step that changes the filesystem: -1 (errno EIO) when the test hook fails it. */
static int step(void)
{
    if (rep_write_step && rep_write_step(++steps)) {
        errno = EIO;
        return -1;
    }
    return 0;
}

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

static int is_set_name(const char *name)
{
    for (size_t i = 0; i < NFILES; i++)
        if (!strcmp(name, files[i].name))
            return 1;
    return 0;
}

/* A temporary an older flexcheck's writer left when killed: "." NAME "." and mkstemp's six
 * characters, NAME one of the set's or "write-test" (its probe). */
static int is_old_temp(const char *e)
{
    if (e[0] != '.')
        return 0;
    const char *dot = strrchr(e, '.');
    if (dot == e || strlen(dot + 1) != 6 || strspn(dot + 1, "abcdefghijklmnopqrstuvwxyz"
                                                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789") != 6)
        return 0;
    size_t len = (size_t)(dot - e - 1);
    if (len == strlen("write-test") && !strncmp(e + 1, "write-test", len))
        return 1;
    for (size_t i = 0; i < NFILES; i++)
        if (len == strlen(files[i].name) && !strncmp(e + 1, files[i].name, len))
            return 1;
    return 0;
}

/* ---- R: its name, its parent, and what it holds ------------------------------------------ */

#define NAME_ROOM 200 /* R's last component: room left in NAME_MAX for ".rep-new.PID.XXXXXXXX" */

typedef struct where {
    const char *dir; /* R as given: what the messages name */
    char *path;      /* R, trailing slashes gone, a symbolic link followed */
    char *parent;    /* its parent directory ("." when R has none) */
    const char *name;/* its last component (in path) */
    int pfd;         /* the parent, open; -1 until then */
} where;

static void where_free(where *w)
{
    if (w->pfd >= 0)
        close(w->pfd);
    free(w->path);
    free(w->parent);
}

static fc_status where_of(const char *dir, where *w, fc_err *err)
{
    memset(w, 0, sizeof *w);
    w->dir = dir;
    w->pfd = -1;
    if (!dir || !*dir)
        return fc_errf(err, FC_EINVAL, "report directory: empty name");
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (!(w->path = strndup(dir, len)))
        return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
    struct stat sb;
    if (lstat(w->path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        char *real = realpath(w->path, NULL); /* the link stays; its directory is replaced */
        if (!real)
            return fc_errf(err, FC_EIO, "report directory %s: a symbolic link that leads "
                           "nowhere: %s", dir, strerror(errno));
        free(w->path);
        w->path = real;
    }
    char *slash = strrchr(w->path, '/');
    w->name = slash ? slash + 1 : w->path;
    w->parent = slash ? strndup(w->path, slash == w->path ? 1 : (size_t)(slash - w->path))
                      : strdup(".");
    if (!w->parent)
        return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
    if (!*w->name || !strcmp(w->name, ".") || !strcmp(w->name, ".."))
        return fc_errf(err, FC_EINVAL, "report directory %s: name the directory itself (a set "
                       "replaces R by renaming it, and . , .. and / cannot be renamed)", dir);
    if (strlen(w->name) > NAME_ROOM)
        return fc_errf(err, FC_EINVAL, "report directory %s: a last component longer than %d "
                       "bytes", dir, NAME_ROOM);
    return FC_OK;
}

/* The parent, opened into w->pfd; FC_EIO when it is missing or no directory. */
static fc_status open_parent(where *w, fc_err *err)
{
    w->pfd = open(w->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->pfd < 0)
        return fc_errf(err, FC_EIO, "report directory %s: %s: %s", w->dir, w->parent,
                       errno == ENOTDIR ? "is not a directory" : strerror(errno));
    return FC_OK;
}

/* R opened for listing: the stream, its fd in *fd (closed by closedir); NULL and err set when
 * it cannot be listed. */
static DIR *list_dir(const where *w, int *fd, fc_err *err)
{
    *fd = openat(w->pfd, w->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = *fd < 0 ? NULL : fdopendir(*fd);
    if (!d) {
        fc_errf(err, FC_EIO, "report directory %s: cannot list it: %s", w->dir, strerror(errno));
        if (*fd >= 0)
            close(*fd);
    }
    return d;
}

/* What R is: missing (*exists 0), or a directory on the parent's filesystem whose files under
 * the set's names are flexcheck's and which holds nothing but files (1, 2, 6 above); *mode its
 * permission bits. */
static fc_status inspect(const where *w, int *exists, mode_t *mode, fc_err *err)
{
    struct stat sb, pb;
    *exists = 0;
    if (fstatat(w->pfd, w->name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? FC_OK
                               : fc_errf(err, FC_EIO, "report directory %s: %s", w->dir,
                                         strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return fc_errf(err, FC_EIO, "report directory %s is not a directory", w->dir);
    if (fstat(w->pfd, &pb) == 0 && pb.st_dev != sb.st_dev)
        return fc_errf(err, FC_EINVAL, "report directory %s is a mount point: a report set is "
                       "switched in by renaming the directory, which a mount point cannot be; "
                       "name a directory inside it", w->dir);
    *exists = 1;
    *mode = sb.st_mode & 07777;
    int rfd;
    DIR *d = list_dir(w, &rfd, err);
    if (!d)
        return FC_EIO;
    fc_status st = FC_OK;
    for (struct dirent *e; st == FC_OK && (e = readdir(d));) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || is_old_temp(n))
            continue;
        if (fstatat(rfd, n, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) /* gone meanwhile: nothing to keep */
                st = fc_errf(err, FC_EIO, "report directory %s: %s: %s", w->dir, n,
                             strerror(errno));
            continue;
        }
        size_t k = 0;
        while (k < NFILES && strcmp(n, files[k].name))
            k++;
        if (k < NFILES) {
            char head[256];
            size_t len = strlen(files[k].sign);
            int fd = S_ISREG(sb.st_mode) ? openat(rfd, n, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
            ssize_t got = fd >= 0 ? read(fd, head, len) : -1;
            if (fd >= 0)
                close(fd);
            if (!S_ISREG(sb.st_mode))
                st = fc_errf(err, FC_EINVAL, "report directory %s: %s is not a regular file; "
                             "not replaced (choose another directory)", w->dir, n);
            else if (got != (ssize_t)len || memcmp(head, files[k].sign, len))
                st = fc_errf(err, FC_EINVAL, "report directory %s: %s is not a flexcheck "
                             "report; not replaced (choose another directory)", w->dir, n);
        } else if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
            st = fc_errf(err, FC_EINVAL, "report directory %s holds %s '%s', which a new report "
                         "set cannot carry over (it replaces the directory whole and links "
                         "only files into it); move it or choose another directory", w->dir,
                         S_ISDIR(sb.st_mode) ? "a directory" : "a special file", n);
        }
    }
    closedir(d);
    return st;
}

/* ---- temporaries: names, liveness, taking one apart --------------------------------------- */

/* 32 random bits for a fresh name (mkdir refuses a name taken, so they need not be good). */
static unsigned rand32(void)
{
    static unsigned counter;
    uint32_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec * 2654435761u ^ ++counter * 40503u;
    }
    return r;
}

/* ".NAME.rep-KIND.PID.XXXXXXXX" for this process, fresh random digits each call. */
static void temp_name(char *buf, size_t cap, const where *w, const char *kind)
{
    snprintf(buf, cap, ".%s.rep-%s.%ld.%08x", w->name, kind, (long)getpid(), rand32());
}

/* Parses a temporary of R's: 'n' (rep-new) or 'o' (rep-old) with its writer's PID, or 0. */
static int temp_of(const where *w, const char *e, pid_t *pid)
{
    size_t nl = strlen(w->name);
    if (e[0] != '.' || strncmp(e + 1, w->name, nl) || strncmp(e + 1 + nl, ".rep-", 5))
        return 0;
    const char *k = e + 1 + nl + 5;
    int kind = !strncmp(k, "new.", 4) ? 'n' : !strncmp(k, "old.", 4) ? 'o' : 0;
    char *end;
    errno = 0;
    long p = kind ? strtol(k + 4, &end, 10) : 0;
    if (!kind || errno || p <= 0 || p > INT_MAX || *end != '.' || strlen(end + 1) != 8 ||
        strspn(end + 1, "0123456789abcdef") != 8)
        return 0;
    *pid = (pid_t)p;
    return kind;
}

static int alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno != ESRCH; /* EPERM: someone else's, alive */
}

/* Takes apart the set under the temporary name tmp beside R (3 above): 0 once it is gone, -1
 * when something had to stay (an entry R has another file under its name, a failed step). */
static int dissolve(const where *w, const char *tmp)
{
    int dfd = openat(w->pfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -1;
    int rfd = openat(w->pfd, w->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int lfd = dup(dfd);
    DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
    int kept = !d;
    if (!d && lfd >= 0)
        close(lfd);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        struct stat sb, rb;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (fstatat(dfd, n, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            kept += errno != ENOENT; /* ENOENT: another cleaner took it */
            continue;
        }
        int ours = S_ISREG(sb.st_mode) && (is_set_name(n) || is_old_temp(n));
        int in_r = rfd >= 0 && fstatat(rfd, n, &rb, AT_SYMLINK_NOFOLLOW) == 0;
        if (ours || (in_r && rb.st_dev == sb.st_dev && rb.st_ino == sb.st_ino)) {
            if (step() || (unlinkat(dfd, n, 0) != 0 && errno != ENOENT))
                kept++;
        } else if (rfd < 0 || in_r) {
            kept++; /* nowhere to put it, or R has another file of that name: it stays */
        } else if (S_ISDIR(sb.st_mode)) { /* a directory put into R during the write */
            if (step() || (rep_renameat2(dfd, n, rfd, n, RENAME_NOREPLACE) != 0 &&
                           ((errno != EINVAL && errno != ENOSYS) || renameat(dfd, n, rfd, n))))
                kept++; /* without NOREPLACE: R had no such name a moment ago */
        } else if (step() || linkat(dfd, n, rfd, n, 0) != 0 || unlinkat(dfd, n, 0) != 0) {
            kept++; /* a file put into R during the write: linked back, then unlinked here */
        }
    }
    if (d)
        closedir(d);
    if (rfd >= 0)
        close(rfd);
    close(dfd);
    if (kept || step() || unlinkat(w->pfd, tmp, AT_REMOVEDIR) != 0)
        return -1;
    return 0;
}

/* What dead writers left beside R (5 above): a rep-old put back as R where R is missing, every
 * other temporary taken apart. Best effort: what cannot be cleared stays for a later run, and
 * never fails this one. */
static void clear_leftovers(const where *w)
{
    int lfd = dup(w->pfd);
    DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        pid_t pid;
        if (!temp_of(w, e->d_name, &pid) || pid == getpid() || alive(pid))
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap = cap ? 2 * cap : 8) * sizeof *names);
            if (!more)
                break;
            names = more;
        }
        if (!(names[n] = strdup(e->d_name)))
            break;
        n++;
    }
    closedir(d);
    for (int pass = 0; pass < 2; pass++) /* rep-old ones first: R back before the rest */
        for (size_t i = 0; i < n; i++) {
            pid_t pid;
            int kind = temp_of(w, names[i], &pid);
            if ((kind == 'o') != (pass == 0))
                continue;
            int fd = openat(w->pfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                continue;
            if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* no live writer holds it */
                struct stat sb;
                if (kind == 'o' && fstatat(w->pfd, w->name, &sb, AT_SYMLINK_NOFOLLOW) != 0 &&
                    errno == ENOENT) {
                    if (!step())
                        (void)renameat(w->pfd, names[i], w->pfd, w->name);
                } else {
                    (void)dissolve(w, names[i]);
                }
            }
            close(fd);
        }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* ---- checking R before any work ---------------------------------------------------------- */

/* R's nearest ancestor that exists, shown to be a directory one can make entries in (a probe
 * directory made and removed): for a parent rep_write_all will make. */
static fc_status probe_ancestor(const where *w, fc_err *err)
{
    size_t cap = strlen(w->parent) + 64;
    char *p = malloc(cap);
    if (!p)
        return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
    snprintf(p, cap, "%s", w->parent);
    struct stat sb;
    fc_status st = FC_OK;
    while (st == FC_OK && stat(p, &sb) != 0) { /* "." and "/" end the walk: they exist */
        char *slash = strrchr(p, '/');
        if (errno != ENOENT)
            st = fc_errf(err, FC_EIO, "report directory %s: %s: %s", w->dir, p,
                         strerror(errno));
        else if (!slash)
            snprintf(p, cap, ".");
        else
            slash[slash == p] = 0; /* "/x" goes to "/" */
    }
    if (st == FC_OK && !S_ISDIR(sb.st_mode))
        st = fc_errf(err, FC_EIO, "report directory %s: %s is not a directory", w->dir, p);
    size_t len = strlen(p);
    snprintf(p + len, cap - len, "/.flexcheck-probe.%ld.%08x", (long)getpid(), rand32());
    if (st == FC_OK && (step() || mkdir(p, 0700) != 0)) {
        p[len] = 0;
        st = fc_errf(err, FC_EIO, "report directory %s: %s is not writable: %s", w->dir, p,
                     strerror(errno));
    } else if (st == FC_OK) {
        rmdir(p);
    }
    free(p);
    return st;
}

fc_status rep_dir_check(const char *dir, fc_err *err)
{
    where w;
    steps = 0;
    fc_status st = where_of(dir, &w, err);
    if (st == FC_OK && access(w.parent, F_OK) != 0 && errno == ENOENT) {
        st = probe_ancestor(&w, err); /* made by the writer, not here (7) */
    } else if (st == FC_OK && (st = open_parent(&w, err)) == FC_OK) {
        int exists;
        mode_t mode;
        clear_leftovers(&w);
        st = inspect(&w, &exists, &mode, err);
        char probe[NAME_MAX + 1];
        temp_name(probe, sizeof probe, &w, "new"); /* a killed probe is a dead writer's */
        if (st == FC_OK && (step() || mkdirat(w.pfd, probe, 0700) != 0))
            st = fc_errf(err, FC_EIO, "report directory %s: %s is not writable: %s", w.dir,
                         w.parent, strerror(errno));
        else if (st == FC_OK)
            unlinkat(w.pfd, probe, AT_REMOVEDIR);
    }
    where_free(&w);
    return st;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* mkdir -p of R's parent; *made: the length of the first component this call made (0: none),
 * for remove_made. */
static fc_status make_parent(const where *w, size_t *made, fc_err *err)
{
    char *p = strdup(w->parent);
    if (!p)
        return fc_errf(err, FC_ENOMEM, "report directory: out of memory");
    size_t len = strlen(p);
    fc_status st = FC_OK;
    *made = 0;
    for (size_t i = 1; i <= len && st == FC_OK; i++) {
        if (p[i] != '/' && p[i] != 0)
            continue;
        char c = p[i];
        p[i] = 0;
        struct stat sb;
        if (step() != 0)
            st = fc_errf(err, FC_EIO, "report directory %s: cannot create %s: %s", w->dir, p,
                         strerror(errno));
        else if (mkdir(p, 0777) == 0)
            *made = *made ? *made : i;
        else if (errno != EEXIST)
            st = fc_errf(err, FC_EIO, "report directory %s: cannot create %s: %s", w->dir, p,
                         strerror(errno));
        else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = fc_errf(err, FC_EIO, "report directory %s: %s is not a directory", w->dir, p);
        p[i] = c;
    }
    free(p);
    return st;
}

/* Removes, deepest first, the directories make_parent made (those it did not get to are
 * missing; rmdir keeps any that holds something). */
static void remove_made(const where *w, size_t made)
{
    char *p = made ? strdup(w->parent) : NULL;
    if (!p)
        return;
    for (size_t len = strlen(p); len >= made; len--) {
        if (p[len] != '/' && p[len] != 0)
            continue;
        p[len] = 0;
        if (rmdir(p) != 0 && errno != ENOENT)
            break;
    }
    free(p);
}

/* The set's files into the directory tfd, each complete and synced. */
static fc_status write_files(const where *w, int tfd, const rep_set *set, fc_err *err)
{
    fc_status st = FC_OK;
    for (size_t i = 0; i < NFILES && st == FC_OK; i++) {
        int fd = step() ? -1
                        : openat(tfd, files[i].name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                                 0666);
        FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
        if (!f) {
            st = fc_errf(err, FC_EIO, "report file %s/%s: cannot create it: %s", w->dir,
                         files[i].name, strerror(errno));
            if (fd >= 0)
                close(fd);
            break;
        }
        errno = 0;
        st = files[i].w(f, set, err);
        if (st == FC_EIO) { /* the writer's line ("HTML report: write failed") with its file */
            int e = errno;
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err ? err->msg : "write failed");
            st = fc_errf(err, FC_EIO, "report file %s/%s: %s%s%s", w->dir, files[i].name, why,
                         e ? ": " : "", e ? strerror(e) : "");
        }
        if (st == FC_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
            st = fc_errf(err, FC_EIO, "report file %s/%s: write failed: %s", w->dir,
                         files[i].name, strerror(errno));
        if (fclose(f) != 0 && st == FC_OK)
            st = fc_errf(err, FC_EIO, "report file %s/%s: close failed: %s", w->dir,
                         files[i].name, strerror(errno));
    }
    return st;
}

/* R's other files hard-linked into tfd (2 above). */
static fc_status carry_over(const where *w, int tfd, fc_err *err)
{
    int rfd;
    DIR *d = list_dir(w, &rfd, err);
    if (!d)
        return FC_EIO;
    fc_status st = FC_OK;
    for (struct dirent *e; st == FC_OK && (e = readdir(d));) {
        const char *n = e->d_name;
        struct stat sb;
        if (!strcmp(n, ".") || !strcmp(n, "..") || is_set_name(n) || is_old_temp(n) ||
            fstatat(rfd, n, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
            st = fc_errf(err, FC_EINVAL, "report directory %s holds %s '%s', which a new report "
                         "set cannot carry over; move it or choose another directory", w->dir,
                         S_ISDIR(sb.st_mode) ? "a directory" : "a special file", n);
        else if (step() || linkat(rfd, n, tfd, n, 0) != 0)
            st = fc_errf(err, FC_EIO, "report directory %s: cannot carry %s over into the new "
                         "set (a hard link): %s", w->dir, n, strerror(errno));
    }
    closedir(d);
    return st;
}

/* A fresh temporary directory beside R, locked (5 above): its name in tmp, its fd. */
static fc_status make_temp(const where *w, char *tmp, size_t cap, int *tfd, fc_err *err)
{
    for (int tries = 0; tries < 16; tries++) {
        temp_name(tmp, cap, w, "new");
        if (step() != 0)
            break;
        if (mkdirat(w->pfd, tmp, 0777) != 0) {
            if (errno == EEXIST)
                continue;
            break;
        }
        *tfd = openat(w->pfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (*tfd < 0)
            continue; /* taken away already */
        struct stat a, b;
        /* A cleaner elsewhere may take an unlocked directory apart before the lock is held:
         * still this directory under this name, then it is ours. */
        if (flock(*tfd, LOCK_EX) == 0 && fstat(*tfd, &a) == 0 &&
            fstatat(w->pfd, tmp, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev)
            return FC_OK;
        close(*tfd);
        *tfd = -1;
        unlinkat(w->pfd, tmp, AT_REMOVEDIR); /* if still there and empty */
    }
    return fc_errf(err, FC_EIO, "report directory %s: cannot create a directory in %s for the "
                   "new set: %s", w->dir, w->parent, strerror(errno));
}

/* The new set at tmp becomes R (3, 4 above); *old: where the previous set now is ("" for none,
 * else tmp or a rep-old name). */
static fc_status switch_in(const where *w, const char *tmp, int exists, char *old, size_t cap,
                           fc_err *err)
{
    old[0] = 0;
    unsigned flags = exists ? RENAME_EXCHANGE : RENAME_NOREPLACE;
    if (step() == 0 && rep_renameat2(w->pfd, tmp, w->pfd, w->name, flags) == 0) {
        if (exists)
            snprintf(old, cap, "%s", tmp);
        return FC_OK;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return fc_errf(err, FC_EIO, "report directory %s: the new set could not be switched "
                       "in (%s); the previous one is as it was", w->dir, strerror(errno));
    /* No exchange on this filesystem: two renames, R missing between them (4 above). */
    if (exists) {
        temp_name(old, cap, w, "old");
        if (step() != 0 || rep_renameat2(w->pfd, w->name, w->pfd, old, 0) != 0) {
            int e = errno;
            old[0] = 0;
            return fc_errf(err, FC_EIO, "report directory %s: the previous set could not be "
                           "moved aside (%s); it is as it was", w->dir, strerror(e));
        }
    }
    if (step() == 0 && rep_renameat2(w->pfd, tmp, w->pfd, w->name, 0) == 0)
        return FC_OK;
    int e = errno;
    if (exists && rep_renameat2(w->pfd, old, w->pfd, w->name, 0) == 0)
        old[0] = 0;
    return fc_errf(err, FC_EIO, "report directory %s: the new set could not be renamed into "
                   "place (%s); %s", w->dir, strerror(e),
                   old[0] ? "the previous one is beside it, hidden, for the next run to put back"
                          : "the previous one is as it was");
}

static fc_status write_all(where *w, const rep_set *set, fc_err *err)
{
    size_t made = 0;
    fc_status st = make_parent(w, &made, err);
    if (st == FC_OK)
        st = open_parent(w, err);
    if (st != FC_OK) {
        remove_made(w, made);
        return st;
    }
    int exists = 0, tfd = -1;
    mode_t mode = 0;
    char tmp[NAME_MAX + 1], old[NAME_MAX + 1] = "";
    clear_leftovers(w);
    st = inspect(w, &exists, &mode, err);
    if (st == FC_OK)
        st = make_temp(w, tmp, sizeof tmp, &tfd, err);
    if (st == FC_OK)
        st = write_files(w, tfd, set, err);
    if (st == FC_OK && exists)
        st = carry_over(w, tfd, err);
    if (st == FC_OK && exists && (step() || fchmod(tfd, mode) != 0))
        st = fc_errf(err, FC_EIO, "report directory %s: cannot give the new set R's mode %o: "
                     "%s", w->dir, (unsigned)mode, strerror(errno));
    if (st == FC_OK && (step() || fsync(tfd) != 0))
        st = fc_errf(err, FC_EIO, "report directory %s: sync failed: %s", w->dir,
                     strerror(errno));
    if (st == FC_OK)
        st = switch_in(w, tmp, exists, old, sizeof old, err);
    if (st == FC_OK) {
        (void)fsync(w->pfd); /* the rename durable; the set is in place either way */
        if (old[0])
            (void)dissolve(w, old); /* what stays is cleared by the next run */
    } else {
        if (tfd >= 0)
            (void)dissolve(w, tmp); /* this run's files, and links R keeps */
        remove_made(w, made);
    }
    if (tfd >= 0)
        close(tfd); /* the lock goes with it */
    return st;
}

fc_status rep_write_all(const char *dir, const rep_set *set, fc_err *err)
{
    where w;
    steps = 0;
    fc_status st = where_of(dir, &w, err);
    if (st != FC_OK) {
        where_free(&w);
        return st;
    }
    sigset_t hold, was;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigprocmask(SIG_BLOCK, &hold, &was);
    st = write_all(&w, set, err);
    sigprocmask(SIG_SETMASK, &was, NULL);
    where_free(&w);
    return st;
}
