// labels: cuda
/* The engine on a CUDA device (engine/gpu.h, config device = cuda:N / auto): contexts on
 * cuda:0 against contexts on the CPU over the same model file, for every architecture the
 * engine runs (llama, qwen2, qwen3, shared KV, gemma3's sliding window, gemma4's per-layer
 * inputs and shared KV):
 *   logits of a prompt (one batch, every row) and of greedy steps within TOL_NMSE, and the
 *   same greedy tokens; two sequences in one batch (continuous batching); gpu_layers = half
 *   (the first layers on the CPU); quantized, rotated KV (q8_0) within TOL_NMSE_KVQ;
 *   state blobs exported from the GPU and imported on the CPU and back, continuing with
 *   the same greedy tokens; a context shift on the GPU as on the CPU;
 *   every pair of cache types; greedy decoding with the argmax on the device and the
 *   one-token step replayed as a CUDA graph, equal to the CPU's greedy tokens;
 *   device = auto chooses cuda:0, and lists it with its name and reserved bytes;
 *   a tensor split over 2, 3 and 4 CUDA contexts on the one GPU equals the CPU;
 *   the qwen35 hybrid of ../shared/models/hybrid (Gated DeltaNet layers with their state
 *   on the GPU, gated attention, partial RoPE): llama.cpp's greedy ids and the CPU's
 *   logits over prompts prefilled in chunks, gpu_layers cutting it anywhere, interleaved
 *   sequences, the decode graph, state blobs and snapshots across devices; its split over
 *   GPUs refused with a clear message;
 *   the mixtures of experts of ../shared/models/hybrid (qwen3moe, qwen35moe with its
 *   shared expert, gpt-oss with sinks and MXFP4 experts, gemma4moe with the dense FFN
 *   beside the experts): llama.cpp's greedy ids and the CPU's logits, the router on the
 *   device, the decode graph, gpu_layers; their split over GPUs refused by name.
 * Skips (exit 77) without a CUDA device. */
#include "engine/engine.h"
#include "kernels/cuda/cuda.h"
#include "cuda/cuda-test.h"
#include "engine/hybrid-ref.h"
#include "test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Named tolerances (NMSE = Σ(gpu - cpu)² / Σ cpu² over every row of logits a run makes;
 * a single row may go above it where a last-bit difference flips the rounding of an
 * activation to its q8 block, as it does between two CPU thread counts):
 *   TOL_NMSE      f16 KV: the products differ by float summation order, prefill's f16
 *                 tiles by 2^-11 relative rounding of W and x'
 *   TOL_NMSE_KVQ  q8_0 rotated KV: a value whose f32 input differs in its last bits may
 *                 round to the neighbouring code */
#define TOL_NMSE 1e-4
#define TOL_NMSE_KVQ 1e-3

#define NEED_DEVICE()                                                                            \
    do {                                                                                         \
        if (kern_cuda_device_count() <= 0)                                                       \
            SKIP("no CUDA device (no GPU or no driver): the engine on CUDA is untested here");   \
        if (!getenv("WARM_BIN")) SKIP("WARM_BIN is not set (warm-mkmodel)");                     \
    } while (0)

struct arch_case {
    const char *name, *args; /* warm-mkmodel options */
};
static const struct arch_case cases[] = {
    {"llama", "--arch llama --n-embd 384 --n-layer 4 --n-head 6 --n-head-kv 2 --head-dim 64 --n-ff 512 --n-vocab 320"},
    {"qwen2", "--arch qwen2 --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 384 --n-vocab 320 --tied"},
    {"qwen3", "--arch qwen3 --n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 4 --head-dim 32 --n-ff 384 --n-vocab 320"},
    {"shared", "--arch llama --n-embd 256 --n-layer 3 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 384 --n-vocab 320 "
               "--shared-kv-layers 1"},
    {"gemma3", "--arch gemma3 --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 512 --n-vocab 320 "
               "--window 16 --swa-pattern 2"},
    {"gemma4", "--arch gemma4 --n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 64 --n-ff 512 --n-vocab 320 "
               "--window 16 --swa-pattern 2 --ple 64 --shared-kv-layers 2"},
};

/* The model of case c in weight type `type`, made (once per name) and loaded into *ret;
 * the test fails naming what did not work. */
static void model_of(const struct arch_case *c, const char *type, struct engine_model **ret) {
    char name[64];
    struct err_detail d = {0};
    *ret = NULL;
    snprintf(name, sizeof name, "%s-%s", c->name, type);
    const char *path = test_mkmodel(name, "%s --type %s --seed 5", c->args, type);
    if (!path) TEST_FAIL_("warm-mkmodel failed for %s", name);
    int r = engine_model_load(path, NULL, ret, &d);
    if (r < 0) TEST_FAIL_("%s: %s", path, err_msg(&d, r));
}

enum { N_PROMPT = 40, N_GEN = 12, N_CTX = 128 };

/* The parameters every context here shares: steps of 16 tokens, and a gemma
 * sliding-window ring of 16 + 16 + 16 cells < N_CTX. */
static void params_of(struct engine_context_params *p, enum kern_type kv) {
    engine_context_params_default(p);
    p->n_ctx = N_CTX;
    p->n_batch = 16;
    p->swa_chunk = 16;
    p->n_outputs = 2 * N_PROMPT;
    p->n_threads = 2;
    p->type_k = p->type_v = kv;
}

static void ctx_make(const struct engine_model *m, enum engine_device_kind dev, uint32_t gpu_layers,
                     enum kern_type kv, uint32_t n_seq, struct engine_context **ret) {
    struct engine_context_params p;
    params_of(&p, kv);
    p.n_seq = n_seq;
    p.device = dev;
    p.gpu_layers = gpu_layers;
    struct err_detail d = {0};
    *ret = NULL;
    int r = engine_context_new(m, &p, ret, &d);
    if (r < 0) TEST_FAIL_("context on %s: %s", dev == ENGINE_DEVICE_CUDA ? "cuda:0" : "cpu", err_msg(&d, r));
}

/* a tensor split over n CUDA contexts on cuda:0 */
static struct engine_context *ctx_split(const struct engine_model *m, uint32_t n, enum kern_type kv) {
    struct engine_context_params p;
    params_of(&p, kv);
    p.split = ENGINE_SPLIT_TENSOR;
    char list[64] = "";
    for (uint32_t i = 0; i < n; i++) strcat(list, i ? ",cuda:0" : "cuda:0");
    struct err_detail d = {0};
    struct engine_context *c = NULL;
    int r = engine_devices_parse_into(list, &p, &d);
    if (r == 0) r = engine_context_new(m, &p, &c, &d);
    if (r < 0) fprintf(stderr, "split over %s: %s\n", list, err_msg(&d, r));
    return c;
}

static struct engine_context *ctx_new(const struct engine_model *m, enum engine_device_kind dev,
                                      uint32_t gpu_layers, enum kern_type kv, uint32_t n_seq) {
    struct engine_context *c;
    ctx_make(m, dev, gpu_layers, kv, n_seq, &c);
    return c;
}

/* the prompt of sequence s: N_PROMPT made-up ids */
static void prompt(int32_t *tok, int32_t *pos, int s, int64_t n_vocab) {
    for (int i = 0; i < N_PROMPT; i++) {
        tok[i] = (int32_t)((i * 37 + 5 + 11 * s) % n_vocab);
        pos[i] = i;
    }
}

/* Decodes the prompt with every row's logits on a and b, then N_GEN greedy steps fed a's
 * tokens; the NMSE of b against a over all those rows, and whether b's greedy tokens were
 * a's. */
static void compare(struct engine_context *a, struct engine_context *b, int64_t n_vocab, double *worst,
                    bool *same) {
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    bool want[N_PROMPT];
    prompt(tok, pos, 0, n_vocab);
    for (int i = 0; i < N_PROMPT; i++) want[i] = true;
    struct engine_batch bt = {.n_tok = N_PROMPT, .token = tok, .pos = pos, .want_logits = want};
    struct err_detail d = {0};
    double num = 0, den = 1e-30;
    *worst = 0;
    *same = true;
    ASSERT_OK_D(engine_context_decode(a, &bt, &d), &d);
    ASSERT_OK_D(engine_context_decode(b, &bt, &d), &d);
    for (int i = 0; i < N_PROMPT; i++) nmse_add(engine_context_logits(b, i), engine_context_logits(a, i), n_vocab, &num, &den);
    for (int s = 0; s < N_GEN; s++) {
        const float *la = engine_context_logits(a, engine_context_n_outputs(a) - 1);
        const float *lb = engine_context_logits(b, engine_context_n_outputs(b) - 1);
        int32_t next = argmax(la, n_vocab), p = N_PROMPT + s;
        *same = *same && argmax(lb, n_vocab) == next;
        struct engine_batch one = {.n_tok = 1, .token = &next, .pos = &p};
        ASSERT_OK_D(engine_context_decode(a, &one, &d), &d);
        ASSERT_OK_D(engine_context_decode(b, &one, &d), &d);
        nmse_add(engine_context_logits(b, 0), engine_context_logits(a, 0), n_vocab, &num, &den);
    }
    *worst = num / den;
}

static void check_case(const struct arch_case *c, const char *type, enum kern_type kv, uint32_t gpu_layers,
                       double tol) {
    struct engine_model *m;
    model_of(c, type, &m);
    ASSERT_TRUE(m != NULL);
    struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, kv, 1);
    struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, gpu_layers, kv, 1);
    if (cpu && gpu) {
        double worst;
        bool same;
        compare(cpu, gpu, m->hp.n_vocab, &worst, &same);
        printf("  %-7s %-6s kv %-5s gpu_layers %u: NMSE %.2e, greedy %s\n", c->name, type,
               kern_type_traits(kv)->name, gpu_layers, worst, same ? "equal" : "DIFFERS");
        if (!(worst <= tol)) TEST_FAIL_("%s %s: logits NMSE %.3g > %.3g", c->name, type, worst, tol);
        if (!same) TEST_FAIL_("%s %s: greedy tokens differ", c->name, type);
    }
    engine_context_free(gpu);
    engine_context_free(cpu);
    engine_model_free(m);
}

/* every architecture, f16 weights and KV, all layers on the GPU */
TEST(architectures) {
    NEED_DEVICE();
    for (size_t i = 0; i < ARRAY_SIZE(cases) && !test_failed_; i++)
        check_case(&cases[i], "f16", KERN_TYPE_F16, 0, TOL_NMSE);
}

/* the weight types of common downloads, llama */
TEST(weight_types) {
    NEED_DEVICE();
    static const char *const types[] = {"f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"};
    for (size_t i = 0; i < ARRAY_SIZE(types) && !test_failed_; i++)
        check_case(&cases[0], types[i], KERN_TYPE_F16, 0, TOL_NMSE);
    static const struct arch_case kq = {
        "kq", "--arch llama --n-embd 512 --n-layer 2 --n-head 8 --n-head-kv 2 --head-dim 64 --n-ff 768 --n-vocab 320"};
    static const char *const ktypes[] = {"q4_K", "q5_K", "q6_K", "q2_K", "q3_K", "iq4_xs"};
    for (size_t i = 0; i < ARRAY_SIZE(ktypes) && !test_failed_; i++) check_case(&kq, ktypes[i], KERN_TYPE_F16, 0, TOL_NMSE);
}

/* the first layers on the CPU, the rest on the GPU; a quantized, rotated cache */
TEST(gpu_layers_and_quantized_kv) {
    NEED_DEVICE();
    check_case(&cases[0], "q8_0", KERN_TYPE_F16, 2, TOL_NMSE);
    check_case(&cases[4], "f16", KERN_TYPE_F16, 3, TOL_NMSE);
    check_case(&cases[5], "f16", KERN_TYPE_F16, 1, TOL_NMSE); /* its last layer reads layer 1's KV */
    check_case(&cases[0], "q8_0", KERN_TYPE_Q8_0, 0, TOL_NMSE_KVQ);
    check_case(&cases[5], "f16", KERN_TYPE_Q8_0, 0, TOL_NMSE_KVQ);
}

/* every cache type pair the KV write converts to, quantized ones rotated (head 64) */
TEST(kv_type_pairs) {
    NEED_DEVICE();
    static const enum kern_type pairs[][2] = {
        {KERN_TYPE_BF16, KERN_TYPE_Q4_1}, {KERN_TYPE_Q4_0, KERN_TYPE_Q4_0},
        {KERN_TYPE_Q5_0, KERN_TYPE_Q5_1}, {KERN_TYPE_IQ4_NL, KERN_TYPE_IQ4_NL},
        {KERN_TYPE_F32, KERN_TYPE_F32},
    };
    struct engine_model *m;
    model_of(&cases[0], "q8_0", &m);
    ASSERT_TRUE(m != NULL);
    for (size_t i = 0; i < ARRAY_SIZE(pairs) && !test_failed_; i++) {
        struct engine_context_params p;
        struct engine_context *c[2] = {NULL, NULL};
        struct err_detail d = {0};
        for (int g = 0; g < 2; g++) {
            params_of(&p, pairs[i][0]);
            p.type_v = pairs[i][1];
            p.device = g ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU;
            ASSERT_OK_D(engine_context_new(m, &p, &c[g], &d), &d);
        }
        double worst;
        bool same;
        compare(c[0], c[1], m->hp.n_vocab, &worst, &same);
        const bool q = kern_type_traits(pairs[i][0])->is_quantized || kern_type_traits(pairs[i][1])->is_quantized;
        printf("  K %-6s V %-6s NMSE %.2e, greedy %s\n", kern_type_traits(pairs[i][0])->name,
               kern_type_traits(pairs[i][1])->name, worst, same ? "equal" : "DIFFERS");
        if (!(worst <= (q ? TOL_NMSE_KVQ : TOL_NMSE)))
            TEST_FAIL_("K %s V %s: logits NMSE %.3g", kern_type_traits(pairs[i][0])->name,
                       kern_type_traits(pairs[i][1])->name, worst);
        engine_context_free(c[1]);
        engine_context_free(c[0]);
    }
    engine_model_free(m);
}

/* The prompt on both contexts, then 3·N_GEN greedy steps, each fed its own last token: the
 * GPU's (argmax_only: the argmax taken on the device, only the token copied back) must equal
 * the CPU's at every step. name labels the output. */
static void greedy_match(struct engine_context *cpu, struct engine_context *gpu, int64_t n_vocab,
                         const char *name) {
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    prompt(tok, pos, 0, n_vocab);
    struct err_detail d = {0};
    struct engine_batch b = {.n_tok = N_PROMPT, .token = tok, .pos = pos};
    ASSERT_OK_D(engine_context_decode(cpu, &b, &d), &d);
    b.argmax_only = true;
    ASSERT_OK_D(engine_context_decode(gpu, &b, &d), &d);
    int32_t a = engine_context_argmax(cpu, 0), g = engine_context_argmax(gpu, 0), same = 0;
    const int n_steps = 3 * N_GEN; /* past the SWA window of 16: the ring wraps */
    for (int s = 0; s < n_steps && a == g; s++, same++) {
        int32_t p = N_PROMPT + s, ta = a, tg = g;
        struct engine_batch one = {.n_tok = 1, .token = &ta, .pos = &p};
        ASSERT_OK_D(engine_context_decode(cpu, &one, &d), &d);
        one.token = &tg;
        one.argmax_only = true;
        ASSERT_OK_D(engine_context_decode(gpu, &one, &d), &d);
        a = engine_context_argmax(cpu, 0);
        g = engine_context_argmax(gpu, 0);
    }
    printf("  %-7s greedy on the device: %d of %d steps equal the CPU's\n", name, same, n_steps);
    if (same < n_steps) TEST_FAIL_("%s: step %d: GPU token %d, CPU token %d", name, same, g, a);
}

/* Greedy decoding with argmax_only: the GPU records its one-token step as a CUDA graph and
 * replays it, takes the argmax on the device and copies only the token; the tokens equal
 * the CPU's greedy tokens from its logits, for a global-attention and a sliding-window
 * model (whose ring rows the replayed KV write mirrors), and for gpu_layers = half. */
TEST(greedy_on_the_device) {
    NEED_DEVICE();
    const size_t which[] = {0, 4, 5};
    for (size_t k = 0; k < ARRAY_SIZE(which) && !test_failed_; k++) {
        struct engine_model *m;
        model_of(&cases[which[k]], "q8_0", &m);
        ASSERT_TRUE(m != NULL);
        struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 1);
        struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, k == 2 ? 2 : 0, KERN_TYPE_F16, 1);
        ASSERT_TRUE(cpu && gpu);
        greedy_match(cpu, gpu, m->hp.n_vocab, cases[which[k]].name);
        ASSERT_TRUE(engine_context_logits(gpu, 0) == NULL); /* only the argmax came back */
        engine_context_free(gpu);
        engine_context_free(cpu);
        engine_model_free(m);
    }
}

/* two sequences in one batch on the GPU, each equal to its own run on the CPU */
TEST(two_sequences_in_one_batch) {
    NEED_DEVICE();
    struct engine_model *m;
    model_of(&cases[4], "f16", &m);
    ASSERT_TRUE(m != NULL);
    struct err_detail d = {0};
    const int64_t nv = m->hp.n_vocab;
    struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 2);
    struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, 0, KERN_TYPE_F16, 2);
    ASSERT_TRUE(cpu && gpu);
    int32_t tok[2 * N_PROMPT], pos[2 * N_PROMPT], seq[2 * N_PROMPT];
    bool want[2 * N_PROMPT];
    for (int s = 0; s < 2; s++) { /* interleaved, as continuous batching mixes them */
        int32_t t1[N_PROMPT], p1[N_PROMPT];
        prompt(t1, p1, s, nv);
        for (int i = 0; i < N_PROMPT; i++) {
            tok[2 * i + s] = t1[i];
            pos[2 * i + s] = p1[i];
            seq[2 * i + s] = s;
            want[2 * i + s] = true;
        }
    }
    struct engine_batch b = {.n_tok = 2 * N_PROMPT, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
    ASSERT_OK_D(engine_context_decode(cpu, &b, &d), &d);
    ASSERT_OK_D(engine_context_decode(gpu, &b, &d), &d);
    double num = 0, den = 1e-30;
    for (int i = 0; i < 2 * N_PROMPT; i++) nmse_add(engine_context_logits(gpu, i), engine_context_logits(cpu, i), nv, &num, &den);
    double worst = num / den;
    printf("  two sequences, one batch: NMSE %.2e\n", worst);
    ASSERT_TRUE(worst <= TOL_NMSE);
    engine_context_free(gpu);
    engine_context_free(cpu);
    engine_model_free(m);
}

/* Greedy continuation of N_GEN tokens of seq 0 after position n (logits of its last row). */
static void greedy(struct engine_context *c, int64_t nv, int32_t n, int32_t *out) {
    struct err_detail d = {0};
    for (int s = 0; s < N_GEN; s++) {
        int32_t next = argmax(engine_context_logits(c, engine_context_n_outputs(c) - 1), nv), p = n + s;
        out[s] = next;
        struct engine_batch one = {.n_tok = 1, .token = &next, .pos = &p};
        ASSERT_OK_D(engine_context_decode(c, &one, &d), &d);
    }
}

/* A blob exported from GPU KV imports on the CPU, and the reverse; both continue as the
 * exporter does. */
TEST(state_blobs_cross_devices) {
    NEED_DEVICE();
    for (size_t k = 0; k < ARRAY_SIZE(cases) && !test_failed_; k += 4) { /* llama, gemma3 */
        struct engine_model *m;
        model_of(&cases[k], "q8_0", &m);
        ASSERT_TRUE(m != NULL);
        struct err_detail d = {0};
        const int64_t nv = m->hp.n_vocab;
        for (int dir = 0; dir < 2; dir++) {
            enum engine_device_kind from = dir ? ENGINE_DEVICE_CPU : ENGINE_DEVICE_CUDA;
            enum engine_device_kind to = dir ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU;
            struct engine_context *src = ctx_new(m, from, 0, KERN_TYPE_Q8_0, 1);
            struct engine_context *dst = ctx_new(m, to, 0, KERN_TYPE_Q8_0, 1);
            ASSERT_TRUE(src && dst);
            int32_t tok[N_PROMPT], pos[N_PROMPT];
            prompt(tok, pos, 0, nv);
            /* the prompt but its last token, exported; both then take the last token */
            struct engine_batch b = {.n_tok = N_PROMPT - 1, .token = tok, .pos = pos};
            ASSERT_OK_D(engine_context_decode(src, &b, &d), &d);
            size_t size = 0;
            ASSERT_OK_D(engine_kv_export(src, 0, 0, N_PROMPT - 1, NULL, 0, &size, &d), &d);
            void *blob = malloc(size);
            ASSERT_TRUE(blob != NULL);
            ASSERT_OK_D(engine_kv_export(src, 0, 0, N_PROMPT - 1, blob, size, &size, &d), &d);
            ASSERT_OK_D(engine_kv_import(dst, 0, blob, size, tok, N_PROMPT, NULL, &d), &d);
            free(blob);
            struct engine_batch last = {.n_tok = 1, .token = tok + N_PROMPT - 1, .pos = pos + N_PROMPT - 1};
            ASSERT_OK_D(engine_context_decode(src, &last, &d), &d);
            ASSERT_OK_D(engine_context_decode(dst, &last, &d), &d);
            int32_t a[N_GEN], c[N_GEN];
            greedy(src, nv, N_PROMPT, a);
            greedy(dst, nv, N_PROMPT, c);
            printf("  %s: blob %s -> %s: continuation %s\n", cases[k].name, dir ? "cpu" : "cuda:0",
                   dir ? "cuda:0" : "cpu", memcmp(a, c, sizeof a) ? "DIFFERS" : "equal");
            ASSERT_TRUE(memcmp(a, c, sizeof a) == 0);
            engine_context_free(dst);
            engine_context_free(src);
        }
        engine_model_free(m);
    }
}

/* a context shift of GPU KV (staged through the host) continues as the CPU's */
TEST(context_shift) {
    NEED_DEVICE();
    struct engine_model *m;
    model_of(&cases[0], "f16", &m);
    ASSERT_TRUE(m != NULL);
    struct err_detail d = {0};
    const int64_t nv = m->hp.n_vocab;
    struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 1);
    struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, 0, KERN_TYPE_F16, 1);
    ASSERT_TRUE(cpu && gpu);
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    prompt(tok, pos, 0, nv);
    struct engine_batch b = {.n_tok = N_PROMPT, .token = tok, .pos = pos};
    ASSERT_OK_D(engine_context_decode(cpu, &b, &d), &d);
    ASSERT_OK_D(engine_context_decode(gpu, &b, &d), &d);
    ASSERT_OK_D(engine_kv_seq_shift(cpu, 0, 4, 10, &d), &d);
    ASSERT_OK_D(engine_kv_seq_shift(gpu, 0, 4, 10, &d), &d);
    int32_t next = tok[0], p = N_PROMPT - 10;
    struct engine_batch one = {.n_tok = 1, .token = &next, .pos = &p};
    ASSERT_OK_D(engine_context_decode(cpu, &one, &d), &d);
    ASSERT_OK_D(engine_context_decode(gpu, &one, &d), &d);
    double e = nmse(engine_context_logits(gpu, 0), engine_context_logits(cpu, 0), nv);
    printf("  after a shift of 10: NMSE %.2e\n", e);
    ASSERT_TRUE(e <= TOL_NMSE);
    engine_context_free(gpu);
    engine_context_free(cpu);
    engine_model_free(m);
}

/* A tensor split over 2, 3 and 4 contexts on one GPU equals one CPU context (head counts
 * the device count does not divide, a device without heads, shared KV, gemma4), lists its
 * partitions, and its state blobs restore on the CPU. */
TEST(split_over_gpu_contexts) {
    NEED_DEVICE();
    static const size_t which[] = {0, 3, 5}; /* llama 6/2 heads, shared KV, gemma4 */
    for (size_t w = 0; w < ARRAY_SIZE(which) && !test_failed_; w++) {
        const struct arch_case *c = &cases[which[w]];
        struct engine_model *m;
        model_of(c, "q8_0", &m);
        ASSERT_TRUE(m != NULL);
        struct err_detail d = {0};
        for (uint32_t n = 2; n <= 4 && !test_failed_; n++) {
            struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 1);
            struct engine_context *sp = ctx_split(m, n, KERN_TYPE_F16);
            ASSERT_TRUE(cpu && sp);
            ASSERT_EQ(engine_context_n_devices(sp), n);
            struct engine_device_info di;
            ASSERT_EQ(engine_context_device_info(sp, n - 1, &di), 0);
            char want[16];
            snprintf(want, sizeof want, "cuda:0.%u", n - 1);
            ASSERT_EQ(strcmp(di.name, want), 0);
            ASSERT_EQ(strcmp(di.kind, "cuda"), 0);
            double worst;
            bool same;
            compare(cpu, sp, m->hp.n_vocab, &worst, &same);
            printf("  %-7s split over %u contexts: NMSE %.2e, greedy %s\n", c->name, n, worst, same ? "equal" : "DIFFERS");
            ASSERT_TRUE(worst <= TOL_NMSE);
            ASSERT_TRUE(same);
            /* its state restores on the CPU */
            size_t size = 0;
            const uint32_t len = engine_kv_seq_len(sp, 0);
            ASSERT_OK_D(engine_kv_export(sp, 0, 0, len, NULL, 0, &size, &d), &d);
            void *blob = malloc(size), *ref = malloc(size);
            ASSERT_TRUE(blob && ref);
            ASSERT_OK_D(engine_kv_export(sp, 0, 0, len, blob, size, &size, &d), &d);
            struct engine_context *back = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 1);
            ASSERT_OK_D(engine_kv_import(back, 0, blob, size, NULL, 0, NULL, &d), &d);
            /* and the split's blob is the bytes the CPU context exports at the same point
             * but for the float rounding of K and V: same size and layout */
            size_t size_cpu = 0;
            ASSERT_OK_D(engine_kv_export(cpu, 0, 0, len, NULL, 0, &size_cpu, &d), &d);
            ASSERT_EQ(size_cpu, size);
            free(blob);
            free(ref);
            engine_context_free(back);
            engine_context_free(sp);
            engine_context_free(cpu);
        }
        engine_model_free(m);
    }
}

/* ---- the qwen35 hybrid ------------------------------------------------------------------ */

/* The reference model, or a skip naming what is missing. */
#define NEED_HYBRID(m)                                                                            \
    do {                                                                                          \
        if (kern_cuda_device_count() <= 0)                                                        \
            SKIP("no CUDA device (no GPU or no driver): the hybrid on CUDA is untested here");    \
        (m) = model_load(test_shared_path("hybrid/qwen35-tiny.gguf"));                            \
        if (!(m)) SKIP("../shared/models/hybrid/qwen35-tiny.gguf is absent");                     \
    } while (0)

/* where hctx_new() puts a GPU context's routed experts */
static enum engine_experts_place hctx_experts = ENGINE_EXPERTS_AUTO;

/* A hybrid context on dev: n_batch 64 (P3's prompt is prefilled in steps), room for P3. */
static struct engine_context *hctx_new(const struct engine_model *m, enum engine_device_kind dev,
                                       uint32_t gpu_layers, uint32_t n_seq) {
    struct engine_context_params p;
    engine_context_params_default(&p);
    p.n_ctx = MAX_PROMPT;
    p.n_seq = n_seq;
    p.n_batch = 64;
    p.n_outputs = MAX_PROMPT;
    p.n_threads = 2;
    p.type_k = p.type_v = KERN_TYPE_F32;
    p.device = dev;
    p.gpu_layers = gpu_layers;
    p.experts = hctx_experts;
    struct engine_context *c = NULL;
    struct err_detail d = {0};
    int r = engine_context_new(m, &p, &c, &d);
    if (r < 0) fprintf(stderr, "hybrid context on %s: %s\n", dev == ENGINE_DEVICE_CUDA ? "cuda:0" : "cpu",
                       err_msg(&d, r));
    return c;
}

/* llama.cpp's prompts P1..P3 of the reference `name` on the CPU and on cuda:0, each
 * prompt in one call (P3's ~800 ids in steps of 64): every prompt row's logits within tol
 * (NMSE) of the CPU's, then N_STEPS greedy steps with the CPU's logits, ids and llama.cpp's
 * ids all equal. gpu_layers: the GPU's last layers (0: all). m stays the caller's. */
static void reference_run(struct engine_model *m, const char *name, double tol, uint32_t gpu_layers) {
    const int64_t V = m->hp.n_vocab;
    static const char *const prompts[] = {"P1", "P2", "P3"};
    for (size_t pi = 0; pi < ARRAY_SIZE(prompts) && !test_failed_; pi++) {
        struct reference ref = {0};
        if (!reference_load(name, prompts[pi], &ref)) {
            free(ref.logits);
            SKIP("the %s-%s reference is absent", name, prompts[pi]);
        }
        struct engine_context *cpu = hctx_new(m, ENGINE_DEVICE_CPU, 0, 1);
        struct engine_context *gpu = hctx_new(m, ENGINE_DEVICE_CUDA, gpu_layers, 1);
        ASSERT_TRUE(cpu && gpu);
        const int32_t np = (int32_t)ref.n_prompt;
        static int32_t pos[MAX_PROMPT + N_STEPS];
        static bool want[MAX_PROMPT];
        for (int32_t i = 0; i < np; i++) pos[i] = i, want[i] = true;
        struct engine_batch b = {.n_tok = np, .token = ref.prompt, .pos = pos, .want_logits = want};
        struct err_detail d = {0};
        ASSERT_OK_D(engine_context_decode(cpu, &b, &d), &d);
        ASSERT_OK_D(engine_context_decode(gpu, &b, &d), &d);
        double num = 0, den = 1e-30;
        for (int32_t i = 0; i < np; i++)
            nmse_add(engine_context_logits(gpu, i), engine_context_logits(cpu, i), V, &num, &den);
        const double e_prompt = num / den;
        num = 0, den = 1e-30;
        int32_t gen_cpu[N_STEPS], gen_gpu[N_STEPS];
        double d_ref = 0;
        for (int k = 0; k < N_STEPS; k++) {
            const float *lc = engine_context_logits(cpu, engine_context_n_outputs(cpu) - 1);
            const float *lg = engine_context_logits(gpu, engine_context_n_outputs(gpu) - 1);
            nmse_add(lg, lc, V, &num, &den);
            for (int64_t v = 0; v < V; v++)
                d_ref = fmax(d_ref, fabs((double)lg[v] - ref.logits[(size_t)k * V + v]));
            gen_cpu[k] = argmax(lc, V);
            gen_gpu[k] = argmax(lg, V);
            int32_t next = gen_cpu[k], p = np + k;
            struct engine_batch one = {.n_tok = 1, .token = &next, .pos = &p};
            ASSERT_OK_D(engine_context_decode(cpu, &one, &d), &d);
            ASSERT_OK_D(engine_context_decode(gpu, &one, &d), &d);
        }
        const double e_steps = num / den;
        printf("  %s %s (%d ids, gpu_layers %u): prompt rows NMSE %.2e, greedy steps NMSE %.2e, max "
               "|dlogit| vs llama.cpp %.3g, greedy %s\n", name, prompts[pi], np, gpu_layers, e_prompt, e_steps,
               d_ref, memcmp(gen_gpu, gen_cpu, sizeof gen_cpu) ? "DIFFERS" : "equal");
        if (!(e_prompt <= tol)) TEST_FAIL_("%s %s: prompt logits NMSE %.3g", name, prompts[pi], e_prompt);
        if (!(e_steps <= tol)) TEST_FAIL_("%s %s: greedy logits NMSE %.3g", name, prompts[pi], e_steps);
        ASSERT_TRUE(memcmp(gen_gpu, gen_cpu, sizeof gen_cpu) == 0);
        ASSERT_TRUE(memcmp(gen_gpu, ref.gen, sizeof gen_gpu) == 0);
        engine_context_free(gpu);
        engine_context_free(cpu);
        free(ref.logits);
    }
}

TEST(hybrid_reference) {
    struct engine_model *m;
    NEED_HYBRID(m);
    reference_run(m, "qwen35-tiny", TOL_NMSE, 0);
    engine_model_free(m);
}

/* gpu_layers anywhere in the hybrid (layers 3 and 7 attend, the rest are Gated DeltaNet):
 * only the last attention layer there (no recurrent state on the GPU), a recurrent layer
 * first, half; and a quantized cache. Made-up prompts of N_PROMPT ids in steps of 16. */
TEST(hybrid_gpu_layers) {
    struct engine_model *m;
    NEED_HYBRID(m);
    static const struct {
        uint32_t gpu_layers;
        enum kern_type kv;
    } cases_h[] = {{0, KERN_TYPE_F16}, {1, KERN_TYPE_F16}, {3, KERN_TYPE_F16}, {4, KERN_TYPE_F16},
                   {6, KERN_TYPE_F16}, {0, KERN_TYPE_Q8_0}};
    for (size_t i = 0; i < ARRAY_SIZE(cases_h) && !test_failed_; i++) {
        struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, cases_h[i].kv, 1);
        struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, cases_h[i].gpu_layers, cases_h[i].kv, 1);
        ASSERT_TRUE(cpu && gpu);
        double worst;
        bool same;
        compare(cpu, gpu, m->hp.n_vocab, &worst, &same);
        const double tol = cases_h[i].kv == KERN_TYPE_F16 ? TOL_NMSE : TOL_NMSE_KVQ;
        printf("  qwen35 kv %-5s gpu_layers %u: NMSE %.2e, greedy %s\n", kern_type_traits(cases_h[i].kv)->name,
               cases_h[i].gpu_layers, worst, same ? "equal" : "DIFFERS");
        if (!(worst <= tol)) TEST_FAIL_("gpu_layers %u: logits NMSE %.3g > %.3g", cases_h[i].gpu_layers, worst, tol);
        if (!same) TEST_FAIL_("gpu_layers %u: greedy tokens differ", cases_h[i].gpu_layers);
        engine_context_free(gpu);
        engine_context_free(cpu);
    }
    engine_model_free(m);
}

/* Two sequences whose tokens alternate in one batch (every run one token long: the
 * kernels switch state at each), then decode steps with both in one batch. */
TEST(hybrid_two_sequences) {
    struct engine_model *m;
    NEED_HYBRID(m);
    struct err_detail d = {0};
    const int64_t nv = m->hp.n_vocab;
    struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 2);
    struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, 0, KERN_TYPE_F16, 2);
    ASSERT_TRUE(cpu && gpu);
    int32_t tok[2 * N_PROMPT], pos[2 * N_PROMPT], seq[2 * N_PROMPT];
    bool want[2 * N_PROMPT];
    for (int s = 0; s < 2; s++) {
        int32_t t1[N_PROMPT], p1[N_PROMPT];
        prompt(t1, p1, s, nv);
        for (int i = 0; i < N_PROMPT; i++) {
            tok[2 * i + s] = t1[i];
            pos[2 * i + s] = p1[i];
            seq[2 * i + s] = s;
            want[2 * i + s] = true;
        }
    }
    struct engine_batch b = {.n_tok = 2 * N_PROMPT, .token = tok, .pos = pos, .seq = seq, .want_logits = want};
    ASSERT_OK_D(engine_context_decode(cpu, &b, &d), &d);
    ASSERT_OK_D(engine_context_decode(gpu, &b, &d), &d);
    double num = 0, den = 1e-30;
    for (int i = 0; i < 2 * N_PROMPT; i++)
        nmse_add(engine_context_logits(gpu, i), engine_context_logits(cpu, i), nv, &num, &den);
    bool same = true;
    for (int k = 0; k < N_GEN; k++) { /* both sequences a step, seq 1 first */
        int32_t nt[2], np[2] = {N_PROMPT + k, N_PROMPT + k}, ns[2] = {1, 0};
        /* the rows of seq 1 and seq 0: the prompt ends with seq 0's then seq 1's, a step
         * holds seq 1's then seq 0's */
        const int n_out = engine_context_n_outputs(cpu);
        const int row[2] = {k == 0 ? n_out - 1 : n_out - 2, k == 0 ? n_out - 2 : n_out - 1};
        for (int j = 0; j < 2; j++) {
            nt[j] = argmax(engine_context_logits(cpu, row[j]), nv);
            same = same && argmax(engine_context_logits(gpu, row[j]), nv) == nt[j];
        }
        bool w2[2] = {true, true};
        struct engine_batch two = {.n_tok = 2, .token = nt, .pos = np, .seq = ns, .want_logits = w2};
        ASSERT_OK_D(engine_context_decode(cpu, &two, &d), &d);
        ASSERT_OK_D(engine_context_decode(gpu, &two, &d), &d);
        for (int j = 0; j < 2; j++)
            nmse_add(engine_context_logits(gpu, j), engine_context_logits(cpu, j), nv, &num, &den);
    }
    printf("  qwen35 two sequences, interleaved: NMSE %.2e, greedy %s\n", num / den, same ? "equal" : "DIFFERS");
    ASSERT_TRUE(num / den <= TOL_NMSE);
    ASSERT_TRUE(same);
    engine_context_free(gpu);
    engine_context_free(cpu);
    engine_model_free(m);
}

/* Greedy decoding on the device: the one-token step, recurrent layers included, recorded
 * as a CUDA graph and replayed; its tokens are the CPU's. */
TEST(hybrid_greedy_graph) {
    struct engine_model *m;
    NEED_HYBRID(m);
    struct engine_context *cpu = ctx_new(m, ENGINE_DEVICE_CPU, 0, KERN_TYPE_F16, 1);
    struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, 0, KERN_TYPE_F16, 1);
    ASSERT_TRUE(cpu && gpu);
    greedy_match(cpu, gpu, m->hp.n_vocab, "qwen35");
    engine_context_free(gpu);
    engine_context_free(cpu);
    engine_model_free(m);
}

/* A blob with the recurrent state exported from the GPU restores on the CPU and the
 * reverse, both continuing as the exporter; on the GPU, a snapshot taken there and rolled
 * back to (the host's copy pushed up again) continues as it did the first time. */
TEST(hybrid_state_blobs) {
    struct engine_model *m;
    NEED_HYBRID(m);
    struct err_detail d = {0};
    const int64_t nv = m->hp.n_vocab;
    int32_t tok[N_PROMPT], pos[N_PROMPT];
    prompt(tok, pos, 0, nv);
    for (int dir = 0; dir < 2 && !test_failed_; dir++) {
        enum engine_device_kind from = dir ? ENGINE_DEVICE_CPU : ENGINE_DEVICE_CUDA;
        enum engine_device_kind to = dir ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU;
        struct engine_context *src = ctx_new(m, from, 0, KERN_TYPE_F16, 1);
        struct engine_context *dst = ctx_new(m, to, 0, KERN_TYPE_F16, 1);
        ASSERT_TRUE(src && dst);
        struct engine_batch b = {.n_tok = N_PROMPT - 1, .token = tok, .pos = pos};
        ASSERT_OK_D(engine_context_decode(src, &b, &d), &d);
        size_t size = 0;
        ASSERT_OK_D(engine_kv_export_snap(src, 0, 0, N_PROMPT - 1, ENGINE_KV_SNAP_NEED, NULL, 0, &size, &d), &d);
        void *blob = malloc(size);
        ASSERT_TRUE(blob != NULL);
        ASSERT_OK_D(engine_kv_export_snap(src, 0, 0, N_PROMPT - 1, ENGINE_KV_SNAP_NEED, blob, size, &size, &d), &d);
        ASSERT_OK_D(engine_kv_import(dst, 0, blob, size, tok, N_PROMPT, NULL, &d), &d);
        free(blob);
        struct engine_batch last = {.n_tok = 1, .token = tok + N_PROMPT - 1, .pos = pos + N_PROMPT - 1};
        ASSERT_OK_D(engine_context_decode(src, &last, &d), &d);
        ASSERT_OK_D(engine_context_decode(dst, &last, &d), &d);
        int32_t a[N_GEN], c[N_GEN];
        greedy(src, nv, N_PROMPT, a);
        greedy(dst, nv, N_PROMPT, c);
        printf("  qwen35 blob %s -> %s: continuation %s\n", dir ? "cpu" : "cuda:0", dir ? "cuda:0" : "cpu",
               memcmp(a, c, sizeof a) ? "DIFFERS" : "equal");
        ASSERT_TRUE(memcmp(a, c, sizeof a) == 0);
        engine_context_free(dst);
        engine_context_free(src);
    }
    /* a snapshot on the GPU, N_GEN steps, back to the snapshot, the same N_GEN steps */
    struct engine_context *gpu = ctx_new(m, ENGINE_DEVICE_CUDA, 0, KERN_TYPE_F16, 1);
    ASSERT_TRUE(gpu != NULL);
    struct engine_batch b = {.n_tok = N_PROMPT, .token = tok, .pos = pos};
    ASSERT_OK_D(engine_context_decode(gpu, &b, &d), &d);
    ASSERT_OK_D(engine_kv_snapshot(gpu, 0, &d), &d);
    int32_t first = argmax(engine_context_logits(gpu, 0), nv), a[N_GEN], c[N_GEN];
    greedy(gpu, nv, N_PROMPT, a); /* a[0] is first */
    ASSERT_OK(engine_kv_seq_rm(gpu, 0, N_PROMPT));
    ASSERT_EQ(engine_kv_seq_len(gpu, 0), N_PROMPT);
    /* the logits of the prompt's last row are gone: feed the first step's token again */
    int32_t p = N_PROMPT;
    struct engine_batch one = {.n_tok = 1, .token = &first, .pos = &p};
    ASSERT_OK_D(engine_context_decode(gpu, &one, &d), &d);
    greedy(gpu, nv, N_PROMPT + 1, c); /* c[s] is a[s + 1] again */
    ASSERT_TRUE(a[0] == first);
    const bool same = memcmp(a + 1, c, (N_GEN - 1) * sizeof *a) == 0;
    printf("  qwen35 snapshot on the GPU, rolled back: continuation %s\n", same ? "equal" : "DIFFERS");
    ASSERT_TRUE(same);
    engine_context_free(gpu);
    engine_model_free(m);
}

/* A tensor split over GPUs refuses the hybrid, saying why and what runs it. */
TEST(hybrid_split_refused) {
    struct engine_model *m;
    NEED_HYBRID(m);
    struct engine_context_params p;
    params_of(&p, KERN_TYPE_F16);
    p.split = ENGINE_SPLIT_TENSOR;
    struct err_detail d = {0};
    struct engine_context *c = NULL;
    ASSERT_OK_D(engine_devices_parse_into("cuda:0,cuda:0", &p, &d), &d);
    int r = engine_context_new(m, &p, &c, &d);
    ASSERT_EQ(r, ERR_UNSUPPORTED);
    ASSERT_TRUE(c == NULL);
    printf("  qwen35 split over GPUs: %s\n", err_msg(&d, r));
    ASSERT_TRUE(strstr(err_msg(&d, r), "not supported yet") != NULL);
    engine_model_free(m);
}

/* device = auto picks cuda:0 and says what it reserved there; cuda:N past the last is
 * refused naming how many there are */
TEST(auto_and_index) {
    NEED_DEVICE();
    int n = kern_cuda_device_count();
    enum engine_device_kind kind;
    int index = -1;
    char why[256];
    struct err_detail d = {0};
    ASSERT_EQ(engine_device_resolve("auto", &kind, &index, why, sizeof why, &d), 0);
    ASSERT_EQ(kind, ENGINE_DEVICE_AUTO);
    ASSERT_EQ(strcmp(why, ""), 0);
    struct engine_model *m;
    model_of(&cases[0], "q8_0", &m);
    ASSERT_TRUE(m != NULL);
    struct engine_context *c = ctx_new(m, ENGINE_DEVICE_AUTO, 0, KERN_TYPE_F16, 1);
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ(strcmp(engine_context_device_note(c), ""), 0);
    ASSERT_EQ(engine_context_n_devices(c), 1u);
    struct engine_device_info di;
    ASSERT_EQ(engine_context_device_info(c, 0, &di), 0);
    struct kern_cuda_device_info info;
    ASSERT_EQ(kern_cuda_device_get_info(0, &info), 0);
    ASSERT_EQ(strcmp(di.name, "cuda:0"), 0);
    ASSERT_EQ(strcmp(di.kind, "cuda"), 0);
    ASSERT_EQ(strcmp(di.device_name, info.name), 0);
    ASSERT_TRUE(di.weight_bytes > 0 && di.kv_bytes == engine_context_kv_bytes(c) && di.scratch_bytes > 0);
    printf("  auto: %s (%s), weights %llu, KV %llu, scratch %llu bytes\n", di.name, di.device_name,
           (unsigned long long)di.weight_bytes, (unsigned long long)di.kv_bytes,
           (unsigned long long)di.scratch_bytes);
    engine_context_free(c);
    /* half the layers there: the CPU listed after it */
    c = ctx_new(m, ENGINE_DEVICE_CUDA, 2, KERN_TYPE_F16, 1);
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ(engine_context_n_devices(c), 2u);
    ASSERT_EQ(engine_context_device_info(c, 1, &di), 0);
    ASSERT_EQ(strcmp(di.kind, "cpu"), 0);
    engine_context_free(c);
    engine_model_free(m);
    ASSERT_EQ(engine_cuda_usable(0, &d), 0);
    ASSERT_EQ(engine_cuda_usable(n, &d), ERR_UNSUPPORTED);
    char want[64];
    snprintf(want, sizeof want, "%d CUDA device", n);
    ASSERT_TRUE(strstr(err_msg(&d, ERR_UNSUPPORTED), want) != NULL);
}

/* ---- mixtures of experts ------------------------------------------------------------------ */

/* The reference model `name` of ../shared/models/hybrid, or a skip naming what is missing. */
#define NEED_MOE(m, name)                                                                         \
    do {                                                                                          \
        if (kern_cuda_device_count() <= 0)                                                        \
            SKIP("no CUDA device (no GPU or no driver): mixtures of experts on CUDA are untested here"); \
        (m) = model_load(test_shared_path("hybrid/" name ".gguf"));                               \
        if (!(m)) SKIP("../shared/models/hybrid/" name ".gguf is absent");                        \
    } while (0)

/* NMSE of gpt-oss's GPU logits against the CPU's: both round the activations to q8 before
 * an MXFP4 dot, and a last-bit difference tips one of a token's ~10^3 roundings now and
 * then (tests/engine/test-gptoss.c measures the CPU against llama.cpp at 5e-5 on P3) */
#define TOL_NMSE_MXFP4 2e-4

/* qwen3moe-tiny (router softmax → top-k → renormalised, every layer MoE) on the GPU, all
 * of it and its last two layers only */
TEST(moe_qwen3moe_reference) {
    struct engine_model *m;
    NEED_MOE(m, "qwen3moe-tiny");
    reference_run(m, "qwen3moe-tiny", TOL_NMSE, 0);
    if (!test_failed_) reference_run(m, "qwen3moe-tiny", TOL_NMSE, 2);
    engine_model_free(m);
}

/* qwen35moe-tiny: Gated DeltaNet and gated attention layers with MoE FFNs and a shared
 * expert behind its sigmoid gate */
TEST(moe_qwen35moe_reference) {
    struct engine_model *m;
    NEED_MOE(m, "qwen35moe-tiny");
    reference_run(m, "qwen35moe-tiny", TOL_NMSE, 0);
    engine_model_free(m);
    if (test_failed_) return;
    NEED_MOE(m, "qwen35moe-tiny-f16"); /* f16 weights */
    reference_run(m, "qwen35moe-tiny-f16", TOL_NMSE, 0);
    engine_model_free(m);
}

/* gpt-oss-tiny: attention sinks, biased router (top-k logits, softmax over those),
 * SWIGLU_OAI experts with biases, MXFP4 expert weights */
TEST(moe_gptoss_reference) {
    struct engine_model *m;
    NEED_MOE(m, "gpt-oss-tiny");
    reference_run(m, "gpt-oss-tiny", TOL_NMSE_MXFP4, 0);
    engine_model_free(m);
}

/* The one-token step of a MoE model records as a CUDA graph (the routing stays on the
 * device) and its replays give the CPU's greedy tokens. */
TEST(moe_greedy_graph) {
    static const char *const names[] = {"qwen3moe-tiny", "gpt-oss-tiny"};
    if (kern_cuda_device_count() <= 0)
        SKIP("no CUDA device (no GPU or no driver): mixtures of experts on CUDA are untested here");
    for (size_t i = 0; i < ARRAY_SIZE(names) && !test_failed_; i++) {
        char path[64];
        snprintf(path, sizeof path, "hybrid/%s.gguf", names[i]);
        struct engine_model *m = model_load(test_shared_path(path));
        if (!m) SKIP("../shared/models/%s is absent", path);
        struct engine_context *cpu = hctx_new(m, ENGINE_DEVICE_CPU, 0, 1);
        struct engine_context *gpu = hctx_new(m, ENGINE_DEVICE_CUDA, 0, 1);
        ASSERT_TRUE(cpu && gpu);
        greedy_match(cpu, gpu, m->hp.n_vocab, names[i]);
        engine_context_free(gpu);
        engine_context_free(cpu);
        engine_model_free(m);
    }
}

/* gemma4moe-tiny: the dense FFN beside the experts (each with its norms, summed and
 * normed), the router on rms_norm(x)/sqrt(n_embd) x scale, per-expert down scales, GELU */
TEST(moe_gemma4moe_reference) {
    struct engine_model *m;
    NEED_MOE(m, "gemma4moe-tiny");
    reference_run(m, "gemma4moe-tiny", TOL_NMSE, 0);
    engine_model_free(m);
}

/* The placement for a GPU too small for the experts: attention, router and shared
 * expert on cuda:0, the routed experts on the CPU (experts = cpu), listed with their
 * bytes on the CPU; the same ids and logits as the CPU alone, all layers or the last two
 * on the GPU. experts = auto keeps these small models' experts on the GPU. */
TEST(moe_experts_on_cpu) {
    static const char *const names[] = {"qwen3moe-tiny", "gpt-oss-tiny", "qwen35moe-tiny"};
    if (kern_cuda_device_count() <= 0)
        SKIP("no CUDA device (no GPU or no driver): mixtures of experts on CUDA are untested here");
    for (size_t i = 0; i < ARRAY_SIZE(names) && !test_failed_; i++) {
        char path[64];
        snprintf(path, sizeof path, "hybrid/%s.gguf", names[i]);
        struct engine_model *m = model_load(test_shared_path(path));
        if (!m) SKIP("../shared/models/%s is absent", path);
        struct engine_device_info gi, ci;
        /* auto: they fit */
        struct engine_context *c = hctx_new(m, ENGINE_DEVICE_CUDA, 0, 1);
        ASSERT_TRUE(c != NULL);
        ASSERT_EQ(engine_context_n_devices(c), 1u);
        ASSERT_OK(engine_context_device_info(c, 0, &gi));
        const uint64_t all_on_gpu = gi.weight_bytes;
        engine_context_free(c);
        hctx_experts = ENGINE_EXPERTS_CPU;
        c = hctx_new(m, ENGINE_DEVICE_CUDA, 0, 1);
        ASSERT_TRUE(c != NULL);
        ASSERT_EQ(engine_context_n_devices(c), 2u);
        ASSERT_OK(engine_context_device_info(c, 0, &gi));
        ASSERT_OK(engine_context_device_info(c, 1, &ci));
        printf("  %s experts on the CPU: %s holds %llu bytes (all: %llu), %s %llu\n", names[i], gi.name,
               (unsigned long long)gi.weight_bytes, (unsigned long long)all_on_gpu, ci.name,
               (unsigned long long)ci.weight_bytes);
        ASSERT_TRUE(strcmp(ci.kind, "cpu") == 0);
        ASSERT_TRUE(gi.weight_bytes < all_on_gpu && ci.weight_bytes > 0);
        engine_context_free(c);
        reference_run(m, names[i], strcmp(names[i], "gpt-oss-tiny") ? TOL_NMSE : TOL_NMSE_MXFP4, 0);
        if (!test_failed_ && i == 0) reference_run(m, names[i], TOL_NMSE, 2);
        hctx_experts = ENGINE_EXPERTS_AUTO;
        engine_model_free(m);
    }
}

/* A split of a MoE model over GPU contexts is refused naming what is not supported. */
TEST(moe_split_refused) {
    struct engine_model *m;
    NEED_MOE(m, "qwen3moe-tiny");
    struct engine_context_params p;
    params_of(&p, KERN_TYPE_F16);
    p.split = ENGINE_SPLIT_TENSOR;
    struct err_detail d = {0};
    struct engine_context *c = NULL;
    ASSERT_OK_D(engine_devices_parse_into("cuda:0,cuda:0", &p, &d), &d);
    int r = engine_context_new(m, &p, &c, &d);
    ASSERT_EQ(r, ERR_UNSUPPORTED);
    ASSERT_TRUE(c == NULL);
    printf("  qwen3moe split over GPUs: %s\n", err_msg(&d, r));
    ASSERT_TRUE(strstr(err_msg(&d, r), "mixtures of experts") != NULL);
    engine_model_free(m);
}

TEST_MAIN(T(auto_and_index), T(architectures), T(weight_types), T(gpu_layers_and_quantized_kv),
          T(kv_type_pairs), T(greedy_on_the_device), T(two_sequences_in_one_batch), T(state_blobs_cross_devices), T(context_shift),
          T(split_over_gpu_contexts), T(hybrid_reference), T(hybrid_gpu_layers), T(hybrid_two_sequences),
          T(hybrid_greedy_graph), T(hybrid_state_blobs), T(hybrid_split_refused), T(moe_qwen3moe_reference),
          T(moe_qwen35moe_reference), T(moe_gptoss_reference), T(moe_greedy_graph), T(moe_gemma4moe_reference),
          T(moe_experts_on_cpu), T(moe_split_refused))
