/*
 * run_id.c - the run identity a command puts in its report (reports/rep.h, rep_run): when it
 * ran, which flexcheck, and the command line as typed, kept by main() before any command's
 * parser moves its arguments around.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/version.h"
#include "cli/cli.h"
#include "reports/rep.h"

static char command_line[REP_CMD_LEN];

/* 1 iff s needs no quoting in a POSIX shell. */
static int shell_plain(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-",
                    *s))
            return 0;
    return 1;
}

/* s as one shell word: as it is when plain, else in single quotes ('\'' for a quote). */
static void put_shell_word(FILE *f, const char *s)
{
    if (shell_plain(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f); /* close, an escaped quote, reopen */
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

void cli_keep_command_line(int argc, char **argv)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        snprintf(command_line, sizeof command_line, "%s", argc > 0 ? argv[0] : "flexcheck");
        return;
    }
    for (int i = 0; i < argc; i++) {
        if (i)
            fputc(' ', f);
        put_shell_word(f, argv[i]);
    }
    fclose(f);
    if (len < sizeof command_line) /* else cut, and say so */
        memcpy(command_line, buf, len + 1);
    else
        snprintf(command_line, sizeof command_line, "%.*s ...",
                 (int)(sizeof command_line - 5), buf);
    free(buf);
}

/* 16 hex digits from the system's random source; the time and process id mixed when it
 * cannot be read (still distinct for runs in different processes or nanoseconds). */
static void random_id(char *buf, size_t cap)
{
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof x, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
            ((uint64_t)getpid() << 40);
    }
    if (f)
        fclose(f);
    snprintf(buf, cap, "%016llx", (unsigned long long)x);
}

void cli_run_identity(rep_run *run, const char *matrix)
{
    memset(run, 0, sizeof *run);
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc))
        strftime(run->time, sizeof run->time, "%Y-%m-%dT%H:%M:%SZ", &utc);
    random_id(run->id, sizeof run->id);
    rep_set_str(run->version, sizeof run->version, fc_version());
    rep_set_str(run->commit, sizeof run->commit, fc_commit());
    rep_set_str(run->command, sizeof run->command, command_line);
    rep_set_str(run->matrix, sizeof run->matrix, matrix);
    run->seed = -1;
    run->shard_i = run->shard_n = 1;
}
