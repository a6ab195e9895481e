/* rt-prog.cu — one program built by nvcc against NVIDIA's CUDA runtime (static and shared
 * cudart), run on the emulator by tests/runtime/test-runtime.py, bare and under libvcuda.
 * Each mode exercises one part of what the runtime needs from a driver and prints what the
 * test checks as `key=value` lines; any CUDA error prints `FAIL <call>: <error>` and exits 1.
 *
 *   rt-prog mem [quota-bytes]   cudaMalloc/Async/Pitch/Managed/3D, cudaMemGetInfo; with a
 *                               quota: total == quota, the allocation past free fails with
 *                               cudaErrorMemoryAllocation (cudaMalloc and cudaMallocAsync)
 *   rt-prog stream              streams, events, elapsed time of spin kernels
 *   rt-prog graph               graph capture and an explicitly built graph
 *   rt-prog global              __device__ / __constant__ variables through the symbol API
 *   rt-prog reset               cudaDeviceReset, then the runtime keeps working
 *   rt-prog multi N             N processes (forked before any CUDA call) allocating at once
 *   rt-prog spin MS N           N spin kernels of MS emulated milliseconds each; prints the
 *                               emulated span (events) and the kernels' busy time
 *   rt-prog start               the runtime's start-up only (cudaFree(0)): bench-emu-runtime */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("FAIL %s: %s (%d)\n", #call, cudaGetErrorName(e_), (int)e_);                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Timed by the emulator from its first parameter, as its PTX spin kernels are (a GPU runs it
 * for that many SM cycles). */
extern "C" __global__ void spin(unsigned long long cycles)
{
    unsigned long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

extern "C" __global__ void add_one(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

__device__ int dev_counter = 5;
__device__ unsigned long long dev_big[64];
__constant__ float const_table[4] = {1.5f, 2.5f, 3.5f, 4.5f};

static unsigned long long cycles_for_ms(double ms)
{
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    return (unsigned long long)(ms * khz);
}

static int mode_mem(long long quota)
{
    size_t free0, total;
    CK(cudaMemGetInfo(&free0, &total));
    printf("total=%zu free=%zu\n", total, free0);
    void *a, *b, *m;
    CK(cudaMalloc(&a, 1 << 20));
    int host[256], back[256];
    for (int i = 0; i < 256; i++)
        host[i] = i * 3;
    CK(cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(back, a, sizeof(back), cudaMemcpyDeviceToHost));
    if (memcmp(host, back, sizeof(host))) {
        printf("FAIL memcpy round trip\n");
        return 1;
    }
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    CK(cudaMallocAsync(&b, 2 << 20, s));
    CK(cudaMemsetAsync(b, 7, 2 << 20, s));
    CK(cudaFreeAsync(b, s));
    CK(cudaStreamSynchronize(s));
    size_t pitch;
    void *p;
    CK(cudaMallocPitch(&p, &pitch, 1000, 10));
    if (pitch < 1000) {
        printf("FAIL pitch %zu\n", pitch);
        return 1;
    }
    CK(cudaMallocManaged(&m, 4096));
    ((int *)m)[0] = 42;
    CK(cudaDeviceSynchronize());
    cudaPitchedPtr pp;
    CK(cudaMalloc3D(&pp, make_cudaExtent(256, 16, 4)));
    size_t free1;
    CK(cudaMemGetInfo(&free1, &total));
    printf("used=%zu\n", free0 - free1);
    CK(cudaFree(pp.ptr));
    CK(cudaFree(m));
    CK(cudaFree(p));
    CK(cudaFree(a));
    CK(cudaStreamDestroy(s));
    if (quota > 0) {
        if ((long long)total != quota) {
            printf("FAIL total %zu != quota %lld\n", total, quota);
            return 1;
        }
        CK(cudaMemGetInfo(&free1, &total));
        void *big = NULL;
        cudaError_t e = cudaMalloc(&big, free1 + (1 << 20));
        printf("over_quota=%s\n", cudaGetErrorName(e));
        if (e != cudaErrorMemoryAllocation)
            return 1;
        cudaGetLastError();
        e = cudaMallocAsync(&big, free1 + (1 << 20), 0);
        printf("over_quota_async=%s\n", cudaGetErrorName(e));
        if (e != cudaErrorMemoryAllocation)
            return 1;
        cudaGetLastError();
        CK(cudaMalloc(&big, free1 / 2)); /* what fits still fits */
        CK(cudaFree(big));
    }
    printf("ok mem\n");
    return 0;
}

static int mode_stream(void)
{
    cudaStream_t s1, s2;
    cudaEvent_t e0, e1, e2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreate(&s2));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreate(&e2));
    unsigned long long c = cycles_for_ms(5);
    CK(cudaEventRecord(e0, s1));
    spin<<<1, 1, 0, s1>>>(c);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s2, e1, 0));
    spin<<<1, 1, 0, s2>>>(c);
    CK(cudaEventRecord(e2, s2));
    CK(cudaEventSynchronize(e2));
    CK(cudaStreamQuery(s1));
    float ms1, ms2;
    CK(cudaEventElapsedTime(&ms1, e0, e1));
    CK(cudaEventElapsedTime(&ms2, e0, e2));
    printf("first_ms=%.3f both_ms=%.3f\n", ms1, ms2);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaEventDestroy(e2));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    printf("ok stream\n");
    return 0;
}

static int mode_graph(void)
{
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    int *d;
    CK(cudaMalloc(&d, 4096));
    CK(cudaMemset(d, 0, 4096));
    unsigned long long c = cycles_for_ms(2);
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    spin<<<1, 1, 0, s>>>(c);
    add_one<<<4, 256, 0, s>>>(d, 1024);
    CK(cudaStreamEndCapture(s, &g));
    size_t n = 0;
    CK(cudaGraphGetNodes(g, NULL, &n));
    printf("captured_nodes=%zu\n", n);
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaStreamSynchronize(s));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("captured_ms=%.3f\n", ms);

    /* built node by node */
    cudaGraph_t g2;
    CK(cudaGraphCreate(&g2, 0));
    cudaKernelNodeParams kp;
    memset(&kp, 0, sizeof(kp));
    void *args[] = {&c};
    kp.func = (void *)spin;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = args;
    cudaGraphNode_t k1, k2;
    CK(cudaGraphAddKernelNode(&k1, g2, NULL, 0, &kp));
    CK(cudaGraphAddKernelNode(&k2, g2, &k1, 1, &kp));
    cudaGraphExec_t ge2;
    CK(cudaGraphInstantiate(&ge2, g2, 0));
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge2, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("explicit_ms=%.3f\n", ms);
    CK(cudaGraphExecDestroy(ge2));
    CK(cudaGraphDestroy(g2));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
    printf("ok graph\n");
    return 0;
}

static int mode_global(void)
{
    int v = 0;
    CK(cudaMemcpyFromSymbol(&v, dev_counter, sizeof(v)));
    printf("initial=%d\n", v);
    int w = 1234;
    CK(cudaMemcpyToSymbol(dev_counter, &w, sizeof(w)));
    v = 0;
    CK(cudaMemcpyFromSymbol(&v, dev_counter, sizeof(v)));
    printf("written=%d\n", v);
    float t[4];
    CK(cudaMemcpyFromSymbol(t, const_table, sizeof(t)));
    printf("const=%.1f,%.1f,%.1f,%.1f\n", t[0], t[1], t[2], t[3]);
    size_t size = 0;
    CK(cudaGetSymbolSize(&size, dev_big));
    void *addr = NULL;
    CK(cudaGetSymbolAddress(&addr, dev_big));
    unsigned long long big[64];
    for (int i = 0; i < 64; i++)
        big[i] = 1000ull + i;
    CK(cudaMemcpy(addr, big, sizeof(big), cudaMemcpyHostToDevice));
    unsigned long long back[64] = {0};
    CK(cudaMemcpyFromSymbol(back, dev_big, sizeof(back), 0));
    printf("big_size=%zu big_last=%llu\n", size, back[63]);
    add_one<<<1, 1>>>(&((int *)addr)[0], 1);
    CK(cudaDeviceSynchronize());
    printf("ok global\n");
    return 0;
}

static int mode_reset(void)
{
    void *a;
    CK(cudaMalloc(&a, 8 << 20));
    size_t f0, f1, f2, t;
    CK(cudaMemGetInfo(&f0, &t));
    CK(cudaDeviceReset());
    CK(cudaMemGetInfo(&f1, &t));
    printf("freed_by_reset=%d\n", f1 > f0);
    CK(cudaMalloc(&a, 1 << 20));
    int h = 77, b = 0;
    CK(cudaMemcpy(a, &h, sizeof(h), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(&b, a, sizeof(b), cudaMemcpyDeviceToHost));
    spin<<<1, 1>>>(cycles_for_ms(1));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    int v = 0;
    CK(cudaMemcpyFromSymbol(&v, dev_counter, sizeof(v)));
    CK(cudaMemGetInfo(&f2, &t));
    printf("after_reset=%d counter=%d\n", b, v);
    CK(cudaFree(a));
    CK(cudaDeviceReset());
    printf("ok reset\n");
    return 0;
}

static int mode_multi(int n)
{
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *a;
            CK(cudaMalloc(&a, (size_t)(i + 1) << 20));
            size_t f, t;
            CK(cudaMemGetInfo(&f, &t));
            spin<<<1, 1>>>(cycles_for_ms(1));
            CK(cudaDeviceSynchronize());
            CK(cudaFree(a));
            _exit(0);
        }
        if (pid < 0)
            return 1;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            bad++;
    }
    printf("children=%d failed=%d\n", n, bad);
    if (bad)
        return 1;
    printf("ok multi\n");
    return 0;
}

static int mode_spin(double ms, int n)
{
    unsigned long long c = cycles_for_ms(ms);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double busy = 0;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < n; i++) {
        CK(cudaEventRecord(a, 0));
        spin<<<1, 1>>>(c);
        CK(cudaGetLastError());
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        float k;
        CK(cudaEventElapsedTime(&k, a, b));
        busy += k;
    }
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    float span;
    CK(cudaEventElapsedTime(&span, e0, e1));
    printf("busy_ms=%.3f span_ms=%.3f\n", busy, span);
    printf("ok spin\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "mem"))
        return mode_mem(argc > 2 ? atoll(argv[2]) : 0);
    if (!strcmp(m, "stream"))
        return mode_stream();
    if (!strcmp(m, "graph"))
        return mode_graph();
    if (!strcmp(m, "global"))
        return mode_global();
    if (!strcmp(m, "reset"))
        return mode_reset();
    if (!strcmp(m, "multi"))
        return mode_multi(argc > 2 ? atoi(argv[2]) : 3);
    if (!strcmp(m, "start")) {
        CK(cudaFree(0));
        return 0;
    }
    if (!strcmp(m, "spin"))
        return mode_spin(argc > 2 ? atof(argv[2]) : 10, argc > 3 ? atoi(argv[3]) : 10);
    fprintf(stderr, "usage: rt-prog mem [quota]|stream|graph|global|reset|multi N|spin MS N|start\n");
    return 2;
}
