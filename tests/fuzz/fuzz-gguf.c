/* Fuzz target for the GGUF reader: open the bytes and, when they are accepted, touch every
 * pair (every string and array element) and every tensor's first and last data byte, so a
 * view that points outside the buffer shows up under ASan. Seeds: a valid tiny model made
 * with the writer (strings, arrays, several tensor types, a custom alignment). */
#include "engine/gguf.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

static volatile uint64_t sink;

static void touch(const void *p, uint64_t n) {
    if (!n) return;
    const uint8_t *b = p;
    sink += b[0] + b[n - 1];
}

/* gguf_open_meta reads the same bytes from a file by pread, in prefixes: it must reach the
 * same verdict, and hand out no tensor data. */
static void meta_same(const uint8_t *data, size_t size, int want) {
    int fd = memfd_create("fuzz-gguf", MFD_CLOEXEC);
    if (fd < 0) return;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return;
    }
    struct gguf_file *m = NULL;
    int r = gguf_open_meta(fd, &m, NULL);
    close(fd);
    if (r != want) __builtin_trap();
    for (uint64_t i = 0; r >= 0 && i < gguf_n_tensors(m); i++)
        if (gguf_tensor_at(m, i)->data) __builtin_trap();
    gguf_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f = NULL;
    struct err_detail d = {0};
    int r = gguf_open_mem(data, size, &f, &d);
    meta_same(data, size, r);
    if (r < 0) return 0;
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        touch(kv->key.ptr, kv->key.len);
        if (gguf_find_kv(f, "general.architecture") == kv) sink++;
        enum gguf_type et = kv->type == GGUF_TYPE_ARRAY ? kv->arr_type : kv->type;
        if (et == GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < kv->n; j++) {
                struct gguf_str s = gguf_kv_str(kv, j);
                touch(s.ptr, s.len);
            }
        } else {
            touch(kv->data, kv->n * gguf_type_size(et));
        }
    }
    uint32_t u;
    float fl;
    struct gguf_str s;
    gguf_get_u32(f, "general.alignment", &u, &d);
    gguf_get_f32(f, "llama.rope.freq_base", &fl, &d);
    gguf_get_str(f, "general.architecture", &s, &d);
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        touch(t->name.ptr, t->name.len);
        touch(t->data, t->n_bytes);
        char name[GGUF_MAX_NAME + 1];
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        if (gguf_find_tensor(f, name) != t) __builtin_trap();
    }
    gguf_close(f);
    return 0;
}

int fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    struct gguf_writer *w = NULL;
    if (gguf_writer_new(&w) < 0) return 0;
    static const struct gguf_str toks[] = {{5, "<unk>"}, {3, "<s>"}, {4, "</s>"}, {0, ""}, {2, "ab"}};
    const float scores[] = {0, 0, 0, -1, -2};
    const int32_t types[] = {2, 3, 3, 1, 1};
    float w32[64];
    for (int i = 0; i < 64; i++) w32[i] = (float)i / 64.0f;
    uint8_t q8[2 * 34] = {0};
    gguf_writer_add_str(w, "general.architecture", "llama");
    gguf_writer_add_u32(w, "general.alignment", 64);
    gguf_writer_add_u32(w, "llama.block_count", 1);
    gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 5);
    gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 5);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 5);
    gguf_writer_add_tensor(w, "token_embd.weight", KERN_TYPE_F32, 2, (int64_t[]){8, 8}, w32);
    gguf_writer_add_tensor(w, "output_norm.weight", KERN_TYPE_F32, 1, (int64_t[]){8}, w32);
    gguf_writer_add_tensor(w, "output.weight", KERN_TYPE_Q8_0, 2, (int64_t[]){32, 2}, q8);
    void *buf = NULL;
    size_t size = 0;
    if (gguf_writer_encode(w, &buf, &size) == 0) {
        add(buf, size);
        add(buf, size < 300 ? size : 300); /* a cut seed exercises the truncation paths */
        free(buf);
    }
    gguf_writer_free(w);
    return 0;
}
