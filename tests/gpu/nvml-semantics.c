/* nvml-semantics — checks the NVML behaviours the emulator imitates (docs/emulator.md) against
 * whatever libnvidia-ml.so.1 the library path finds: NVIDIA's on a GPU machine
 * (tests/gpu/nvml-semantics.sh), the emulator's in `meson test` (emu-nvml-semantics). A case
 * that fails on a real GPU means the emulator's NVML answers differently from the driver's:
 * fix the emulator and this list together. Prints TAP. libc + libdl only; our nvml_api.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml_api.h"

static int n_case, n_fail;

static void verdict(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %d - ", ok ? "ok" : "not ok", ++n_case);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok)
        n_fail++;
}

#define EXPECT(call, want)                                                                         \
    do {                                                                                           \
        nvmlReturn_t r_ = (call);                                                                  \
        verdict(r_ == (want), "%s == %s (got %d)", #call, #want, (int)r_);                         \
    } while (0)

#define LOAD(name)                                                                                 \
    __typeof__(name) *p_##name = (__typeof__(name) *)dlsym(lib, #name);                            \
    if (!p_##name) {                                                                               \
        printf("Bail out! libnvidia-ml.so.1 lacks " #name "\n");                                   \
        return 1;                                                                                  \
    }

int main(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        printf("1..0 # SKIP no libnvidia-ml.so.1: %s\n", dlerror());
        return 77;
    }
    LOAD(nvmlInit_v2);
    LOAD(nvmlShutdown);
    LOAD(nvmlSystemGetNVMLVersion);
    LOAD(nvmlSystemGetDriverVersion);
    LOAD(nvmlSystemGetCudaDriverVersion);
    LOAD(nvmlSystemGetCudaDriverVersion_v2);
    LOAD(nvmlDeviceGetCount_v2);
    LOAD(nvmlDeviceGetHandleByIndex_v2);
    LOAD(nvmlDeviceGetHandleByUUID);
    LOAD(nvmlDeviceGetHandleByPciBusId_v2);
    LOAD(nvmlDeviceGetUUID);
    LOAD(nvmlDeviceGetName);
    LOAD(nvmlDeviceGetPciInfo_v3);
    LOAD(nvmlDeviceGetMemoryInfo);
    LOAD(nvmlDeviceGetMemoryInfo_v2);
    LOAD(nvmlDeviceGetComputeRunningProcesses_v3);
    LOAD(nvmlDeviceGetProcessUtilization);
    LOAD(nvmlDeviceGetProcessesUtilizationInfo);
    LOAD(nvmlDeviceGetUtilizationRates);
    LOAD(nvmlDeviceGetTemperature);
    LOAD(nvmlDeviceGetClockInfo);
    LOAD(nvmlDeviceGetTotalEccErrors);
    LOAD(nvmlEventSetCreate);
    LOAD(nvmlDeviceRegisterEvents);
    LOAD(nvmlEventSetWait_v2);
    LOAD(nvmlEventSetFree);

    char buf[256];
    unsigned count = 0;
    int cuda = 0;

    EXPECT(p_nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    EXPECT(p_nvmlSystemGetNVMLVersion(buf, sizeof(buf)), NVML_SUCCESS); /* no init needed */
    /* the CUDA version asks the driver: init first */
    EXPECT(p_nvmlSystemGetCudaDriverVersion(&cuda), NVML_ERROR_UNINITIALIZED);
    EXPECT(p_nvmlSystemGetCudaDriverVersion_v2(&cuda), NVML_ERROR_UNINITIALIZED);
    if (p_nvmlInit_v2() != NVML_SUCCESS) {
        printf("Bail out! nvmlInit_v2 failed\n");
        return 1;
    }
    EXPECT(p_nvmlInit_v2(), NVML_SUCCESS); /* counted */
    EXPECT(p_nvmlShutdown(), NVML_SUCCESS);
    EXPECT(p_nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    verdict(count >= 1, "at least one GPU (%u)", count);
    EXPECT(p_nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT(p_nvmlSystemGetDriverVersion(buf, 4), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT(p_nvmlSystemGetDriverVersion(NULL, 80), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT(p_nvmlSystemGetCudaDriverVersion(&cuda), NVML_SUCCESS);
    verdict(cuda >= 11000 && cuda % 10 == 0, "CUDA version 1000 * major + 10 * minor (%d)", cuda);

    nvmlDevice_t d, d2;
    EXPECT(p_nvmlDeviceGetHandleByIndex_v2(count, &d), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT(p_nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT);
    if (p_nvmlDeviceGetHandleByIndex_v2(0, &d) != NVML_SUCCESS) {
        printf("Bail out! no handle for GPU 0\n");
        return 1;
    }

    /* strings: the NUL must fit */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    EXPECT(p_nvmlDeviceGetUUID(d, uuid, sizeof(uuid)), NVML_SUCCESS);
    EXPECT(p_nvmlDeviceGetUUID(d, buf, (unsigned)strlen(uuid)), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT(p_nvmlDeviceGetUUID(d, buf, (unsigned)strlen(uuid) + 1), NVML_SUCCESS);
    EXPECT(p_nvmlDeviceGetUUID(d, NULL, sizeof(uuid)), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT(p_nvmlDeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
    EXPECT(p_nvmlDeviceGetName(d, buf, (unsigned)strlen(name)), NVML_ERROR_INSUFFICIENT_SIZE);

    /* lookups */
    EXPECT(p_nvmlDeviceGetHandleByUUID(uuid, &d2), NVML_SUCCESS);
    verdict(d2 == d, "handle by UUID is the handle by index");
    EXPECT(p_nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d2),
           NVML_ERROR_NOT_FOUND);
    nvmlPciInfo_t pci;
    EXPECT(p_nvmlDeviceGetPciInfo_v3(d, &pci), NVML_SUCCESS);
    verdict(strlen(pci.busId) == 16 && strlen(pci.busIdLegacy) == 12,
            "bus ids have 8- and 4-digit domains (%s, %s)", pci.busId, pci.busIdLegacy);
    EXPECT(p_nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &d2), NVML_SUCCESS);
    verdict(d2 == d, "handle by bus id is the handle by index");
    EXPECT(p_nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &d2), NVML_SUCCESS);
    verdict(d2 == d, "handle by legacy bus id is the handle by index");

    /* memory */
    nvmlMemory_t m;
    EXPECT(p_nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
    verdict(m.used + m.free == m.total, "used + free == total (v1)");
    EXPECT(p_nvmlDeviceGetMemoryInfo(d, NULL), NVML_ERROR_INVALID_ARGUMENT);
    nvmlMemory_v2_t m2 = {.version = 1};
    /* not ARGUMENT_VERSION_MISMATCH: NVML finds no function for that version */
    EXPECT(p_nvmlDeviceGetMemoryInfo_v2(d, &m2), NVML_ERROR_FUNCTION_NOT_FOUND);
    m2.version = 2; /* "must be 2", as the reference words it, is not nvmlMemory_v2 either */
    EXPECT(p_nvmlDeviceGetMemoryInfo_v2(d, &m2), NVML_ERROR_FUNCTION_NOT_FOUND);
    EXPECT(p_nvmlDeviceGetMemoryInfo_v2(NULL, &m2), NVML_ERROR_INVALID_ARGUMENT); /* handle first */
    m2.version = nvmlMemory_v2;
    EXPECT(p_nvmlDeviceGetMemoryInfo_v2(d, &m2), NVML_SUCCESS);
    verdict(m2.total == m.total, "v2 total == v1 total");

    /* lists: a NULL buffer asks for the count */
    unsigned n = 0;
    nvmlReturn_t r = p_nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL);
    verdict((r == NVML_SUCCESS && n == 0) || (r == NVML_ERROR_INSUFFICIENT_SIZE && n > 0),
            "running processes with no buffer: SUCCESS with 0 or INSUFFICIENT_SIZE with n "
            "(got %d, n %u)",
            (int)r, n);
    EXPECT(p_nvmlDeviceGetComputeRunningProcesses_v3(d, NULL, NULL), NVML_ERROR_INVALID_ARGUMENT);
    /* no buffer: the size of the driver's own sample buffer, idle or busy (an H200 with driver
     * 580.159.04, idle: 72), never NOT_FOUND */
    n = 0;
    r = p_nvmlDeviceGetProcessUtilization(d, NULL, &n, 0);
    verdict(r == NVML_ERROR_INSUFFICIENT_SIZE && n > 0,
            "process utilization with no buffer: INSUFFICIENT_SIZE with the driver's sample "
            "buffer size (got %d, n %u)",
            (int)r, n);
    unsigned samples = r == NVML_ERROR_INSUFFICIENT_SIZE ? n : 0;
    /* the newer versioned calls do answer ARGUMENT_VERSION_MISMATCH */
    nvmlProcessesUtilizationInfo_t pu = {.version = 0};
    EXPECT(p_nvmlDeviceGetProcessesUtilizationInfo(d, &pu), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    nvmlUtilization_t u;
    EXPECT(p_nvmlDeviceGetUtilizationRates(d, &u), NVML_SUCCESS);
    verdict(u.gpu <= 100 && u.memory <= 100, "utilization in percent");

    /* sensors */
    unsigned t, c;
    EXPECT(p_nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
    EXPECT(p_nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, NULL), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT(p_nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &c), NVML_SUCCESS);
    unsigned long long ecc;
    r = p_nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                      &ecc);
    verdict(r == NVML_SUCCESS || r == NVML_ERROR_NOT_SUPPORTED, "ECC counts (got %d)", (int)r);

    /* events */
    nvmlEventSet_t set;
    nvmlEventData_t e;
    EXPECT(p_nvmlEventSetCreate(&set), NVML_SUCCESS);
    EXPECT(p_nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    EXPECT(p_nvmlEventSetWait_v2(set, &e, 10), NVML_ERROR_TIMEOUT);
    EXPECT(p_nvmlEventSetFree(set), NVML_SUCCESS);

    /* per-process utilization against the size the query without a buffer answered (kept
     * after the earlier checks so their numbers do not move): the versioned call asks for the
     * same size (the H200: 72 from both); a buffer one entry short is refused with that size
     * (not printed on the H200, but libvcuda's 64 entries got no sample there); one of that
     * size answers */
    if (samples > 1 && samples <= 4096) {
        nvmlProcessesUtilizationInfo_t pi = {.version = nvmlProcessesUtilizationInfo_v1};
        r = p_nvmlDeviceGetProcessesUtilizationInfo(d, &pi);
        verdict(r == NVML_ERROR_INSUFFICIENT_SIZE && pi.processSamplesCount == samples,
                "processes utilization info with no array: INSUFFICIENT_SIZE with %u (got %d, "
                "count %u)",
                samples, (int)r, pi.processSamplesCount);
        nvmlProcessUtilizationSample_t *old = calloc(samples, sizeof(*old));
        nvmlProcessUtilizationInfo_v1_t *arr = calloc(samples, sizeof(*arr));
        if (!old || !arr) {
            printf("Bail out! out of memory\n");
            return 1;
        }
        n = samples - 1;
        r = p_nvmlDeviceGetProcessUtilization(d, old, &n, 0);
        verdict(r == NVML_ERROR_INSUFFICIENT_SIZE && n == samples,
                "process utilization into %u entries: INSUFFICIENT_SIZE with %u (got %d, n %u)",
                samples - 1, samples, (int)r, n);
        pi.procUtilArray = arr;
        pi.processSamplesCount = samples - 1;
        r = p_nvmlDeviceGetProcessesUtilizationInfo(d, &pi);
        verdict(r == NVML_ERROR_INSUFFICIENT_SIZE && pi.processSamplesCount == samples,
                "processes utilization info into %u entries: INSUFFICIENT_SIZE with %u (got %d, "
                "count %u)",
                samples - 1, samples, (int)r, pi.processSamplesCount);
        n = samples;
        r = p_nvmlDeviceGetProcessUtilization(d, old, &n, 0);
        verdict(r == NVML_ERROR_NOT_FOUND || (r == NVML_SUCCESS && n <= samples),
                "process utilization into %u entries: SUCCESS or NOT_FOUND (got %d, n %u)", samples,
                (int)r, n);
        pi.processSamplesCount = samples;
        r = p_nvmlDeviceGetProcessesUtilizationInfo(d, &pi);
        verdict(r == NVML_ERROR_NOT_FOUND ||
                    (r == NVML_SUCCESS && pi.processSamplesCount <= samples),
                "processes utilization info into %u entries: SUCCESS or NOT_FOUND (got %d, "
                "count %u)",
                samples, (int)r, pi.processSamplesCount);
        free(old);
        free(arr);
    } else {
        verdict(false, "a sample buffer size to check against (the size query gave %u)", samples);
    }

    EXPECT(p_nvmlShutdown(), NVML_SUCCESS);
    EXPECT(p_nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    printf("1..%d\n", n_case);
    return n_fail ? 1 : 0;
}
