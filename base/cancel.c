/* cancel.c - the calling thread's cancel flag (cancel.h). */
#include <stddef.h>

#include "base/cancel.h"

/* Per thread, so that concurrent callers never see each other's requests. */
static _Thread_local const int *flag_of_thread;

const int *fc_cancel_set(const int *flag)
{
    const int *prev = flag_of_thread;
    flag_of_thread = flag;
    return prev;
}

const int *fc_cancel_get(void)
{
    return flag_of_thread;
}

int fc_cancelled(void)
{
    /* Relaxed: the request only has to be seen at some later poll, not ordered with data. */
    return flag_of_thread && __atomic_load_n(flag_of_thread, __ATOMIC_RELAXED) != 0;
}
