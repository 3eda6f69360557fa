/*
 * emu_internal.h - what the emu runtime (emu_runtime.cc) and the race checker (emu_race.cc)
 * tell each other. Not for kernels. The race checker exists only in the race build
 * (-DEMU_RACE), which runs blocks one after another on one OS thread, so its state is global.
 */
#ifndef FLEXCHECK_EMU_INTERNAL_H
#define FLEXCHECK_EMU_INTERNAL_H

#include <string>

namespace emu { namespace rt {
/* "file:line (function)" for a return address inside a kernel, from the -g info via
 * addr2line; "module+0xoffset" when that is unavailable. Cached; thread-safe. */
std::string describe_pc(const void *pc);
}}

namespace emu { namespace race {
void block_begin(unsigned char *dyn, size_t dyn_size, dim3 block_dim, uint3 block_idx);
void set_thread(int tid, int warp);     /* at every switch into a fiber */
void barrier();                         /* a __syncthreads completed */
void warp_sync(int warp, unsigned mask); /* a warp collective completed */
long take_count();                      /* races reported since the last call */
}}

#endif
