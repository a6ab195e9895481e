/* md2.c — MD2 message digest (RFC 1319, section 3) and HMAC over it (RFC 2104, section 2).
 * Written from the RFCs' descriptions; the substitution table is the RFC's "permutation of
 * 0..255 constructed from the digits of pi" (RFC 1319, section 3.2). */
#include "md2.h"

#include <string.h>

static const uint8_t pi_subst[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20,
};

void md2_init(struct md2_ctx *c)
{
    memset(c, 0, sizeof(*c));
}

/* One 16-byte block: the checksum update (3.2) and the 18-round state transform (3.4). */
static void block(struct md2_ctx *c, const uint8_t m[16])
{
    uint8_t l = c->checksum[15];
    for (int j = 0; j < 16; j++)
        l = c->checksum[j] ^= pi_subst[m[j] ^ l];
    for (int j = 0; j < 16; j++) {
        c->state[16 + j] = m[j];
        c->state[32 + j] = (uint8_t)(m[j] ^ c->state[j]);
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = c->state[k] ^= pi_subst[t];
        t = (uint8_t)(t + round);
    }
}

void md2_update(struct md2_ctx *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        size_t n = MD2_BLOCK - c->nbuf < len ? MD2_BLOCK - c->nbuf : len;
        memcpy(c->buf + c->nbuf, p, n);
        c->nbuf += n;
        p += n;
        len -= n;
        if (c->nbuf == MD2_BLOCK) {
            block(c, c->buf);
            c->nbuf = 0;
        }
    }
}

void md2_final(struct md2_ctx *c, uint8_t out[MD2_DIGEST])
{
    /* 3.1: i bytes of value i, 1 <= i <= 16, so the length is a multiple of 16 */
    uint8_t pad = (uint8_t)(MD2_BLOCK - c->nbuf);
    uint8_t padding[MD2_BLOCK];
    memset(padding, pad, pad);
    md2_update(c, padding, pad);
    /* 3.2: the checksum is the last block */
    uint8_t sum[16];
    memcpy(sum, c->checksum, 16);
    md2_update(c, sum, 16);
    memcpy(out, c->state, MD2_DIGEST);
    memset(c, 0, sizeof(*c));
}

void md2(const void *data, size_t len, uint8_t out[MD2_DIGEST])
{
    struct md2_ctx c;
    md2_init(&c);
    md2_update(&c, data, len);
    md2_final(&c, out);
}

void md2_hmac(const void *key, size_t keylen, const void *msg, size_t len, uint8_t out[MD2_DIGEST])
{
    uint8_t k[MD2_BLOCK] = {0};
    if (keylen > MD2_BLOCK)
        md2(key, keylen, k); /* L == B here, so the digest fills the block */
    else if (keylen)
        memcpy(k, key, keylen);
    uint8_t pad[MD2_BLOCK], inner[MD2_DIGEST];
    struct md2_ctx c;
    for (int i = 0; i < MD2_BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    md2_init(&c);
    md2_update(&c, pad, sizeof(pad));
    md2_update(&c, msg, len);
    md2_final(&c, inner);
    for (int i = 0; i < MD2_BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    md2_init(&c);
    md2_update(&c, pad, sizeof(pad));
    md2_update(&c, inner, sizeof(inner));
    md2_final(&c, out);
}
