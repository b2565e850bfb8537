/* rpc-models — ListModels, LoadModel, UnloadModel. */
#include "daemon/rpc-handlers.h"

#include "warm/v1/warm.pb-c.h"

#include <stdio.h>

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
    if (n && (!infos || !ptrs)) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory listing models");
    } else {
        for (size_t i = 0; i < n; i++) {
            warm__v1__model_info__init(&infos[i]);
            infos[i].name = list[i].name;
            infos[i].size_bytes = list[i].size_bytes;
            infos[i].modified_usec = list[i].modified_usec;
            infos[i].loaded = list[i].loaded;
            ptrs[i] = &infos[i];
        }
        Warm__V1__ListModelsResponse r = WARM__V1__LIST_MODELS_RESPONSE__INIT;
        r.n_models = n;
        r.models = ptrs;
        rpc_call_reply(c, &r.base);
    }
    free(ptrs);
    free(infos);
    free(list);
}

void rpc_models_load(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__LoadModelRequest *q = (const Warm__V1__LoadModelRequest *)req;
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    rpc_not_wired(c);
}

void rpc_models_unload(struct rpc_call *c, const ProtobufCMessage *req) {
    const Warm__V1__UnloadModelRequest *q = (const Warm__V1__UnloadModelRequest *)req;
    struct registry_model m;
    if (rpc_model_resolve(c, q->model, &m) < 0) return;
    /* Nothing is ever resident in this build: unloading is a successful no-op. */
    Warm__V1__UnloadModelResponse r = WARM__V1__UNLOAD_MODEL_RESPONSE__INIT;
    r.was_loaded = false;
    rpc_call_reply(c, &r.base);
}
