/* Unit tests for the shared usage region: layout, attach of foreign files,
 * exact reservations, races between threads and processes, and the reclaim
 * of slots of processes killed at any point. */
#include "region.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *region_path(const char *name)
{
    static char buf[4][512];
    static int n;
    char *p = buf[n++ % 4];
    snprintf(p, 512, "%s/%s", tap_tmpdir(), name);
    return p;
}

static uint32_t dead_pid(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    waitpid(p, NULL, 0);
    return (uint32_t)p;
}

TEST(region_layout_and_attach)
{
    struct vc_region r;
    const char *path = region_path("layout");
    REQUIRE_EQ_INT(vc_region_attach(path, &r), 0);
    CHECK_EQ_U64(r.hdr->magic, VC_REGION_MAGIC);
    CHECK_EQ_INT(r.hdr->abi_version, VC_REGION_ABI);
    CHECK_EQ_INT(r.hdr->header_size, 4096);
    CHECK_EQ_INT(r.hdr->slot_count, VC_REGION_SLOTS);
    CHECK_EQ_INT(r.hdr->slot_size, 256);
    CHECK_EQ_INT(r.hdr->slot_offset, 4096);
    CHECK_EQ_INT(r.hdr->device_count, VC_REGION_DEVICES);
    CHECK_EQ_U64(r.hdr->region_size, VC_REGION_SIZE);
    CHECK(memcmp(&r.hdr->magic, "VCUAREG1", 8) == 0);
    struct stat st;
    REQUIRE_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_U64(st.st_size, VC_REGION_SIZE);
    /* A second attach sees the same memory. */
    struct vc_region r2;
    REQUIRE_EQ_INT(vc_region_attach(path, &r2), 0);
    r.hdr->memory_limit[3] = 777;
    CHECK_EQ_U64(r2.hdr->memory_limit[3], 777);
    vc_region_detach(&r2);
    vc_region_detach(&r);
    vc_region_detach(&r); /* idempotent */
}

TEST(region_refuses_foreign_file_and_leaves_it)
{
    const char *path = region_path("foreign");
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    char junk[64];
    memset(junk, 'x', sizeof(junk));
    REQUIRE(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    close(fd);
    struct vc_region r = {0};
    CHECK_EQ_INT(vc_region_attach(path, &r), -EPROTO);
    CHECK(r.hdr == NULL);
    /* Another ABI version is refused too. */
    const char *p2 = region_path("otherabi");
    REQUIRE_EQ_INT(vc_region_attach(p2, &r), 0);
    r.hdr->abi_version = 99;
    vc_region_detach(&r);
    CHECK_EQ_INT(vc_region_attach(p2, &r), -EPROTO);
    CHECK_EQ_INT(vc_region_attach("/proc", &r), -EISDIR);
}

TEST(region_reserve_is_exact)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region_path("exact"), &r), 0);
    int s = vc_region_claim_slot(&r, (uint32_t)getpid(), vc_proc_start_time((uint32_t)getpid()));
    REQUIRE(s >= 0);
    const uint64_t limit = 1000;
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 999, limit), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 2, limit), -ENOSPC);
    CHECK_EQ_U64(vc_region_used(&r, 0), 999);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 1, limit), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 1, limit), -ENOSPC);
    CHECK_EQ_U64(vc_region_used(&r, 0), 1000);
    /* devices are independent */
    CHECK_EQ_INT(vc_region_reserve(&r, s, 1, 1000, limit), 0);
    vc_region_release(&r, s, 0, 500);
    CHECK_EQ_U64(vc_region_used(&r, 0), 500);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 500, limit), 0);
    /* releasing more than held saturates at zero */
    vc_region_release(&r, s, 0, 5000);
    CHECK_EQ_U64(vc_region_used(&r, 0), 0);
    /* a second slot shares the same limit */
    int s2 = vc_region_claim_slot(&r, (uint32_t)getpid(), 0);
    REQUIRE(s2 >= 0 && s2 != s);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 600, limit), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, s2, 0, 401, limit), -ENOSPC);
    CHECK_EQ_INT(vc_region_reserve(&r, s2, 0, 400, limit), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, UINT64_MAX, limit), -ENOSPC);
    /* no limit: anything goes */
    CHECK_EQ_INT(vc_region_reserve(&r, s, 2, 1ull << 50, 0), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, -1, 0, 1, limit), -EINVAL);
    CHECK_EQ_INT(vc_region_reserve(&r, s, VC_REGION_DEVICES, 1, limit), -EINVAL);
    vc_region_detach(&r);
}

/* Threads on separate slots: after each successful reservation the holder
 * adds to `held`; the sum of what is held never exceeds the limit. */
struct race {
    struct vc_region *r;
    int slot;
    uint64_t limit;
    atomic_ullong *held;
    atomic_int *violations;
    unsigned seed;
    int successes;
};

static void *race_thread(void *arg)
{
    struct race *a = arg;
    uint64_t mine[8] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = (int)(rand_r(&a->seed) % 8);
        if (mine[k]) {
            atomic_fetch_sub(a->held, mine[k]);
            vc_region_release(a->r, a->slot, 0, mine[k]);
            mine[k] = 0;
        } else {
            uint64_t sz = 1 + rand_r(&a->seed) % (a->limit / 4);
            if (vc_region_reserve(a->r, a->slot, 0, sz, a->limit) == 0) {
                mine[k] = sz;
                a->successes++;
                if (atomic_fetch_add(a->held, sz) + sz > a->limit)
                    atomic_fetch_add(a->violations, 1);
            }
        }
    }
    for (int k = 0; k < 8; k++)
        if (mine[k]) {
            atomic_fetch_sub(a->held, mine[k]);
            vc_region_release(a->r, a->slot, 0, mine[k]);
        }
    return NULL;
}

TEST(region_threads_never_exceed)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region_path("threads"), &r), 0);
    atomic_ullong held = 0;
    atomic_int violations = 0;
    struct race a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct race){.r = &r,
                             .limit = 1000000,
                             .held = &held,
                             .violations = &violations,
                             .seed = (unsigned)i * 7919u + 1};
        a[i].slot = vc_region_claim_slot(&r, (uint32_t)getpid(), 0);
        REQUIRE(a[i].slot >= 0);
    }
    /* every slot claimed before any thread runs: a claim resets the process's own copy of
     * what it holds (a process claims once, before its first allocation) */
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, race_thread, &a[i]);
    int succ = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        succ += a[i].successes;
    }
    CHECK_EQ_INT(atomic_load(&violations), 0);
    CHECK(succ > 1000); /* the race really happened */
    CHECK_EQ_U64(vc_region_used(&r, 0), 0);
    vc_region_detach(&r);
}

/* The threads of one process share its slot: their reservations and releases,
 * racing, are never mistaken for tampering (the process's own copy of what it
 * holds and its slot are read while another thread is between updating the
 * two), and the slot ends at 0. */
TEST(region_threads_of_one_slot_are_not_tampering)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region_path("one-slot"), &r), 0);
    int slot = vc_region_claim_slot(&r, (uint32_t)getpid(), 0);
    REQUIRE(slot >= 0);
    atomic_ullong held = 0;
    atomic_int violations = 0;
    struct race a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct race){.r = &r,
                             .slot = slot,
                             .limit = 1000000,
                             .held = &held,
                             .violations = &violations,
                             .seed = (unsigned)i * 104729u + 3};
        pthread_create(&t[i], NULL, race_thread, &a[i]);
    }
    int succ = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        succ += a[i].successes;
    }
    CHECK_EQ_INT(atomic_load(&violations), 0);
    CHECK(succ > 1000);
    CHECK_EQ_U64(r.tampered, 0);
    CHECK_EQ_U64(vc_region_used(&r, 0), 0);
    vc_region_detach(&r);
}

/* 8 processes race to fill one quota with random sizes; a shared counter of
 * what they hold after success never passes the limit, and the quota ends up
 * nearly full (no process is starved by the protocol). */
TEST(region_processes_never_exceed)
{
    const char *path = region_path("procs");
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(path, &r), 0);
    struct shared {
        atomic_ullong held;
        atomic_int violations;
        atomic_int go;
    } *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    const uint64_t limit = 64ull << 20;
    pid_t kids[8];
    for (int i = 0; i < 8; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            struct vc_region cr;
            if (vc_region_attach(path, &cr) < 0)
                _exit(2);
            uint32_t me = (uint32_t)getpid();
            int s = vc_region_claim_slot(&cr, me, vc_proc_start_time(me));
            if (s < 0)
                _exit(3);
            while (!atomic_load(&sh->go))
                ;
            unsigned seed = me;
            int fails = 0;
            while (fails < 200) {
                uint64_t sz = 1 + rand_r(&seed) % (1 << 20);
                if (vc_region_reserve(&cr, s, 0, sz, limit) == 0) {
                    if (atomic_fetch_add(&sh->held, sz) + sz > limit)
                        atomic_fetch_add(&sh->violations, 1);
                } else {
                    fails++;
                }
            }
            _exit(0);
        }
        REQUIRE(kids[i] > 0);
    }
    atomic_store(&sh->go, 1);
    for (int i = 0; i < 8; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_EQ_INT(atomic_load(&sh->violations), 0);
    CHECK_LE_U64(atomic_load(&sh->held), limit);
    CHECK_EQ_U64(vc_region_used(&r, 0), atomic_load(&sh->held));
    /* Random sizes up to 1 MiB, 200 failures each: the last MiB may stay free. */
    CHECK_GE_U64(atomic_load(&sh->held), limit - (1ull << 20));
    /* All exited without releasing: the reaper gives everything back. */
    CHECK_EQ_INT(vc_region_reap(&r), 8);
    CHECK_EQ_U64(vc_region_used(&r, 0), 0);
    munmap(sh, sizeof(*sh));
    vc_region_detach(&r);
}

/* A process killed at a random point of reserve/release loops: whatever it
 * held comes back, and nothing of anyone else's is lost or double counted. */
TEST(region_kill9_at_any_point)
{
    const char *path = region_path("kill9");
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(path, &r), 0);
    uint32_t me = (uint32_t)getpid();
    int mine = vc_region_claim_slot(&r, me, vc_proc_start_time(me));
    REQUIRE(mine >= 0);
    REQUIRE_EQ_INT(vc_region_reserve(&r, mine, 0, 12345, 0), 0);
    for (int round = 0; round < 20; round++) {
        int pfd[2];
        REQUIRE_EQ_INT(pipe(pfd), 0);
        pid_t kid = fork();
        if (kid == 0) {
            close(pfd[0]);
            struct vc_region cr;
            if (vc_region_attach(path, &cr) < 0)
                _exit(2);
            uint32_t p = (uint32_t)getpid();
            int s = vc_region_claim_slot(&cr, p, vc_proc_start_time(p));
            (void)!write(pfd[1], "x", 1);
            unsigned seed = p;
            for (;;) {
                uint64_t sz = 1 + rand_r(&seed) % 4096;
                if (vc_region_reserve(&cr, s, 0, sz, 1 << 20) == 0)
                    vc_region_release(&cr, s, 0, rand_r(&seed) % 2 ? sz : 0);
            }
        }
        close(pfd[1]);
        char c;
        REQUIRE(read(pfd[0], &c, 1) == 1);
        close(pfd[0]);
        /* let it run a varying while, then kill it mid-loop */
        for (volatile int spin = 0; spin < round * 20000; spin++)
            ;
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        CHECK(vc_region_used(&r, 0) >= 12345);
        vc_region_reap(&r);
        CHECK_EQ_U64(vc_region_used(&r, 0), 12345);
    }
    vc_region_detach(&r);
}

TEST(region_reap_rules)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region_path("reap"), &r), 0);
    uint32_t me = (uint32_t)getpid();
    /* our own slot and a live process (our parent-like child) are kept */
    int s_me = vc_region_claim_slot(&r, me, vc_proc_start_time(me));
    pid_t live = fork();
    if (live == 0) {
        pause();
        _exit(0);
    }
    uint32_t lp = (uint32_t)live;
    int s_live = vc_region_claim_slot(&r, lp, 0);   /* start time unknown: kept while alive */
    int s_reused = vc_region_claim_slot(&r, lp, 1); /* pid reused: start time differs */
    int s_dead = vc_region_claim_slot(&r, dead_pid(), 0);
    REQUIRE(s_me >= 0 && s_live >= 0 && s_reused >= 0 && s_dead >= 0);
    vc_region_charge(&r, s_me, 0, 1);
    vc_region_charge(&r, s_live, 0, 10);
    vc_region_charge(&r, s_reused, 0, 100);
    vc_region_charge(&r, s_dead, 0, 1000);
    /* a reaper that died half-way through zeroing: taken over */
    int s_halfway = vc_region_claim_slot(&r, me, 0);
    REQUIRE(s_halfway >= 0);
    vc_region_charge(&r, s_halfway, 0, 10000);
    __atomic_store_n(&r.slots[s_halfway].owner, VC_OWNER_RECLAIM | dead_pid(), __ATOMIC_SEQ_CST);
    CHECK_EQ_U64(vc_region_used(&r, 0), 11111);
    CHECK_EQ_INT(vc_region_reap(&r), 3);
    CHECK_EQ_U64(vc_region_used(&r, 0), 11);
    CHECK_EQ_U64(r.slots[s_dead].owner, 0);
    CHECK_EQ_U64(r.slots[s_halfway].owner, 0);
    CHECK_EQ_U64(r.slots[s_live].owner, lp);
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    CHECK_EQ_INT(vc_region_reap(&r), 1);
    CHECK_EQ_U64(vc_region_used(&r, 0), 1);
    vc_region_release_slot(&r, s_me, me);
    CHECK_EQ_U64(vc_region_used(&r, 0), 0);
    CHECK_EQ_U64(r.slots[s_me].owner, 0);
    vc_region_detach(&r);
}

/* Bytes added to a slot after its owner's exit freed it (a straggler thread)
 * are dropped by the next reap and by the next claimer. */
TEST(region_leftovers_in_free_slots)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region_path("leftover"), &r), 0);
    uint32_t me = (uint32_t)getpid();
    int s = vc_region_claim_slot(&r, me, 0);
    REQUIRE(s >= 0);
    vc_region_release_slot(&r, s, me);
    CHECK_EQ_U64(r.slots[s].owner, 0);
    vc_region_charge(&r, s, 0, 4096); /* the straggler */
    CHECK_EQ_U64(vc_region_used(&r, 0), 4096);
    vc_region_reap(&r);
    CHECK_EQ_U64(vc_region_used(&r, 0), 0);
    CHECK_EQ_U64(r.slots[s].owner, 0);
    vc_region_charge(&r, s, 1, 4096);
    int s2 = vc_region_claim_slot(&r, me, 0);
    CHECK_EQ_INT(s2, s);
    CHECK_EQ_U64(vc_region_used(&r, 1), 0);
    vc_region_detach(&r);
}

TEST(region_full_table_reaps_dead_owners)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(region_path("full"), &r), 0);
    uint32_t dead = dead_pid();
    for (unsigned i = 0; i < VC_REGION_SLOTS; i++)
        REQUIRE(vc_region_claim_slot(&r, dead, 0) == (int)i);
    CHECK_EQ_INT(r.hdr->slot_hwm, VC_REGION_SLOTS);
    int s = vc_region_claim_slot(&r, (uint32_t)getpid(), 0);
    CHECK(s >= 0);
    vc_region_detach(&r);
}

TEST(region_anonymous)
{
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(NULL, &r), 0);
    CHECK(r.anonymous);
    int s = vc_region_claim_slot(&r, (uint32_t)getpid(), 0);
    REQUIRE(s >= 0);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 10, 10), 0);
    CHECK_EQ_INT(vc_region_reserve(&r, s, 0, 1, 10), -ENOSPC);
    vc_region_detach(&r);
}

TEST(proc_start_time)
{
    uint32_t me = (uint32_t)getpid();
    uint64_t t = vc_proc_start_time(me);
    CHECK(t > 0);
    CHECK_EQ_U64(vc_proc_start_time(me), t);
    CHECK_EQ_U64(vc_proc_start_time(dead_pid()), 0);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
