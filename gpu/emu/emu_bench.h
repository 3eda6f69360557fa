/*
 * emu_bench.h - the emu backend's benchmark, callable from C (flexcheck bench):
 * fiber switches per second of one OS thread, measured on a kernel that does nothing but
 * __syncthreads in a loop. A ratio to report, never a pass/fail.
 */
#ifndef FLEXCHECK_EMU_BENCH_H
#define FLEXCHECK_EMU_BENCH_H
#ifdef __cplusplus
extern "C" {
#endif
/* Switches per second (a switch = one fiber suspending or resuming) for a block of
 * `threads` threads doing `rounds` barriers; 0 on a launch error. */
double emu_bench_switches_per_sec(int threads, int rounds);
#ifdef __cplusplus
}
#endif
#endif
