/*
 * emut_fp16_ref.cc - the CUDA toolkit's own host-side half/bf16 conversions, as the reference
 * the emu's conversions (gpu/emu/emu_fp16.h) must match bit for bit. Built by g++ against the
 * toolkit headers when $(CUDA_HOME)/include/cuda_fp16.h exists; with -DEMUT_NO_TOOLKIT the
 * check that uses it reports the reference unavailable and relies on its own.
 *
 *   g++ -std=c++17 -I$CUDA_HOME/include -I. -c tests/emu/emut_fp16_ref.cc
 */
#include "tests/emu/emut.h"

#ifndef EMUT_NO_TOOLKIT
#include <cuda_bf16.h>
#include <cuda_fp16.h>

int emut_ref_available(void) { return 1; }
unsigned short emut_ref_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
unsigned short emut_ref_f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
float emut_ref_h2f(unsigned short h) { return __half2float(__ushort_as_half(h)); }
#else
int emut_ref_available(void) { return 0; }
unsigned short emut_ref_f2h(float) { return 0; }
unsigned short emut_ref_f2bf(float) { return 0; }
float emut_ref_h2f(unsigned short) { return 0; }
#endif
