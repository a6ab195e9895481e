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
static int param(struct lexer *lx, uint32_t *ret_size, uint32_t *ret_align, struct token *ret_after)
{
    uint32_t size = 0, count = 1, align = 0;
    struct token t = next(lx);
    bool named = false, ptr = false;
    for (; t.n; t = next(lx)) {
        uint32_t s = type_size(t);
        if (s) {
            size = s;
        } else if (is(t, ".align")) {
            uint32_t a;
            if (!number(next(lx), &a))
                return -EINVAL;
            /* after .ptr it is the pointee's alignment, not the parameter's */
            if (!ptr && a && !(a & (a - 1)) && a <= 4096)
                align = a;
        } else if (is(t, ".ptr")) {
            ptr = true;
        } else if (is(t, ".global") || is(t, ".const") || is(t, ".local") || is(t, ".shared")) {
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
    *ret_align = align ? align : size; /* .align N, else the element's own size */
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
        int r = param(lx, &k->param_size[k->nparams], &k->param_align[k->nparams], &after);
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

/* ---- module-scope variables ---- */

#include <stdlib.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* An integer or a 0f/0d float bit pattern; false for anything else. */
static bool literal(struct token t, uint64_t *ret)
{
    if (!t.n || !isdigit((unsigned char)t.s[0]))
        return false;
    uint64_t v = 0;
    size_t i = 0;
    size_t n = t.n;
    if (n && (t.s[n - 1] == 'U' || t.s[n - 1] == 'u'))
        n--;
    if (n > 2 && t.s[0] == '0' && strchr("xXfFdD", t.s[1])) {
        for (i = 2; i < n; i++) {
            int h = hexval(t.s[i]);
            if (h < 0 || i > 17)
                return false;
            v = v << 4 | (uint64_t)h;
        }
    } else {
        for (; i < n; i++) {
            if (!isdigit((unsigned char)t.s[i]))
                return false;
            v = v * 10 + (uint64_t)(t.s[i] - '0');
        }
    }
    *ret = v;
    return true;
}

struct initz {
    uint8_t *buf;
    size_t len, cap; /* bytes written / allocated */
    uint32_t elem;
    uint64_t limit; /* declared size (0: open array) */
    size_t count;   /* elements written */
};

static int init_put(struct initz *z, uint64_t v)
{
    uint64_t end = (uint64_t)(z->count + 1) * z->elem;
    if ((z->limit && end > z->limit) || end > PTX_INIT_MAX)
        return -EINVAL;
    if (end > z->cap) {
        size_t cap = z->cap ? z->cap * 2 : 64;
        while (cap < end)
            cap *= 2;
        uint8_t *b = realloc(z->buf, cap);
        if (!b)
            return -ENOMEM;
        z->buf = b;
        z->cap = cap;
    }
    for (uint32_t i = 0; i < z->elem; i++)
        z->buf[z->count * z->elem + i] = (uint8_t)(i < 8 ? v >> (8 * i) : 0);
    z->count++;
    z->len = (size_t)end;
    return 0;
}

/* One initializer: a value, or a brace list of them; t is its first token. */
static int init_value(struct lexer *lx, struct token t, struct initz *z, int depth)
{
    if (depth > 8)
        return -EINVAL;
    if (is(t, "{")) {
        t = next(lx);
        if (is(t, "}"))
            return 0;
        for (;;) {
            int r = init_value(lx, t, z, depth + 1);
            if (r < 0)
                return r;
            t = next(lx);
            if (is(t, "}"))
                return 0;
            if (!is(t, ","))
                return -EINVAL;
            t = next(lx);
        }
    }
    bool neg = false;
    if (is(t, "-")) {
        neg = true;
        t = next(lx);
    }
    uint64_t v;
    if (literal(t, &v))
        return init_put(z, neg ? (uint64_t)0 - v : v);
    if (neg || !t.n || !(isalpha((unsigned char)t.s[0]) || t.s[0] == '_' || t.s[0] == '$'))
        return -EINVAL;
    /* an address: `name`, `generic(name)`, `name+4` — 0 here; skip to the value's end */
    struct lexer save = *lx;
    struct token u = next(lx);
    int paren = 0;
    while (u.n && (paren || !(is(u, ",") || is(u, "}") || is(u, ";")))) {
        if (is(u, "("))
            paren++;
        else if (is(u, ")"))
            paren--;
        save = *lx;
        u = next(lx);
    }
    *lx = save;
    return init_put(z, 0);
}

/* A declaration after `.global`/`.const`; keep: false for `.extern` ones (parsed, dropped). */
static int global_decl(struct lexer *lx, bool constant, struct ptx_global *g)
{
    uint32_t elem = 0, vec = 1;
    struct token t;
    for (t = next(lx); t.n && t.s[0] == '.'; t = next(lx)) {
        uint32_t s = type_size(t), a;
        if (s)
            elem = s;
        else if (is(t, ".align")) {
            if (!number(next(lx), &a))
                return -EINVAL;
        } else if (is(t, ".v2"))
            vec = 2;
        else if (is(t, ".v4"))
            vec = 4;
        else if (is(t, ".v8"))
            vec = 8;
        else
            return 1; /* .texref and the like: no storage the emulator models */
    }
    if (!elem || !t.n || !(isalpha((unsigned char)t.s[0]) || t.s[0] == '_' || t.s[0] == '$'))
        return -EINVAL;
    if (t.n >= PTX_NAME_MAX)
        return -ENAMETOOLONG;
    memset(g, 0, sizeof(*g));
    memcpy(g->name, t.s, t.n);
    g->constant = constant;
    uint64_t count = 1;
    bool open = false;
    for (t = next(lx); is(t, "["); t = next(lx)) {
        struct token n = next(lx);
        uint32_t d;
        if (is(n, "]")) {
            open = true;
            continue;
        }
        if (!number(n, &d) || !d || !is(next(lx), "]"))
            return -EINVAL;
        count *= d;
        if (count > PTX_GLOBAL_SIZE_MAX)
            return -EINVAL;
    }
    elem *= vec;
    g->size = open ? 0 : count * elem;
    if (g->size > PTX_GLOBAL_SIZE_MAX)
        return -EINVAL;
    if (is(t, "=")) {
        struct initz z = {NULL, 0, 0, elem, g->size, 0};
        int r = init_value(lx, next(lx), &z, 0);
        if (r < 0) {
            free(z.buf);
            return r;
        }
        g->init = z.buf;
        g->init_len = z.len;
        if (open)
            g->size = z.len;
        t = next(lx);
    }
    if (!is(t, ";") || !g->size) {
        free(g->init);
        g->init = NULL;
        return -EINVAL;
    }
    return 0;
}

void ptx_globals_free(struct ptx_global *g, size_t n)
{
    for (size_t i = 0; g && i < n; i++)
        free(g[i].init);
    free(g);
}

int ptx_globals(const char *text, size_t len, struct ptx_global **ret, size_t *ret_n)
{
    if (!text)
        return -EINVAL;
    struct lexer lx = {text, text + len, false};
    struct ptx_global *gs = NULL;
    size_t n = 0, cap = 0;
    int depth = 0, r = 0;
    bool ext = false;
    for (struct token t = next(&lx); t.n; t = next(&lx)) {
        if (is(t, "{") || is(t, "("))
            depth++;
        else if (is(t, "}") || is(t, ")"))
            depth--;
        if (depth < 0) {
            r = -EINVAL;
            break;
        }
        if (depth || !(is(t, ".global") || is(t, ".const"))) {
            if (!depth)
                ext = is(t, ".extern") || (ext && (is(t, ".visible") || is(t, ".weak")));
            continue;
        }
        struct ptx_global g;
        int d = global_decl(&lx, is(t, ".const"), &g);
        if (d < 0) {
            r = d;
            break;
        }
        bool keep = d == 0 && !ext;
        ext = false;
        if (!keep) {
            if (d == 0)
                free(g.init);
            continue;
        }
        if (n == PTX_GLOBALS_MAX) {
            free(g.init);
            r = -EINVAL;
            break;
        }
        if (n == cap) {
            size_t c = cap ? cap * 2 : 8;
            struct ptx_global *ng = realloc(gs, c * sizeof(*ng));
            if (!ng) {
                free(g.init);
                r = -ENOMEM;
                break;
            }
            gs = ng;
            cap = c;
        }
        gs[n++] = g;
    }
    if (!r && lx.bad)
        r = -EINVAL;
    if (r < 0) {
        ptx_globals_free(gs, n);
        return r;
    }
    *ret = gs;
    *ret_n = n;
    return 0;
}
