/* userns.h — whether this process runs in the initial user namespace, read so that a tenant
 * cannot forge the answer with mounts of its own (docs/vcuda.md, "Threat model", F5b).
 *
 * The agent's config is trusted only there: a process that made a user namespace of its own
 * (`unshare -Urm`, no privilege needed where unprivileged user namespaces are allowed) holds
 * every capability over a mount namespace of its own and can bind-mount any file over the
 * config path. Pure function of the kernel's answers; no globals. */
#pragma once

#include <stddef.h>

/* The initial user namespace's inode number (the kernel's PROC_USER_INIT_INO, fixed since
 * Linux 3.8): /proc/self/ns/user reads "user:[4026531837]" there and nowhere else. */
#define VC_USERNS_INIT_INO 0xEFFFFFFDu

/* 0 when the calling process is in the initial user namespace, as the procfs mounted at proc
 * (normally "/proc") says:
 *  - proc must be a procfs mount (fstatfs), and proc/self/uid_map, opened from it with
 *    openat2(RESOLVE_BENEATH | RESOLVE_NO_XDEV) so that no mount over any part of the path is
 *    followed (plain openat + an fstatfs check where openat2 is missing), must be the identity
 *    map "0 0 4294967295" — a map that only a process holding CAP_SETUID in the initial
 *    namespace can write for a namespace it made;
 *  - proc/self/ns/user, read the same way, must be the initial namespace's inode, which no
 *    map can fake.
 * Otherwise -EPERM with why (whylen bytes) saying what was seen, or another -errno when proc
 * cannot be read (why says which file). */
int vc_userns_initial(const char *proc, char *why, size_t whylen);
