/* Devices, contexts, buffers and measurements (kernels/cuda/cuda.h). */
#include "kernels/cuda/common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cudaGetDeviceCount() fails with cudaErrorNoDevice / cudaErrorInsufficientDriver (and,
 * with the static runtime, cudaErrorInitializationError when libcuda.so is absent): all
 * mean "no device here". The error is sticky for nothing: we clear it. */
extern "C" int kern_cuda_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int kern_cuda_device_get_info(int dev, struct kern_cuda_device_info *ret) {
    if (dev < 0 || dev >= kern_cuda_device_count()) return -ENODEV;
    cudaDeviceProp p;
    int r = cuda_err(cudaGetDeviceProperties(&p, dev));
    if (r < 0) return r;
    struct kern_cuda_device_info info;
    memset(&info, 0, sizeof info);
    memcpy(info.name, p.name, sizeof info.name - 1); /* NUL kept by the memset */
    info.cc_major = p.major;
    info.cc_minor = p.minor;
    info.n_sm = p.multiProcessorCount;
    info.total_bytes = p.totalGlobalMem;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(dev) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        info.free_bytes = free_b;
    *ret = info;
    return 0;
}

extern "C" int kern_cuda_ctx_new(int dev, struct kern_cuda_ctx **ret) {
    if (dev < 0 || dev >= kern_cuda_device_count()) return -ENODEV;
    struct kern_cuda_ctx *ctx = (struct kern_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) return -ENOMEM;
    ctx->dev = dev;
    int r = cuda_err(cudaSetDevice(dev));
    if (r == 0) r = cuda_err(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    if (r == 0) r = cuda_err(cudaEventCreate(&ctx->t0));
    if (r == 0) r = cuda_err(cudaEventCreate(&ctx->t1));
    if (r < 0) {
        kern_cuda_ctx_free(ctx);
        return r;
    }
    *ret = ctx;
    return 0;
}

extern "C" void kern_cuda_ctx_free(struct kern_cuda_ctx *ctx) {
    if (!ctx) return;
    cudaSetDevice(ctx->dev);
    if (ctx->t1) cudaEventDestroy(ctx->t1);
    if (ctx->t0) cudaEventDestroy(ctx->t0);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    free(ctx);
}

extern "C" int kern_cuda_ctx_device(const struct kern_cuda_ctx *ctx) {
    return ctx->dev;
}

extern "C" int kern_cuda_ctx_sync(struct kern_cuda_ctx *ctx) {
    int r = cuda_use(ctx);
    return r < 0 ? r : cuda_err(cudaStreamSynchronize(ctx->stream));
}

extern "C" size_t kern_cuda_ctx_reserved_bytes(const struct kern_cuda_ctx *ctx) {
    return ctx->reserved;
}

struct kern_cuda_buf {
    struct kern_cuda_ctx *ctx;
    void *ptr;
    size_t bytes;
};

extern "C" int kern_cuda_buf_new(struct kern_cuda_ctx *ctx, size_t bytes, struct kern_cuda_buf **ret) {
    int r = cuda_use(ctx);
    if (r < 0) return r;
    struct kern_cuda_buf *b = (struct kern_cuda_buf *)calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    b->ctx = ctx;
    b->bytes = bytes;
    r = cuda_err(cudaMalloc(&b->ptr, bytes ? bytes : 1));
    if (r == 0) r = cuda_err(cudaMemsetAsync(b->ptr, 0, bytes, ctx->stream));
    if (r < 0) {
        if (b->ptr) cudaFree(b->ptr);
        (void)cudaGetLastError();
        free(b);
        return r;
    }
    ctx->reserved += bytes;
    *ret = b;
    return 0;
}

extern "C" void kern_cuda_buf_free(struct kern_cuda_buf *b) {
    if (!b) return;
    cudaSetDevice(b->ctx->dev);
    /* the stream may still use it */
    cudaStreamSynchronize(b->ctx->stream);
    cudaFree(b->ptr);
    b->ctx->reserved -= b->bytes;
    free(b);
}

extern "C" void *kern_cuda_buf_ptr(const struct kern_cuda_buf *b) {
    return b->ptr;
}
extern "C" size_t kern_cuda_buf_bytes(const struct kern_cuda_buf *b) {
    return b->bytes;
}

extern "C" int kern_cuda_buf_upload(struct kern_cuda_buf *b, size_t off, const void *src, size_t n) {
    if (off > b->bytes || n > b->bytes - off) return -EINVAL;
    int r = cuda_use(b->ctx);
    if (r < 0) return r;
    r = cuda_err(cudaMemcpyAsync((char *)b->ptr + off, src, n, cudaMemcpyHostToDevice, b->ctx->stream));
    /* pageable source: wait so that the caller may reuse src at once */
    return r < 0 ? r : cuda_err(cudaStreamSynchronize(b->ctx->stream));
}

extern "C" int kern_cuda_buf_download(const struct kern_cuda_buf *b, size_t off, void *dst, size_t n) {
    if (off > b->bytes || n > b->bytes - off) return -EINVAL;
    int r = cuda_use(b->ctx);
    if (r < 0) return r;
    r = cuda_err(cudaMemcpyAsync(dst, (const char *)b->ptr + off, n, cudaMemcpyDeviceToHost, b->ctx->stream));
    return r < 0 ? r : cuda_err(cudaStreamSynchronize(b->ctx->stream));
}

extern "C" int kern_cuda_copy(struct kern_cuda_ctx *ctx, void *dst, const void *src, size_t n) {
    int r = cuda_use(ctx);
    return r < 0 ? r : cuda_err(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, ctx->stream));
}

extern "C" int kern_cuda_timer_begin(struct kern_cuda_ctx *ctx) {
    int r = cuda_use(ctx);
    return r < 0 ? r : cuda_err(cudaEventRecord(ctx->t0, ctx->stream));
}

extern "C" int kern_cuda_timer_end(struct kern_cuda_ctx *ctx, double *ret_usec) {
    int r = cuda_use(ctx);
    if (r == 0) r = cuda_err(cudaEventRecord(ctx->t1, ctx->stream));
    if (r == 0) r = cuda_err(cudaEventSynchronize(ctx->t1));
    float ms = 0;
    if (r == 0) r = cuda_err(cudaEventElapsedTime(&ms, ctx->t0, ctx->t1));
    if (r == 0) *ret_usec = (double)ms * 1000.0;
    return r;
}

extern "C" int kern_cuda_copy_bandwidth(struct kern_cuda_ctx *ctx, size_t bytes, int reps, double *ret) {
    if (bytes == 0 || reps <= 0) return -EINVAL;
    struct kern_cuda_buf *a = NULL, *b = NULL;
    int r = kern_cuda_buf_new(ctx, bytes, &a);
    if (r == 0) r = kern_cuda_buf_new(ctx, bytes, &b);
    double usec = 0;
    if (r == 0) r = kern_cuda_copy(ctx, b->ptr, a->ptr, bytes); /* warm-up */
    if (r == 0) r = kern_cuda_timer_begin(ctx);
    for (int i = 0; r == 0 && i < reps; i++)
        r = kern_cuda_copy(ctx, i % 2 ? a->ptr : b->ptr, i % 2 ? b->ptr : a->ptr, bytes);
    if (r == 0) r = kern_cuda_timer_end(ctx, &usec);
    kern_cuda_buf_free(b);
    kern_cuda_buf_free(a);
    if (r == 0) *ret = usec > 0 ? 2.0 * (double)bytes * reps / (usec * 1e-6) : 0;
    return r;
}

struct kern_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

extern "C" int kern_cuda_graph_begin(struct kern_cuda_ctx *ctx) {
    int r = cuda_use(ctx);
    return r < 0 ? r : cuda_err(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
}

extern "C" int kern_cuda_graph_end(struct kern_cuda_ctx *ctx, struct kern_cuda_graph **ret) {
    int r = cuda_use(ctx);
    if (r < 0) return r;
    struct kern_cuda_graph *g = (struct kern_cuda_graph *)calloc(1, sizeof *g);
    cudaGraph_t graph = NULL;
    r = cuda_err(cudaStreamEndCapture(ctx->stream, &graph)); /* ends the capture even on error */
    if (r == 0 && !g) r = -ENOMEM;
    if (r == 0) {
        g->graph = graph;
        r = cuda_err(cudaGraphInstantiate(&g->exec, graph, 0));
    }
    if (r < 0) {
        if (graph) cudaGraphDestroy(graph);
        free(g);
        (void)cudaGetLastError();
        return r;
    }
    *ret = g;
    return 0;
}

extern "C" int kern_cuda_graph_launch(struct kern_cuda_ctx *ctx, struct kern_cuda_graph *g) {
    int r = cuda_use(ctx);
    return r < 0 ? r : cuda_err(cudaGraphLaunch(g->exec, ctx->stream));
}

extern "C" void kern_cuda_graph_free(struct kern_cuda_graph *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}
