/* MXFP4 (ggml type 39) in a real file: the gpt-oss reference model of
 * ../shared/models/hybrid (file type 38, MOSTLY_MXFP4_MOE; its experts MXFP4, written by
 * llama.cpp's tools). The GGUF reader sizes its tensors, the reference decoder and
 * quantizer agree with its blocks, and every level's matmul (rows and rows8) of each
 * expert's rows matches the spec. */
#include "test.h"

#include "engine/gguf.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GPT_OSS "hybrid/gpt-oss-tiny.gguf"
/* kern_matmul vs kern_ref_dot_f32: float summation order only (tests/kernels/test-matmul.c) */
#define TOL_SUM 2e-5

/* The expert tensors: {n_embd 128, n_ff 64, 8 experts} gate/up, {64, 128, 8} down, in
 * each of the 4 layers. */
static bool is_expert(const struct gguf_tensor *t) {
    static const char *const kinds[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                        "ffn_down_exps.weight"};
    for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
        size_t n = strlen(kinds[k]);
        if (t->name.len > n && memcmp(t->name.ptr + t->name.len - n, kinds[k], n) == 0)
            return true;
    }
    return false;
}

TEST(reader_sizes_mxfp4) {
    const char *path = test_shared_path(GPT_OSS);
    if (!path) SKIP("../shared/models/" GPT_OSS " is absent");
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    uint32_t ft = 0;
    ASSERT_OK_D(gguf_get_u32(f, "general.file_type", &ft, &d), &d);
    ASSERT_EQ(ft, 38); /* LLAMA_FTYPE_MOSTLY_MXFP4_MOE */
    int n_mxfp4 = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        /* the experts are MXFP4 and nothing else is (README: everything else f32) */
        ASSERT_EQ(t->type == KERN_TYPE_MXFP4, is_expert(t));
        if (t->type != KERN_TYPE_MXFP4) continue;
        n_mxfp4++;
        ASSERT_EQ(t->n_dims, 3);
        ASSERT_EQ(t->ne[2], 8);
        ASSERT_TRUE((t->ne[0] == 128 && t->ne[1] == 64) || (t->ne[0] == 64 && t->ne[1] == 128));
        /* 17 bytes per 32 values */
        ASSERT_EQ(t->n_bytes, (uint64_t)(t->ne[0] / 32 * 17 * t->ne[1] * t->ne[2]));
        ASSERT_EQ(t->n_bytes, kern_row_size(KERN_TYPE_MXFP4, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2]));
    }
    ASSERT_EQ(n_mxfp4, 12);
    ASSERT_EQ(gguf_trailing_bytes(f), 0);
    gguf_close(f);
}

/* Every block decodes to finite values on the E2M1 grid of its scale; re-quantizing the
 * decoded values gives the file's bytes back wherever ggml's rule must: blocks whose
 * largest code is ±8 or ±12 (the exponent it derives from amax is the block's own), with
 * each -0 code (8) read back as +0 (0). ggml's quantizer always leaves a block's amax at
 * 8..16 times its scale, so in a file llama.cpp quantized (this one) that is every block:
 * our quantizer writes ggml's bytes. */
TEST(decode_and_requantize) {
    const char *path = test_shared_path(GPT_OSS);
    if (!path) SKIP("../shared/models/" GPT_OSS " is absent");
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    const struct kern_type_traits *tr = kern_type_traits(KERN_TYPE_MXFP4);
    long n_blocks = 0, n_fixed = 0, n_zero_codes = 0;
    int e_min = 255, e_max = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->type != KERN_TYPE_MXFP4) continue;
        const struct block_mxfp4 *b = t->data;
        for (uint64_t k = 0; k < t->n_bytes / sizeof *b; k++, n_blocks++) {
            float x[32];
            tr->to_f32(x, &b[k], 32);
            int qmax = 0;
            for (int j = 0; j < 32; j++) {
                const int q = (b[k].qs[j % 16] >> (j < 16 ? 0 : 4)) & 15;
                ASSERT_TRUE(isfinite(x[j]));
                ASSERT_TRUE(x[j] == (float)kern_mxfp4_values[q] * ldexpf(1.0f, b[k].e - 128));
                qmax = MAX(qmax, abs(kern_mxfp4_values[q]));
                n_zero_codes += q == 8;
            }
            e_min = MIN(e_min, b[k].e);
            e_max = MAX(e_max, b[k].e);
            if (qmax < 8) continue;
            struct block_mxfp4 back, want = b[k];
            tr->from_f32(&back, x, 32);
            for (int j = 0; j < 16; j++) {
                if ((want.qs[j] & 15) == 8) want.qs[j] &= 0xf0;
                if ((want.qs[j] >> 4) == 8) want.qs[j] &= 0x0f;
            }
            if (memcmp(&back, &want, sizeof back) != 0)
                TEST_FAIL_("tensor #%llu block %llu: e %d re-quantized as e %d",
                           (unsigned long long)i, (unsigned long long)k, b[k].e, back.e);
            n_fixed++;
        }
    }
    printf("  %ld blocks, exponents %d..%d, %ld re-quantized byte for byte, %ld -0 codes\n",
           n_blocks, e_min, e_max, n_fixed, n_zero_codes);
    ASSERT_EQ(n_blocks, 12 * 34816 / 17);
    ASSERT_EQ(n_fixed, n_blocks);
    gguf_close(f);
}

/* Each expert's rows (n_ff × n_embd or n_embd × n_ff) times 1 and 7 tokens at every level,
 * in the file's rows and repacked as rows8 (the engine's load-time layout), against the
 * spec with the activations quantized to q8_0 as ggml does. */
TEST(expert_matmul_every_level) {
    const char *path = test_shared_path(GPT_OSS);
    if (!path) SKIP("../shared/models/" GPT_OSS " is absent");
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    ASSERT_OK_D(gguf_open(path, &f, &d), &d);
    enum { MAX_IN = 128, MAX_OUT = 128, TOK = 7 };
    float *x = malloc(sizeof(float) * MAX_IN * TOK), *y = malloc(sizeof(float) * MAX_OUT * TOK);
    float *wd = malloc(sizeof(float) * MAX_IN * MAX_OUT);
    uint8_t *g = malloc(kern_row_size(KERN_TYPE_MXFP4, MAX_IN) * MAX_OUT);
    void *scratch = malloc(kern_matmul_scratch_bytes(KERN_TYPE_MXFP4, MAX_IN, TOK));
    ASSERT_TRUE(x && y && wd && g && scratch);
    uint32_t seed = 12345;
    for (int i = 0; i < MAX_IN * TOK; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) * 0x1p-23f - 1.0f;
    }
    const char *saved = kern_cpu()->level;
    int checked = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        if (t->type != KERN_TYPE_MXFP4) continue;
        const int64_t n_in = t->ne[0], n_out = t->ne[1];
        const size_t rs = kern_row_size(KERN_TYPE_MXFP4, n_in);
        for (int64_t e = 0; e < t->ne[2]; e++) {
            const uint8_t *w = (const uint8_t *)t->data + (size_t)e * rs * (size_t)n_out;
            kern_type_traits(KERN_TYPE_MXFP4)->to_f32(wd, w, n_in * n_out);
            ASSERT_OK(kern_rows8_pack(KERN_TYPE_MXFP4, g, w, n_in, n_out));
            for (int li = 0; kern_level_name(li); li++) {
                const char *level = kern_level_name(li);
                if (kern_set_level(level) < 0) continue;
                for (int lay = 0; lay < 2; lay++)
                    for (int64_t nt = 1; nt <= TOK; nt += TOK - 1) {
                        kern_matmul_layout(NULL, y, lay ? g : w, KERN_TYPE_MXFP4,
                                           lay ? KERN_LAYOUT_ROWS8 : KERN_LAYOUT_ROWS, x, n_in,
                                           n_out, nt, scratch);
                        for (int64_t tk = 0; tk < nt; tk++)
                            for (int64_t o = 0; o < n_out; o++) {
                                const float *xt = x + tk * n_in, *wr = wd + o * n_in;
                                double s = 0;
                                for (int64_t k = 0; k < n_in; k++) s += fabs((double)wr[k] * xt[k]);
                                float want = kern_ref_dot_f32(w + o * rs, KERN_TYPE_MXFP4, xt, n_in);
                                if (!(fabs((double)y[tk * n_out + o] - want) <= TOL_SUM * s + 1e-30))
                                    TEST_FAIL_("tensor #%llu expert %lld level %s %s n_tok %lld: "
                                               "y[%lld][%lld] = %.9g, spec %.9g",
                                               (unsigned long long)i, (long long)e, level,
                                               lay ? "rows8" : "rows", (long long)nt, (long long)tk,
                                               (long long)o, y[tk * n_out + o], want);
                            }
                        checked++;
                    }
            }
        }
    }
    kern_set_level(saved);
    printf("  %d expert × level × layout × batch matmuls checked\n", checked);
    ASSERT_TRUE(checked >= 12 * 8 * 2 * 2);
    free(x), free(y), free(wd), free(g), free(scratch);
    gguf_close(f);
}

TEST_MAIN(T(reader_sizes_mxfp4), T(decode_and_requantize), T(expert_matmul_every_level))
