/* Mixture-of-experts models (notes/hybrid.md §A.7, §C) against llama.cpp's references
 * (../shared/models/hybrid/README.md): the router's arithmetic on hand-made logits; then
 * qwen3moe-tiny (attention only), qwen35moe-tiny (the qwen35 hybrid trunk + MoE FFN with a
 * shared expert) and qwen35moe-tiny-f16 on P1..P3: greedy ids equal to the reference and
 * every step's logits within the README's thresholds (f32: max |Δ| 0.01; the f16 MoE file,
 * whose routing has near-ties that fp16 rounding can flip: NMSE 1e-3 a step with the
 * reference's tokens fed back); P3 prefilled in steps of 8, 64 and whole gives the same; 1
 * and 2 threads give the same bits. Then a tensor split of qwen3moe over 2 CPU partitions
 * equals one device, and the refusals of what is not supported name what is missing. */
#include "test.h"
#include "hybrid-run.h"

#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_F32 0.01
#define NMSE_F16_MOE 1e-3
/* the same prompt in other steps (f32 summation order; the routing must not flip) */
#define TOL_BATCHING 2e-3
/* a tensor split against one device (DESIGN.md 3.7, tests/engine/test-split.c) */
#define NMSE_SPLIT 1e-4

/* ---- the router ---------------------------------------------------------------------- */

TEST(routing) {
    /* 6 experts, top 2: softmax over all, the top two renormalised (qwen) */
    const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
    struct moe_route_params p = {.gating = ENGINE_MOE_SOFTMAX, .norm_w = true, .n_expert = 6,
                                 .n_used = 2};
    int32_t ids[3];
    float w[3];
    moe_route_token(ids, w, logits, &p);
    /* a tie goes to the lower index; equal logits, equal weights */
    ASSERT_EQ(ids[0], 1);
    ASSERT_EQ(ids[1], 3);
    ASSERT_NEAR(w[0], 0.5, 1e-6);
    ASSERT_NEAR(w[1], 0.5, 1e-6);
    /* without renormalisation: the softmax probabilities themselves */
    double z = 0;
    for (int i = 0; i < 6; i++) z += exp(logits[i]);
    p.norm_w = false;
    p.n_used = 3;
    moe_route_token(ids, w, logits, &p);
    ASSERT_EQ(ids[2], 4);
    ASSERT_NEAR(w[0], exp(2.0) / z, 1e-6);
    ASSERT_NEAR(w[2], exp(1.0) / z, 1e-6);
    /* with a scale (expert_weights_scale) */
    p.w_scale = 2.5f;
    moe_route_token(ids, w, logits, &p);
    ASSERT_NEAR(w[2], 2.5 * exp(1.0) / z, 1e-6);
    /* gpt-oss's: the top logits, a softmax over them only (sums to 1 unnormalised) */
    p = (struct moe_route_params){.gating = ENGINE_MOE_SOFTMAX_TOPK, .n_expert = 6, .n_used = 3};
    moe_route_token(ids, w, logits, &p);
    ASSERT_TRUE(ids[0] == 1 && ids[1] == 3 && ids[2] == 4);
    const double zk = 2 * exp(2.0) + exp(1.0);
    ASSERT_NEAR(w[0], exp(2.0) / zk, 1e-6);
    ASSERT_NEAR(w[2], exp(1.0) / zk, 1e-6);
    ASSERT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

/* ---- the references ------------------------------------------------------------------ */

/* One file on P1..P3: the prompt whole then N_STEPS greedy steps against the reference
 * (f16: the reference's tokens fed back, NMSE a step); P2 on 1 and 2 threads; P3 in steps
 * of 8, 64 and whole, which must agree. */
static void check_model(const char *file, const char *arch, bool f16) {
    struct engine_model *m = model_open(file);
    if (!m) SKIP("../shared/models/hybrid/%s.gguf is absent", file);
    ASSERT_STREQ(m->arch_name, arch);
    ASSERT_EQ(m->hp.n_expert, 8);
    ASSERT_EQ(m->hp.n_expert_used, 2);
    for (uint32_t il = 0; il < m->hp.n_layer; il++) ASSERT_EQ(m->hp.layer[il].ffn, ENGINE_FFN_MOE);
    /* the bytes a token reads: all but 6 of 8 experts' */
    ASSERT_TRUE(m->active_bytes < m->weight_bytes);
    const uint64_t stack = (uint64_t)m->layers[0].exp_gate.expert_bytes * 3 * m->hp.n_layer;
    ASSERT_EQ(m->weight_bytes - m->active_bytes, stack * 6);
    const uint32_t V = m->hp.n_vocab;
    float *got = malloc((size_t)N_STEPS * V * sizeof *got);
    float *got2 = malloc((size_t)N_STEPS * V * sizeof *got2);
    float *all = malloc((size_t)MAX_PROMPT * V * sizeof *all);
    float *all2 = malloc((size_t)MAX_PROMPT * V * sizeof *all2);
    ASSERT_TRUE(got && got2 && all && all2);
    const char *prompts[] = {"P1", "P2", "P3"};
    for (size_t pi = 0; pi < ARRAY_SIZE(prompts); pi++) {
        struct reference ref = {0};
        if (!reference_load(file, prompts[pi], &ref)) {
            free(ref.logits);
            SKIP("the %s-%s reference is absent", file, prompts[pi]);
        }
        ASSERT_EQ(ref.n_vocab, V);
        const uint32_t np = (uint32_t)ref.n_prompt;
        struct engine_context *ctx = ctx_new(m, 1024, 2, 1);
        ASSERT_TRUE(ctx != NULL);
        ASSERT_OK(prefill(ctx, ref.prompt, np, np, all, V));
        int32_t gen[N_STEPS];
        ASSERT_OK(greedy(ctx, np, (int32_t)np - 1, V, f16 ? ref.gen : NULL, got, gen));
        double d_steps = max_diff(got, ref.logits, (size_t)N_STEPS * V), worst = 0;
        for (int k = 0; k < N_STEPS; k++)
            worst = MAX(worst, test_nmse(got + (size_t)k * V, ref.logits + (size_t)k * V, V));
        const double nmse = test_nmse(got, ref.logits, (size_t)N_STEPS * V);
        int same = 0;
        for (int k = 0; k < N_STEPS; k++) same += gen[k] == ref.gen[k];
        printf("  %s %s (%u ids): greedy steps max |dlogit| %.3g, nmse %.3g (worst step %.3g), "
               "%d/%d ids equal\n", file, prompts[pi], np, d_steps, nmse, worst, same, N_STEPS);
        if (f16) {
            /* the README: an expert flips on P1 (one argmax differs, |Δ| 2.5, even for a
             * numpy that rounds the inputs to fp16 as ggml does); the others all equal */
            ASSERT_TRUE(nmse <= NMSE_F16_MOE);
            ASSERT_TRUE(same >= (pi == 0 ? N_STEPS - 1 : N_STEPS));
        } else {
            ASSERT_TRUE(memcmp(gen, ref.gen, sizeof gen) == 0);
            ASSERT_TRUE(d_steps <= TOL_F32);
        }
        engine_context_free(ctx);
        /* one thread: the same bits (each product is one tile's whatever the threads; the
         * classifier over as many rows: its one-row and many-row kernels may differ) */
        if (pi == 1) {
            ctx = ctx_new(m, 1024, 1, 1);
            ASSERT_TRUE(ctx != NULL);
            ASSERT_OK(prefill(ctx, ref.prompt, np, np, all2, V)); /* (the same rows) */
            int32_t gen1[N_STEPS];
            ASSERT_OK(greedy(ctx, np, (int32_t)np - 1, V, f16 ? ref.gen : NULL, got2, gen1));
            double d = max_diff(got, got2, (size_t)N_STEPS * V);
            printf("  %s %s: 1 vs 2 threads max |dlogit| %.3g\n", file, prompts[pi], d);
            ASSERT_TRUE(d == 0);
            engine_context_free(ctx);
        }
        /* the long prompt in steps of 8 and 64, and an n_batch of 64 cutting one decode */
        static const struct {
            uint32_t n_batch, step;
        } modes[] = {{1024, 8}, {1024, 64}, {64, 1024}};
        for (size_t mi = 0; pi == 2 && mi < ARRAY_SIZE(modes); mi++) {
            ctx = ctx_new(m, modes[mi].n_batch, 2, 1);
            ASSERT_TRUE(ctx != NULL);
            ASSERT_OK(prefill(ctx, ref.prompt, np, modes[mi].step, all2, V));
            double d_all = max_diff(all2, all, (size_t)np * V);
            int32_t gen2[N_STEPS];
            const uint32_t step = MIN(modes[mi].step, np), n_last = np - (np - 1) / step * step;
            ASSERT_OK(greedy(ctx, np, (int32_t)n_last - 1, V, f16 ? ref.gen : NULL, got2, gen2));
            double d_ref = max_diff(got2, got, (size_t)N_STEPS * V);
            printf("  %s %s in steps of %u (n_batch %u): prompt vs whole max |dlogit| %.3g, "
                   "steps %.3g\n", file, prompts[pi], modes[mi].step, modes[mi].n_batch, d_all,
                   d_ref);
            ASSERT_TRUE(d_all <= TOL_BATCHING);
            ASSERT_TRUE(d_ref <= TOL_BATCHING);
            ASSERT_TRUE(memcmp(gen2, gen, sizeof gen2) == 0);
            engine_context_free(ctx);
        }
        free(ref.logits);
    }
    free(got);
    free(got2);
    free(all);
    free(all2);
    engine_model_free(m);
}

TEST(qwen3moe_f32) {
    check_model("qwen3moe-tiny", "qwen3moe", false);
}

TEST(qwen35moe_f32) {
    check_model("qwen35moe-tiny", "qwen35moe", false);
}

TEST(qwen35moe_f16) {
    check_model("qwen35moe-tiny-f16", "qwen35moe", true);
}

/* ---- tensor split ------------------------------------------------------------------- */

/* P2 and its greedy steps on n_dev partitions: the prompt's and the steps' logits into
 * all ((n_prompt + N_STEPS) rows), the ids into gen. */
static int split_run(const struct engine_model *m, const struct reference *ref, uint32_t n_dev,
                     float *all, int32_t *gen, uint64_t *ret_w) {
    const uint32_t V = m->hp.n_vocab, np = (uint32_t)ref->n_prompt;
    struct engine_context *ctx = ctx_new(m, 64, (int)n_dev, n_dev);
    if (!ctx) return ERR_INVALID;
    int r = prefill(ctx, ref->prompt, np, 64, all, V);
    if (r >= 0) r = greedy(ctx, np, (int32_t)np - 1 - (int32_t)((np - 1) / 64 * 64), V, NULL,
                           all + (size_t)np * V, gen);
    /* every device holds its share of every expert: the shares add up to one device's */
    uint64_t w = 0;
    for (uint32_t i = 0; r >= 0 && i < n_dev; i++) {
        struct engine_device_info info;
        if ((r = engine_context_device_info(ctx, i, &info)) >= 0) w += info.weight_bytes;
    }
    *ret_w = w;
    engine_context_free(ctx);
    return r;
}

/* qwen3moe on 2 and 3 CPU partitions (64 expert units: 32 + 32, 21 + 21 + 22) and
 * qwen35moe on 2 equal one device within the split tolerance, with the same greedy ids. */
TEST(split) {
    struct engine_model *m = model_open("qwen3moe-tiny");
    if (!m) SKIP("../shared/models/hybrid/qwen3moe-tiny.gguf is absent");
    struct reference ref = {0};
    if (!reference_load("qwen3moe-tiny", "P2", &ref)) {
        free(ref.logits);
        engine_model_free(m);
        SKIP("the qwen3moe-tiny P2 reference is absent");
    }
    const uint32_t V = m->hp.n_vocab;
    const size_t rows = ref.n_prompt + N_STEPS;
    float *one = malloc(rows * V * sizeof *one), *many = malloc(rows * V * sizeof *many);
    ASSERT_TRUE(one && many);
    int32_t gen1[N_STEPS], gen[N_STEPS];
    uint64_t w1 = 0, w = 0;
    ASSERT_OK(split_run(m, &ref, 1, one, gen1, &w1));
    ASSERT_TRUE(memcmp(gen1, ref.gen, sizeof gen1) == 0);
    for (uint32_t n_dev = 2; n_dev <= 3; n_dev++) {
        ASSERT_OK(split_run(m, &ref, n_dev, many, gen, &w));
        const double nmse = test_nmse(many, one, rows * V);
        printf("  %u partitions vs one device: nmse %.3g, max |dlogit| %.3g; weight bytes %llu "
               "(one device %llu)\n", n_dev, nmse, max_diff(many, one, rows * V),
               (unsigned long long)w, (unsigned long long)w1);
        ASSERT_EQ(w, w1);
        ASSERT_TRUE(nmse <= NMSE_SPLIT);
        ASSERT_TRUE(memcmp(gen, gen1, sizeof gen) == 0);
    }
    free(one), free(many), free(ref.logits);
    engine_model_free(m);
    /* qwen35moe: its Gated DeltaNet layers cut by key heads (engine/device.h), its experts
     * as qwen3moe's */
    m = model_open("qwen35moe-tiny");
    if (!m) return;
    ref = (struct reference){0};
    ASSERT_TRUE(reference_load("qwen35moe-tiny", "P2", &ref));
    ASSERT_EQ(ref.n_prompt + N_STEPS, rows); /* (every file's P2 is the same prompt) */
    one = malloc(rows * V * sizeof *one), many = malloc(rows * V * sizeof *many);
    ASSERT_TRUE(one && many);
    ASSERT_OK(split_run(m, &ref, 1, one, gen1, &w1));
    ASSERT_TRUE(memcmp(gen1, ref.gen, sizeof gen1) == 0);
    ASSERT_OK(split_run(m, &ref, 2, many, gen, &w));
    const double nmse = test_nmse(many, one, rows * V);
    printf("  qwen35moe on 2 partitions vs one device: nmse %.3g, max |dlogit| %.3g\n", nmse,
           max_diff(many, one, rows * V));
    ASSERT_TRUE(nmse <= NMSE_SPLIT);
    ASSERT_TRUE(memcmp(gen, gen1, sizeof gen) == 0);
    free(one), free(many), free(ref.logits);
    engine_model_free(m);
}

/* ---- a fused gate_up stack ------------------------------------------------------------ */

/* qwen3moe-tiny rewritten with each layer's ffn_gate_exps and ffn_up_exps fused into one
 * ffn_gate_up_exps {n_embd, 2 n_ff_exp, n_expert} (each expert's gate rows, then its up
 * rows: llama.cpp's --fuse-gate-up-exps) into path; with_separate keeps the two as well. */
static int write_fused(const char *path, bool with_separate) {
    const char *src_path = test_shared_path("hybrid/qwen3moe-tiny.gguf");
    struct gguf_file *src = NULL;
    struct gguf_writer *w = NULL;
    struct err_detail d = {0};
    int r = src_path ? gguf_open(src_path, &src, &d) : ERR_NOT_FOUND;
    if (r < 0) return r;
    if ((r = gguf_writer_new(&w)) < 0) goto out;
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(src); i++)
        r = gguf_writer_add_kv(w, gguf_kv_at(src, i));
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(src, i);
        char name[GGUF_MAX_NAME + 1], gate[GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        unsigned il;
        const bool is_gate = strstr(name, ".ffn_gate_exps.") != NULL,
                   is_up = strstr(name, ".ffn_up_exps.") != NULL;
        if ((!is_gate && !is_up) || with_separate)
            r = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
        if (r < 0 || !is_up || sscanf(name, "blk.%u.", &il) != 1) continue;
        snprintf(gate, sizeof gate, "blk.%u.ffn_gate_exps.weight", il);
        const struct gguf_tensor *g = gguf_find_tensor(src, gate);
        const size_t half = (size_t)t->ne[0] * (size_t)t->ne[1] * sizeof(float); /* f32 */
        char *fused = malloc(2 * half * (size_t)t->ne[2]);
        if (!g || !fused) {
            free(fused);
            r = ERR_INVALID;
            break;
        }
        for (int64_t e = 0; e < t->ne[2]; e++) {
            memcpy(fused + (size_t)e * 2 * half, (const char *)g->data + (size_t)e * half, half);
            memcpy(fused + (size_t)e * 2 * half + half, (const char *)t->data + (size_t)e * half,
                   half);
        }
        snprintf(name, sizeof name, "blk.%u.ffn_gate_up_exps.weight", il);
        r = gguf_writer_add_tensor(w, name, t->type, 3,
                                   (const int64_t[]){t->ne[0], 2 * t->ne[1], t->ne[2], 1}, fused);
        free(fused);
    }
    if (r >= 0) r = gguf_writer_save(w, path);
out:
    gguf_writer_free(w);
    gguf_close(src);
    return r;
}

/* The fused file gives the separate file's bits, on one device and on two partitions
 * (each holding its rows of both halves); a file with both forms is refused, as
 * llama.cpp counts the separate ones as unused. */
TEST(fused_gate_up) {
    struct engine_model *m = model_open("qwen3moe-tiny");
    struct reference ref = {0};
    if (!m || !reference_load("qwen3moe-tiny", "P2", &ref)) {
        free(ref.logits);
        engine_model_free(m);
        SKIP("qwen3moe-tiny or its P2 reference is absent");
    }
    char path[600];
    snprintf(path, sizeof path, "%s/fused.gguf", test_tmpdir());
    ASSERT_OK(write_fused(path, false));
    struct engine_model *f = model_load(path);
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ(f->layers[0].exp_gate.expert_bytes, 2 * m->layers[0].exp_gate.expert_bytes);
    ASSERT_EQ(f->weight_bytes, m->weight_bytes);
    ASSERT_EQ(f->active_bytes, m->active_bytes);
    const uint32_t V = m->hp.n_vocab;
    const size_t rows = ref.n_prompt + N_STEPS;
    float *a = malloc(rows * V * sizeof *a), *b = malloc(rows * V * sizeof *b);
    ASSERT_TRUE(a && b);
    int32_t ga[N_STEPS], gb[N_STEPS];
    uint64_t wa, wb;
    ASSERT_OK(split_run(m, &ref, 1, a, ga, &wa));
    for (uint32_t n_dev = 1; n_dev <= 2; n_dev++) {
        ASSERT_OK(split_run(f, &ref, n_dev, b, gb, &wb));
        const double d = max_diff(a, b, rows * V);
        printf("  fused gate_up on %u device(s) vs separate on one: max |dlogit| %.3g\n", n_dev, d);
        ASSERT_TRUE(memcmp(ga, gb, sizeof ga) == 0);
        ASSERT_TRUE(n_dev == 1 ? d == 0 : test_nmse(b, a, rows * V) <= NMSE_SPLIT);
        ASSERT_EQ(wa, wb);
    }
    engine_model_free(f);
    ASSERT_OK(write_fused(path, true));
    struct err_detail d = {0};
    f = NULL;
    ASSERT_ERR(engine_model_load(path, NULL, &f, &d), ERR_MODEL_TENSOR_UNUSED);
    printf("  both forms: %s\n", d.msg);
    free(a), free(b), free(ref.logits);
    engine_model_free(m);
}

/* ---- warm-mkmodel --------------------------------------------------------------------- */

/* A prompt of n made-up ids, N_STEPS greedy steps after it on n_dev partitions; the ids
 * into gen, every step's logits into got (N_STEPS, n_vocab). */
static int mk_generate(const struct engine_model *m, uint32_t n_dev, int n_threads, uint32_t step,
                       int32_t *gen, float *got) {
    enum { N = 40 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 131 + 7) % m->hp.n_vocab);
    struct engine_context *ctx = ctx_new(m, 64, n_threads, n_dev);
    if (!ctx) return ERR_INVALID;
    int r = prefill(ctx, tok, N, step, NULL, m->hp.n_vocab);
    if (r >= 0) r = greedy(ctx, N, 0, m->hp.n_vocab, NULL, got, gen);
    engine_context_free(ctx);
    return r;
}

/* warm-mkmodel's MoE files (its --arch qwen3moe, qwen35moe, and the dense qwen35) load
 * with llama.cpp's key and tensor names and generate deterministically: the same ids and
 * bits from a second context, the same ids from the prompt in steps of 3 (each step's
 * experts run row-parallel, not grouped) on 1 thread (2 before); qwen3moe with
 * q8_0 experts also on 2 partitions (cut at q8_0 blocks), within the split tolerance. */
TEST(mkmodel_files) {
    static const struct {
        const char *name, *opts;
        uint32_t n_dev; /* > 1: also a split */
    } cases[] = {
        {"mk-qwen3moe", "--arch qwen3moe --n-embd 128 --n-layer 3 --n-head 4 --n-head-kv 2 "
                        "--head-dim 32 --experts 16 --experts-used 4 --n-ff-exp 128 --type f32", 1},
        {"mk-qwen3moe-q8", "--arch qwen3moe --n-embd 128 --n-layer 2 --n-head 4 --n-head-kv 2 "
                           "--head-dim 32 --experts 6 --experts-used 2 --n-ff-exp 64 "
                           "--type q8_0", 2},
        {"mk-qwen35moe", "--arch qwen35moe --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 "
                         "--head-dim 64 --experts 8 --experts-used 2 --n-ff-exp 32 "
                         "--n-ff-shexp 64 --ssm-groups 2 --ssm-heads 4 --type f16", 1},
        {"mk-qwen35", "--arch qwen35 --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 "
                      "--head-dim 64 --n-ff 96 --type f32", 1},
    };
    for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
        const char *path = test_mkmodel(cases[c].name, "%s --seed 5", cases[c].opts);
        if (!path) SKIP("warm-mkmodel is not built or failed (see mkmodel.log)");
        struct engine_model *m = model_load(path);
        ASSERT_TRUE(m != NULL);
        const uint32_t V = m->hp.n_vocab;
        float *a = malloc((size_t)N_STEPS * V * sizeof *a);
        float *b = malloc((size_t)N_STEPS * V * sizeof *b);
        ASSERT_TRUE(a && b);
        int32_t ga[N_STEPS], gb[N_STEPS];
        ASSERT_OK(mk_generate(m, 1, 2, 64, ga, a));
        int distinct = 0; /* not one token over and over */
        for (int k = 1; k < N_STEPS; k++) distinct += ga[k] != ga[0];
        printf("  %s: %s, %u experts (%u a token), %u recurrent layers; ids %d %d %d %d ...\n",
               cases[c].name, m->arch_name, m->hp.n_expert, m->hp.n_expert_used, m->hp.n_layer_rec,
               ga[0], ga[1], ga[2], ga[3]);
        ASSERT_TRUE(distinct > 0);
        ASSERT_OK(mk_generate(m, 1, 2, 64, gb, b));
        ASSERT_TRUE(memcmp(ga, gb, sizeof ga) == 0 && max_diff(a, b, (size_t)N_STEPS * V) == 0);
        /* steps of 3: the few-token path (MOE_FEW_TOKENS) against the grouped one */
        ASSERT_OK(mk_generate(m, 1, 1, 3, gb, b));
        double d = max_diff(a, b, (size_t)N_STEPS * V);
        printf("    prompt in steps of 3 on 1 thread: max |dlogit| %.3g\n", d);
        ASSERT_TRUE(memcmp(ga, gb, sizeof ga) == 0 && d <= TOL_BATCHING);
        if (cases[c].n_dev > 1) {
            ASSERT_OK(mk_generate(m, cases[c].n_dev, 2, 64, gb, b));
            const double nmse = test_nmse(b, a, (size_t)N_STEPS * V);
            printf("    %u partitions: nmse %.3g\n", cases[c].n_dev, nmse);
            ASSERT_TRUE(memcmp(ga, gb, sizeof ga) == 0 && nmse <= NMSE_SPLIT);
        }
        free(a), free(b);
        engine_model_free(m);
    }
}

/* ---- the daemon's private copy: experts repacked in place ------------------------------ */

/* A model loaded as the daemon loads it (a private copy, repacked in place by its first
 * context: its expert stacks too, expert by expert, in rows8) generates what the mapped
 * file does: same ids, logits within the kernels' summation order; qwen35moe-tiny-f16 (f16 rows8)
 * and warm-mkmodel's q8_0 qwen3moe, whose decode steps take the few-token path over whole
 * rows8 groups. */
TEST(private_copy) {
    const char *paths[2] = {test_shared_path("hybrid/qwen35moe-tiny-f16.gguf"),
                            test_mkmodel("mk-qwen3moe-q8-big", "--arch qwen3moe --n-embd 256 "
                                         "--n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 64 "
                                         "--experts 8 --experts-used 3 --n-ff-exp 128 "
                                         "--type q8_0 --seed 9")};
    int ran = 0;
    for (size_t c = 0; c < ARRAY_SIZE(paths); c++) {
        if (!paths[c]) continue;
        struct engine_model *mapped = model_load(paths[c]), *own = NULL;
        struct err_detail d = {0};
        const struct engine_model_params mp = {.private_copy = true};
        ASSERT_TRUE(mapped != NULL);
        ASSERT_OK_D(engine_model_load(paths[c], &mp, &own, &d), &d);
        const uint32_t V = own->hp.n_vocab;
        float *a = malloc((size_t)N_STEPS * V * sizeof *a);
        float *b = malloc((size_t)N_STEPS * V * sizeof *b);
        ASSERT_TRUE(a && b);
        int32_t ga[N_STEPS], gb[N_STEPS];
        ASSERT_OK(mk_generate(mapped, 1, 2, 64, ga, a));
        ASSERT_OK(mk_generate(own, 1, 2, 64, gb, b));
        ASSERT_TRUE(own->repacked);
        ASSERT_EQ(own->layers[0].exp_gate.layout, KERN_LAYOUT_ROWS8);
        ASSERT_EQ(own->layers[0].exp_down.layout, KERN_LAYOUT_ROWS8);
        ASSERT_EQ(mapped->layers[0].exp_gate.layout, KERN_LAYOUT_ROWS);
        const double nmse = test_nmse(b, a, (size_t)N_STEPS * V);
        printf("  %s: repacked private copy vs mapped file: nmse %.3g, max |dlogit| %.3g\n",
               own->arch_name, nmse, max_diff(a, b, (size_t)N_STEPS * V));
        ASSERT_TRUE(memcmp(ga, gb, sizeof ga) == 0);
        /* (q8_0's rows8 and rows kernels sum a row's blocks in other orders: 1e-6) */
        ASSERT_TRUE(nmse <= 1e-5);
        /* a second context of the repacked model (steps of 3, one thread): the same ids */
        ASSERT_OK(mk_generate(own, 1, 1, 3, ga, a));
        ASSERT_TRUE(memcmp(ga, gb, sizeof ga) == 0 && max_diff(a, b, (size_t)N_STEPS * V) < 1e-3);
        free(a), free(b);
        engine_model_free(mapped);
        engine_model_free(own);
        ran++;
    }
    if (!ran) SKIP("neither qwen35moe-tiny-f16 nor warm-mkmodel is available");
}

/* ---- refusals ------------------------------------------------------------------------- */

/* Loads a copy of hybrid/qwen3moe-tiny.gguf with key `key` set to u32 (key NULL: none
 * changed) and without the tensor `drop` (NULL: all kept); r < 0 and d say why not. */
static int load_variant(const char *key, uint32_t u32, const char *drop, struct err_detail *d) {
    const char *path = test_shared_path("hybrid/qwen3moe-tiny.gguf");
    struct gguf_file *src = NULL;
    struct gguf_writer *w = NULL;
    int r = path ? gguf_open(path, &src, d) : 1;
    if (r) return r;
    if ((r = gguf_writer_new(&w)) < 0) goto out;
    for (uint64_t i = 0; r >= 0 && i < gguf_n_kv(src); i++) {
        const struct gguf_kv *kv = gguf_kv_at(src, i);
        if (!key || !gguf_str_eq(kv->key, key)) r = gguf_writer_add_kv(w, kv);
    }
    if (r >= 0 && key) r = gguf_writer_add_u32(w, key, u32);
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(src); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(src, i);
        char name[GGUF_MAX_NAME + 1];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (!drop || strcmp(name, drop))
            r = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
    }
    char out[600];
    snprintf(out, sizeof out, "%s/variant.gguf", test_tmpdir());
    if (r >= 0) r = gguf_writer_save(w, out);
    if (r >= 0) {
        struct engine_model *m = NULL;
        memset(d, 0, sizeof *d);
        r = engine_model_load(out, NULL, &m, d);
        engine_model_free(m);
    }
out:
    gguf_writer_free(w);
    gguf_close(src);
    return r;
}

/* Bad MoE files name the key or tensor; a CUDA context refuses a MoE model. */
TEST(refusals) {
    if (!test_shared_path("hybrid/qwen3moe-tiny.gguf")) SKIP("qwen3moe-tiny.gguf is absent");
    struct err_detail d = {0};
    ASSERT_OK_D(load_variant(NULL, 0, NULL, &d), &d);
    ASSERT_ERR(load_variant("qwen3moe.expert_used_count", 9, NULL, &d), ERR_MODEL_HPARAM);
    printf("  %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "qwen3moe.expert_used_count") != NULL);
    ASSERT_ERR(load_variant("qwen3moe.expert_count", 0, NULL, &d), ERR_MODEL_HPARAM);
    printf("  %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "expert_count") != NULL);
    /* 4 experts: the stacks of 8 no longer fit */
    ASSERT_ERR(load_variant("qwen3moe.expert_count", 4, NULL, &d), ERR_MODEL_TENSOR_SHAPE);
    printf("  %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "blk.0.ffn_gate_inp.weight") || strstr(d.msg, "_exps.weight"));
    ASSERT_ERR(load_variant(NULL, 0, "blk.2.ffn_down_exps.weight", &d), ERR_MODEL_TENSOR_MISSING);
    printf("  %s\n", d.msg);
    ASSERT_TRUE(strstr(d.msg, "blk.2.ffn_down_exps.weight") != NULL);
    /* gpt-oss and gemma4's 26B-A4B: archs now (tests/engine/test-gptoss.c,
     * test-gemma4moe.c). CUDA: the CPU only (without a GPU or a CUDA build the device is
     * refused first) */
    struct engine_model *m = model_open("qwen3moe-tiny");
    ASSERT_TRUE(m != NULL);
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64;
    p.device = ENGINE_DEVICE_CUDA;
    struct engine_context *ctx = NULL;
    ASSERT_ERR(engine_context_new(m, &p, &ctx, &d), ERR_UNSUPPORTED);
    printf("  cuda:0: %s\n", d.msg);
    engine_model_free(m);
}

/* warm-run (tests/tools/warm-run.c) on P2 of each f32 file: its greedy ids and --logits
 * against the reference. */
TEST(warm_run) {
    const char *bin = getenv("WARM_BIN");
    const char *files[] = {"qwen3moe-tiny", "qwen35moe-tiny"};
    for (size_t fi = 0; fi < ARRAY_SIZE(files); fi++) {
        char rel[128];
        snprintf(rel, sizeof rel, "hybrid/%s.gguf", files[fi]);
        const char *shared = test_shared_path(rel);
        char model[600];
        snprintf(model, sizeof model, "%s", shared ? shared : "");
        struct reference ref = {0};
        if (!bin || !shared || !reference_load(files[fi], "P2", &ref)) {
            free(ref.logits);
            SKIP("WARM_BIN or the %s reference is absent", files[fi]);
        }
        static char cmd[8192], ids[4096];
        size_t at = 0;
        for (size_t i = 0; i < ref.n_prompt; i++)
            at += (size_t)snprintf(ids + at, sizeof ids - at, "%s%d", i ? " " : "", ref.prompt[i]);
        char out[600];
        snprintf(out, sizeof out, "%s/%s.logits", test_tmpdir(), files[fi]);
        snprintf(cmd, sizeof cmd, "'%s/warm-run' -m '%s' --prompt-ids '%s' -n %zu --cache-type "
                 "f32 -t 2 --ids --logits '%s'", bin, model, ids, ref.n_prompt + N_STEPS - 1, out);
        FILE *p = popen(cmd, "r");
        ASSERT_TRUE(p != NULL);
        static char line[1 << 14];
        int32_t gen[N_STEPS] = {0};
        size_t n_gen = 0;
        while (fgets(line, sizeof line, p))
            if (!strncmp(line, "generated_ids: ", 15)) n_gen = ids_parse(line + 15, gen, N_STEPS);
        ASSERT_EQ(pclose(p), 0);
        ASSERT_EQ(n_gen, N_STEPS);
        ASSERT_TRUE(memcmp(gen, ref.gen, sizeof gen) == 0);
        uint32_t nv, nr, np, fp;
        float *x = logits_read_path(out, &nv, &nr, &np, &fp);
        ASSERT_TRUE(x != NULL);
        ASSERT_TRUE(nv == ref.n_vocab && nr == N_STEPS && np == ref.n_prompt && fp == np - 1);
        double d = max_diff(x, ref.logits, (size_t)nv * nr);
        printf("  warm-run --logits on %s P2: max |dlogit| %.3g\n", files[fi], d);
        ASSERT_TRUE(d <= TOL_F32);
        free(x);
        free(ref.logits);
    }
}

TEST_MAIN(T(routing), T(qwen3moe_f32), T(qwen35moe_f32), T(qwen35moe_f16), T(split),
          T(fused_gate_up), T(mkmodel_files), T(private_copy), T(refusals), T(warm_run))
