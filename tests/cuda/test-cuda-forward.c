// labels: cuda
/* Whole-model logits on the GPU (tests/cuda/gpu-forward.h, built from the kernels/cuda
 * ops) against the CPU engine, for every architecture and weight type warm-mkmodel
 * writes, on the matrix-vector path (decode) and the GEMM path (prefill), and over
 * quantized, Hadamard-rotated KV caches. Exits 77 without a CUDA device. */
#include "cuda/cuda-test.h"
#include "cuda/gpu-forward.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>

/* Named tolerances (NMSE = Σ(gpu - cpu)² / Σ cpu², per position):
 *   TOL_NMSE      same weights, f32 KV: the products differ only by float summation order
 *                 (the GPU rounds activations to q8 blocks as the CPU does); prefill's f16
 *                 tiles add 2^-11 relative rounding of W and x'
 *   TOL_NMSE_KVQ  quantized, rotated KV: a K or V value whose f32 input differs in the last
 *                 bits may round to the neighbouring code on one side */
#define TOL_NMSE 1e-4
#define TOL_NMSE_KVQ 1e-3

struct arch_case {
    const char *arch;
    const char *shape; /* warm-mkmodel options */
};
static const struct arch_case arch_cases[] = {
    /* head_dim 64 (rotation applies), GQA 6:2 */
    {"llama", "--n-embd 384 --n-layer 2 --n-head 6 --n-head-kv 2 --head-dim 64 --n-ff 512 --n-vocab 320"},
    {"qwen2", "--n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 384 --n-vocab 320 --tied"},
    {"qwen3", "--n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 --head-dim 32 --n-ff 384 --n-vocab 320"},
    /* the last layer reads layer 1's KV */
    {"llama", "--n-embd 256 --n-layer 3 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 384 --n-vocab 320 "
              "--shared-kv-layers 1"},
};
static const char *const weight_types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"};
/* k-quants need every matrix's n_in to be a multiple of 256; checked when warm-mkmodel can
 * write them (the matmul of every k-quant is checked by test-cuda-ops either way) */
static const struct arch_case kquant_case = {
    "llama", "--n-embd 512 --n-layer 2 --n-head 8 --n-head-kv 2 --head-dim 64 --n-ff 768 --n-vocab 320"};
static const char *const kquant_types[] = {"q4_K", "q5_K", "q6_K"};

static struct kern_cuda_ctx *ctx;
static void ctx_free(void) {
    kern_cuda_ctx_free(ctx);
}
static struct kern_cuda_ctx *dev_ctx(void) {
    if (!ctx && kern_cuda_device_count() > 0) {
        if (kern_cuda_ctx_new(0, &ctx) < 0) ctx = NULL;
        else atexit(ctx_free);
    }
    return ctx;
}
#define NEED_DEVICE()                                                                            \
    do {                                                                                         \
        if (!dev_ctx()) SKIP("no CUDA device (no GPU or no driver): the CUDA forward is untested here"); \
    } while (0)

/* The model of case a in weight type `type`, as test_tmpdir()/NAME.gguf; NULL when
 * warm-mkmodel failed. */
static const char *mkmodel(const char *name, const struct arch_case *a, const char *type) {
    return test_mkmodel(name, "--arch %s %s --type %s --seed 11", a->arch, a->shape, type);
}

enum { MAX_PROMPT = 48, N_GEN = 8 };

/* Runs prompt (n_prompt tokens, one step) then N_GEN greedy steps on the CPU engine and
 * on the GPU, feeding both the CPU's tokens; returns the worst NMSE and counts the steps
 * whose greedy token agrees. */
static int compare_run(const char *path, uint32_t n_prompt, enum kern_type kt, enum kern_type vt, double *ret_worst,
                       int *ret_agree, struct err_detail *d) {
    struct engine_model *m = NULL;
    struct engine_context *cpu = NULL;
    struct gpu_model *gpu = NULL;
    float *lg = NULL;
    int r = engine_model_load(path, NULL, &m, d);
    if (r < 0) return r;
    const int64_t n_vocab = m->hp.n_vocab;
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 128;
    p.n_outputs = MAX_PROMPT;
    p.n_threads = 2;
    p.type_k = kt;
    p.type_v = vt;
    p.kv_rotation = true;
    r = engine_context_new(m, &p, &cpu, d);
    if (r == 0) r = gpu_model_new(ctx, m, 128, MAX_PROMPT, kt, vt, true, &gpu);
    if (r == 0) {
        struct engine_kv_info info;
        engine_context_kv_info(cpu, &info);
        if (info.n_rot_k != gpu->n_rot_k || info.n_rot_v != gpu->n_rot_v) r = err_set(d, -EINVAL, "rotation sizes differ");
    }
    lg = malloc(sizeof(float) * MAX_PROMPT * n_vocab);
    if (r == 0 && !lg) r = -ENOMEM;
    int32_t tok[MAX_PROMPT], pos[MAX_PROMPT];
    bool want[MAX_PROMPT];
    for (uint32_t i = 0; i < n_prompt; i++) {
        tok[i] = (int32_t)((i * 37 + 5) % n_vocab);
        pos[i] = (int32_t)i;
        want[i] = true;
    }
    double worst = 0;
    int agree = 0;
    if (r == 0) {
        struct engine_batch b = {.n_tok = (int32_t)n_prompt, .token = tok, .pos = pos, .want_logits = want};
        r = engine_context_decode(cpu, &b, d);
    }
    if (r == 0) r = gpu_forward(gpu, tok, n_prompt, n_prompt);
    if (r == 0) r = gpu_logits(gpu, lg, n_prompt);
    for (uint32_t i = 0; r == 0 && i < n_prompt; i++) {
        double e = nmse(lg + i * n_vocab, engine_context_logits(cpu, (int32_t)i), n_vocab);
        worst = e > worst ? e : worst;
    }
    for (int s = 0; r == 0 && s < N_GEN; s++) {
        const float *cl = engine_context_logits(cpu, engine_context_n_outputs(cpu) - 1);
        int32_t next = argmax(cl, n_vocab), gnext = -1;
        r = gpu_greedy(gpu, &gnext);
        agree += r == 0 && gnext == next;
        int32_t ps = (int32_t)(n_prompt + s);
        struct engine_batch b = {.n_tok = 1, .token = &next, .pos = &ps};
        if (r == 0) r = engine_context_decode(cpu, &b, d);
        if (r == 0) r = gpu_forward(gpu, &next, 1, 1);
        if (r == 0) r = gpu_logits(gpu, lg, 1);
        if (r == 0) {
            double e = nmse(lg, engine_context_logits(cpu, 0), n_vocab);
            worst = e > worst ? e : worst;
        }
    }
    *ret_worst = worst;
    *ret_agree = agree;
    free(lg);
    gpu_model_free(gpu);
    engine_context_free(cpu);
    engine_model_free(m);
    return r;
}

/* One model: decode-path logits against the CPU engine, f32 KV, a 6-token prompt. */
static void check_decode(const struct arch_case *a, const char *type, const char *name, bool optional) {
    const char *path = mkmodel(name, a, type);
    if (!path) {
        if (optional) {
            printf("  %-6s %-7s not checked: warm-mkmodel does not write this type\n", a->arch, type);
            return;
        }
        TEST_FAIL_("warm-mkmodel failed for %s", name);
    }
    struct err_detail d = {0};
    double worst = 0;
    int agree = 0;
    ASSERT_OK_D(compare_run(path, 6, KERN_TYPE_F32, KERN_TYPE_F32, &worst, &agree, &d), &d);
    printf("  %-6s %-7s NMSE %.2e, greedy agrees %d/%d\n", a->arch, type, worst, agree, N_GEN);
    if (!(worst <= TOL_NMSE)) TEST_FAIL_("%s %s: logits NMSE %.3g > %.3g", a->arch, type, worst, TOL_NMSE);
}

/* every arch × weight type (matrix-vector path) */
TEST(logits_decode) {
    NEED_DEVICE();
    if (!getenv("WARM_BIN")) SKIP("WARM_BIN is not set (warm-mkmodel)");
    char name[64];
    for (size_t a = 0; a < ARRAY_SIZE(arch_cases); a++)
        for (size_t t = 0; t < ARRAY_SIZE(weight_types) && !test_failed_; t++) {
            snprintf(name, sizeof name, "%s-%zu-%s", arch_cases[a].arch, a, weight_types[t]);
            check_decode(&arch_cases[a], weight_types[t], name, false);
        }
    for (size_t t = 0; t < ARRAY_SIZE(kquant_types) && !test_failed_; t++) {
        snprintf(name, sizeof name, "kq-%s", kquant_types[t]);
        check_decode(&kquant_case, kquant_types[t], name, true); /* k-quants: test-cuda-ops covers the ops */
    }
}

/* a 40-token prompt (GEMM path) for each weight type of the llama case */
TEST(logits_prefill) {
    NEED_DEVICE();
    if (!getenv("WARM_BIN")) SKIP("WARM_BIN is not set (warm-mkmodel)");
    char name[64];
    for (size_t t = 0; t < ARRAY_SIZE(weight_types); t++) {
        snprintf(name, sizeof name, "prefill-%s", weight_types[t]);
        const char *path = mkmodel(name, &arch_cases[0], weight_types[t]);
        if (!path) TEST_FAIL_("warm-mkmodel failed for %s", name);
        struct err_detail d = {0};
        double worst = 0;
        int agree = 0;
        ASSERT_OK_D(compare_run(path, 40, KERN_TYPE_F32, KERN_TYPE_F32, &worst, &agree, &d), &d);
        printf("  prefill %-7s NMSE %.2e, greedy agrees %d/%d\n", weight_types[t], worst, agree, N_GEN);
        if (!(worst <= TOL_NMSE)) TEST_FAIL_("%s: prefill logits NMSE %.3g > %.3g", weight_types[t], worst, TOL_NMSE);
    }
}

/* quantized, rotated caches (llama: head 64, so K and V are rotated) and the float ones */
TEST(logits_kv_types) {
    NEED_DEVICE();
    if (!getenv("WARM_BIN")) SKIP("WARM_BIN is not set (warm-mkmodel)");
    static const int pairs[][2] = {
        {KERN_TYPE_F16, KERN_TYPE_F16},   {KERN_TYPE_BF16, KERN_TYPE_Q4_1}, {KERN_TYPE_Q8_0, KERN_TYPE_Q8_0},
        {KERN_TYPE_Q4_0, KERN_TYPE_Q4_0}, {KERN_TYPE_Q5_0, KERN_TYPE_Q5_1}, {KERN_TYPE_IQ4_NL, KERN_TYPE_IQ4_NL},
    };
    const char *path = mkmodel("kv-q8_0", &arch_cases[0], "q8_0");
    if (!path) TEST_FAIL_("warm-mkmodel failed for kv-q8_0");
    for (size_t i = 0; i < ARRAY_SIZE(pairs); i++) {
        struct err_detail d = {0};
        double worst = 0;
        int agree = 0;
        ASSERT_OK_D(compare_run(path, 6, pairs[i][0], pairs[i][1], &worst, &agree, &d), &d);
        const double tol = kern_type_traits(pairs[i][0])->is_quantized || kern_type_traits(pairs[i][1])->is_quantized
                               ? TOL_NMSE_KVQ : TOL_NMSE;
        printf("  K %-6s V %-6s NMSE %.2e, greedy agrees %d/%d\n", kern_type_name(pairs[i][0]),
               kern_type_name(pairs[i][1]), worst, agree, N_GEN);
        if (!(worst <= tol))
            TEST_FAIL_("K %s V %s: logits NMSE %.3g > %.3g", kern_type_name(pairs[i][0]), kern_type_name(pairs[i][1]),
                       worst, tol);
    }
}

/* ---- state blobs between the GPU and the CPU (DESIGN.md 3.5) -------------------------- */

/* Where a blob's payload starts and how long it is (the layout of engine/kv-state.c):
 * header_bytes at offset 8; at it p0, p1, the tokens, then payload_bytes, payload_xxh3,
 * header_xxh3, the payload. */
static size_t blob_payload(const uint8_t *b, size_t *ret_bytes) {
    uint32_t hb, p0, p1;
    uint64_t pb;
    memcpy(&hb, b + 8, 4);
    memcpy(&p0, b + hb, 4);
    memcpy(&p1, b + hb + 4, 4);
    size_t sums = hb + 8 + 4 * (size_t)(p1 - p0);
    memcpy(&pb, b + sums, 8);
    *ret_bytes = (size_t)pb;
    return sums + 24;
}

enum { BLOB_PROMPT = 6, BLOB_GEN = 8 };

/* Greedy continuation on the CPU after positions [0, BLOB_PROMPT - 1) are cached: feeds
 * the last prompt token, then its own tokens. */
static int cpu_continue(struct engine_context *c, const int32_t *prompt, int32_t *gen, struct err_detail *d) {
    int32_t tok = prompt[BLOB_PROMPT - 1], pos = BLOB_PROMPT - 1;
    const int64_t n_vocab = engine_context_model(c)->hp.n_vocab;
    for (int s = 0; s < BLOB_GEN; s++, pos++) {
        struct engine_batch b = {.n_tok = 1, .token = &tok, .pos = &pos};
        int r = engine_context_decode(c, &b, d);
        if (r < 0) return r;
        tok = gen[s] = argmax(engine_context_logits(c, 0), n_vocab);
    }
    return 0;
}

static int gpu_continue(struct gpu_model *g, const int32_t *prompt, int32_t *gen) {
    int32_t tok = prompt[BLOB_PROMPT - 1];
    for (int s = 0; s < BLOB_GEN; s++) {
        int r = gpu_forward(g, &tok, 1, 1);
        if (r == 0) r = gpu_greedy(g, &tok);
        if (r < 0) return r;
        gen[s] = tok;
    }
    return 0;
}

static struct engine_context *cpu_ctx(const struct engine_model *m, enum kern_type kt, enum kern_type vt,
                                      struct err_detail *d) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = 64;
    p.n_threads = 2;
    p.type_k = kt;
    p.type_v = vt;
    p.kv_rotation = true;
    struct engine_context *c = NULL;
    return engine_context_new(m, &p, &c, d) < 0 ? NULL : c;
}

/* GPU -> CPU: the GPU's cache rows of the prompt, in a blob (the CPU's own export of the
 * same prompt with its payload replaced and its checksums recomputed), import on a fresh
 * CPU context, which then continues as the GPU does. CPU -> GPU: a CPU blob's payload
 * uploaded into the GPU cache continues as the CPU does. For a float and a quantized,
 * rotated cache. */
TEST(state_blobs) {
    NEED_DEVICE();
    if (!getenv("WARM_BIN")) SKIP("WARM_BIN is not set (warm-mkmodel)");
    static const int pairs[][2] = {{KERN_TYPE_F16, KERN_TYPE_F16}, {KERN_TYPE_Q8_0, KERN_TYPE_Q4_0}};
    const char *path = mkmodel("blob-q8_0", &arch_cases[0], "q8_0");
    if (!path) TEST_FAIL_("warm-mkmodel failed for blob-q8_0");
    struct err_detail d = {0};
    struct engine_model *m = NULL;
    ASSERT_OK_D(engine_model_load(path, NULL, &m, &d), &d);
    int32_t prompt[BLOB_PROMPT], pos[BLOB_PROMPT];
    for (int i = 0; i < BLOB_PROMPT; i++) prompt[i] = (i * 53 + 7) % (int32_t)m->hp.n_vocab, pos[i] = i;
    const uint32_t n_cached = BLOB_PROMPT - 1; /* the blob's range [0, n_cached) */
    for (size_t i = 0; i < ARRAY_SIZE(pairs) && !test_failed_; i++) {
        const enum kern_type kt = pairs[i][0], vt = pairs[i][1];
        struct engine_context *c1 = cpu_ctx(m, kt, vt, &d), *c2 = cpu_ctx(m, kt, vt, &d);
        struct gpu_model *g = NULL;
        uint8_t *blob = NULL;
        int32_t gen_gpu[BLOB_GEN], gen_cpu[BLOB_GEN];
        size_t n_blob = 0, pl_bytes = 0;
        int r = c1 && c2 ? 0 : ERR_INVALID;
        if (r == 0) r = gpu_model_new(ctx, m, 64, BLOB_PROMPT, kt, vt, true, &g);
        /* the CPU's blob of the first n_cached prompt positions */
        struct engine_batch b = {.n_tok = (int32_t)n_cached, .token = prompt, .pos = pos};
        if (r == 0) r = engine_context_decode(c1, &b, &d);
        if (r == 0) r = engine_kv_export(c1, 0, 0, n_cached, NULL, 0, &n_blob, &d);
        if (r == 0 && !(blob = malloc(n_blob))) r = -ENOMEM;
        if (r == 0) r = engine_kv_export(c1, 0, 0, n_cached, blob, n_blob, &n_blob, &d);
        size_t pl = r == 0 ? blob_payload(blob, &pl_bytes) : 0;
        const size_t layer_bytes = (size_t)n_cached * (g ? g->k_row_bytes + g->v_row_bytes : 0);
        const uint32_t n_own = m->hp.n_layer - m->hp.n_layer_kv_shared;
        if (r == 0 && (pl + pl_bytes != n_blob || pl_bytes != layer_bytes * n_own)) r = ERR_STATE_BAD;

        /* CPU -> GPU: upload the payload, continue both */
        for (uint32_t s = 0; r == 0 && s < n_own; s++) r = gpu_kv_rows(g, (int)s, 0, n_cached, blob + pl + s * layer_bytes, true);
        if (r == 0) g->n_past = n_cached;
        if (r == 0) r = gpu_continue(g, prompt, gen_gpu);
        if (r == 0) r = cpu_continue(c1, prompt, gen_cpu, &d);
        if (r == 0 && memcmp(gen_gpu, gen_cpu, sizeof gen_gpu) != 0) {
            printf("  CPU blob -> GPU (K %s, V %s): GPU", kern_type_name(kt), kern_type_name(vt));
            for (int s = 0; s < BLOB_GEN; s++) printf(" %d", gen_gpu[s]);
            printf(", CPU");
            for (int s = 0; s < BLOB_GEN; s++) printf(" %d", gen_cpu[s]);
            printf("\n");
            r = ERR_STATE_TOKENS;
        }

        /* GPU -> CPU: a fresh GPU run of the prompt, its rows as the blob's payload */
        if (r == 0) {
            g->n_past = 0;
            r = gpu_forward(g, prompt, n_cached, 1);
        }
        for (uint32_t s = 0; r == 0 && s < n_own; s++) r = gpu_kv_rows(g, (int)s, 0, n_cached, blob + pl + s * layer_bytes, false);
        if (r == 0) {
            uint64_t h = hash64(blob + pl, pl_bytes);
            memcpy(blob + pl - 16, &h, 8);
            h = hash64(blob, pl - 8);
            memcpy(blob + pl - 8, &h, 8);
            r = engine_kv_import(c2, 0, blob, n_blob, prompt, BLOB_PROMPT, NULL, &d);
        }
        if (r == 0) r = gpu_continue(g, prompt, gen_gpu);
        if (r == 0) r = cpu_continue(c2, prompt, gen_cpu, &d);
        if (r == 0 && memcmp(gen_gpu, gen_cpu, sizeof gen_gpu) != 0) {
            printf("  GPU blob -> CPU (K %s, V %s) continues differently\n", kern_type_name(kt), kern_type_name(vt));
            r = ERR_STATE_TOKENS;
        }
        if (r == 0) printf("  K %-5s V %-5s: blobs cross GPU <-> CPU, %d greedy tokens equal\n", kern_type_name(kt),
                           kern_type_name(vt), BLOB_GEN);
        free(blob);
        gpu_model_free(g);
        engine_context_free(c1);
        engine_context_free(c2);
        if (r < 0) {
            engine_model_free(m);
            TEST_FAIL_("K %s V %s: %s (%s)", kern_type_name(kt), kern_type_name(vt), err_name(r), err_msg(&d, r));
        }
    }
    engine_model_free(m);
}

TEST_MAIN(T(logits_decode), T(logits_prefill), T(logits_kv_types), T(state_blobs))
