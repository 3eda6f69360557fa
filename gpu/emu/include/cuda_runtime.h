/* cuda_runtime.h - stand-in for the CUDA toolkit header in the emu build (see gpu/emu/emu.h, rule 1).
 * Everything lives in emu.h, which the build forces in front of every .cu. */
#include "gpu/emu/emu.h"
