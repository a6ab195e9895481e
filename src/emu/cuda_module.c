/* cuda_module.c — emulated libcuda.so.1: modules (cuModule*) and the CUDA 12 library API over
 * them (cuLibrary*, cuKernel*), the images they load and the variables they define.
 *
 * An image is PTX text, a fatbinary or nvcc's wrapper around one (fatbin.c picks the PTX
 * entry, decompressing it; SASS alone is CUDA_ERROR_NO_BINARY_FOR_GPU: the emulator cannot
 * run machine code), or an ELF cubin (INVALID_IMAGE). The kernels and their parameter sizes
 * come from the PTX (ptx.c); a kernel whose name starts with "spin" runs for the SM cycles in
 * its first u64 parameter (cuda_exec.c), whoever launches it.
 *
 * Variables (`__device__`, `__constant__`: PTX .global/.const) get device memory the first
 * time cuModuleGetGlobal/cuLibraryGetGlobal asks for them in a context, filled with their
 * initializers, so cudaMemcpyToSymbol/FromSymbol move real bytes. That memory belongs to the
 * context: after the context is reset (cudaDeviceReset) the next lookup makes it afresh with
 * the initial values, as a real driver reloads the module.
 *
 * NVIDIA's runtime loads its fatbins with cuLibraryLoadData before any context is current, so
 * libraries (and their modules) need no context; cuModuleLoad* do, as on the driver. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "fatbin.h"
#include "ptx.h"

#define PTX_MAX (64u << 20)

struct emu_module_global {
    CUdeviceptr ptr;           /* 0: not made yet in ctx */
    struct CUctx_st *ctx;      /* the context it was made in */
    unsigned long long ctx_id; /* ctx->id then: a reset gives the context a new id */
};

struct CUlib_st {
    uint32_t magic;
    CUmodule mod;
};
#define EMU_MAGIC_LIB 0x4c494231u

int cuda_func_dev(const struct CUfunc_st *f)
{
    if (f->mod->ctx && f->mod->ctx->magic == EMU_MAGIC_CTX)
        return f->mod->ctx->dev;
    struct CUctx_st *c = cuda_current();
    return c ? c->dev : 0;
}

static CUresult module_from_text(CUmodule *pm, const char *text, size_t len, struct CUctx_st *c)
{
    size_t n = 0, ng = 0;
    if (ptx_parse(text, len, NULL, 0, &n) < 0)
        return CUDA_ERROR_INVALID_PTX;
    struct ptx_global *gs = NULL;
    int r = ptx_globals(text, len, &gs, &ng);
    if (r == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (r < 0)
        return CUDA_ERROR_INVALID_PTX;
    struct CUmod_st *m = calloc(1, sizeof(*m));
    struct ptx_kernel *ks = calloc(n ? n : 1, sizeof(*ks));
    struct CUfunc_st *fs = calloc(n ? n : 1, sizeof(*fs));
    struct emu_module_global *gm = calloc(ng ? ng : 1, sizeof(*gm));
    if (!m || !ks || !fs || !gm) {
        free(m);
        free(ks);
        free(fs);
        free(gm);
        ptx_globals_free(gs, ng);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ptx_parse(text, len, ks, n, &n);
    for (size_t i = 0; i < n; i++) {
        fs[i].magic = EMU_MAGIC_FUNC;
        fs[i].mod = m;
        memcpy(fs[i].name, ks[i].name, sizeof(fs[i].name));
        fs[i].nparams = ks[i].nparams;
        memcpy(fs[i].param_size, ks[i].param_size, sizeof(fs[i].param_size));
        /* each parameter at the next multiple of its alignment, as the ABI lays them out */
        uint64_t off = 0;
        for (unsigned j = 0; j < ks[i].nparams; j++) {
            uint64_t a = ks[i].param_align[j] ? ks[i].param_align[j] : 1;
            off = (off + a - 1) / a * a;
            fs[i].param_offset[j] = (uint32_t)(off > UINT32_MAX ? UINT32_MAX : off);
            off += ks[i].param_size[j];
        }
        fs[i].spin = strncmp(ks[i].name, "spin", 4) == 0;
    }
    free(ks);
    m->magic = EMU_MAGIC_MODULE;
    m->ctx = c;
    m->nfuncs = n;
    m->funcs = fs;
    m->nglobals = ng;
    m->globals = gs;
    m->gmem = gm;
    *pm = m;
    return CUDA_SUCCESS;
}

/* An image in memory (length unknown, as the driver gets it) to a module. */
static CUresult module_from_image(CUmodule *pm, const void *image, struct CUctx_st *c)
{
    const uint8_t *fb;
    size_t fblen;
    int r = fatbin_locate(image, &fb, &fblen);
    if (r == -EINVAL)
        return CUDA_ERROR_INVALID_IMAGE;
    if (r == 0) {
        struct fatbin_entry e;
        r = fatbin_find_ptx(fb, fblen, &e);
        if (r == -ENODATA)
            return module_from_text(pm, ".version 8.0\n.target sm_90\n", 27, c);
        if (r == -ENOEXEC)
            return CUDA_ERROR_NO_BINARY_FOR_GPU; /* SASS only: no PTX the emulator can run */
        if (r < 0)
            return CUDA_ERROR_INVALID_IMAGE;
        char *text;
        size_t len;
        r = fatbin_ptx_text(&e, &text, &len);
        if (r == -ENOMEM)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (r == -ELIBACC)
            return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
        if (r < 0)
            return CUDA_ERROR_INVALID_IMAGE;
        CUresult cr = module_from_text(pm, text, len, c);
        free(text);
        return cr;
    }
    const char *t = image;
    if (memcmp(t,
               "\x7f"
               "ELF",
               4) == 0)
        return CUDA_ERROR_INVALID_IMAGE; /* a cubin: machine code the emulator cannot run */
    return module_from_text(pm, t, strnlen(t, PTX_MAX), c);
}

static CUresult need_ctx(struct CUctx_st **ret)
{
    return cuda_need_ctx(ret);
}

EMU_API CUresult cuModuleLoadData(CUmodule *pm, const void *image)
{
    if (!pm || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = need_ctx(&c);
    return r ? r : module_from_image(pm, image, c);
}

EMU_API CUresult cuModuleLoadDataEx(CUmodule *pm, const void *image, unsigned int n,
                                    CUjit_option *options, void **values)
{
    return cuModuleLoadData(pm, image);
}

EMU_API CUresult cuModuleLoadFatBinary(CUmodule *pm, const void *fatbin)
{
    return cuModuleLoadData(pm, fatbin);
}

EMU_API CUresult cuModuleLoad(CUmodule *pm, const char *path)
{
    if (!pm || !path)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult cr = need_ctx(&c);
    if (cr)
        return cr;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size > PTX_MAX) {
        close(fd);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    char *buf = calloc(1, (size_t)st.st_size + 1);
    ssize_t got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
    close(fd);
    CUresult r = CUDA_ERROR_INVALID_IMAGE;
    if (got == st.st_size) {
        const uint8_t *fb;
        size_t fblen;
        uint32_t magic = 0;
        memcpy(&magic, buf, got >= 4 ? 4 : 0);
        /* a fatbin file: its header's length must fit in what was read */
        if (magic == FATBIN_MAGIC)
            r = fatbin_locate(buf, &fb, &fblen) == 0 && fblen <= (size_t)got
                    ? module_from_image(pm, buf, c)
                    : CUDA_ERROR_INVALID_IMAGE;
        else if (magic != FATBIN_WRAPPER_MAGIC)
            r = module_from_image(pm, buf, c);
    }
    free(buf);
    return r;
}

/* The variable's memory in the current context, made (and initialized) on first use there. */
static CUresult global_get(struct CUmod_st *m, size_t i, CUdeviceptr *ret)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    struct emu_module_global *g = &m->gmem[i];
    pthread_mutex_lock(&cuda_lock);
    bool have = g->ptr && g->ctx == c && g->ctx_id == c->id;
    CUdeviceptr p = g->ptr;
    pthread_mutex_unlock(&cuda_lock);
    if (!have) {
        const struct ptx_global *pg = &m->globals[i];
        r = cuda_dev_alloc(c->dev, pg->size, 0, NULL, &p);
        if (r)
            return r;
        memset((void *)(uintptr_t)p, 0, pg->size);
        if (pg->init_len)
            memcpy((void *)(uintptr_t)p, pg->init, pg->init_len);
        pthread_mutex_lock(&cuda_lock);
        g->ptr = p;
        g->ctx = c;
        g->ctx_id = c->id;
        pthread_mutex_unlock(&cuda_lock);
    }
    *ret = p;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule m,
                                      const char *name)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m || m->magic != EMU_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < m->nglobals; i++) {
        if (strcmp(m->globals[i].name, name) != 0)
            continue;
        CUdeviceptr p = 0;
        if (dptr) {
            CUresult r = global_get(m, i, &p);
            if (r)
                return r;
            *dptr = p;
        }
        if (bytes)
            *bytes = (size_t)m->globals[i].size;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

EMU_API CUresult cuModuleUnload(CUmodule m)
{
    if (!m || m->magic != EMU_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    m->magic = 0;
    for (size_t i = 0; i < m->nfuncs; i++)
        m->funcs[i].magic = 0;
    for (size_t i = 0; i < m->nglobals; i++) {
        struct emu_module_global *g = &m->gmem[i];
        pthread_mutex_lock(&cuda_lock);
        bool live = g->ptr && g->ctx->magic == EMU_MAGIC_CTX && g->ctx->id == g->ctx_id;
        pthread_mutex_unlock(&cuda_lock);
        if (live)
            cuda_dev_free(g->ptr);
    }
    ptx_globals_free(m->globals, m->nglobals);
    free(m->gmem);
    free(m->funcs);
    free(m);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuModuleGetFunction(CUfunction *pf, CUmodule m, const char *name)
{
    if (!pf || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m || m->magic != EMU_MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i].name, name) == 0) {
            *pf = &m->funcs[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

/* The CUDA 12 library API over the same modules: a CUkernel is its CUfunction, valid in any
 * context (launches are timed on the launching stream's device). */
EMU_API CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv,
                                   unsigned int njo, CUlibraryOption *lo, void **lv,
                                   unsigned int nlo)
{
    if (!lib || !code)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    struct CUlib_st *l = calloc(1, sizeof(*l));
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = module_from_image(&l->mod, code, NULL);
    if (r) {
        free(l);
        return r;
    }
    l->magic = EMU_MAGIC_LIB;
    *lib = l;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuLibraryUnload(CUlibrary lib)
{
    if (!lib || lib->magic != EMU_MAGIC_LIB)
        return CUDA_ERROR_INVALID_HANDLE;
    cuModuleUnload(lib->mod);
    lib->magic = 0;
    free(lib);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuLibraryGetModule(CUmodule *pm, CUlibrary lib)
{
    if (!pm)
        return CUDA_ERROR_INVALID_VALUE;
    if (!lib || lib->magic != EMU_MAGIC_LIB)
        return CUDA_ERROR_INVALID_HANDLE;
    *pm = lib->mod;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuLibraryGetKernel(CUkernel *pk, CUlibrary lib, const char *name)
{
    if (!pk)
        return CUDA_ERROR_INVALID_VALUE;
    if (!lib || lib->magic != EMU_MAGIC_LIB)
        return CUDA_ERROR_INVALID_HANDLE;
    CUfunction f;
    CUresult r = cuModuleGetFunction(&f, lib->mod, name);
    if (!r)
        *pk = (CUkernel)(void *)f;
    return r;
}

EMU_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib,
                                    const char *name)
{
    if (!lib || lib->magic != EMU_MAGIC_LIB)
        return CUDA_ERROR_INVALID_HANDLE;
    return cuModuleGetGlobal_v2(dptr, bytes, lib->mod, name);
}

EMU_API CUresult cuKernelGetFunction(CUfunction *pf, CUkernel k)
{
    if (!pf)
        return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = (CUfunction)(void *)k;
    if (!f || f->magic != EMU_MAGIC_FUNC)
        return CUDA_ERROR_INVALID_HANDLE;
    *pf = f;
    return CUDA_SUCCESS;
}

/* "Returns the offset and size of a kernel parameter in the device-side parameter layout";
 * "paramIndex must be less than the number of parameters that func takes"; paramSize may be
 * NULL (CUDA driver API, Execution Control, cuFuncGetParamInfo, CUDA 12.4). The layout comes
 * from the PTX parameter list: each parameter aligned to its `.align`, else its type's size. */
EMU_API CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    if (!f || f->magic != EMU_MAGIC_FUNC || !offset || index >= f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = f->param_offset[index];
    if (size)
        *size = f->param_size[index];
    return CUDA_SUCCESS;
}
