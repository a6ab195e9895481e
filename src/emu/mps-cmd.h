/* mps-cmd.h — the command language of nvidia-cuda-mps-control, parsed.
 *
 * One line of text ("set_default_device_pinned_mem_limit 0 2G") becomes a
 * struct mps_cmd, or an error message naming the bad word. Pure: no I/O, no
 * state; the daemon (mps-control.c) executes the result. The text arrives
 * from any local user through the control socket, so this is a parser of
 * outside data with its own fuzz target (tests/fuzz/fuzz-mps-cmd.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Longest command line accepted; the real tool's commands are short. */
#define MPS_CMD_MAX_LINE 1024

enum mps_cmd_kind {
    MPS_CMD_QUIT,                     /* quit [-t SECONDS] */
    MPS_CMD_GET_SERVER_LIST,          /* get_server_list */
    MPS_CMD_GET_SERVER_STATUS,        /* get_server_status PID */
    MPS_CMD_START_SERVER,             /* start_server -uid UID */
    MPS_CMD_SHUTDOWN_SERVER,          /* shutdown_server PID [-f] */
    MPS_CMD_GET_CLIENT_LIST,          /* get_client_list PID */
    MPS_CMD_GET_DEVICE_CLIENT_LIST,   /* get_device_client_list [PID] */
    MPS_CMD_GET_DEFAULT_THREAD_PCT,   /* get_default_active_thread_percentage */
    MPS_CMD_SET_DEFAULT_THREAD_PCT,   /* set_default_active_thread_percentage PCT */
    MPS_CMD_GET_THREAD_PCT,           /* get_active_thread_percentage PID */
    MPS_CMD_SET_THREAD_PCT,           /* set_active_thread_percentage PID PCT */
    MPS_CMD_GET_DEFAULT_PINNED_LIMIT, /* get_default_device_pinned_mem_limit DEV */
    MPS_CMD_SET_DEFAULT_PINNED_LIMIT, /* set_default_device_pinned_mem_limit DEV VALUE */
    MPS_CMD_GET_PINNED_LIMIT,         /* get_device_pinned_mem_limit PID DEV */
    MPS_CMD_SET_PINNED_LIMIT,         /* set_device_pinned_mem_limit PID DEV VALUE */
};

struct mps_cmd {
    enum mps_cmd_kind kind;
    pid_t pid;               /* server PID (per-server forms, shutdown, lists); 0 = none given */
    uint32_t uid;            /* start_server */
    uint32_t device;         /* pinned-memory forms */
    uint32_t thread_pct_x10; /* percentage in tenths: 50.5 % → 505; 1..1000 */
    uint64_t bytes;          /* pinned-memory limit; 0 = no limit */
    uint32_t timeout_s;      /* quit -t */
    int force;               /* shutdown_server -f */
};

/* Parses one command line (a trailing newline is allowed). Returns 0 and
 * fills *ret_cmd, or -EINVAL with a one-line message in err ("unknown command
 * 'foo'", "bad percentage '150': want a number in (0, 100]"), *ret_cmd
 * untouched. A line of blanks is -ENODATA (nothing to do). */
int mps_cmd_parse(const char *line, struct mps_cmd *ret_cmd, char *err, size_t errlen);

/* "2G", "512M", "64K", "1048576", optionally with a "B" or "iB" tail: powers
 * of 1024, as NVIDIA's tools read them. "0" = no limit. 0 or -EINVAL/-ERANGE. */
int mps_cmd_parse_bytes(const char *s, uint64_t *ret_bytes);

/* A client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=1G,1=512MB", MPS guide, "Appendix:
 * Environment Variables"): each well-formed "DEV=VALUE" entry with DEV < n and VALUE > 0 lowers
 * lim[DEV] (0 = no limit) to VALUE when it is below; nothing is ever raised. The value comes
 * from a tenant's environment (tests/fuzz/fuzz-mps-cmd.c). Returns the number of entries
 * ignored as malformed or out of range. */
int mps_cmd_tighten_limits(const char *s, uint64_t *lim, size_t n);

/* Formats a limit the way get_* prints it: the largest unit that divides it
 * exactly ("2G", "1536M", "4097"), "0" for none. Returns buf. */
char *mps_cmd_format_bytes(uint64_t bytes, char *buf, size_t len);

/* Formats a percentage in tenths as "50.0". Returns buf. */
char *mps_cmd_format_pct(uint32_t pct_x10, char *buf, size_t len);
