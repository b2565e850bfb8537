/* warm-gguf: inspect or validate GGUF files.
 *
 *   warm-gguf FILE...           header, metadata (arrays summarized: element type, count,
 *                               first items) and the tensor table (name, type, shape,
 *                               offset, bytes)
 *   warm-gguf --check FILE...   validate only: one "OK" line per file, exit 0; or the
 *                               error code and the reader's message, exit 1
 *   --items N                   array items shown (default 4)
 *   warm-gguf --supported       the architectures and weight types the engine loads (from
 *                               its own tables: README.md's model table is checked
 *                               against this list) */
#include "engine/engine.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints a string value quoted, escaping control bytes, cut after max bytes. */
static void print_str(struct gguf_str s, size_t max) {
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            printf("\\n");
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (s.len > max) printf("...(%" PRIu64 " bytes)", s.len);
}

typedef void (*print_fn)(const uint8_t *p);
static void pr_u8(const uint8_t *p) { printf("%u", p[0]); }
static void pr_i8(const uint8_t *p) { printf("%d", (int8_t)p[0]); }
static void pr_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); printf("%u", v); }
static void pr_i16(const uint8_t *p) { int16_t v; memcpy(&v, p, 2); printf("%d", v); }
static void pr_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); printf("%" PRIu32, v); }
static void pr_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); printf("%" PRId32, v); }
static void pr_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); printf("%g", v); }
static void pr_bool(const uint8_t *p) { printf("%s", p[0] ? "true" : "false"); }
static void pr_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); printf("%" PRIu64, v); }
static void pr_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); printf("%" PRId64, v); }
static void pr_f64(const uint8_t *p) { double v; memcpy(&v, p, 8); printf("%g", v); }

static const print_fn printers[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = pr_u8,   [GGUF_TYPE_INT8] = pr_i8,     [GGUF_TYPE_UINT16] = pr_u16,
    [GGUF_TYPE_INT16] = pr_i16,  [GGUF_TYPE_UINT32] = pr_u32,  [GGUF_TYPE_INT32] = pr_i32,
    [GGUF_TYPE_FLOAT32] = pr_f32, [GGUF_TYPE_BOOL] = pr_bool,  [GGUF_TYPE_UINT64] = pr_u64,
    [GGUF_TYPE_INT64] = pr_i64,  [GGUF_TYPE_FLOAT64] = pr_f64,
};

static void print_item(const struct gguf_kv *kv, enum gguf_type et, uint64_t i) {
    if (et == GGUF_TYPE_STRING)
        print_str(gguf_kv_str(kv, i), 60);
    else
        printers[et]((const uint8_t *)kv->data + i * gguf_type_size(et));
}

static void print_kv(uint64_t i, const struct gguf_kv *kv, uint64_t items) {
    char key[72], type[40];
    snprintf(key, sizeof key, "%.*s", (int)MIN(kv->key.len, (uint64_t)64), kv->key.ptr);
    if (kv->type == GGUF_TYPE_ARRAY)
        snprintf(type, sizeof type, "[%s x %" PRIu64 "]", gguf_type_name(kv->arr_type), kv->n);
    else
        snprintf(type, sizeof type, "%s", gguf_type_name(kv->type));
    printf("  %4" PRIu64 "  %-44s %-22s ", i, key, type);
    if (kv->type != GGUF_TYPE_ARRAY) {
        print_item(kv, kv->type, 0);
    } else {
        for (uint64_t j = 0; j < kv->n && j < items; j++) {
            if (j) printf(", ");
            print_item(kv, kv->arr_type, j);
        }
        if (kv->n > items) printf(", ...");
    }
    putchar('\n');
}

static void print_file(const char *path, const struct gguf_file *f, uint64_t items) {
    printf("file:       %s\n", path);
    printf("version:    %" PRIu32 "\n", gguf_version(f));
    printf("size:       %" PRIu64 " bytes\n", gguf_size(f));
    printf("alignment:  %" PRIu64 "\n", gguf_alignment(f));
    printf("data:       offset %" PRIu64 ", end %" PRIu64 ", %" PRIu64 " trailing bytes\n",
           gguf_data_offset(f), gguf_data_end(f), gguf_trailing_bytes(f));
    printf("metadata:   %" PRIu64 " pairs\n", gguf_n_kv(f));
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) print_kv(i, gguf_kv_at(f, i), items);
    printf("tensors:    %" PRIu64 "\n", gguf_n_tensors(f));
    if (gguf_n_tensors(f))
        printf("  %4s  %-40s %-7s %-24s %12s %12s\n", "#", "name", "type", "shape", "offset",
               "bytes");
    uint64_t n_params = 0, n_bytes = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        char shape[96];
        int o = snprintf(shape, sizeof shape, "[");
        uint64_t n = 1;
        for (uint32_t k = 0; k < t->n_dims; k++) {
            o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%" PRId64, k ? ", " : "", t->ne[k]);
            n *= (uint64_t)t->ne[k];
        }
        snprintf(shape + o, sizeof shape - (size_t)o, "]");
        printf("  %4" PRIu64 "  %-40.*s %-7s %-24s %12" PRIu64 " %12" PRIu64 "\n", i,
               (int)t->name.len, t->name.ptr, kern_type_name(t->type), shape, t->offset,
               t->n_bytes);
        n_params += n;
        n_bytes += t->n_bytes;
    }
    printf("total:      %" PRIu64 " parameters, %" PRIu64 " bytes of tensor data\n", n_params,
           n_bytes);
}

/* What a model file may contain for the engine to load it: every row of the arch table, and
 * every type matrices may have (a reference to_f32 and a dot kernel, the rule model.c
 * applies to weight matrices), with its bits per weight. */
static void print_supported(void) {
    printf("architectures:\n");
    for (int a = 0; a < ENGINE_ARCH_COUNT; a++) printf("  %s\n", engine_arch_name(a));
    printf("weight types (bits per weight):\n");
    for (int t = 0; t < KERN_TYPE_COUNT; t++) {
        const struct kern_type_traits *tt = kern_type_traits(t);
        if (!tt || !tt->to_f32 || !tt->vec_dot) continue;
        char name[16];
        size_t n = 0;
        for (const char *c = tt->name; *c && n + 1 < sizeof name; c++)
            name[n++] = (char)toupper((unsigned char)*c);
        name[n] = 0;
        printf("  %-8s %.3g\n", name, 8.0 * (double)tt->type_size / (double)tt->blck_size);
    }
}

static void usage(FILE *out) {
    fprintf(out, "usage: warm-gguf [--check] [--items N] FILE...\n"
                 "       warm-gguf --supported\n"
                 "  --check      validate only; exit 1 with the reader's message on a bad file\n"
                 "  --items N    array items to show (default 4)\n"
                 "  --supported  list the architectures and weight types warmd loads\n");
}

int main(int argc, char **argv) {
    bool check = false;
    uint64_t items = 4;
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (strcmp(argv[first], "--check") == 0) {
            check = true;
        } else if (strcmp(argv[first], "--items") == 0 && first + 1 < argc) {
            items = strtoull(argv[++first], NULL, 10);
        } else if (strcmp(argv[first], "--supported") == 0) {
            print_supported();
            return 0;
        } else if (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (first >= argc) {
        usage(stderr);
        return 2;
    }
    int status = 0;
    for (int i = first; i < argc; i++) {
        struct gguf_file *f = NULL;
        struct err_detail d = {0};
        int r = gguf_open(argv[i], &f, &d);
        if (r < 0) {
            fprintf(stderr, "%s: %s: %s\n", argv[i], err_name(r), err_msg(&d, r));
            status = 1;
            continue;
        }
        if (check)
            printf("%s: OK (GGUF v%" PRIu32 ", %" PRIu64 " pairs, %" PRIu64 " tensors, %" PRIu64
                   " bytes)\n", argv[i], gguf_version(f), gguf_n_kv(f), gguf_n_tensors(f),
                   gguf_size(f));
        else
            print_file(argv[i], f, items);
        gguf_close(f);
    }
    return status;
}
