/*
 * cancel.h - a long call stopped at its caller's request (the public API's
 * flexcheck_problem_interrupt, include/flexcheck.h): the caller hands the calls it makes on its
 * thread a flag that another thread may set, and the long loops (the reference's panels, the
 * diagnosis's rows) poll it between steps and return FC_ECANCELED. Nothing else sets a flag,
 * so for the CLI and the gate fc_cancelled() is always 0.
 *
 *   const int *prev = fc_cancel_set(&h->interrupt);   // the calls below poll it
 *   st = long_call(...);                               // FC_ECANCELED once it is set
 *   fc_cancel_set(prev);
 *
 * The flag belongs to the calling thread (thread-local), not to the process: threads judging
 * at once each poll their own, and a call that starts worker threads hands them its flag
 * (fc_cancel_get, then fc_cancel_set in each worker).
 */
#ifndef FLEXCHECK_CANCEL_H
#define FLEXCHECK_CANCEL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Makes flag (NULL: none) the one this thread's calls poll; returns the one it replaces. The
 * flag is read atomically; whoever sets it stores a non-zero int atomically. */
const int *fc_cancel_set(const int *flag);
/* This thread's flag (NULL: none), for a call to hand its workers. */
const int *fc_cancel_get(void);
/* 1 once this thread's flag is set, else 0 (always 0 without a flag). */
int fc_cancelled(void);

#ifdef __cplusplus
}
#endif

#endif
