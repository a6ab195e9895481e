/* nvml-fields.c — the emulated NVML's nvmlDeviceGetFieldValues: the field IDs the suite's
 * exporter and health checks read and the emulator has values for (ECC mode and totals, energy,
 * PCIe replays, row remapping), each answered by the entry point that reports the same value,
 * so a field and its dedicated call never disagree. Any other field: that entry's nvmlReturn is
 * NOT_SUPPORTED, as the driver answers for a field a GPU lacks. */
#define _GNU_SOURCE
#include "nvml_emu.h"

/* One field's value from the dedicated entry point; the type is set only on success. */
static nvmlReturn_t field_value(nvmlDevice_t device, unsigned id, nvmlFieldValue_t *v)
{
    nvmlReturn_t r;
    unsigned int u[4];
    unsigned long long ull;
    nvmlEnableState_t cur, pend;
    switch (id) {
    case NVML_FI_DEV_ECC_CURRENT:
    case NVML_FI_DEV_ECC_PENDING:
        r = nvmlDeviceGetEccMode(device, &cur, &pend);
        v->value.uiVal = id == NVML_FI_DEV_ECC_CURRENT ? (unsigned)cur : (unsigned)pend;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        return r;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL: {
        bool dbe = id == NVML_FI_DEV_ECC_DBE_VOL_TOTAL || id == NVML_FI_DEV_ECC_DBE_AGG_TOTAL;
        bool vol = id == NVML_FI_DEV_ECC_SBE_VOL_TOTAL || id == NVML_FI_DEV_ECC_DBE_VOL_TOTAL;
        r = nvmlDeviceGetTotalEccErrors(
            device, dbe ? NVML_MEMORY_ERROR_TYPE_UNCORRECTED : NVML_MEMORY_ERROR_TYPE_CORRECTED,
            vol ? NVML_VOLATILE_ECC : NVML_AGGREGATE_ECC, &ull);
        v->value.ullVal = ull;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        return r;
    }
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
        r = nvmlDeviceGetTotalEnergyConsumption(device, &ull);
        v->value.ullVal = ull;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        return r;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
        r = nvmlDeviceGetPcieReplayCounter(device, &u[0]);
        v->value.uiVal = u[0];
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        return r;
    case NVML_FI_DEV_REMAPPED_COR:
    case NVML_FI_DEV_REMAPPED_UNC:
    case NVML_FI_DEV_REMAPPED_PENDING:
    case NVML_FI_DEV_REMAPPED_FAILURE:
        r = nvmlDeviceGetRemappedRows(device, &u[0], &u[1], &u[2], &u[3]);
        v->value.uiVal = u[id - NVML_FI_DEV_REMAPPED_COR];
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        return r;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

/* "valuesCount: Number of entries in values that should be retrieved"; each entry's fieldId
 * (and scopeId) is set by the caller, and "the per-field nvmlReturn must be checked" (NVML API
 * reference, nvmlDeviceGetFieldValues): the call itself fails only for the device or the
 * arguments; each field gets its own nvmlReturn and a CPU timestamp. */
NVML_EMU_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                   nvmlFieldValue_t *values)
{
    nvmlReturn_t r = nvml_emu_device(device, NULL, NULL);
    if (r != NVML_SUCCESS)
        return r;
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)nvml_emu_realtime_us();
        v->latencyUsec = 0;
        v->value.ullVal = 0;
        v->nvmlReturn = field_value(device, v->fieldId, v);
    }
    return NVML_SUCCESS;
}
