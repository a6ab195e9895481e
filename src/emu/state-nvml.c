/* state-nvml.c — part B's operations on the shared state; see state-nvml.h. */
#include "state-nvml.h"
#include "state-mig.h"
#include "state-mps.h"

#include <errno.h>

unsigned emu_state_proc_info_stride(struct emu_state *st)
{
    unsigned s = __atomic_load_n(&emu_state_shared(st)->proc_info_stride, __ATOMIC_RELAXED);
    return s == 16 || s == 24 || s == 32 ? s : 24;
}

int emu_state_set_proc_info_stride(struct emu_state *st, unsigned stride)
{
    if (stride != 16 && stride != 24 && stride != 32)
        return -EINVAL;
    __atomic_store_n(&emu_state_shared(st)->proc_info_stride, stride, __ATOMIC_RELAXED);
    return 0;
}

int emu_state_inject_xid(struct emu_state *st, unsigned gpu, uint64_t xid)
{
    if (!emu_state_gpu(st, gpu))
        return -EINVAL;
    if (emu_state_mps_fatal_xid(xid))
        emu_state_mps_fault(st, gpu);
    return emu_state_event_post(st, gpu, EMU_EVENT_XID, xid, NULL);
}

int emu_state_inject_ecc(struct emu_state *st, unsigned gpu, bool double_bit)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    if (double_bit) {
        g->ecc_double_bit++;
        g->ecc_vol_double_bit++;
    } else {
        g->ecc_single_bit++;
        g->ecc_vol_single_bit++;
    }
    emu_state_unlock(st);
    return emu_state_event_post(
        st, gpu, double_bit ? EMU_EVENT_DOUBLE_BIT_ECC : EMU_EVENT_SINGLE_BIT_ECC, 0, NULL);
}

int emu_state_set_lost(struct emu_state *st, unsigned gpu, bool lost)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    bool changed = g->lost != (uint32_t)lost;
    g->lost = lost;
    emu_state_unlock(st);
    if (changed && lost)
        return emu_state_event_post(st, gpu, EMU_EVENT_XID, EMU_XID_FALLEN_OFF_BUS, NULL);
    return 0;
}

int emu_state_set_vfio(struct emu_state *st, unsigned gpu, bool on, int32_t *ret_busy_pid)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g)
        return -EINVAL;
    emu_state_lock(st);
    int r = 0;
    int32_t busy = 0;
    bool mig = false;
    for (unsigned s = 0; s < EMU_MIG_MAX_GI; s++)
        mig |= g->mig[s].used != 0;
    if (g->vfio != (uint32_t)on) {
        if (on && (busy = emu_state_busy_pid_locked(st, gpu)))
            r = -EBUSY;
        else if (on && mig)
            r = -ENOTEMPTY;
        else
            g->vfio = on;
    }
    emu_state_unlock(st);
    if (ret_busy_pid)
        *ret_busy_pid = busy;
    return r;
}

int emu_state_set_pci_function(struct emu_state *st, unsigned gpu, unsigned fn, bool on)
{
    struct emu_gpu *g = emu_state_gpu(st, gpu);
    if (!g || (fn != EMU_PCI_FN_AUDIO && fn != EMU_PCI_FN_BRIDGE))
        return -EINVAL;
    emu_state_lock(st);
    g->pci_functions = on ? g->pci_functions | fn : g->pci_functions & ~fn;
    emu_state_unlock(st);
    return 0;
}
