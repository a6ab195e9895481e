/* hook-launch.c — the kernel and graph launch entry points (hooks.def,
 * "launches"). Owned by libvcuda part 2 (compute share, branch vcuda2), which
 * paces them against the container's core limit; until then they pass
 * straight through to the driver. */
#include "vcuda.h"

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    VC_NEED_REAL(cuLaunchKernel);
    return vc_real.cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                  sharedMemBytes, hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    VC_NEED_REAL(cuLaunchKernel_ptsz);
    return vc_real.cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                       blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    VC_NEED_REAL(cuLaunchKernelEx);
    return vc_real.cuLaunchKernelEx(config, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    VC_NEED_REAL(cuLaunchKernelEx_ptsz);
    return vc_real.cuLaunchKernelEx_ptsz(config, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    VC_NEED_REAL(cuLaunchCooperativeKernel);
    return vc_real.cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                             blockDimY, blockDimZ, sharedMemBytes, hStream,
                                             kernelParams);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ,
                                                unsigned int sharedMemBytes, CUstream hStream,
                                                void **kernelParams)
{
    VC_NEED_REAL(cuLaunchCooperativeKernel_ptsz);
    return vc_real.cuLaunchCooperativeKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                  blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                  kernelParams);
}

CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                      unsigned int numDevices, unsigned int flags)
{
    VC_NEED_REAL(cuLaunchCooperativeKernelMultiDevice);
    return vc_real.cuLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags);
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    VC_NEED_REAL(cuGraphLaunch);
    return vc_real.cuGraphLaunch(hGraphExec, hStream);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    VC_NEED_REAL(cuGraphLaunch_ptsz);
    return vc_real.cuGraphLaunch_ptsz(hGraphExec, hStream);
}
