/* rpc-info — GetInfo and Metrics. What they tell a caller about other users' activity is
 * for admins only (see the Metrics comment in warm.proto and daemon/metrics.h). */
#include "daemon/rpc-handlers.h"

#include "daemon/cache.h"
#include "daemon/resident.h"
#include "daemon/server.h"
#include "store/store.h"
#include "warm/v1/warm.pb-c.h"

#include <stdio.h>
#include <string.h>

void rpc_info_get_info(struct rpc_call *c, const ProtobufCMessage *req) {
    struct daemon *d = rpc_call_daemon(c);
    const struct config *cfg = &d->config;
    const struct peer *p = rpc_call_peer(c);
    char ns[32];
    snprintf(ns, sizeof ns, "uid:%u", p->uid);
    Warm__V1__PeerInfo peer = WARM__V1__PEER_INFO__INIT;
    peer.uid = p->uid;
    peer.gid = p->gid;
    peer.pid = p->pid;
    peer.admin = p->admin;
    peer.namespace_ = ns;
    peer.via_proxy = p->via_proxy;
    peer.proxy_uid = p->proxy_uid;
    /* the devices really in use (none before a model loads), then the store */
    struct residency_device dev[ENGINE_MAX_DEVICES * 4];
    size_t n_dev = residency_devices(d, dev, ARRAY_SIZE(dev));
    Warm__V1__DeviceInfo devinfo[ARRAY_SIZE(dev)], *devp[ARRAY_SIZE(dev)];
    char *features[3];
    size_t n_features = 0;
    static const char *const kinds[] = {"cpu", "cuda"};
    for (size_t k = 0; k < ARRAY_SIZE(kinds); k++)
        for (size_t i = 0; i < n_dev; i++)
            if (!strcmp(dev[i].kind, kinds[k])) {
                features[n_features++] = (char *)kinds[k];
                break;
            }
    if (d->store) features[n_features++] = "store";
    for (size_t i = 0; i < n_dev; i++) {
        warm__v1__device_info__init(&devinfo[i]);
        devinfo[i].name = dev[i].name;
        devinfo[i].kind = (char *)dev[i].kind;
        devinfo[i].reserved_bytes = dev[i].reserved_bytes;
        devinfo[i].description = dev[i].description;
        devp[i] = &devinfo[i];
    }
    Warm__V1__GetInfoResponse r = WARM__V1__GET_INFO_RESPONSE__INIT;
    r.version = DAEMON_VERSION;
    r.api_version = "warm.v1";
    r.uptime_usec = time_now_usec() - d->start_usec;
    r.peer = &peer;
    r.threads = d->threads;
    r.ctx_size = cfg->ctx_size;
    r.parallel = cfg->parallel;
    r.cache_type_k = (char *)config_cache_type_names[cfg->cache_type_k];
    r.cache_type_v = (char *)config_cache_type_names[cfg->cache_type_v];
    r.kv_rotation = cfg->kv_rotation;
    r.max_keep_alive_usec = cfg->max_keep_alive_usec;
    r.max_loaded_models = cfg->max_loaded_models;
    r.memory_budget_bytes = d->memory_budget_bytes;
    r.cache_max_bytes = cfg->cache_max_bytes;
    r.models_available = (uint32_t)registry_count(&d->registry);
    r.models_loaded = (uint32_t)residency_count(d);
    /* other users' streams are their activity: admins only */
    /* this GetInfo is one of the calls in progress: not counted as a stream */
    unsigned active = server_active_calls(d->server);
    r.active_streams = p->admin && active > 0 ? active - 1 : 0;
    r.n_features = n_features;
    r.features = features;
    r.n_devices = n_dev;
    r.devices = devp;
    rpc_call_reply(c, &r.base);
}

void rpc_info_metrics(struct rpc_call *c, const ProtobufCMessage *req) {
    struct daemon *d = rpc_call_daemon(c);
    const char *names[64];
    for (size_t i = 0; i < rpc_n_methods && i < ARRAY_SIZE(names); i++) names[i] = rpc_methods[i].name;
    metrics_set(&d->metrics, METRIC_MODELS_AVAILABLE, registry_count(&d->registry));
    metrics_set(&d->metrics, METRIC_QUEUE_DEPTH, residency_queue_depth(d));
    struct residency_device dev[ENGINE_MAX_DEVICES * 4];
    uint64_t reserved[2] = {0, 0}; /* cpu, cuda */
    for (size_t i = 0, n = residency_devices(d, dev, ARRAY_SIZE(dev)); i < n; i++)
        reserved[strcmp(dev[i].kind, "cpu") != 0] += dev[i].reserved_bytes;
    metrics_set(&d->metrics, METRIC_DEVICE_CPU_BYTES, reserved[0]);
    metrics_set(&d->metrics, METRIC_DEVICE_CUDA_BYTES, reserved[1]);
    cache_metrics_sync(d); /* the store's and the writer's counters */
    char *text = NULL;
    uint64_t uptime = time_now_usec() - d->start_usec;
    const struct peer *p = rpc_call_peer(c);
    int e;
    if (p->admin) {
        e = metrics_render(&d->metrics, names, MIN(rpc_n_methods, ARRAY_SIZE(names)), uptime,
                           &text);
    } else {
        /* the public rows and the namespaces this caller may use, nothing store-wide */
        char ns[CACHE_NS_VISIBLE_MAX][CACHE_NS_MAX];
        const char *nsp[CACHE_NS_VISIBLE_MAX];
        size_t n = cache_namespaces_visible(&d->config, p, ns, CACHE_NS_VISIBLE_MAX);
        for (size_t i = 0; i < n; i++) nsp[i] = ns[i];
        e = metrics_render_scoped(&d->metrics, nsp, n, uptime, &text);
    }
    if (e < 0) {
        rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory rendering metrics");
        return;
    }
    Warm__V1__MetricsResponse r = WARM__V1__METRICS_RESPONSE__INIT;
    r.text = text;
    rpc_call_reply(c, &r.base);
    free(text);
}
