/* Devices: the split plan, the weight slices, each device's threads and scratch
 * (engine/device.h says what is cut where and why). */
#include "engine/forward.h"

#include "engine/arch.h"
#include "kernels/deltanet.h"
#ifdef WARM_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const split_names[] = {
    [ENGINE_SPLIT_NONE] = "none",
    [ENGINE_SPLIT_TENSOR] = "tensor",
};

const char *engine_split_name(enum engine_split s) {
    return (unsigned)s < ARRAY_SIZE(split_names) ? split_names[s] : "?";
}

int engine_split_from_name(const char *name) {
    for (size_t i = 0; i < ARRAY_SIZE(split_names); i++)
        if (!strcmp(name, split_names[i])) return (int)i;
    return ERR_INVALID;
}

int engine_devices_parse_into(const char *list, struct engine_context_params *prm, struct err_detail *d) {
    uint32_t n = 0, n_cuda = 0;
    uint16_t cuda[ENGINE_MAX_DEVICES];
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        if (n >= ENGINE_MAX_DEVICES)
            return err_set(d, ERR_INVALID, "more than %d devices in \"%s\"", ENGINE_MAX_DEVICES, list);
        if (len == 3 && !strncmp(p, "cpu", 3)) {
            cuda[n++] = 0;
        } else if (len > 5 && len < 10 && !strncmp(p, "cuda:", 5) && strspn(p + 5, "0123456789") == len - 5) {
            cuda[n++] = (uint16_t)(atoi(p + 5) + 1);
            n_cuda++;
        } else {
            return err_set(d, ERR_INVALID, "device \"%.*s\" in \"%s\" is not cpu or cuda:N",
                           (int)len, p, list);
        }
        p += len;
        if (!*p) break;
    }
    if (n_cuda && n_cuda != n)
        return err_set(d, ERR_INVALID, "devices \"%s\" mix CPU partitions and CUDA devices: a "
                       "split is all of one kind", list);
    prm->n_devices = n;
    memset(prm->split_cuda, 0, sizeof prm->split_cuda);
    memcpy(prm->split_cuda, cuda, n * sizeof *cuda);
    return 0;
}


/* Why cuda:index cannot run a context (NULL: it can), into buf. */
static const char *cuda_why_not(int index, char *buf, size_t len) {
#ifdef WARM_CUDA
    const int n = kern_cuda_device_count();
    struct kern_cuda_device_info info;
    if (n <= 0)
        snprintf(buf, len, "no GPU, no NVIDIA driver, or a driver older than the CUDA runtime");
    else if (index >= n)
        snprintf(buf, len, "cuda:%d does not exist: %d CUDA device%s found", index, n,
                 n == 1 ? "" : "s");
    else if (kern_cuda_device_get_info(index, &info) < 0)
        snprintf(buf, len, "cuda:%d cannot be queried", index);
    else
        return NULL;
#else
    (void)index;
    snprintf(buf, len, "this build has no CUDA backend (built without nvcc)");
#endif
    return buf;
}

int engine_cuda_usable(int index, struct err_detail *d) {
    char why[256];
    const char *no = cuda_why_not(index, why, sizeof why);
    return no ? err_set(d, ERR_UNSUPPORTED, "device cuda:%d: %s", index, no) : 0;
}

const char *engine_cuda_device_name(int index, char *buf, size_t len) {
    snprintf(buf, len, "?");
#ifdef WARM_CUDA
    struct kern_cuda_device_info info;
    if (kern_cuda_device_get_info(index, &info) == 0) snprintf(buf, len, "%s", info.name);
#else
    (void)index;
#endif
    return buf;
}

int engine_device_parse(const char *spec, enum engine_device_kind *ret_kind, int *ret_index,
                        struct err_detail *d) {
    enum engine_device_kind kind = ENGINE_DEVICE_CPU;
    int index = 0;
    if (!strcmp(spec, "auto")) {
        kind = ENGINE_DEVICE_AUTO;
    } else if (!strncmp(spec, "cuda:", 5)) {
        char *end;
        errno = 0;
        long v = strtol(spec + 5, &end, 10);
        if (end == spec + 5 || *end || errno || v < 0 || v > 1023)
            return err_set(d, ERR_INVALID, "device \"%s\": N of cuda:N is not a number 0..1023", spec);
        kind = ENGINE_DEVICE_CUDA;
        index = (int)v;
    } else if (strcmp(spec, "cpu")) {
        return err_set(d, ERR_INVALID, "device \"%s\" is not auto, cpu or cuda:N", spec);
    }
    *ret_kind = kind;
    *ret_index = index;
    return 0;
}

int engine_device_resolve(const char *spec, enum engine_device_kind *ret_kind, int *ret_index,
                          char *why_not, size_t why_len, struct err_detail *d) {
    char why[256] = "";
    enum engine_device_kind kind;
    int index;
    int r = engine_device_parse(spec, &kind, &index, d);
    if (r < 0) return r;
    /* auto: the first CUDA device, tried for each model (engine_context_new) */
    if (kind == ENGINE_DEVICE_AUTO && cuda_why_not(0, why, sizeof why)) kind = ENGINE_DEVICE_CPU;
    *ret_kind = kind;
    *ret_index = index;
    if (why_not && why_len) snprintf(why_not, why_len, "%s", why);
    return 0;
}

int engine_tensor_split_parse(const char *list, float *ratio, uint32_t max, struct err_detail *d) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < max; i++) ratio[i] = 0;
    for (const char *p = list;; n++) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !(v >= 0) || !isfinite(v) || (*end && *end != ','))
            return err_set(d, ERR_INVALID, "tensor split \"%s\": share %u is not a number >= 0",
                           list, n);
        if (n >= max) return err_set(d, ERR_INVALID, "tensor split \"%s\": more than %u shares", list, max);
        ratio[n] = (float)v;
        if (!*end) break;
        p = end + 1;
    }
    return 0;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm64(int64_t a, int64_t b) {
    return a / gcd64(a, b) * b;
}

/* values per quant block of a weight (1 for an absent one) */
static int64_t block_of(const struct engine_weight *w) {
    return w->data ? kern_type_traits(w->type)->blck_size : 1;
}

/* Cuts n items, in units of `unit` (the last chunk also takes the n mod unit rest), over
 * n_dev devices: chunk j has the share ratio[(j + rot) mod n_dev], ends at floor(n_units ·
 * cumulative share) units (the last one at n) and belongs to device (j + rot) mod n_dev.
 * off/cnt: each device's range, the ranges laid out in device order. */
static void split_cut(int64_t n, int64_t unit, uint32_t n_dev, const float *ratio, uint32_t rot,
                      int64_t *off, int64_t *cnt) {
    const int64_t n_units = n / unit;
    double total = 0, cum = 0;
    for (uint32_t d = 0; d < n_dev; d++) total += ratio[d];
    int64_t prev = 0;
    for (uint32_t j = 0; j < n_dev; j++) {
        uint32_t dv = (j + rot) % n_dev;
        cum += ratio[dv];
        /* the epsilon keeps an exact share (3 · 1/3) from rounding one unit down */
        int64_t high = j + 1 == n_dev ? n : (int64_t)(cum / total * (double)n_units + 1e-9) * unit;
        high = MIN(MAX(high, prev), n);
        cnt[dv] = high - prev;
        prev = high;
    }
    int64_t o = 0;
    for (uint32_t d = 0; d < n_dev; d++) off[d] = o, o += cnt[d];
}

/* The rotation of layer il: the earlier layers of its kind (SWA or not), mod n_dev. */
static uint32_t layer_rot(const struct engine_hparams *hp, int il, uint32_t n_dev) {
    uint32_t k = 0;
    for (int i = 0; i < il; i++) k += hp->layer[i].swa == hp->layer[il].swa;
    return k % n_dev;
}

/* rows [r0, r0 + n) of w, a view */
static struct engine_weight rows_view(const struct engine_weight *w, int64_t r0, int64_t n) {
    struct engine_weight s = *w;
    if (w->data) s.data = (const char *)w->data + (size_t)r0 * w->row_bytes, s.n_out = n;
    return s;
}

/* values [i0, i0 + n) of a 1-D f32 weight (a bias), a view */
static struct engine_weight vec_view(const struct engine_weight *w, int64_t i0, int64_t n) {
    struct engine_weight s = *w;
    if (w->data) s.data = (const float *)w->data + i0, s.n_in = n, s.row_bytes = (size_t)n * sizeof(float);
    return s;
}

/* columns [c0, c0 + n) of every row of w (c0 and n whole blocks; of every expert of a
 * stack): a view when that is all of w, else a copy the device owns */
static int cols_slice(struct device *dv, const struct engine_weight *w, int64_t c0, int64_t n,
                      struct engine_weight *ret) {
    *ret = *w;
    if (!w->data || (c0 == 0 && n == w->n_in)) return 0;
    const int64_t n_mat = MAX(w->n_expert, 1);
    size_t off = kern_row_size(w->type, c0), rb = kern_row_size(w->type, n);
    char *p = malloc_array((size_t)(w->n_out * n_mat), rb ? rb : 1);
    if (!p) return -ENOMEM;
    for (int64_t e = 0; e < n_mat; e++)
        for (int64_t r = 0; r < w->n_out; r++)
            memcpy(p + (size_t)(e * w->n_out + r) * rb,
                   (const char *)w->data + (size_t)e * w->expert_bytes +
                       (size_t)r * w->row_bytes + off,
                   rb);
    dv->owned[dv->n_owned++] = p;
    dv->copied_bytes += (uint64_t)(w->n_out * n_mat) * rb;
    ret->data = p;
    ret->n_in = n;
    ret->row_bytes = rb;
    if (w->n_expert > 0) ret->expert_bytes = (size_t)w->n_out * rb;
    return 0;
}

/* ---- Gated DeltaNet layers (engine/device.h) -------------------------------------------
 * A device's heads in its local order, as runs of consecutive global indices: n items
 * from g0 (global) at l0 (local). A tiled layer cut in parts has H_v / H_k runs of value
 * heads (and two of q, k channels): at most DN_MAX_RUNS, else it goes whole to a device. */
#define DN_MAX_RUNS 66

struct dn_run {
    int64_t g0, l0, n;
};

/* The global value head of a device's local value head l. */
static int64_t dn_head_global(const struct kern_dn_shape *p, const struct dev_layer *dl,
                              int64_t l) {
    const int64_t r = p->n_head_v / p->n_head_k;
    if (p->head_map == KERN_DN_HEAD_MAP_GROUPED || dl->n_dk == p->n_head_k) return dl->dk0 * r + l;
    return l / dl->n_dk * p->n_head_k + dl->dk0 + l % dl->n_dk; /* tiled */
}

/* The global conv channel of a device's local channel c (q | k | v, each in its order). */
static int64_t dn_chan_global(const struct kern_dn_shape *p, const struct dev_layer *dl,
                              int64_t c) {
    const int64_t dk = p->head_dim_k, dv = p->head_dim_v, key = p->n_head_k * dk;
    const int64_t nkd = dl->n_dk * dk;
    if (c < 2 * nkd) return (c < nkd ? 0 : key - nkd) + dl->dk0 * dk + c;
    c -= 2 * nkd;
    return 2 * key + dn_head_global(p, dl, c / dv) * dv + c % dv;
}

/* dl's value heads (in heads) or conv channels (chan) as runs into run (room for H_v / H_k
 * + 2), adjacent ones merged; returns their count. */
static int64_t dn_runs(const struct kern_dn_shape *p, const struct dev_layer *dl, bool chan,
                       struct dn_run *run) {
    const int64_t r = p->n_head_v / p->n_head_k, dk = p->head_dim_k, dv = chan ? p->head_dim_v : 1;
    const int64_t key = p->n_head_k * dk, nkd = dl->n_dk * dk;
    int64_t n = 0;
    if (dl->n_dk == 0) return 0;
    if (chan) {
        run[n++] = (struct dn_run){dl->dk0 * dk, 0, nkd};
        run[n++] = (struct dn_run){key + dl->dk0 * dk, nkd, nkd};
    }
    const int64_t base = chan ? 2 * key : 0, lbase = chan ? 2 * nkd : 0;
    const bool tiled = p->head_map == KERN_DN_HEAD_MAP_TILED && dl->n_dk < p->n_head_k;
    for (int64_t j = 0; j < (tiled ? r : 1); j++) {
        const int64_t l0 = tiled ? j * dl->n_dk : 0, cnt = tiled ? dl->n_dk : dl->n_dk * r;
        struct dn_run x = {base + dn_head_global(p, dl, l0) * dv, lbase + l0 * dv, cnt * dv};
        if (n > 0 && run[n - 1].g0 + run[n - 1].n == x.g0 && run[n - 1].l0 + run[n - 1].n == x.l0)
            run[n - 1].n += x.n;
        else
            run[n++] = x;
    }
    return n;
}

/* w's items of the runs into ret, `per` rows of a matrix (values of a vector, columns of
 * the tap-major conv) an item: a view where that is one run of rows or values, else a
 * copy the device owns. No item: an absent weight. */
static int dn_gather(struct device *dv, const struct engine_weight *w, enum spec_kind kind,
                     const struct dn_run *run, int64_t n_run, int64_t per,
                     struct engine_weight *ret) {
    int64_t total = 0;
    for (int64_t i = 0; i < n_run; i++) total += run[i].n * per;
    *ret = *w;
    if (!w->data || total == 0) {
        ret->data = NULL;
        return 0;
    }
    if (n_run == 1 && kind == KIND_CONV && total == w->n_out) return 0; /* all of it */
    if (n_run == 1 && kind != KIND_CONV) {
        *ret = kind == KIND_VEC ? vec_view(w, run[0].g0 * per, total)
                                : rows_view(w, run[0].g0 * per, total);
        return 0;
    }
    /* a vector's values, a matrix's rows, or the conv's columns of each of its K taps */
    const size_t item = kind == KIND_MATMUL ? w->row_bytes : sizeof(float);
    const int64_t n_tap = kind == KIND_CONV ? w->n_in : 1, n_chan = w->n_out;
    size_t bytes;
    if (!size_mul((size_t)(total * n_tap), item, &bytes)) return -ENOMEM;
    char *p = malloc(bytes ? bytes : 1);
    if (!p) return -ENOMEM;
    char *at = p;
    for (int64_t t = 0; t < n_tap; t++)
        for (int64_t i = 0; i < n_run; i++) {
            const size_t n = (size_t)(run[i].n * per) * item;
            const size_t from = (size_t)(t * n_chan) + (size_t)(run[i].g0 * per);
            memcpy(at, (const char *)w->data + from * item, n);
            at += n;
        }
    dv->owned[dv->n_owned++] = p;
    dv->copied_bytes += bytes;
    ret->data = p;
    if (kind == KIND_VEC)
        ret->n_in = total, ret->row_bytes = (size_t)total * sizeof(float);
    else
        ret->n_out = total;
    return 0;
}

/* ssm_out's columns of the runs (d_v a value head; whole blocks, engine/device.c
 * dn_unit): a view where that is all of w, else a copy the device owns. */
static int dn_cols(struct device *dv, const struct engine_weight *w, const struct dn_run *run,
                   int64_t n_run, int64_t per, struct engine_weight *ret) {
    if (n_run <= 1) {
        if (n_run == 0) return dn_gather(dv, w, KIND_MATMUL, run, 0, per, ret);
        return cols_slice(dv, w, run[0].g0 * per, run[0].n * per, ret);
    }
    int64_t total = 0;
    for (int64_t i = 0; i < n_run; i++) total += run[i].n * per;
    const size_t rb = kern_row_size(w->type, total);
    *ret = *w;
    if (!w->data) return 0;
    char *p = malloc_array((size_t)w->n_out, rb ? rb : 1);
    if (!p) return -ENOMEM;
    for (int64_t r = 0; r < w->n_out; r++) {
        char *at = p + (size_t)r * rb;
        for (int64_t i = 0; i < n_run; i++) {
            const size_t off = kern_row_size(w->type, run[i].g0 * per),
                         n = kern_row_size(w->type, run[i].n * per);
            memcpy(at, (const char *)w->data + (size_t)r * w->row_bytes + off, n);
            at += n;
        }
    }
    dv->owned[dv->n_owned++] = p;
    dv->copied_bytes += (uint64_t)w->n_out * rb;
    ret->data = p;
    ret->n_in = total;
    ret->row_bytes = rb;
    return 0;
}

/* A device's share of a Gated DeltaNet layer's weight of spec s (split SPLIT_DN_*), p the
 * layer's global shape. */
static int dn_slice(struct device *de, const struct tensor_spec *s, const struct engine_weight *w,
                    const struct dev_layer *dl, const struct kern_dn_shape *p,
                    struct engine_weight *out) {
    struct dn_run run[DN_MAX_RUNS];
    const bool chan = s->split == SPLIT_DN_CHAN;
    if (!w->data) { /* not a recurrent layer */
        *out = *w;
        return 0;
    }
    if (s->split == SPLIT_DN_K_ROWS) {
        const struct dn_run k = {dl->dk0, 0, dl->n_dk};
        return dn_gather(de, w, s->kind, &k, dl->n_dk ? 1 : 0,
                         (s->kind == KIND_VEC ? w->n_in : w->n_out) / p->n_head_k, out);
    }
    const int64_t n_run = dn_runs(p, dl, chan, run);
    if (s->split == SPLIT_DN_O_COLS) return dn_cols(de, w, run, n_run, p->head_dim_v, out);
    const int64_t per = chan ? 1 : (s->kind == KIND_VEC ? w->n_in : w->n_out) / p->n_head_v;
    return dn_gather(de, w, s->kind, run, n_run, per, out);
}

/* The unit of a Gated DeltaNet layer's cut in key heads: the fewest whose value heads'
 * columns of ssm_out are whole quant blocks (in the tiled order, every run of them:
 * where H_k·d_v is not whole blocks, the layer goes whole to one device). */
static int64_t dn_unit(const struct kern_dn_shape *p, const struct engine_weight *out) {
    const int64_t blk = block_of(out), r = p->n_head_v / p->n_head_k;
    const int64_t cols = p->head_dim_v * (p->head_map == KERN_DN_HEAD_MAP_TILED ? 1 : r);
    if (p->head_map == KERN_DN_HEAD_MAP_TILED && r > 1 &&
        ((p->n_head_k * p->head_dim_v) % blk || r + 2 > DN_MAX_RUNS))
        return p->n_head_k;
    return MIN(blk / gcd64(blk, cols), p->n_head_k);
}

void device_dn_conv(struct device *de, int il, float *y, float *state, const float *x,
                    int64_t n_tok, int64_t c0, int64_t c1) {
    const struct kv_rstate *rs = &de->cpu.e.ctx->kv.rs;
    const struct dev_layer *dl = &de->layer[il];
    const int64_t C = rs->n_chan, Cl = dl->n_dchan, K = rs->n_kernel;
    const float *w = dl->w.ssm_conv.data;
    if (Cl == C) {
        kern_dn_conv(y, state, x, w, n_tok, C, K, c0, c1);
        return;
    }
    /* its channels of the state in its order, and back: no other device holds them */
    float *loc = de->dn_conv_state;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t g = dn_chan_global(&rs->shape, dl, c);
        for (int64_t t = 0; t < K - 1; t++) loc[t * Cl + c] = state[t * C + g];
    }
    kern_dn_conv(y, loc, x, w, n_tok, Cl, K, c0, c1);
    for (int64_t c = c0; c < c1; c++) {
        const int64_t g = dn_chan_global(&rs->shape, dl, c);
        for (int64_t t = 0; t < K - 1; t++) state[t * C + g] = loc[t * Cl + c];
    }
}

void device_dn_delta(const struct device *de, int il, float *state, const struct kern_dn_seq *s,
                     int64_t h0, int64_t h1, void *scratch) {
    const struct kern_dn_shape *p = &de->cpu.e.ctx->kv.rs.shape;
    const struct dev_layer *dl = &de->layer[il];
    const int64_t dv = p->head_dim_v, hs = p->head_dim_v * p->head_dim_k;
    if (dl->n_dk == p->n_head_k) { /* the whole layer: its order is the global one */
        kern_dn_delta(state, s, p, h0, h1, scratch);
        return;
    }
    if (p->head_map != KERN_DN_HEAD_MAP_TILED) { /* grouped: one run from dk0·r */
        kern_dn_delta(state + dl->dk0 * (p->n_head_v / p->n_head_k) * hs, s, &dl->dn, h0, h1,
                      scratch);
        return;
    }
    /* tiled: run j is local heads [j·n_dk, (j + 1)·n_dk), global j·H_k + dk0 + i, each
     * reading local key head i; its g and β (a row of H_v values a token to the kernels)
     * copied to rows of n_dk after the kernels' scratch */
    const int64_t nk = dl->n_dk, nv = dl->n_dv, n = s->n_tok;
    struct kern_dn_shape one = dl->dn;
    one.n_head_v = nk;
    float *g = (float *)((char *)scratch + de->dn_kern_bytes), *beta = g + n * nk;
    for (int64_t j = h0 / nk; j * nk < h1; j++) {
        const int64_t a = MAX(h0, j * nk) - j * nk, b = MIN(h1, (j + 1) * nk) - j * nk;
        struct kern_dn_seq r = *s;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = a; i < b; i++) {
                g[t * nk + i] = s->g[t * nv + j * nk + i];
                beta[t * nk + i] = s->beta[t * nv + j * nk + i];
            }
        r.v += j * nk * dv;
        r.g = g;
        r.beta = beta;
        r.o += j * nk * dv;
        kern_dn_delta(state + (j * p->n_head_k + dl->dk0) * hs, &r, &one, a, b, scratch);
    }
}

/* A repacked copy of bytes: on 2 MiB boundaries with transparent huge pages asked for
 * where it spans one or more (best effort), as the daemon's private copy of the model
 * has them: decode streams every weight once per token, and with 4 KiB pages that is a
 * TLB miss every 4 KiB. free() frees it. */
static void *weights_alloc(size_t bytes) {
    const size_t huge = 2u << 20;
    void *p;
    if (posix_memalign(&p, bytes >= huge ? huge : 64, bytes ? bytes : 1) != 0) return NULL;
    if (bytes >= huge) (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
    return p;
}


/* A repack of every group of 8 rows of w (all its experts' for a stack) spread over a
 * device's threads, each a run of whole groups: in place (dst NULL: each group through a
 * buffer of its thread's) or into dst. A 20 GB model's weights pass through here at load,
 * so its speed is part of the load's: one thread repacked ~1-2 GB/s. */
struct repack_job {
    const struct engine_weight *w;
    uint8_t *dst;
    int64_t n_group; /* per expert */
    int64_t n_units; /* groups over all experts */
    _Atomic int err; /* a thread's allocation failure (-ENOMEM) */
};

static void repack_task(void *arg, int ith, int nth) {
    struct repack_job *j = arg;
    const struct engine_weight *w = j->w;
    const size_t group = 8 * w->row_bytes;
    const int64_t u0 = j->n_units * ith / nth, u1 = j->n_units * (ith + 1) / nth;
    uint8_t *tmp = NULL;
    if (u0 < u1 && !j->dst && !(tmp = malloc(group))) {
        atomic_store_explicit(&j->err, -ENOMEM, memory_order_relaxed); /* whichever fails */
        return;
    }
    for (int64_t u = u0; u < u1; u++) {
        const int64_t e = u / j->n_group, i = u % j->n_group;
        const size_t off = (size_t)e * w->expert_bytes + (size_t)i * group;
        uint8_t *g = (uint8_t *)w->data + off;
        if (j->dst) {
            (void)kern_rows8_pack(w->type, j->dst + off, g, w->n_in, 8); /* shape checked */
        } else {
            memcpy(tmp, g, group);
            (void)kern_rows8_pack(w->type, g, tmp, w->n_in, 8);
        }
    }
    free(tmp);
}

/* w's groups repacked (every expert's for a stack) on dv's threads: where they are
 * (writable) when dst is NULL, else into dst (w's bytes, laid out as w's). */
static int repack_groups(struct device *dv, const struct engine_weight *w, uint8_t *dst) {
    struct repack_job j = {.w = w, .dst = dst, .n_group = w->n_out / 8};
    j.n_units = j.n_group * MAX(w->n_expert, 1);
    atomic_init(&j.err, 0);
    kern_pool_run(dv->pool, repack_task, &j);
    return atomic_load_explicit(&j.err, memory_order_relaxed);
}

/* An experts' stack (w, of the model's mw) is read in place, expert e a slice of the
 * file's tensor: a copy of every expert would double a MoE model's bulk for the few
 * experts a token reads. Where the model owns its weights (the daemon's private copy) the
 * whole stack is repacked there, expert by expert (each expert's rows are whole groups of
 * 8); a column slice the device owns likewise; a mapped file's stack stays as it is. */
static int stack_repack(struct engine_context *ctx, struct device *dv, struct engine_weight *w,
                        struct engine_weight *mw) {
    struct engine_model *m = (struct engine_model *)ctx->model;
    if (!w->data || w->layout != KERN_LAYOUT_ROWS || !kern_rows8_supported(w->type, w->n_in, w->n_out))
        return 0;
    bool owned = false;
    for (size_t i = 0; i < dv->n_owned && !owned; i++) owned = dv->owned[i] == w->data;
    const bool whole = w->data == mw->data && w->n_out == mw->n_out && w->n_in == mw->n_in;
    if (!owned && !(m->own_copy && whole)) return 0;
    int r = repack_groups(dv, w, NULL);
    if (r < 0) return r;
    if (!owned) {
        mw->layout = KERN_LAYOUT_ROWS8;
        m->repacked = true;
    }
    w->layout = KERN_LAYOUT_ROWS8;
    return 0;
}

/* w (a device's view or copy of the model's mw) in the layout this CPU's kernels read
 * fastest (kernels/types.h rows8), where that differs from the file's:
 *   a column slice the device owns: in place;
 *   the whole tensor of a model that owns its weights (the daemon's private copy): in
 *     place in the model, which then holds it repacked (mw's layout), so no byte is
 *     held twice; its part of a split, or a classifier tied to the token embeddings
 *     (read by rows), stays as it is;
 *   a mapped file's tensor: in a copy the device owns (the file's pages, left alone,
 *     are the page cache's to drop). */
static int weight_repack(struct engine_context *ctx, struct device *dv, struct engine_weight *w,
                         struct engine_weight *mw) {
    struct engine_model *m = (struct engine_model *)ctx->model; /* see the in-place case */
    if (w->n_expert > 0) return stack_repack(ctx, dv, w, mw);
    if (!w->data || w->layout != KERN_LAYOUT_ROWS || !kern_rows8_supported(w->type, w->n_in, w->n_out))
        return 0;
    size_t i = 0;
    while (i < dv->n_owned && dv->owned[i] != w->data) i++;
    const bool owned = i < dv->n_owned;
    const bool whole = w->data == mw->data && w->n_out == mw->n_out && w->n_in == mw->n_in;
    if (!owned && m->own_copy && (!whole || mw->data == m->tok_embd.data)) return 0;
    if (owned || m->own_copy) {
        /* the model's copy is writable while devices_repack() runs; no other context
         * reads it meanwhile (engine_model.repacked) */
        int r = repack_groups(dv, w, NULL);
        if (r < 0) return r;
        if (!owned) {
            mw->layout = KERN_LAYOUT_ROWS8;
            m->repacked = true;
        }
    } else {
        size_t bytes = (size_t)w->n_out * w->row_bytes;
        void *p = weights_alloc(bytes);
        if (!p) return -ENOMEM;
        (void)repack_groups(dv, w, p); /* allocates nothing */
        dv->owned[dv->n_owned++] = p;
        dv->copied_bytes += bytes;
        w->data = p;
    }
    w->layout = KERN_LAYOUT_ROWS8;
    return 0;
}

static int repack_all(struct engine_context *ctx, struct err_detail *d);

/* Repacks the matrices of the layers the host runs (and the classifier, when the host
 * runs it) on every CPU device; a GPU split's partitions upload the file's rows. A model
 * an earlier context repacked in place serves one CPU device only. */
static int devices_repack(struct engine_context *ctx, struct err_detail *d) {
    struct engine_model *m = (struct engine_model *)ctx->model;
    if (m->repacked && (ctx->n_dev > 1 || ctx->gpu || ctx->split_gpu || ctx->params.plain_weights))
        return err_set(d, ERR_UNSUPPORTED, "an earlier context repacked this model's weights in "
                       "place for one CPU device; load the model again to run it on a GPU, "
                       "on a split or with the file's layout");
    if (ctx->params.plain_weights || ctx->split_gpu) return 0;
    /* the model's private copy is kept read-only, as the mapping it stands in for: the
     * whole of it writable meanwhile (one mapping: its huge pages stay whole) */
    const int prot = PROT_READ | PROT_WRITE;
    if (m->own_copy && mprotect((void *)gguf_base(m->file), (size_t)gguf_size(m->file), prot) < 0)
        return err_set(d, -errno, "cannot make the model's copy writable: %s", err_str(-errno));
    int r = repack_all(ctx, d);
    if (m->own_copy) (void)mprotect((void *)gguf_base(m->file), (size_t)gguf_size(m->file), PROT_READ);
    return r;
}

/* The matrices a device multiplies by: the sliced ones of its layers (engine/arch.h). */
static bool spec_on_devices(const struct tensor_spec *s) {
    return s->kind == KIND_MATMUL && s->split != SPLIT_HOST && s->split != SPLIT_ALL;
}

static int repack_all(struct engine_context *ctx, struct err_detail *d) {
    struct engine_model *m = (struct engine_model *)ctx->model;
    for (uint32_t i = 0; i < ctx->n_dev; i++) {
        struct device *de = &ctx->dev[i];
        for (uint32_t il = 0; il < ctx->n_layer_host; il++) {
            for (size_t k = 0; k < engine_n_layer_specs; k++) {
                const struct tensor_spec *s = &engine_layer_specs[k];
                if (!spec_on_devices(s)) continue;
                int r = weight_repack(ctx, de, spec_field(&de->layer[il].w, s),
                                      spec_field(&m->layers[il], s));
                if (r < 0) return err_set(d, r, "cannot repack layer %u's weights for %s", il, de->name);
            }
        }
        /* an embeddings context has no classifier to run (engine/context.h) */
        int r = ctx->gpu || ctx->params.embeddings ? 0 : weight_repack(ctx, de, &de->output, &m->output);
        if (r < 0) return err_set(d, r, "cannot repack the classifier for %s", de->name);
    }
    return 0;
}

static uint64_t weight_bytes(const struct engine_weight *w) {
    return w->data ? (uint64_t)w->n_out * w->row_bytes * (uint64_t)MAX(w->n_expert, 1) : 0;
}

/* The unit of layer il's attention cut in KV heads: the fewest whose query heads' columns
 * of the output projection are whole quant blocks. */
static int64_t attn_unit(const struct engine_model *m, const struct kv_cache *kv, int il) {
    const struct engine_hparams *hp = &m->hp;
    const int64_t n_kv = kv_store_of(kv, il)->n_head_kv;
    const int64_t cols = hp->n_head / n_kv * hp->layer[il].head_dim_v; /* one KV head's group */
    const int64_t blk = block_of(&m->layers[il].wo);
    return blk / gcd64(blk, cols);
}

/* Device dv's share of layer il's weight of spec s, from the cut of the attention (its KV
 * heads [kv0, kv0 + n_kv), groups of `group` query heads) and of the FFN (the units of
 * dl), as the spec's split column says (engine/arch.h), into dl->w. */
static int layer_slice(struct device *de, const struct tensor_spec *s, const struct engine_layer *l,
                       struct dev_layer *dl, int64_t group, int64_t hd_q, int64_t hd_k,
                       int64_t hd_v, const struct kern_dn_shape *dn) {
    const struct engine_weight *w = spec_field_const(l, s);
    struct engine_weight *out = spec_field(&dl->w, s);
    const int64_t kv_off = dl->kv0, kv_cnt = dl->n_kv;
    int64_t per = 1, off = dl->ff0, cnt = dl->n_ff; /* rows or columns a unit, the units */
    switch (s->split) {
    case SPLIT_HOST:
        *out = (struct engine_weight){0};
        return 0;
    case SPLIT_ALL:
        *out = *w;
        return 0;
    case SPLIT_Q_ROWS:
        per = group * (s->kind == KIND_VEC ? hd_k : hd_q); /* attn_q's rows: with the gate */
        off = kv_off;
        cnt = kv_cnt;
        break;
    case SPLIT_K_ROWS:
        per = hd_k;
        off = kv_off;
        cnt = kv_cnt;
        break;
    case SPLIT_V_ROWS:
        per = hd_v;
        off = kv_off;
        cnt = kv_cnt;
        break;
    case SPLIT_O_COLS:
        per = group * hd_v;
        off = kv_off;
        cnt = kv_cnt;
        break;
    case SPLIT_FF_ROWS:
    case SPLIT_FF_COLS:
        break;
    case SPLIT_EXP_ROWS:
    case SPLIT_EXP_COLS:
        off = dl->fe0;
        cnt = dl->n_fe;
        break;
    case SPLIT_SH_ROWS:
    case SPLIT_SH_COLS:
        off = dl->fs0;
        cnt = dl->n_fs;
        break;
    case SPLIT_DN_CHAN:
    case SPLIT_DN_V_ROWS:
    case SPLIT_DN_K_ROWS:
    case SPLIT_DN_O_COLS:
        return dn_slice(de, s, w, dl, dn, out);
    case SPLIT_VOCAB_ROWS:
        return ERR_INVALID; /* not a layer's */
    }
    if (s->split == SPLIT_O_COLS || s->split == SPLIT_FF_COLS || s->split == SPLIT_EXP_COLS ||
        s->split == SPLIT_SH_COLS)
        return cols_slice(de, w, off * per, cnt * per, out);
    *out = s->kind == KIND_VEC ? vec_view(w, off * per, cnt * per)
                               : rows_view(w, off * per, cnt * per);
    return 0;
}

/* Cuts n hidden units (0: none on any device) in units of whole blocks of down's columns. */
static void ffn_cut(int64_t n, const struct engine_weight *down, uint32_t n_dev, const float *ratio,
                    uint32_t rot, int64_t *off, int64_t *cnt) {
    if (n == 0) {
        for (uint32_t dv = 0; dv < n_dev; dv++) off[dv] = cnt[dv] = 0;
        return;
    }
    split_cut(n, MIN(block_of(down), n), n_dev, ratio, rot, off, cnt);
}

static int plan_layers(struct engine_context *ctx, const float *ratio, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const struct kv_cache *kv = &ctx->kv;
    const uint32_t n = ctx->n_dev;
    int64_t kv_off[ENGINE_MAX_DEVICES], kv_cnt[ENGINE_MAX_DEVICES];
    int64_t ff_off[ENGINE_MAX_DEVICES], ff_cnt[ENGINE_MAX_DEVICES];
    int64_t fe_off[ENGINE_MAX_DEVICES], fe_cnt[ENGINE_MAX_DEVICES];
    int64_t fs_off[ENGINE_MAX_DEVICES], fs_cnt[ENGINE_MAX_DEVICES];
    int64_t dk_off[ENGINE_MAX_DEVICES] = {0}, dk_cnt[ENGINE_MAX_DEVICES] = {0};
    const struct kern_dn_shape *dn = &kv->rs.shape;
    uint32_t n_rec = 0; /* recurrent layers before il: their rotation */
    for (int il = 0; il < (int)hp->n_layer; il++) {
        const struct engine_layer_hparams *lh = &hp->layer[il];
        const struct engine_layer *l = &m->layers[il];
        const int src = kv_source(kv, il);
        /* (a recurrent layer has no attention: no KV heads anywhere) */
        const bool rec = lh->mixer == ENGINE_MIXER_GATED_DELTANET;
        const int64_t n_kv = rec ? 0 : kv_store_of(kv, il)->n_head_kv;
        const int64_t group = n_kv ? hp->n_head / n_kv : 1;
        /* the attention: the unit every layer reading src's KV needs, src's rotation */
        int64_t unit = 1;
        for (int j = 0; j < (int)hp->n_layer && !rec; j++)
            if (kv_source(kv, j) == src) unit = lcm64(unit, attn_unit(m, kv, j));
        unit = MIN(unit, n_kv);
        uint32_t rot = layer_rot(hp, ctx->params.split_own_rotation ? il : src, n);
        if (rec)
            for (uint32_t dv = 0; dv < n; dv++) kv_off[dv] = kv_cnt[dv] = 0;
        else
            split_cut(n_kv, unit, n, ratio, rot, kv_off, kv_cnt);
        /* the FFN: its own rotation, units of whole blocks of the down projection (a
         * mixture of experts: of every expert's and of the shared expert's) */
        const bool moe = lh->ffn == ENGINE_FFN_MOE || lh->ffn == ENGINE_FFN_MOE_DENSE;
        const uint32_t frot = layer_rot(hp, il, n);
        ffn_cut(lh->ffn == ENGINE_FFN_MOE ? 0 : lh->n_ff, &l->w_down, n, ratio, frot, ff_off,
                ff_cnt);
        ffn_cut(moe ? hp->n_ff_exp : 0, &l->exp_down, n, ratio, frot, fe_off, fe_cnt);
        ffn_cut(moe && l->sh_down.data ? hp->n_ff_shexp : 0, &l->sh_down, n, ratio, frot,
                fs_off, fs_cnt);
        /* a Gated DeltaNet layer: by key heads, rotated over the recurrent layers */
        if (rec) split_cut(dn->n_head_k, dn_unit(dn, &l->ssm_out), n, ratio, n_rec++ % n, dk_off,
                           dk_cnt);
        for (uint32_t dv = 0; dv < n; dv++) {
            struct device *de = &ctx->dev[dv];
            struct dev_layer *dl = &de->layer[il];
            *dl = (struct dev_layer){
                .kv0 = kv_off[dv], .n_kv = kv_cnt[dv], .ff0 = ff_off[dv], .n_ff = ff_cnt[dv],
                .fe0 = fe_off[dv], .n_fe = fe_cnt[dv], .fs0 = fs_off[dv], .n_fs = fs_cnt[dv]};
            if (rec) {
                const int64_t nk = dk_cnt[dv], r = dn->n_head_v / dn->n_head_k;
                dl->dk0 = dk_off[dv];
                dl->n_dk = nk;
                dl->n_dv = nk * r;
                dl->n_dchan = 2 * nk * dn->head_dim_k + nk * r * dn->head_dim_v;
                dl->dn = *dn;
                dl->dn.n_head_k = nk;
                dl->dn.n_head_v = nk * r;
            }
            for (size_t k = 0; k < engine_n_layer_specs; k++) {
                const struct tensor_spec *s = &engine_layer_specs[k];
                const int64_t hd_q = lh->head_dim_k + (hp->attn_gate ? lh->head_dim_v : 0);
                int r = layer_slice(de, s, l, dl, group, hd_q, lh->head_dim_k, lh->head_dim_v, dn);
                if (r < 0)
                    return err_set(d, r, "cannot cut layer %d's %s for %s", il, s->name, de->name);
                if (spec_on_devices(s) && il < (int)ctx->n_layer_host)
                    de->weight_bytes += weight_bytes(spec_field(&dl->w, s));
            }
        }
    }
    /* the classifier by vocabulary rows, rotated as the non-layer tensors: n_layer mod n */
    split_cut(hp->n_vocab, 1, n, ratio, hp->n_layer % n, kv_off, kv_cnt);
    for (uint32_t dv = 0; dv < n; dv++) {
        struct device *de = &ctx->dev[dv];
        de->vocab0 = kv_off[dv];
        de->n_vocab = kv_cnt[dv];
        de->output = rows_view(&m->output, kv_off[dv], kv_cnt[dv]);
        if (!ctx->gpu && !ctx->params.embeddings) /* else the GPU's, or none */
            de->weight_bytes += weight_bytes(&de->output);
    }
    return 0;
}

/* Every query head on the device that holds its KV head (#31406): a layer reading another
 * layer's KV must have that layer's head ranges on every device. */
static int placement_check(const struct engine_context *ctx, struct err_detail *d) {
    for (int il = 0; il < (int)ctx->model->hp.n_layer; il++) {
        int src = kv_source(&ctx->kv, il);
        for (uint32_t dv = 0; src != il && dv < ctx->n_dev; dv++) {
            const struct dev_layer *q = &ctx->dev[dv].layer[il], *k = &ctx->dev[dv].layer[src];
            if (q->kv0 != k->kv0 || q->n_kv != k->n_kv)
                return err_set(d, ERR_INVALID, "layer %d reads layer %d's KV, but %s would run "
                               "its query heads of KV heads [%lld, %lld) and holds KV heads "
                               "[%lld, %lld) of layer %d", il, src, ctx->dev[dv].name,
                               (long long)q->kv0, (long long)(q->kv0 + q->n_kv),
                               (long long)k->kv0, (long long)(k->kv0 + k->n_kv), src);
        }
    }
    return 0;
}

/* Sizes a device's scratch for its largest slices, and its KV bytes. */
static int device_scratch(struct engine_context *ctx, struct device *de, struct err_detail *d) {
    const struct engine_model *m = ctx->model;
    const struct engine_hparams *hp = &m->hp;
    const struct kv_cache *kv = &ctx->kv;
    const size_t nb = ctx->params.n_batch;
    int64_t q = 1, k = 1, v = 1, att = 1, ff = 1, max_group = 1;
    size_t mm = kern_matmul_scratch_bytes(de->output.type, de->output.n_in, ctx->n_out_step);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct dev_layer *dl = &de->layer[il];
        const int64_t n_kv = kv_store_of(kv, (int)il)->n_head_kv; /* (0: no attention) */
        const int64_t group = n_kv ? hp->n_head / n_kv : 1;
        const int64_t hd_k = hp->layer[il].head_dim_k, hd_v = hp->layer[il].head_dim_v;
        max_group = MAX(max_group, group);
        q = MAX(q, dl->n_kv * group * hd_k);
        k = MAX(k, dl->n_kv * hd_k);
        v = MAX(v, dl->n_kv * MAX(hd_k, hd_v)); /* K = V copies K */
        att = MAX(att, dl->n_kv * group * hd_v);
        /* gemma4 MoE: the host's att holds the dense FFN's output while the experts run
         * (engine/forward.c ffn_beside) */
        if (hp->layer[il].ffn == ENGINE_FFN_MOE_DENSE) att = MAX(att, (int64_t)hp->n_embd);
        ff = MAX(ff, MAX(dl->n_ff, MAX(dl->n_fe, dl->n_fs)));
        for (size_t i = 0; i < engine_n_layer_specs; i++) {
            const struct engine_weight *w = spec_field_const(&dl->w, &engine_layer_specs[i]);
            /* (the whole ones too: a router runs on every device) */
            if (engine_layer_specs[i].kind == KIND_MATMUL && w->data)
                mm = MAX(mm, kern_matmul_scratch_bytes(w->type, w->n_in, (int64_t)nb));
            /* device 0's threads also run the host's products (the per-layer branch) */
            w = spec_field_const(&m->layers[il], &engine_layer_specs[i]);
            if (de == ctx->dev && w->data && engine_layer_specs[i].kind != KIND_VEC)
                mm = MAX(mm, kern_matmul_scratch_bytes(w->type, w->n_in, (int64_t)nb));
        }
    }
    if (de == ctx->dev && m->pl_model_proj.data)
        mm = MAX(mm, kern_matmul_scratch_bytes(m->pl_model_proj.type, m->pl_model_proj.n_in, (int64_t)nb));
    de->attn_scratch_floats = (size_t)kern_attn_scratch_floats((int64_t)ATTN_BLOCK * max_group,
                                                               hp->max_head_dim_k, hp->max_head_dim_v);
    /* gated attention (qg holds q and the gates); Gated DeltaNet layers (1 float without) */
    const size_t qg = hp->attn_gate ? (size_t)q + (size_t)att : 1,
                 gate = hp->attn_gate ? (size_t)att : 1;
    const struct kv_rstate *rs = &kv->rs;
    const bool dn = rs->n_layer_rs > 0;
    const size_t dn_chan = dn ? (size_t)rs->n_chan : 1;
    const size_t dn_heads = dn ? (size_t)rs->shape.n_head_v : 1;
    const size_t dn_inner = dn ? (size_t)(rs->shape.n_head_v * rs->shape.head_dim_v) : 1;
    int64_t dn_chan_dev = 1; /* its most conv channels of a layer */
    for (uint32_t il = 0; il < hp->n_layer; il++)
        dn_chan_dev = MAX(dn_chan_dev, de->layer[il].n_dchan);
    de->dn_scratch_bytes = dn ? kern_dn_scratch_bytes(&rs->shape) : 0;
    if (dn && de->dn_scratch_bytes == 0)
        return err_set(d, ERR_OVERFLOW, "the Gated DeltaNet scratch of %s overflows", de->name);
    /* (64-byte multiples: each thread's part stays aligned); then a tiled layer cut in
     * parts: a run's g and β (device_dn_delta), n_batch × its key heads each */
    de->dn_scratch_bytes = (de->dn_scratch_bytes + 63) / 64 * 64;
    de->dn_kern_bytes = de->dn_scratch_bytes;
    int64_t dn_k_dev = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) dn_k_dev = MAX(dn_k_dev, de->layer[il].n_dk);
    if (dn) de->dn_scratch_bytes += (2 * nb * (size_t)dn_k_dev * sizeof(float) + 63) / 64 * 64;
    /* a mixture of experts: hb holds the router's logits, hb2 the shared expert's output
     * (engine/forward.c ffn_moe); the routing and an expert's rows (1 float without) */
    const bool moe = hp->n_expert > 0;
    const size_t hb = MAX((size_t)ff, moe ? hp->n_expert : 1),
                 hb2 = MAX((size_t)ff, moe ? hp->n_embd : 1);
    int64_t fe = 1;
    size_t few = 0; /* a few tokens' matmul scratch, a thread */
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct dev_layer *dl = &de->layer[il];
        const struct engine_weight *ws[] = {&dl->w.exp_gate, &dl->w.exp_up, &dl->w.exp_down};
        fe = MAX(fe, dl->n_fe);
        for (size_t i = 0; i < ARRAY_SIZE(ws); i++)
            if (ws[i]->data) few = MAX(few, kern_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, 1));
    }
    const size_t row = ((size_t)hp->n_embd * sizeof(float) + 63) / 64 * 64;
    de->moe_few_bytes = moe ? row + (few + 63) / 64 * 64 : 0;
    /* (a few tokens' expert pairs may outnumber n_batch rows) */
    const size_t sel = moe ? nb * hp->n_expert_used : 1, xy = moe ? nb * hp->n_embd : 1,
                 h = moe ? MAX(nb, (size_t)MOE_FEW_TOKENS * hp->n_expert_used) * (size_t)fe : 1;
    size_t floats[] = {nb * (size_t)q, nb * (size_t)k, nb * (size_t)v, nb * (size_t)att,
                       nb * hb, nb * hb2, nb * hp->n_embd,
                       ctx->n_out_step * (size_t)MAX(de->n_vocab, 1),
                       (size_t)de->n_threads * de->attn_scratch_floats,
                       nb * qg, nb * gate, nb * dn_chan, nb * dn_inner, nb * dn_heads,
                       nb * dn_heads, nb * dn_inner,
                       ((size_t)de->n_threads * de->dn_scratch_bytes + 3) / 4 + 1,
                       sel, xy, xy, h, h, xy,
                       dn ? (size_t)(rs->n_kernel - 1) * (size_t)dn_chan_dev : 1};
    float **bufs[] = {&de->q, &de->k, &de->v, &de->att, &de->hb, &de->hb2, &de->part,
                      &de->logits, &de->attn_scratch, &de->qg, &de->gate, &de->dn_qkv,
                      &de->dn_z, &de->dn_g, &de->dn_beta, &de->dn_o, &de->dn_scratch,
                      &de->moe_wt, &de->moe_x, &de->moe_y, &de->moe_h, &de->moe_h2,
                      &de->moe_acc, &de->dn_conv_state};
    de->scratch_bytes = mm;
    for (size_t i = 0; i < ARRAY_SIZE(bufs); i++) {
        if (bufs[i] == &de->logits && ctx->n_dev == 1) continue; /* it writes ctx->logits */
        if (!(*bufs[i] = malloc_array_aligned(floats[i], sizeof(float))))
            return err_set(d, -ENOMEM, "cannot allocate %s's scratch", de->name);
        de->scratch_bytes += floats[i] * sizeof(float);
    }
    int32_t **ibufs[] = {&de->moe_sel, &de->moe_list, &de->moe_count};
    const size_t ints[] = {sel, sel, (size_t)hp->n_expert + 1};
    for (size_t i = 0; i < ARRAY_SIZE(ibufs); i++) {
        if (!(*ibufs[i] = malloc_array(ints[i], sizeof(int32_t))))
            return err_set(d, -ENOMEM, "cannot allocate %s's scratch", de->name);
        de->scratch_bytes += ints[i] * sizeof(int32_t);
    }
    if (!(de->mm_scratch = malloc(mm ? mm : 1)) ||
        !(de->moe_few = malloc_array_aligned((size_t)de->n_threads, MAX(de->moe_few_bytes, 1))))
        return err_set(d, -ENOMEM, "cannot allocate %s's scratch", de->name);
    de->scratch_bytes += (size_t)de->n_threads * de->moe_few_bytes;
    /* its KV heads of every owning layer */
    for (uint32_t s = 0; s < kv->n_store; s++) {
        const struct kv_store *st = &kv->store[s];
        uint64_t rows = (uint64_t)kv->n_seq * (st->ring ? 2 : 1) * st->n_cells;
        for (uint32_t i = 0; i < st->n_layer_kv; i++) {
            if (st->on_dev[i]) continue; /* the GPU's */
            int64_t nh = de->layer[st->layers[i]].n_kv;
            de->kv_bytes += rows * (kern_row_size(kv->type_k, nh * st->head_dim_k) +
                                    kern_row_size(kv->type_v, nh * st->head_dim_v));
        }
    }
    return 0;
}

int engine_split_check(const struct engine_context_params *p, struct err_detail *d) {
    const uint32_t n = p->n_devices ? p->n_devices : 1;
    if (n > ENGINE_MAX_DEVICES)
        return err_set(d, ERR_INVALID, "%u devices, at most %d", n, ENGINE_MAX_DEVICES);
    if (n > 1 && p->split != ENGINE_SPLIT_TENSOR)
        return err_set(d, ERR_INVALID, "%u devices need split = tensor (split = %s takes one)", n,
                       engine_split_name(p->split));
    for (uint32_t i = 0; i < n; i++)
        if (!(p->tensor_split[i] >= 0) || !isfinite(p->tensor_split[i]))
            return err_set(d, ERR_INVALID, "tensor_split[%u] = %g is not a share >= 0", i,
                           (double)p->tensor_split[i]);
    if (p->n_devices > 0 && p->split_cuda[0] != 0 && n < 2) /* as ctx->split_gpu */
        return err_set(d, ERR_INVALID, "devices = cuda:%d alone is not a split: use device = cuda:%d",
                       p->split_cuda[0] - 1, p->split_cuda[0] - 1);
    return 0;
}

int devices_init(struct engine_context *ctx, struct err_detail *d) {
    const struct engine_context_params *p = &ctx->params;
    int r = engine_split_check(p, d);
    if (r < 0) return r;
    const uint32_t n = p->n_devices ? p->n_devices : 1;
    float ratio[ENGINE_MAX_DEVICES];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += p->tensor_split[i];
    for (uint32_t i = 0; i < n; i++) ratio[i] = sum > 0 ? p->tensor_split[i] : 1.0f;

    const uint32_t n_layer = ctx->model->hp.n_layer;
    /* copies a device may own per layer: one per matrix it holds a slice of (a column
     * slice is repacked in place; a row view repacked is one copy), and a Gated DeltaNet
     * layer's gathered conv and vectors */
    size_t n_owned_max = 0;
    for (size_t k = 0; k < engine_n_layer_specs; k++)
        n_owned_max += spec_on_devices(&engine_layer_specs[k]) ||
                       engine_layer_specs[k].split == SPLIT_DN_CHAN ||
                       engine_layer_specs[k].split == SPLIT_DN_V_ROWS;
    ctx->n_dev = n;
    if (!(ctx->dev = calloc(n, sizeof *ctx->dev))) return -ENOMEM;
    int threads = MAX(p->n_threads, 1);
    for (uint32_t i = 0; i < n; i++) {
        struct device *de = &ctx->dev[i];
        if (n == 1)
            snprintf(de->name, sizeof de->name, "cpu");
        else
            snprintf(de->name, sizeof de->name, "cpu%u", i);
        /* a GPU partition's host thread only drives it */
        de->n_threads = ctx->split_gpu ? 1 : MAX(1, threads / (int)n + ((int)i < threads % (int)n));
        de->layer = calloc(n_layer, sizeof *de->layer);
        de->owned = calloc(n_owned_max * (size_t)n_layer + 1, sizeof *de->owned);
        if (!de->layer || !de->owned) return -ENOMEM;
        if ((r = kern_pool_new(de->n_threads, &de->pool)) < 0)
            return err_set(d, r, "cannot start %d threads for %s", de->n_threads, de->name);
    }
    if (n > 1 && (r = kern_pool_new((int)n, &ctx->dev_drive)) < 0)
        return err_set(d, r, "cannot start the threads that drive %u devices", n);
    ctx->pool = ctx->dev[0].pool;
    if (ctx->split_gpu && (r = gpu_parts_open(ctx, d)) < 0) return r;
    if ((r = plan_layers(ctx, ratio, d)) < 0 || (r = placement_check(ctx, d)) < 0 ||
        (r = devices_repack(ctx, d)) < 0)
        return r;
    for (uint32_t i = 0; i < n; i++) {
        struct device *de = &ctx->dev[i];
        if ((r = device_scratch(ctx, de, d)) < 0) return r;
        /* its executor (engine/exec.h); a GPU partition's is set by gpu_parts_load() */
        de->cpu = (struct exec_cpu){
            .e = {.ops = &exec_cpu_ops, .ctx = ctx, .name = de->name, .layer = de->layer, .q = de->q,
                  .k = de->k, .v = de->v, .att = de->att, .hb = de->hb, .hb2 = de->hb2, .out = de->part,
                  .logits = de->logits, .output = &de->output, .impl = de, .qg = de->qg,
                  .gate = de->gate, .dn_qkv = de->dn_qkv, .dn_z = de->dn_z, .dn_g = de->dn_g,
                  .dn_beta = de->dn_beta, .dn_o = de->dn_o},
            .pool = de->pool,
            .mm_scratch = de->mm_scratch,
            .attn_scratch = de->attn_scratch,
            .attn_scratch_floats = de->attn_scratch_floats,
            .dn_scratch = de->dn_scratch,
            .dn_scratch_bytes = de->dn_scratch_bytes,
        };
        de->ex = &de->cpu.e;
    }
    return 0;
}

void devices_done(struct engine_context *ctx) {
    gpu_parts_close(ctx);
    for (uint32_t i = 0; ctx->dev && i < ctx->n_dev; i++) {
        struct device *de = &ctx->dev[i];
        kern_pool_free(de->pool);
        for (size_t j = 0; j < de->n_owned; j++) free(de->owned[j]);
        free(de->owned);
        free(de->layer);
        void *bufs[] = {de->q,      de->k,      de->v,       de->att,     de->hb,
                        de->hb2,    de->part,   de->logits,  de->attn_scratch, de->qg,
                        de->gate,   de->dn_qkv, de->dn_z,    de->dn_g,    de->dn_beta,
                        de->dn_o,   de->dn_scratch, de->moe_sel, de->moe_wt, de->moe_list,
                        de->moe_count, de->moe_x, de->moe_y, de->moe_h, de->moe_h2,
                        de->moe_acc, de->moe_few, de->dn_conv_state};
        for (size_t j = 0; j < ARRAY_SIZE(bufs); j++) free(bufs[j]);
        free(de->mm_scratch);
    }
    kern_pool_free(ctx->dev_drive);
    free(ctx->dev);
    ctx->dev = NULL;
    ctx->pool = NULL;
}

struct drive {
    struct engine_context *ctx;
    device_fn fn;
    void *arg;
};

/* thread d of the drive pool runs device d's share (on that device's own pool) */
static void drive_task(void *arg, int ith, int nth) {
    (void)nth;
    struct drive *dr = arg;
    dr->fn(dr->ctx, &dr->ctx->dev[ith], dr->arg);
}

void devices_run(struct engine_context *ctx, device_fn fn, void *arg) {
    if (ctx->n_dev == 1) {
        fn(ctx, &ctx->dev[0], arg);
        return;
    }
    struct drive dr = {.ctx = ctx, .fn = fn, .arg = arg};
    kern_pool_run(ctx->dev_drive, drive_task, &dr);
}

void devices_sum(struct engine_context *ctx, float *y, int64_t n) {
    memcpy(y, ctx->dev[0].part, (size_t)n * sizeof *y);
    for (uint32_t i = 1; i < ctx->n_dev; i++) kern_add(y, ctx->dev[i].part, n);
}

/* the host devices are in use unless a GPU runs every layer (its routed experts too) */
static uint32_t n_host_listed(const struct engine_context *ctx) {
    return ctx->gpu && ctx->n_layer_host == 0 && gpu_host_expert_bytes(ctx) == 0 ? 0 : ctx->n_dev;
}

uint32_t engine_context_n_devices(const struct engine_context *ctx) {
    return (ctx->gpu ? 1 : 0) + n_host_listed(ctx);
}

int engine_context_device_info(const struct engine_context *ctx, uint32_t i,
                               struct engine_device_info *ret) {
    if (ctx->gpu && i == 0) {
        gpu_device_info(ctx, ret);
        return 0;
    }
    i -= ctx->gpu ? 1 : 0;
    if (i >= n_host_listed(ctx)) return ERR_INVALID;
    const struct device *de = &ctx->dev[i];
    if (de->gpu) {
        gpu_part_info(de, ret);
        return 0;
    }
    *ret = (struct engine_device_info){
        .kind = "cpu",
        .n_threads = de->n_threads,
        /* (the GPU layers' routed experts where the host runs them: engine/gpu.h) */
        .weight_bytes = de->weight_bytes + (i == 0 ? gpu_host_expert_bytes(ctx) : 0),
        .copied_bytes = de->copied_bytes,
        .kv_bytes = de->kv_bytes,
        .scratch_bytes = de->scratch_bytes,
    };
    snprintf(ret->name, sizeof ret->name, "%s", de->name);
    return 0;
}
