/*
 * version.h - which flexcheck this is: the release version, and the git commit the binary was
 * built from. Reports record both in their run identity (reports/rep.h, rep_run), and
 * `flexcheck report merge` refuses to combine shards that disagree on them.
 */
#ifndef FLEXCHECK_VERSION_H
#define FLEXCHECK_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

#define FC_VERSION "0.1.0"

/* FC_VERSION. */
const char *fc_version(void);
/* `git rev-parse --short HEAD` of the tree the binary was built from (the Makefile passes it
 * to base/version.c alone, so a new commit rebuilds one object), or "unknown" when the tree
 * was not a git checkout. */
const char *fc_commit(void);
/* "0.1.0 (commit abc1234)": both in one constant string. */
const char *fc_version_line(void);

#ifdef __cplusplus
}
#endif

#endif
