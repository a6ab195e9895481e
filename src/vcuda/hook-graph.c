/* hook-graph.c — graph memory: what graph allocation nodes hold on the device, charged as the
 * driver holds it (issue 22; docs/vcuda.md, "Graph memory").
 *
 * NVIDIA's model (CUDA C++ Programming Guide, "Graph Memory Nodes"): an allocation node (made
 * by cuGraphAddMemAllocNode, or by a cuMemAllocAsync captured from a stream) gets its address
 * when the node is made and no memory; "Mapping is done instead during graph launch. Calling
 * cudaGraphUpload can separate out the cost of allocation from the launch by performing all
 * mappings for that graph immediately"; "Physical mappings for a graph are retained between
 * launches"; destroying a graph "will not immediately return physical memory to the OS";
 * cudaDeviceGraphMemTrim "will unmap and release any physical memory reserved by graph memory
 * nodes that is not actively in use"; and the process's figure is the device attribute
 * CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ("the amount of physical memory reserved by the driver
 * for graph allocations in the current process").
 *
 * So libvcuda charges a device's graph memory as that attribute says, and checks it before the
 * driver can grow it:
 *  - a captured cuMemAllocAsync is not charged at capture (hook-mem.c): it allocates nothing;
 *  - at instantiation, the graph's allocation nodes are added up per device (child graphs
 *    included): what a launch may need to map;
 *  - the first launch or upload of an executable graph (and the first after a trim) reserves
 *    that sum against the quota before the driver is called, and is refused with
 *    CUDA_ERROR_OUT_OF_MEMORY when it does not fit; after the call the device's charge is
 *    settled on the attribute (what graphs share is given back);
 *  - a later launch of a graph already mapped reserves nothing (its memory is charged); any
 *    growth the driver makes then (a remap for a concurrent launch) is charged at the next
 *    settlement (a trim, an executable graph destroyed, a quota view or refusal);
 *  - cuDeviceGraphMemTrim settles the device on what the driver kept.
 * Launches that reserve are serialized by a lock held across the driver call (first launches
 * only: later ones take no lock but a lookup's). */
#include "vcuda.h"

#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VC_DEV_SLOTS (VC_REGION_DEVICES + 1) /* region indexes and VC_DEVICE_UNASSIGNED */
#define GRAPH_PAGE (2ull << 20)              /* the VMM granularity graph memory is mapped in */
#define CHILD_DEPTH 8

struct graph_rec {
    CUgraphExec exec;
    bool resident; /* mapped by a launch or upload since trim generation gen */
    unsigned gen;
    uint64_t bytes[VC_DEV_SLOTS]; /* its allocation nodes, per region index */
};

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint graph_recs; /* records, read relaxed: a process with none pays one load */
static struct graph_rec *recs; /* graph_lock */
static size_t nrecs, caprecs;
static unsigned trim_gen;                   /* graph_lock: bumped by each trim */
static uint64_t charged[VC_REGION_DEVICES]; /* graph_lock: charged per region index */
static int ordinal_of[VC_REGION_DEVICES];   /* graph_lock: CUDA ordinal + 1, 0 unknown */

static struct graph_rec *rec_find_locked(CUgraphExec e)
{
    for (size_t i = 0; i < nrecs; i++)
        if (recs[i].exec == e)
            return &recs[i];
    return NULL;
}

/* Adds graph g's allocation nodes to bytes[] (whole 2 MiB pages each, as graph memory is
 * mapped), recording each device's ordinal. 0, or -errno when the graph cannot be read. */
static int graph_alloc_bytes(CUgraph g, uint64_t *bytes, int depth)
{
    if (depth > CHILD_DEPTH)
        return -ELOOP;
    size_t n = 0;
    if (vc_real.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS)
        return -EINVAL;
    if (n == 0)
        return 0;
    CUgraphNode *nodes = calloc(n, sizeof(*nodes));
    if (!nodes)
        return -ENOMEM;
    int r = 0;
    if (vc_real.cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS)
        r = -EINVAL;
    for (size_t i = 0; i < n && r == 0; i++) {
        CUgraphNodeType t;
        if (vc_real.cuGraphNodeGetType(nodes[i], &t) != CUDA_SUCCESS) {
            r = -EINVAL;
        } else if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            memset(&p, 0, sizeof(p));
            unsigned index;
            if (vc_real.cuGraphMemAllocNodeGetParams(nodes[i], &p) != CUDA_SUCCESS)
                r = -EINVAL;
            else if (p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                     vc_device_index(p.poolProps.location.id, &index) == 0) {
                bytes[index] += (p.bytesize + GRAPH_PAGE - 1) / GRAPH_PAGE * GRAPH_PAGE;
                if (index < VC_REGION_DEVICES)
                    ordinal_of[index] = p.poolProps.location.id + 1;
            }
        } else if (t == CU_GRAPH_NODE_TYPE_GRAPH && vc_real.cuGraphChildGraphNodeGetGraph) {
            CUgraph child;
            if (vc_real.cuGraphChildGraphNodeGetGraph(nodes[i], &child) != CUDA_SUCCESS)
                r = -EINVAL;
            else
                r = graph_alloc_bytes(child, bytes, depth + 1);
        }
    }
    free(nodes);
    return r;
}

/* What g's allocation nodes need, per region index; false when g has none (or graph memory
 * nodes are not in this driver). */
static bool graph_needs(CUgraph g, uint64_t *bytes)
{
    memset(bytes, 0, VC_DEV_SLOTS * sizeof(*bytes));
    if (!vc_real.cuGraphGetNodes || !vc_real.cuGraphNodeGetType ||
        !vc_real.cuGraphMemAllocNodeGetParams || !vc_real.cuDeviceGetGraphMemAttribute)
        return false; /* no graph memory nodes before CUDA 11.4, which brought all of these */
    pthread_mutex_lock(&graph_lock);
    int r = graph_alloc_bytes(g, bytes, 0);
    pthread_mutex_unlock(&graph_lock);
    if (r < 0) {
        log_warn("cannot read a graph's nodes (%s): its memory nodes are charged only as the "
                 "driver reports them, after its launches",
                 strerror(-r));
        memset(bytes, 0, VC_DEV_SLOTS * sizeof(*bytes));
        return false;
    }
    for (unsigned i = 0; i < VC_DEV_SLOTS; i++)
        if (bytes[i])
            return true;
    return false;
}

/* graph_lock held: the device's charge becomes what the driver says its graph memory holds
 * (charged without a limit check when more: the driver holds it already). */
static void settle_locked(unsigned index)
{
    if (index >= VC_REGION_DEVICES || !ordinal_of[index])
        return;
    cuuint64_t held = 0;
    if (vc_real.cuDeviceGetGraphMemAttribute((CUdevice)(ordinal_of[index] - 1),
                                             CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                             &held) != CUDA_SUCCESS)
        return;
    if (held > charged[index])
        vc_region_charge(&vc.region, vc.slot, index, held - charged[index]);
    else if (held < charged[index])
        vc_region_release(&vc.region, vc.slot, index, charged[index] - held);
    charged[index] = held;
}

void vc_graph_refresh(void)
{
    if (!atomic_load_explicit(&graph_recs, memory_order_relaxed))
        return;
    /* Not while a first launch holds the lock (this thread's own, from a reservation made
     * inside the launch, or another's): that launch settles when it ends. */
    if (pthread_mutex_trylock(&graph_lock) != 0)
        return;
    for (unsigned i = 0; i < VC_REGION_DEVICES; i++)
        if (charged[i])
            settle_locked(i);
    pthread_mutex_unlock(&graph_lock);
}

/* graph_lock held: reserves bytes[] against the quota, all or nothing. The index that did not
 * fit, or -1. */
static int reserve_all_locked(const uint64_t *bytes)
{
    for (unsigned i = 0; i < VC_DEV_SLOTS; i++) {
        if (!bytes[i])
            continue;
        bool ok = !vc.fail_closed && vc.slot >= 0 && i < VC_REGION_DEVICES &&
                  vc_region_reserve(&vc.region, vc.slot, i, bytes[i], vc.cfg.memory_limit) == 0;
        if (!ok) {
            for (unsigned j = 0; j < i; j++)
                if (bytes[j])
                    vc_region_release(&vc.region, vc.slot, j, bytes[j]);
            return (int)i;
        }
    }
    for (unsigned i = 0; i < VC_REGION_DEVICES; i++)
        charged[i] += bytes[i];
    return -1;
}

/* Reserves what an unmapped graph's launch or upload may map (bytes[]), taking graph_lock,
 * which the caller holds across the driver call and gives back with settle_unlock. 0, or the
 * CUDA_ERROR_OUT_OF_MEMORY result (with its log line; the lock not held). */
static CUresult reserve_and_lock(const uint64_t *bytes, const char *what)
{
    pthread_mutex_lock(&graph_lock);
    int bad = reserve_all_locked(bytes);
    if (bad >= 0) {
        /* before saying no: dead processes and pools (and graph memory) give back */
        pthread_mutex_unlock(&graph_lock);
        vc_region_reap(&vc.region);
        vc_pools_refresh();
        pthread_mutex_lock(&graph_lock);
        bad = reserve_all_locked(bytes);
    }
    if (bad < 0)
        return CUDA_SUCCESS;
    pthread_mutex_unlock(&graph_lock);
    return vc_mem_oom((unsigned)bad, bytes[bad], what);
}

/* After the driver call that reserve_and_lock preceded: settles the devices bytes[] names on
 * what the driver holds, and unlocks. */
static void settle_unlock(const uint64_t *bytes)
{
    for (unsigned i = 0; i < VC_REGION_DEVICES; i++)
        if (bytes[i])
            settle_locked(i);
    pthread_mutex_unlock(&graph_lock);
}

/* ---- launches and uploads --------------------------------------------------- */

CUresult vc_graph_map_begin(CUgraphExec e, const char *what, struct vc_graph_pending *ret)
{
    ret->locked = false;
    if (VC_LIKELY(!atomic_load_explicit(&graph_recs, memory_order_relaxed)))
        return CUDA_SUCCESS;
    if (vc_ensure() < 0)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&graph_lock);
    struct graph_rec *rec = rec_find_locked(e);
    if (!rec || (rec->resident && rec->gen == trim_gen)) {
        pthread_mutex_unlock(&graph_lock);
        return CUDA_SUCCESS;
    }
    memcpy(ret->bytes, rec->bytes, sizeof(ret->bytes));
    pthread_mutex_unlock(&graph_lock);
    CUresult r = reserve_and_lock(ret->bytes, what);
    if (r != CUDA_SUCCESS)
        return r;
    ret->exec = e;
    ret->locked = true;
    return CUDA_SUCCESS;
}

void vc_graph_map_end(struct vc_graph_pending *p, CUresult r)
{
    if (!p->locked)
        return;
    struct graph_rec *rec = rec_find_locked(p->exec);
    if (rec && r == CUDA_SUCCESS) {
        rec->resident = true;
        rec->gen = trim_gen;
    }
    settle_unlock(p->bytes);
    p->locked = false;
}

/* An upload maps the graph's memory at once ("performing all mappings for that graph
 * immediately"): the same reservation as a first launch. */
static CUresult upload(CUresult (*call)(CUgraphExec, CUstream), CUgraphExec e, CUstream s)
{
    struct vc_graph_pending gp;
    CUresult r = vc_graph_map_begin(e, "cuGraphUpload (graph memory)", &gp);
    if (r != CUDA_SUCCESS)
        return r;
    r = call(e, s);
    vc_graph_map_end(&gp, r);
    return r;
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    VC_NEED_REAL(cuGraphUpload);
    return upload(vc_real.cuGraphUpload, hGraphExec, hStream);
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    VC_NEED_REAL(cuGraphUpload_ptsz);
    return upload(vc_real.cuGraphUpload_ptsz, hGraphExec, hStream);
}

/* ---- instantiation and destruction ------------------------------------------ */

/* After a successful instantiation of g into e: a record when g has allocation nodes. */
static void remember(CUgraphExec e, const uint64_t *bytes, bool resident)
{
    pthread_mutex_lock(&graph_lock);
    struct graph_rec *rec = rec_find_locked(e);
    if (!rec) {
        if (nrecs == caprecs) {
            size_t cap = caprecs ? 2 * caprecs : 16;
            struct graph_rec *n = realloc(recs, cap * sizeof(*n));
            if (!n) {
                pthread_mutex_unlock(&graph_lock);
                log_warn("cannot track an executable graph; its memory nodes are charged only "
                         "as the driver reports them");
                return;
            }
            recs = n;
            caprecs = cap;
        }
        rec = &recs[nrecs++];
        atomic_fetch_add_explicit(&graph_recs, 1, memory_order_relaxed);
    }
    rec->exec = e;
    memcpy(rec->bytes, bytes, sizeof(rec->bytes));
    rec->resident = resident;
    rec->gen = trim_gen;
    pthread_mutex_unlock(&graph_lock);
}

/* Instantiation without an upload maps nothing: the graph is recorded. */
#define INSTANTIATE(call, pe, g)                                                                   \
    do {                                                                                           \
        uint64_t bytes_[VC_DEV_SLOTS];                                                             \
        bool has_ = graph_needs(g, bytes_);                                                        \
        CUresult r_ = call;                                                                        \
        if (r_ == CUDA_SUCCESS && has_ && pe)                                                      \
            remember(*(pe), bytes_, false);                                                        \
        return r_;                                                                                 \
    } while (0)

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    VC_PREAMBLE(cuGraphInstantiate);
    INSTANTIATE(vc_real.cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
                phGraphExec, hGraph);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    VC_PREAMBLE(cuGraphInstantiate_v2);
    INSTANTIATE(
        vc_real.cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
        phGraphExec, hGraph);
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    VC_PREAMBLE(cuGraphInstantiateWithFlags);
    INSTANTIATE(vc_real.cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags), phGraphExec,
                hGraph);
}

/* CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD maps the graph's memory at instantiation, as an upload. */
static CUresult instantiate_with_params(bool ptsz, CUgraphExec *pe, CUgraph g,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    uint64_t bytes[VC_DEV_SLOTS];
    bool has = graph_needs(g, bytes);
    bool upload = has && p && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
    if (upload) {
        CUresult r = reserve_and_lock(bytes, "cuGraphInstantiateWithParams (graph memory)");
        if (r != CUDA_SUCCESS)
            return r;
    }
    CUresult r = ptsz ? vc_real.cuGraphInstantiateWithParams_ptsz(pe, g, p)
                      : vc_real.cuGraphInstantiateWithParams(pe, g, p);
    if (upload)
        settle_unlock(bytes);
    if (r == CUDA_SUCCESS && has && pe)
        remember(*pe, bytes, upload);
    return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    VC_PREAMBLE(cuGraphInstantiateWithParams);
    return instantiate_with_params(false, phGraphExec, hGraph, instantiateParams);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    VC_PREAMBLE(cuGraphInstantiateWithParams_ptsz);
    return instantiate_with_params(true, phGraphExec, hGraph, instantiateParams);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    VC_NEED_REAL(cuGraphExecDestroy);
    CUresult r = vc_real.cuGraphExecDestroy(hGraphExec);
    if (r != CUDA_SUCCESS || !atomic_load_explicit(&graph_recs, memory_order_relaxed))
        return r;
    pthread_mutex_lock(&graph_lock);
    struct graph_rec *rec = rec_find_locked(hGraphExec);
    if (rec) {
        /* its memory stays the driver's until a trim; whatever it says now is settled */
        for (unsigned i = 0; i < VC_REGION_DEVICES; i++)
            if (rec->bytes[i])
                settle_locked(i);
        *rec = recs[--nrecs];
        atomic_fetch_sub_explicit(&graph_recs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&graph_lock);
    return r;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device)
{
    VC_PREAMBLE(cuDeviceGraphMemTrim);
    CUresult r = vc_real.cuDeviceGraphMemTrim(device);
    unsigned index;
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&graph_lock);
    trim_gen++; /* graphs not in use lost their mappings: their next launch maps again */
    if (vc_device_index(device, &index) == 0 && index < VC_REGION_DEVICES) {
        if (!ordinal_of[index])
            ordinal_of[index] = device + 1;
        settle_locked(index);
    }
    pthread_mutex_unlock(&graph_lock);
    return r;
}

void vc_graph_atfork_child(void)
{
    /* the child holds none of its parent's graphs or their memory */
    pthread_mutex_init(&graph_lock, NULL);
    free(recs);
    recs = NULL;
    nrecs = caprecs = 0;
    atomic_store_explicit(&graph_recs, 0, memory_order_relaxed);
    memset(charged, 0, sizeof(charged));
    memset(ordinal_of, 0, sizeof(ordinal_of));
}
