/* nvml-events.c — the emulated NVML's events: event sets, registration and waiting.
 *
 * Events live in the shared machine's per-GPU rings (state.h), posted by `accel-emu xid|ecc|
 * lose|set` from any process. A set remembers, per GPU, the event types it wants and the last
 * sequence number it has consumed; registering starts at the ring's newest entry, so only
 * later events are delivered. A waiter blocks on the futex word the poster bumps (no polling),
 * so an injected XID reaches it as soon as the kernel wakes it. A set is used by one thread at
 * a time (as with NVML), but is guarded anyway. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "nvml_emu.h"

#define SUPPORTED_EVENTS                                                                           \
    ((unsigned long long)(nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |        \
                          nvmlEventTypePState | nvmlEventTypeXidCriticalError |                    \
                          nvmlEventTypeClock))

struct nvmlEventSet_st {
    uint32_t magic;
    pthread_mutex_t lock;
    unsigned long long mask[EMU_MAX_GPUS]; /* 0: GPU not registered */
    uint64_t seen[EMU_MAX_GPUS];           /* last sequence number consumed */
};

#define SET_MAGIC 0x4e455653u /* "SVEN" */

NVML_EMU_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!nvml_emu_state())
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (!s)
        return NVML_ERROR_MEMORY;
    s->magic = SET_MAGIC;
    pthread_mutex_init(&s->lock, NULL);
    *set = s;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!nvml_emu_state())
        return NVML_ERROR_UNINITIALIZED;
    if (!set || set->magic != SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    pthread_mutex_destroy(&set->lock);
    free(set);
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                           unsigned long long *eventTypes)
{
    nvmlReturn_t r = nvml_emu_device(device, NULL, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

NVML_EMU_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                   unsigned long long eventTypes,
                                                   nvmlEventSet_t set)
{
    unsigned gi;
    nvmlReturn_t r = nvml_emu_device(device, NULL, &gi);
    if (r != NVML_SUCCESS)
        return r;
    if (!set || set->magic != SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&set->lock);
    if (!set->mask[gi])
        set->seen[gi] = emu_state_event_last(nvml_emu_state(), gi);
    set->mask[gi] |= eventTypes;
    pthread_mutex_unlock(&set->lock);
    return NVML_SUCCESS;
}

/* The next wanted event of any registered GPU, consuming what it passes over. */
static bool next_event(struct emu_state *st, struct nvmlEventSet_st *s, nvmlEventData_t *data)
{
    unsigned count = emu_state_gpu_count(st);
    for (unsigned g = 0; g < count; g++) {
        if (!s->mask[g])
            continue;
        uint64_t last = emu_state_event_last(st, g);
        while (s->seen[g] < last) {
            struct emu_event ev;
            int r = emu_state_event_get(st, g, s->seen[g] + 1, &ev);
            if (r == -ESTALE) {
                /* the ring wrapped past us: those events are gone, skip to the oldest kept */
                s->seen[g] = last >= EMU_EVENT_RING ? last - EMU_EVENT_RING : 0;
                continue;
            }
            if (r < 0)
                break;
            s->seen[g]++;
            if (!(ev.type & s->mask[g]))
                continue;
            data->device = nvml_emu_handle(g);
            data->eventType = ev.type;
            data->eventData = ev.type == EMU_EVENT_XID ? ev.data : 0;
            data->gpuInstanceId = NVML_EMU_NO_INSTANCE;
            data->computeInstanceId = NVML_EMU_NO_INSTANCE;
            return true;
        }
    }
    return false;
}

/* A registered GPU has fallen off the bus: once its events (the XID 79 among them) are
 * delivered, a wait answers NVML_ERROR_GPU_IS_LOST ("if a GPU has fallen off the bus or is
 * otherwise inaccessible", NVML API reference, nvmlEventSetWait_v2) instead of timing out. */
static bool set_has_lost_gpu(struct emu_state *st, const struct nvmlEventSet_st *s)
{
    unsigned count = emu_state_gpu_count(st);
    for (unsigned g = 0; g < count; g++)
        if (s->mask[g] && __atomic_load_n(&emu_state_gpu(st, g)->lost, __ATOMIC_RELAXED))
            return true;
    return false;
}

NVML_EMU_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                              unsigned int timeoutms)
{
    struct emu_state *st = nvml_emu_state();
    if (!st)
        return NVML_ERROR_UNINITIALIZED;
    if (!set || set->magic != SET_MAGIC || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = emu_state_now_ns() + (uint64_t)timeoutms * 1000000ull;
    pthread_mutex_lock(&set->lock);
    nvmlReturn_t r = NVML_ERROR_TIMEOUT;
    for (;;) {
        /* read the word before looking: a post after the look changes it and wakes us */
        uint32_t word = emu_state_event_word(st);
        if (next_event(st, set, data)) {
            r = NVML_SUCCESS;
            break;
        }
        if (set_has_lost_gpu(st, set)) {
            r = NVML_ERROR_GPU_IS_LOST;
            break;
        }
        uint64_t now = emu_state_now_ns();
        if (now >= deadline)
            break;
        if (emu_state_event_wait(st, word, deadline - now) == -ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&set->lock);
    return r;
}

/* The pre-v2 entry point: its record lacks the two instance ids. */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
} nvml_emu_event_data_v1_t;

NVML_EMU_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvml_emu_event_data_v1_t *data,
                                           unsigned int timeoutms);
NVML_EMU_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvml_emu_event_data_v1_t *data,
                                           unsigned int timeoutms)
{
    if (!data)
        return nvml_emu_state() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    nvmlEventData_t d;
    nvmlReturn_t r = nvmlEventSetWait_v2(set, &d, timeoutms);
    if (r == NVML_SUCCESS)
        *data = (nvml_emu_event_data_v1_t){d.device, d.eventType, d.eventData};
    return r;
}
