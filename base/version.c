/* version.c - the version and build commit (version.h). The only object that embeds the
 * commit: the Makefile compiles it with -DFLEXCHECK_COMMIT="..." and rebuilds it alone when
 * the commit changes. */
#include "base/version.h"

#ifndef FLEXCHECK_COMMIT
#define FLEXCHECK_COMMIT "unknown"
#endif

const char *fc_version(void)
{
    return FC_VERSION;
}

const char *fc_commit(void)
{
    return FLEXCHECK_COMMIT;
}

const char *fc_version_line(void)
{
    return FC_VERSION " (commit " FLEXCHECK_COMMIT ")";
}
