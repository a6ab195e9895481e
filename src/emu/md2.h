/* md2.h — MD2 (RFC 1319) and HMAC (RFC 2104) over it. NVIDIA's runtime checks that the driver
 * answers its integrity table (cuda_export_integrity.c) with an HMAC-MD2 of a few process
 * facts; nothing else in the project should use MD2, which is long broken as a hash.
 * libc only; no allocation; every function is thread-safe on its own context. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define MD2_BLOCK 16
#define MD2_DIGEST 16

struct md2_ctx {
    uint8_t state[48];
    uint8_t checksum[16];
    uint8_t buf[16];
    size_t nbuf;
};

void md2_init(struct md2_ctx *c);
void md2_update(struct md2_ctx *c, const void *data, size_t len);
void md2_final(struct md2_ctx *c, uint8_t out[MD2_DIGEST]);
void md2(const void *data, size_t len, uint8_t out[MD2_DIGEST]);

/* HMAC-MD2 (B = 16, L = 16): a key longer than 16 bytes is hashed first, as RFC 2104 says. */
void md2_hmac(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[MD2_DIGEST]);
