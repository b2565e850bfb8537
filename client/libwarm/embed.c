/* embed — warm_embed: the Embed RPC (warm.proto EmbedRequest / EmbedResponse). */
#include "libwarm.h"

#include "warm/v1/warm.pb-c.h"

#include <stdlib.h>
#include <string.h>

WARM_API int warm_embed(struct warm_client *c, const struct warm_embed_params *p,
                        struct warm_embed_result **ret, struct warm_error *err) {
    if (!p || !ret) return lw_fail(err, WARM_BAD_REQUEST, "warm_embed: params and ret are required");
    if ((p->n_inputs && !p->inputs) || (p->n_token_inputs && (!p->token_inputs || !p->n_tokens)))
        return lw_fail(err, WARM_BAD_REQUEST, "warm_embed: NULL inputs with a count > 0");
    Warm__V1__EmbedRequest req = WARM__V1__EMBED_REQUEST__INIT;
    req.model = (char *)(p->model ? p->model : "");
    req.n_inputs = p->n_inputs;
    req.inputs = (char **)p->inputs;
    req.truncate = p->truncate;
    req.raw = p->raw;
    req.dimensions = p->dimensions;
    req.keep_alive_usec = p->keep_alive_usec;
    req.unload_after = p->unload_after;
    Warm__V1__TokenList *lists = NULL, **ptrs = NULL;
    if (p->n_token_inputs) {
        lists = calloc(p->n_token_inputs, sizeof *lists);
        ptrs = calloc(p->n_token_inputs, sizeof *ptrs);
        if (!lists || !ptrs) {
            free(lists);
            free(ptrs);
            return lw_fail(err, WARM_NO_MEMORY, "out of memory");
        }
        for (size_t i = 0; i < p->n_token_inputs; i++) {
            warm__v1__token_list__init(&lists[i]);
            lists[i].n_tokens = p->n_tokens[i];
            lists[i].tokens = (int32_t *)p->token_inputs[i];
            ptrs[i] = &lists[i];
        }
        req.n_token_inputs = p->n_token_inputs;
        req.token_inputs = ptrs;
    }
    ProtobufCMessage *m;
    int r = lw_call_unary(c, "Embed", &req.base, &warm__v1__embed_response__descriptor, &m, err);
    free(lists);
    free(ptrs);
    if (r < 0) return r;
    const Warm__V1__EmbedResponse *q = (const Warm__V1__EmbedResponse *)m;
    uint32_t dims = q->n_embeddings ? (uint32_t)q->embeddings[0]->n_values : 0;
    for (size_t i = 0; i < q->n_embeddings; i++)
        if (q->embeddings[i]->n_values != dims) {
            protobuf_c_message_free_unpacked(m, NULL);
            return lw_fail(err, WARM_PROTOCOL, "Embed: vectors of different widths");
        }
    size_t n_floats = q->n_embeddings * (size_t)dims;
    struct warm_embed_result *res = calloc(1, sizeof *res + n_floats * sizeof(float));
    if (!res) {
        protobuf_c_message_free_unpacked(m, NULL);
        return lw_fail(err, WARM_NO_MEMORY, "out of memory");
    }
    lw_copy(res->model, sizeof res->model, q->model);
    res->n_embeddings = q->n_embeddings;
    res->dimensions = dims;
    res->prompt_tokens = q->prompt_tokens;
    res->cached_inputs = q->cached_inputs;
    res->truncated_inputs = q->truncated_inputs;
    res->load_usec = q->load_usec;
    res->total_usec = q->total_usec;
    res->keep_alive_usec = q->keep_alive_usec;
    res->values = (float *)(res + 1);
    for (size_t i = 0; i < q->n_embeddings; i++)
        memcpy(res->values + i * dims, q->embeddings[i]->values, dims * sizeof(float));
    protobuf_c_message_free_unpacked(m, NULL);
    *ret = res;
    return 0;
}
