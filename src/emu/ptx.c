/* ptx.c — finds the kernels and their parameter sizes in PTX text (see ptx.h). A small
 * tokenizer that skips comments and yields directives (".entry"), identifiers, numbers and
 * punctuation; everything else in the module is ignored. */
#include "ptx.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

struct lexer {
    const char *p, *end;
    bool bad; /* an unterminated block comment */
};

struct token {
    const char *s;
    size_t n;
};

static bool ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '%' || c == '.';
}

/* Next token, or n == 0 at the end. Comments are skipped; an unterminated block comment ends
 * the text and marks it bad. */
static struct token next(struct lexer *lx)
{
    for (;;) {
        while (lx->p < lx->end && isspace((unsigned char)*lx->p))
            lx->p++;
        if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '/') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
            continue;
        }
        if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '*') {
            const char *q = lx->p + 2;
            while (q + 1 < lx->end && !(q[0] == '*' && q[1] == '/'))
                q++;
            if (q + 1 >= lx->end)
                lx->bad = true;
            lx->p = q + 1 < lx->end ? q + 2 : lx->end;
            continue;
        }
        break;
    }
    struct token t = {lx->p, 0};
    if (lx->p >= lx->end)
        return t;
    if (*lx->p == 0) { /* a NUL ends PTX text */
        lx->p = lx->end;
        return t;
    }
    if (ident_char(*lx->p)) {
        /* a '.' starts a directive/type; inside an identifier it splits ".u64" from a name */
        const char *q = lx->p + 1;
        while (q < lx->end && ident_char(*q) && *q != '.')
            q++;
        t.n = (size_t)(q - lx->p);
    } else {
        t.n = 1;
    }
    lx->p += t.n;
    return t;
}

static bool is(struct token t, const char *s)
{
    size_t n = strlen(s);
    return t.n == n && memcmp(t.s, s, n) == 0;
}

static uint32_t type_size(struct token t)
{
    static const struct {
        const char *name;
        uint32_t size;
    } types[] = {
        {".b8", 1},  {".u8", 1},  {".s8", 1},  {".b16", 2},  {".u16", 2},   {".s16", 2},
        {".f16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4},  {".f32", 4},   {".b64", 8},
        {".u64", 8}, {".s64", 8}, {".f64", 8}, {".pred", 1}, {".f16x2", 4},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (is(t, types[i].name))
            return types[i].size;
    return 0;
}

static bool number(struct token t, uint32_t *ret)
{
    if (!t.n || t.n > 9)
        return false;
    uint32_t v = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (!isdigit((unsigned char)t.s[i]))
            return false;
        v = v * 10 + (uint32_t)(t.s[i] - '0');
    }
    *ret = v;
    return true;
}

/* One parameter: ".param" already read; attributes, a type, a name, an optional [N]. */
static int param(struct lexer *lx, uint32_t *ret_size, struct token *ret_after)
{
    uint32_t size = 0, count = 1;
    struct token t = next(lx);
    bool named = false;
    for (; t.n; t = next(lx)) {
        uint32_t s = type_size(t);
        if (s) {
            size = s;
        } else if (is(t, ".align")) {
            uint32_t a;
            if (!number(next(lx), &a))
                return -EINVAL;
        } else if (is(t, ".ptr") || is(t, ".global") || is(t, ".const") || is(t, ".local") ||
                   is(t, ".shared")) {
            /* pointer attributes: no effect on the size */
        } else if (t.s[0] == '.') {
            return -EINVAL; /* an unknown type or attribute */
        } else if (!named && (isalpha((unsigned char)t.s[0]) || t.s[0] == '_' || t.s[0] == '$' ||
                              t.s[0] == '%')) {
            named = true;
        } else if (named && is(t, "[")) {
            struct token n = next(lx);
            if (!number(n, &count) || !count || !is(next(lx), "]"))
                return -EINVAL;
        } else {
            break; /* ',' or ')' */
        }
    }
    if (!size || !named || (uint64_t)size * count > UINT32_MAX / 2)
        return -EINVAL;
    *ret_size = size * count;
    *ret_after = t;
    return 0;
}

static int entry(struct lexer *lx, struct ptx_kernel *k)
{
    struct token name = next(lx);
    if (!name.n || name.s[0] == '.' || !ident_char(name.s[0]))
        return -EINVAL;
    if (name.n >= PTX_NAME_MAX)
        return -ENAMETOOLONG;
    memcpy(k->name, name.s, name.n);
    k->name[name.n] = 0;
    k->nparams = 0;
    struct lexer save = *lx;
    struct token t = next(lx);
    if (!is(t, "(")) {
        *lx = save; /* no parameter list */
        return 0;
    }
    t = next(lx);
    if (is(t, ")"))
        return 0;
    for (;;) {
        if (!is(t, ".param"))
            return -EINVAL;
        if (k->nparams == PTX_PARAMS_MAX)
            return -EINVAL;
        struct token after;
        int r = param(lx, &k->param_size[k->nparams], &after);
        if (r < 0)
            return r;
        k->nparams++;
        if (is(after, ")"))
            return 0;
        if (!is(after, ","))
            return -EINVAL;
        t = next(lx);
    }
}

int ptx_parse(const char *text, size_t len, struct ptx_kernel *out, size_t max, size_t *ret_n)
{
    if (!text)
        return -EINVAL;
    struct lexer lx = {text, text + len, false};
    bool version = false, target = false;
    size_t n = 0;
    struct ptx_kernel k;
    for (struct token t = next(&lx); t.n; t = next(&lx)) {
        if (is(t, ".version"))
            version = true;
        else if (is(t, ".target"))
            target = true;
        else if (is(t, ".entry")) {
            int r = entry(&lx, &k);
            if (r < 0)
                return r;
            if (n == PTX_ENTRIES_MAX)
                return -EINVAL;
            if (n < max && out)
                out[n] = k;
            n++;
        }
    }
    if (!version || !target || lx.bad)
        return -EINVAL;
    if (ret_n)
        *ret_n = n;
    return 0;
}
