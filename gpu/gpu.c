/*
 * gpu.c - backend dispatch for the kernel C API (gpu.h). The emu backend is always linked; the
 * CUDA backend only when the build found nvcc (FLEXCHECK_HAVE_CUDA), and it runs only when a
 * device is present.
 */
#include <string.h>

#include "gpu/gpu.h"

fc_status gpu_attention_emu(const gpu_call *c, float *o, float *lse, gpu_result *res, fc_err *err);
int gpu_device_count_emu(fc_err *err);
#ifdef FLEXCHECK_HAVE_CUDA
fc_status gpu_attention_cuda(const gpu_call *c, float *o, float *lse, gpu_result *res,
                             fc_err *err);
int gpu_device_count_cuda(fc_err *err);
#endif

const char *gpu_backend_name(gpu_backend b)
{
    return b == GPU_BACKEND_EMU ? "emu" : b == GPU_BACKEND_CUDA ? "gpu" : "?";
}

fc_status gpu_backend_parse(const char *s, gpu_backend *out)
{
    if (s && !strcmp(s, "emu"))
        *out = GPU_BACKEND_EMU;
    else if (s && !strcmp(s, "gpu"))
        *out = GPU_BACKEND_CUDA;
    else
        return FC_EINVAL;
    return FC_OK;
}

int gpu_backend_available(gpu_backend b, fc_err *err)
{
    if (b == GPU_BACKEND_EMU)
        return 1;
#ifdef FLEXCHECK_HAVE_CUDA
    int n = gpu_device_count_cuda(err);
    if (n == 0)
        fc_errf(err, FC_EUNSUP, "no CUDA device (driver: it reports 0 devices)");
    return n > 0;
#else
    fc_errf(err, FC_EUNSUP, "this build has no CUDA backend (nvcc was not found at build time)");
    return 0;
#endif
}

fc_status gpu_attention(const gpu_call *c, float *o, float *lse, gpu_result *res, fc_err *err)
{
    if (res)
        memset(res, 0, sizeof *res);
    if (!c || !o)
        return fc_errf(err, FC_EINVAL, "gpu_attention: NULL call or output");
    switch (c->backend) {
    case GPU_BACKEND_EMU:
        return gpu_attention_emu(c, o, lse, res, err);
    case GPU_BACKEND_CUDA:
#ifdef FLEXCHECK_HAVE_CUDA
        if (!gpu_backend_available(GPU_BACKEND_CUDA, err))
            return FC_EUNSUP;
        return gpu_attention_cuda(c, o, lse, res, err);
#else
        return fc_errf(err, FC_EUNSUP, "this build has no CUDA backend (nvcc was not found)");
#endif
    }
    return fc_errf(err, FC_EINVAL, "unknown backend %d", (int)c->backend);
}
