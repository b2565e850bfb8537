/* rpc-models — ListModels, LoadModel, UnloadModel. */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

#include <stdio.h>

/* Fills info from the registry entry and the residency; fp and arch are its buffers. */
static void model_info_fill(struct daemon *d, const struct registry_model *m,
                            Warm__V1__ModelInfo *info, char fp[33], char arch[32]) {
    struct residency_info ri;
    residency_info(d, m->name, &ri);
    warm__v1__model_info__init(info);
    info->name = (char *)m->name;
    info->size_bytes = m->size_bytes;
    info->modified_usec = m->modified_usec;
    info->loaded = ri.loaded;
    fp[0] = arch[0] = 0;
    if (ri.loaded) {
        hash128_to_hex(ri.fingerprint, fp);
        snprintf(arch, 32, "%s", ri.architecture);
    }
    info->fingerprint = fp;
    info->architecture = arch;
    info->memory_bytes = ri.memory_bytes;
    info->keep_alive_left_usec = ri.keep_alive_left_usec;
}

void rpc_models_list(struct rpc_call *c, const ProtobufCMessage *req) {
    struct daemon *d = rpc_call_daemon(c);
    /* A rescan per call: a file dropped into the directory shows up at once. */
    (void)registry_scan(&d->registry, NULL);
    metrics_set(&d->metrics, METRIC_MODELS_AVAILABLE, registry_count(&d->registry));
    struct registry_model *list = NULL;
    size_t n = 0;
    if (registry_list(&d->registry, &list, &n) < 0) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory listing models");
        return;
    }
    Warm__V1__ModelInfo *infos = n ? calloc_array(n, sizeof *infos) : NULL;
    Warm__V1__ModelInfo **ptrs = n ? calloc_array(n, sizeof *ptrs) : NULL;
    char (*fps)[33] = n ? calloc_array(n, sizeof *fps) : NULL;
    char (*archs)[32] = n ? calloc_array(n, sizeof *archs) : NULL;
    if (n && (!infos || !ptrs || !fps || !archs)) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory listing models");
    } else {
        for (size_t i = 0; i < n; i++) {
            model_info_fill(d, &list[i], &infos[i], fps[i], archs[i]);
            ptrs[i] = &infos[i];
        }
        Warm__V1__ListModelsResponse r = WARM__V1__LIST_MODELS_RESPONSE__INIT;
        r.n_models = n;
        r.models = ptrs;
        rpc_call_reply(c, &r.base);
    }
    free(fps);
    free(archs);
    free(ptrs);
    free(infos);
    free(list);
}

/* On the work pool: a load takes as long as the file is big. */
static void load_run(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__LoadModelRequest *q = (const Warm__V1__LoadModelRequest *)req;
    struct daemon *d = rpc_call_daemon(c);
    struct resident *res;
    uint64_t load_usec;
    if (rpc_model_acquire(c, q->model, q->keep_alive_usec, &res, &load_usec) < 0) return;
    struct registry_model m;
    struct err_detail e = {0};
    Warm__V1__ModelInfo info;
    char fp[33], arch[32];
    int r = registry_find(&d->registry, res->name, &m, &e);
    if (r >= 0) model_info_fill(d, &m, &info, fp, arch);
    /* Released before answering: a client's next call must find the model idle. */
    residency_release(d, res);
    if (r < 0) {
        rpc_call_fail(c, rpc_status_from_err(r), "%s", err_msg(&e, r));
    } else {
        Warm__V1__LoadModelResponse resp = WARM__V1__LOAD_MODEL_RESPONSE__INIT;
        resp.model = &info;
        resp.load_usec = load_usec;
        rpc_call_reply(c, &resp.base);
    }
}

void rpc_models_load(struct rpc_call *c, const ProtobufCMessage *req) {
    rpc_pool_defer(c, req, load_run);
}

void rpc_models_unload(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__UnloadModelRequest *q = (const Warm__V1__UnloadModelRequest *)req;
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    bool was = false;
    residency_unload(rpc_call_daemon(c), m.name, &was);
    Warm__V1__UnloadModelResponse r = WARM__V1__UNLOAD_MODEL_RESPONSE__INIT;
    r.was_loaded = was;
    rpc_call_reply(c, &r.base);
}
