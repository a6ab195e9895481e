/* emu-args.c — accel-emu's value parsers; see emu-args.h. */
#include "emu-args.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const emu_args_set_keys =
    "temperature=C power=W power_limit=W sm_clock=MHz mem_clock=MHz fan=% pstate=N "
    "compute_mode=default|exclusive_process|prohibited mig=on|off clocks_event_reasons=MASK "
    "energy=J ecc_mode=on|off remapped_corr=N remapped_unc=N remap_pending=0|1 "
    "remap_failure=0|1 pcie_replays=N ecc_volatile=clear timeslice=US|default nvlink_link=L "
    "nvlink_replay=N nvlink_recovery=N nvlink_crc_flit=N nvlink_crc_data=N nvlink_ecc_data=N";

/* The NVLink error counter keys, by nvmlNvLinkErrorCounter_t. */
static const char *const nvlink_error_keys[5] = {
    "nvlink_replay", "nvlink_recovery", "nvlink_crc_flit", "nvlink_crc_data", "nvlink_ecc_data"};

/* Whole-string decimal in [0, max]. */
static bool uint_in(const char *s, size_t len, uint64_t max, uint64_t *ret)
{
    if (len == 0 || len > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > max)
            return false;
    }
    *ret = v;
    return true;
}

/* "250", "250.5", "72.125" watts → milliwatts in [0, max_w]. */
static bool watts(const char *s, uint64_t max_w, uint32_t *ret_mw)
{
    const char *dot = strchr(s, '.');
    size_t wl = dot ? (size_t)(dot - s) : strlen(s);
    uint64_t w, milli = 0;
    if (!uint_in(s, wl, max_w, &w))
        return false;
    if (dot) {
        size_t fl = strlen(dot + 1);
        if (fl == 0 || fl > 3 || !uint_in(dot + 1, fl, 999, &milli))
            return false;
        for (size_t i = fl; i < 3; i++)
            milli *= 10;
    }
    uint64_t mw = w * 1000 + milli;
    if (mw > max_w * 1000)
        return false;
    *ret_mw = (uint32_t)mw;
    return true;
}

int emu_args_gpu_index(const char *s, unsigned gpu_count, unsigned *ret, char *err, size_t errlen)
{
    if (!s || !*s)
        return errbuf_printf(err, errlen, "empty GPU: want an index, a UUID or a PCI bus id");
    size_t len = strlen(s);
    if (strspn(s, "0123456789") != len)
        return -ENOENT;
    uint64_t v;
    if (!uint_in(s, len, UINT32_MAX, &v) || v >= gpu_count)
        return errbuf_printf(err, errlen, "no GPU '%s': the machine has GPUs 0-%u", s,
                             gpu_count ? gpu_count - 1 : 0);
    *ret = (unsigned)v;
    return 0;
}

int emu_args_numa(const char *s, unsigned want, int *ret, char *err, size_t errlen)
{
    int tmp[EMU_MAX_GPUS];
    unsigned n = 0;
    if (!s)
        return errbuf_printf(err, errlen, "missing NUMA list");
    const char *p = s;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        bool neg = len > 0 && p[0] == '-';
        uint64_t v;
        if (!uint_in(p + neg, len - neg, neg ? 1 : 1023, &v))
            return errbuf_printf(err, errlen,
                                 "bad NUMA node '%.*s' in '%s': want -1 (none) or 0-1023",
                                 (int)(len > 32 ? 32 : len), p, s);
        if (n == EMU_MAX_GPUS || n == want)
            return errbuf_printf(err, errlen,
                                 "NUMA list '%s' has more than %u entries (one per GPU)", s, want);
        tmp[n++] = neg ? -(int)v : (int)v;
        if (!end)
            break;
        p = end + 1;
    }
    if (n != want)
        return errbuf_printf(err, errlen, "NUMA list '%s' has %u entries, want %u (one per GPU)", s,
                             n, want);
    memcpy(ret, tmp, n * sizeof(int));
    return 0;
}

int emu_args_nvlink(const char *s, enum emu_nvlink_mode *ret, char *err, size_t errlen)
{
    if (s && strcmp(s, "all") == 0)
        *ret = EMU_NVLINK_ALL;
    else if (s && strcmp(s, "none") == 0)
        *ret = EMU_NVLINK_NONE;
    else if (s && strcmp(s, "pairs") == 0)
        *ret = EMU_NVLINK_PAIRS;
    else
        return errbuf_printf(err, errlen, "bad NVLink mode '%s': want all, none or pairs",
                             s ? s : "");
    return 0;
}

int emu_args_mode(const char *s, unsigned *ret, char *err, size_t errlen)
{
    unsigned v = 0;
    size_t n = s ? strlen(s) : 0;
    bool ok = n >= 3 && n <= 4;
    for (size_t i = 0; ok && i < n; i++) {
        ok = s[i] >= '0' && s[i] <= '7';
        v = v * 8 + (unsigned)(s[i] - '0');
    }
    if (!ok || v > 0777 || (v & 0600) != 0600)
        return errbuf_printf(err, errlen,
                             "bad mode '%.16s': want octal permission bits with owner read and "
                             "write, e.g. 0600 (the owner only), 0660 (a group) or 0666 (anyone)",
                             s ? s : "");
    *ret = v;
    return 0;
}

int emu_args_iommu_groups(const char *s, bool *ret, char *err, size_t errlen)
{
    if (s && strcmp(s, "per-gpu") == 0)
        *ret = false;
    else if (s && strcmp(s, "shared") == 0)
        *ret = true;
    else
        return errbuf_printf(err, errlen,
                             "bad --iommu-groups '%.32s': want per-gpu (one group per GPU) or "
                             "shared (GPUs 2k and 2k+1 in one group)",
                             s ? s : "");
    return 0;
}

int emu_args_mig_profiles(const char *s, const struct emu_mig_board *b, unsigned *ret, size_t max,
                          size_t *ret_n, char *err, size_t errlen)
{
    unsigned tmp[EMU_MIG_MAX_GI];
    size_t n = 0;
    if (!b)
        return errbuf_printf(err, errlen, "this GPU has no MIG profiles");
    if (!s || !*s)
        return errbuf_printf(err, errlen, "empty MIG profile list: want e.g. 1g.10gb,3g.40gb");
    if (max > EMU_MIG_MAX_GI)
        max = EMU_MIG_MAX_GI;
    for (const char *p = s;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const struct emu_mig_gi_profile *prof = emu_mig_gi_by_name(b, p, len);
        uint64_t id;
        if (!prof && uint_in(p, len, 255, &id))
            prof = emu_mig_gi_by_id(b, (unsigned)id);
        if (!prof) {
            char names[256] = "";
            for (size_t i = 0; i < b->n; i++)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s (%u)",
                         i ? ", " : "", b->profiles[i].name, b->profiles[i].id);
            return errbuf_printf(err, errlen, "unknown MIG profile '%.*s' on %s: want one of %s",
                                 (int)(len > 32 ? 32 : len), p, b->gpu_name, names);
        }
        if (n == max)
            return errbuf_printf(err, errlen,
                                 "MIG profile list '%.64s' has more than %zu entries (a GPU holds "
                                 "at most %d GPU instances)",
                                 s, max, EMU_MIG_MAX_GI);
        tmp[n++] = prof->index;
        if (!end)
            break;
        p = end + 1;
    }
    memcpy(ret, tmp, n * sizeof(*tmp));
    *ret_n = n;
    return 0;
}

int emu_args_set(const char *kv, struct emu_set_req *req, char *err, size_t errlen)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq)
        return errbuf_printf(err, errlen, "bad setting '%s': want key=value (keys: %s)",
                             kv ? kv : "", emu_args_set_keys);
    size_t kl = (size_t)(eq - kv);
    const char *v = eq + 1;
    struct emu_set_req r = *req;
    uint64_t n;
#define KEY(name) (kl == strlen(name) && strncmp(kv, name, kl) == 0)
    if (KEY("temperature")) {
        if (!uint_in(v, strlen(v), 200, &n))
            return errbuf_printf(err, errlen, "bad temperature '%s': want degrees C, 0-200", v);
        r.temperature_c = (uint32_t)n;
        r.mask |= EMU_SET_TEMPERATURE;
    } else if (KEY("power") || KEY("power_limit")) {
        uint32_t mw;
        if (!watts(v, 2000, &mw))
            return errbuf_printf(err, errlen, "bad %.*s '%s': want watts, 0-2000", (int)kl, kv, v);
        if (KEY("power")) {
            r.power_mw = mw;
            r.mask |= EMU_SET_POWER;
        } else {
            r.power_limit_mw = mw;
            r.mask |= EMU_SET_POWER_LIMIT;
        }
    } else if (KEY("sm_clock") || KEY("mem_clock")) {
        if (!uint_in(v, strlen(v), 10000, &n) || n == 0)
            return errbuf_printf(err, errlen, "bad %.*s '%s': want MHz, 1-10000", (int)kl, kv, v);
        if (KEY("sm_clock")) {
            r.sm_clock_mhz = (uint32_t)n;
            r.mask |= EMU_SET_SM_CLOCK;
        } else {
            r.mem_clock_mhz = (uint32_t)n;
            r.mask |= EMU_SET_MEM_CLOCK;
        }
    } else if (KEY("fan")) {
        if (!uint_in(v, strlen(v), 100, &n))
            return errbuf_printf(err, errlen, "bad fan '%s': want percent, 0-100", v);
        r.fan_percent = (uint32_t)n;
        r.mask |= EMU_SET_FAN;
    } else if (KEY("pstate")) {
        if (!uint_in(v, strlen(v), 15, &n))
            return errbuf_printf(err, errlen, "bad pstate '%s': want 0-15", v);
        r.pstate = (uint32_t)n;
        r.mask |= EMU_SET_PSTATE;
    } else if (KEY("compute_mode")) {
        /* NVML's nvmlComputeMode_t: 1 (exclusive thread) is gone from current drivers */
        if (strcmp(v, "default") == 0 || strcmp(v, "0") == 0)
            r.compute_mode = 0;
        else if (strcmp(v, "prohibited") == 0 || strcmp(v, "2") == 0)
            r.compute_mode = 2;
        else if (strcmp(v, "exclusive_process") == 0 || strcmp(v, "3") == 0)
            r.compute_mode = 3;
        else
            return errbuf_printf(
                err, errlen, "bad compute_mode '%s': want default, exclusive_process or prohibited",
                v);
        r.mask |= EMU_SET_COMPUTE_MODE;
    } else if (KEY("mig")) {
        if (strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
            r.mig_mode = 1;
        else if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
            r.mig_mode = 0;
        else
            return errbuf_printf(err, errlen, "bad mig '%s': want on or off", v);
        r.mask |= EMU_SET_MIG;
    } else if (KEY("clocks_event_reasons")) {
        bool hex = strncmp(v, "0x", 2) == 0 || strncmp(v, "0X", 2) == 0;
        char *end = NULL;
        errno = 0;
        unsigned long long m = hex ? strtoull(v + 2, &end, 16) : 0;
        if (hex ? (!isxdigit((unsigned char)v[2]) || *end || errno)
                : !uint_in(v, strlen(v), UINT64_MAX, &n))
            return errbuf_printf(err, errlen,
                                 "bad clocks_event_reasons '%s': want a bit mask, e.g. 0x40", v);
        r.clocks_event_reasons = hex ? (uint64_t)m : n;
        r.mask |= EMU_SET_CLOCKS_EVENT_REASONS;
    } else if (KEY("energy")) {
        if (!uint_in(v, strlen(v), UINT64_MAX / 1000, &n))
            return errbuf_printf(err, errlen, "bad energy '%s': want whole joules", v);
        r.energy_mj = n * 1000;
        r.mask |= EMU_SET_ENERGY;
    } else if (KEY("ecc_mode")) {
        if (strcmp(v, "on") == 0)
            r.ecc_disabled = 0;
        else if (strcmp(v, "off") == 0)
            r.ecc_disabled = 1;
        else
            return errbuf_printf(err, errlen, "bad ecc_mode '%s': want on or off", v);
        r.mask |= EMU_SET_ECC_MODE;
    } else if (KEY("remapped_corr") || KEY("remapped_unc")) {
        if (!uint_in(v, strlen(v), 65535, &n))
            return errbuf_printf(err, errlen, "bad %.*s '%s': want rows, 0-65535", (int)kl, kv, v);
        if (KEY("remapped_corr")) {
            r.remapped_corr = (uint32_t)n;
            r.mask |= EMU_SET_REMAPPED_CORR;
        } else {
            r.remapped_unc = (uint32_t)n;
            r.mask |= EMU_SET_REMAPPED_UNC;
        }
    } else if (KEY("remap_pending") || KEY("remap_failure")) {
        if (!uint_in(v, strlen(v), 1, &n))
            return errbuf_printf(err, errlen, "bad %.*s '%s': want 0 or 1", (int)kl, kv, v);
        if (KEY("remap_pending")) {
            r.remap_pending = (uint32_t)n;
            r.mask |= EMU_SET_REMAP_PENDING;
        } else {
            r.remap_failure = (uint32_t)n;
            r.mask |= EMU_SET_REMAP_FAILURE;
        }
    } else if (KEY("timeslice")) {
        if (strcmp(v, "default") == 0)
            n = 0;
        else if (!uint_in(v, strlen(v), EMU_TIMESLICE_MAX_US, &n) || n == 0)
            return errbuf_printf(err, errlen,
                                 "bad timeslice '%s': want microseconds, 1-%u, or default", v,
                                 EMU_TIMESLICE_MAX_US);
        r.timeslice_us = (uint32_t)n;
        r.mask |= EMU_SET_TIMESLICE;
    } else if (KEY("pcie_replays")) {
        if (!uint_in(v, strlen(v), UINT32_MAX, &n))
            return errbuf_printf(err, errlen, "bad pcie_replays '%s': want 0-4294967295", v);
        r.pcie_replays = (uint32_t)n;
        r.mask |= EMU_SET_PCIE_REPLAYS;
    } else if (KEY("nvlink_link")) {
        if (!uint_in(v, strlen(v), 17, &n))
            return errbuf_printf(err, errlen, "bad nvlink_link '%s': want a link, 0-17", v);
        r.nvlink_error_link = (uint32_t)n;
        r.mask |= EMU_SET_NVLINK_ERROR_LINK;
    } else if (strncmp(kv, "nvlink_", 7) == 0 && kl > 7) {
        size_t c = 0;
        while (c < 5 && !KEY(nvlink_error_keys[c]))
            c++;
        if (c == 5)
            return errbuf_printf(err, errlen, "unknown setting '%.*s' (keys: %s)",
                                 (int)(kl > 40 ? 40 : kl), kv, emu_args_set_keys);
        if (!uint_in(v, strlen(v), UINT32_MAX, &n))
            return errbuf_printf(err, errlen, "bad %s '%s': want 0-4294967295",
                                 nvlink_error_keys[c], v);
        r.nvlink_errors[c] = (uint32_t)n;
        r.nvlink_errors_mask |= 1u << c;
        r.mask |= EMU_SET_NVLINK_ERRORS;
    } else if (KEY("ecc_volatile")) {
        if (strcmp(v, "clear") != 0)
            return errbuf_printf(err, errlen, "bad ecc_volatile '%s': the only value is clear", v);
        r.mask |= EMU_SET_ECC_VOLATILE_CLEAR;
    } else {
        return errbuf_printf(err, errlen, "unknown setting '%.*s' (keys: %s)",
                             (int)(kl > 40 ? 40 : kl), kv, emu_args_set_keys);
    }
#undef KEY
    *req = r;
    return 0;
}

int emu_args_set_apply(struct emu_gpu *g, const struct emu_set_req *req, char *err, size_t errlen)
{
    if ((req->mask & EMU_SET_SM_CLOCK) && req->sm_clock_mhz > g->sm_clock_max_mhz) {
        errbuf_printf(err, errlen, "sm_clock %u MHz is above GPU %u's maximum of %u MHz",
                      req->sm_clock_mhz, g->index, g->sm_clock_max_mhz);
        return -ERANGE;
    }
    if ((req->mask & EMU_SET_MIG) && req->mig_mode && !emu_mig_board_find(g->name)) {
        errbuf_printf(err, errlen, "GPU %u (%s) does not support MIG", g->index, g->name);
        return -ERANGE;
    }
    if (req->mask & EMU_SET_TEMPERATURE)
        g->temperature_c = req->temperature_c;
    if (req->mask & (EMU_SET_POWER | EMU_SET_ENERGY)) {
        /* bank the energy drawn at the old power before the power or the counter changes */
        uint64_t now = emu_state_now_ns();
        if (g->energy_stamp_ns && now > g->energy_stamp_ns)
            g->energy_mj += (uint64_t)g->power_mw * (now - g->energy_stamp_ns) / 1000000000ULL;
        g->energy_stamp_ns = now;
        if (req->mask & EMU_SET_ENERGY)
            g->energy_mj = req->energy_mj;
    }
    if (req->mask & EMU_SET_POWER)
        g->power_mw = req->power_mw;
    if (req->mask & EMU_SET_CLOCKS_EVENT_REASONS)
        g->clocks_event_reasons = req->clocks_event_reasons;
    if (req->mask & EMU_SET_ECC_MODE)
        g->ecc_disabled = req->ecc_disabled;
    if (req->mask & EMU_SET_REMAPPED_CORR)
        g->remapped_corr = req->remapped_corr;
    if (req->mask & EMU_SET_REMAPPED_UNC)
        g->remapped_unc = req->remapped_unc;
    if (req->mask & EMU_SET_REMAP_PENDING)
        g->remap_pending = req->remap_pending;
    if (req->mask & EMU_SET_REMAP_FAILURE)
        g->remap_failure = req->remap_failure;
    if (req->mask & EMU_SET_PCIE_REPLAYS)
        g->pcie_replays = req->pcie_replays;
    if (req->mask & EMU_SET_TIMESLICE)
        g->timeslice_us = req->timeslice_us; /* work queued from now on is dealt out in it */
    if (req->mask & EMU_SET_ECC_VOLATILE_CLEAR)
        g->ecc_vol_single_bit = g->ecc_vol_double_bit = 0;
    if (req->mask & EMU_SET_POWER_LIMIT)
        g->power_limit_mw = req->power_limit_mw;
    if (req->mask & EMU_SET_SM_CLOCK)
        g->sm_clock_mhz = req->sm_clock_mhz;
    if (req->mask & EMU_SET_MEM_CLOCK)
        g->mem_clock_mhz = req->mem_clock_mhz;
    if (req->mask & EMU_SET_FAN)
        g->fan_percent = req->fan_percent;
    if (req->mask & EMU_SET_PSTATE)
        g->pstate = req->pstate;
    if (req->mask & EMU_SET_COMPUTE_MODE)
        g->compute_mode = req->compute_mode;
    if (req->mask & EMU_SET_NVLINK_ERROR_LINK)
        g->nvlink_error_link = req->nvlink_error_link;
    for (unsigned c = 0; c < 5 && (req->mask & EMU_SET_NVLINK_ERRORS); c++)
        if (req->nvlink_errors_mask & (1u << c))
            g->nvlink_errors[c] = req->nvlink_errors[c];
    return 0;
}
