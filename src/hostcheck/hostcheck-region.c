/* hostcheck-region.c — a container's usage region read as hostile input: the file is the
 * tenant's (it can truncate, replace, link or fill it at any moment), so it is opened below
 * its directory without following links (tenant-fs.h), read with pread into a private copy
 * — a mapping of a file the tenant truncates faults with SIGBUS — and every header field is
 * checked before anything is read through it; see hostcheck.h. */
#define _GNU_SOURCE
#include "hostcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tenant-fs.h"

static uint64_t rd64(const unsigned char *p, size_t off)
{
    uint64_t v;
    memcpy(&v, p + off, sizeof v);
    return v;
}

static uint32_t rd32(const unsigned char *p, size_t off)
{
    uint32_t v;
    memcpy(&v, p + off, sizeof v);
    return v;
}

#define H32(b, f) rd32(b, offsetof(struct vc_region_header, f))
#define H64(b, f) rd64(b, offsetof(struct vc_region_header, f))

int hostcheck_region_parse(const void *bytes, size_t len, struct hostcheck_region *ret)
{
    const unsigned char *b = bytes;
    if (!b || len < VC_REGION_SIZE)
        return -EPROTO; /* libvcuda sizes the file whole before it uses it: short = truncated */
    if (H64(b, magic) == 0)
        return -EAGAIN; /* sized, its header not written yet (libvcuda writes magic last) */
    if (H64(b, magic) != VC_REGION_MAGIC || H32(b, abi_version) != VC_REGION_ABI ||
        H32(b, header_size) != VC_REGION_HEADER_SIZE || H64(b, region_size) != VC_REGION_SIZE ||
        H32(b, slot_count) != VC_REGION_SLOTS || H32(b, slot_size) != VC_REGION_SLOT_SIZE ||
        H32(b, slot_offset) != VC_REGION_HEADER_SIZE || H32(b, device_count) != VC_REGION_DEVICES ||
        H32(b, slot_hwm) > VC_REGION_SLOTS)
        return -EPROTO;
    /* 64-byte aligned, as a mapping would be: the view's atomics need natural alignment */
    void *buf = aligned_alloc(64, VC_REGION_SIZE);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, b, VC_REGION_SIZE);
    *ret = (struct hostcheck_region){
        .buf = buf,
        .view =
            {
                .hdr = buf,
                .slots = (struct vc_region_slot *)((char *)buf + VC_REGION_HEADER_SIZE),
                .map_size = VC_REGION_SIZE,
                .mine_slot = -1,
            },
    };
    return 0;
}

int hostcheck_region_read_at(int dirfd, struct hostcheck_region *ret)
{
    off_t size = 0;
    int fd = tenant_open_file(dirfd, HOSTCHECK_REGION_FILE, 0, &size);
    if (fd < 0)
        return fd;
    if (size < (off_t)VC_REGION_SIZE) {
        close(fd);
        return -EPROTO;
    }
    unsigned char *bytes = malloc(VC_REGION_SIZE);
    if (!bytes) {
        close(fd);
        return -ENOMEM;
    }
    /* the file may shrink between fstat and here: pread just returns less */
    ssize_t n = tenant_pread(fd, bytes, VC_REGION_SIZE, 0);
    close(fd);
    int r = n < 0 ? (int)n : hostcheck_region_parse(bytes, (size_t)n, ret);
    free(bytes);
    return r;
}

int hostcheck_region_read(const char *region_dir, struct hostcheck_region *ret)
{
    if (!region_dir || !*region_dir)
        return -EINVAL;
    int dfd = open(region_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int r = hostcheck_region_read_at(dfd, ret);
    close(dfd);
    return r;
}

void hostcheck_region_free(struct hostcheck_region *r)
{
    if (!r)
        return;
    free(r->buf);
    r->buf = NULL;
    r->view.hdr = NULL;
    r->view.slots = NULL;
}
