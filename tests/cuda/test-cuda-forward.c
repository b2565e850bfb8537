// labels: cuda
/* Whole-model logits on the GPU (tests/cuda/gpu-forward.h, built from the kernels/cuda
 * ops) against the CPU engine, for every architecture and weight type warm-mkmodel
 * writes, on the matrix-vector path (decode) and the GEMM path (prefill), and over
 * quantized, Hadamard-rotated KV caches. Exits 77 without a CUDA device. */
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

static bool mkmodel(const struct arch_case *a, const char *type, const char *out) {
    const char *bin = getenv("WARM_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s/warm-mkmodel' --arch %s %s --type %s --seed 11 -o '%s' >/dev/null 2>&1",
             bin ? bin : ".", a->arch, a->shape, type, out);
    return system(cmd) == 0;
}

static double nmse(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return num / den;
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
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
static void check_decode(const struct arch_case *a, const char *type, const char *path, bool optional) {
    if (!mkmodel(a, type, path)) {
        if (optional) {
            printf("  %-6s %-7s not checked: warm-mkmodel does not write this type\n", a->arch, type);
            return;
        }
        TEST_FAIL_("warm-mkmodel failed for %s", path);
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
    char path[1024];
    for (size_t a = 0; a < ARRAY_SIZE(arch_cases); a++)
        for (size_t t = 0; t < ARRAY_SIZE(weight_types) && !test_failed_; t++) {
            snprintf(path, sizeof path, "%s/%s-%zu-%s.gguf", test_tmpdir(), arch_cases[a].arch, a, weight_types[t]);
            check_decode(&arch_cases[a], weight_types[t], path, false);
        }
    for (size_t t = 0; t < ARRAY_SIZE(kquant_types) && !test_failed_; t++) {
        snprintf(path, sizeof path, "%s/kq-%s.gguf", test_tmpdir(), kquant_types[t]);
        check_decode(&kquant_case, kquant_types[t], path, true); /* k-quants: test-cuda-ops covers the ops */
    }
}

/* a 40-token prompt (GEMM path) for each weight type of the llama case */
TEST(logits_prefill) {
    NEED_DEVICE();
    if (!getenv("WARM_BIN")) SKIP("WARM_BIN is not set (warm-mkmodel)");
    char path[1024];
    for (size_t t = 0; t < ARRAY_SIZE(weight_types); t++) {
        snprintf(path, sizeof path, "%s/prefill-%s.gguf", test_tmpdir(), weight_types[t]);
        if (!mkmodel(&arch_cases[0], weight_types[t], path)) TEST_FAIL_("warm-mkmodel failed for %s", path);
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
    char path[1024];
    snprintf(path, sizeof path, "%s/kv-q8_0.gguf", test_tmpdir());
    if (!mkmodel(&arch_cases[0], "q8_0", path)) TEST_FAIL_("warm-mkmodel failed for %s", path);
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

TEST_MAIN(T(logits_decode), T(logits_prefill), T(logits_kv_types))
