/* stub-cuda.c — a do-nothing libcuda.so.1 for measuring libvcuda's own cost per launch: every
 * call succeeds at once, so the difference between a run with and without LD_PRELOAD is the
 * hook path alone, not the (emulated) driver's variance. Just enough of the API for
 * `vcuda-load --overhead` and for libvcuda's paced path (events, capture status). Never used
 * for anything but bench/vcuda-compute's overhead rows. */
#include "cuda_api.h"

#include <stdint.h>

#define STUB __attribute__((visibility("default")))

static int obj; /* any non-NULL handle */

STUB CUresult cuInit(unsigned int f)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuDeviceGet(CUdevice *d, int o)
{
    *d = 0;
    return CUDA_SUCCESS;
}
STUB CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    *v = a == CU_DEVICE_ATTRIBUTE_CLOCK_RATE ? 1980000 : 132;
    return CUDA_SUCCESS;
}
STUB CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    *c = (CUcontext)&obj;
    return CUDA_SUCCESS;
}
STUB CUresult cuCtxSetCurrent(CUcontext c)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuCtxGetCurrent(CUcontext *c)
{
    *c = (CUcontext)&obj;
    return CUDA_SUCCESS;
}
STUB CUresult cuCtxGetDevice(CUdevice *d)
{
    *d = 0;
    return CUDA_SUCCESS;
}
STUB CUresult cuCtxSynchronize(void)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuModuleLoadData(CUmodule *m, const void *i)
{
    *m = (CUmodule)&obj;
    return CUDA_SUCCESS;
}
STUB CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n)
{
    *f = (CUfunction)&obj;
    return CUDA_SUCCESS;
}
STUB CUresult cuStreamCreate(CUstream *s, unsigned int f)
{
    *s = (CUstream)&obj;
    return CUDA_SUCCESS;
}
STUB CUresult cuStreamSynchronize(CUstream s)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
STUB CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}
STUB CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}
STUB CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long f)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}
STUB CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}
STUB CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int sh,
                             CUstream s, void **p, void **e)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuEventCreate(CUevent *e, unsigned int f)
{
    *e = (CUevent)&obj;
    return CUDA_SUCCESS;
}
STUB CUresult cuEventDestroy_v2(CUevent e)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuEventRecord(CUevent e, CUstream s)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuEventQuery(CUevent e)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuEventSynchronize(CUevent e)
{
    return CUDA_SUCCESS;
}
/* Every launch "took" 1 ns of GPU time: the budget never runs out, so no run waits. */
STUB CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    *ms = 0.000001f;
    return CUDA_SUCCESS;
}
STUB CUresult cuGraphDestroy(CUgraph g)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuGraphExecDestroy(CUgraphExec e)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuStreamDestroy_v2(CUstream s)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuModuleUnload(CUmodule m)
{
    return CUDA_SUCCESS;
}
STUB CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    return CUDA_SUCCESS;
}
