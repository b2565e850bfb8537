/* exec-cpu — private to the engine: the CPU's executor (engine/exec.h), a device's thread
 * pool and scratch beside the generic part. */
#pragma once

#include "engine/exec.h"

struct kern_pool;

/* A mixture of experts' step of at most this many tokens (decode) runs every selected
 * expert in one pass of the threads, each over its rows of all of them, rather than one
 * product of the grouped tokens per expert (exec-cpu.c cpu_moe_experts). */
#define MOE_FEW_TOKENS 4

struct exec_cpu {
    struct exec e; /* first: the ops cast back to this */
    struct kern_pool *pool;
    void *mm_scratch;
    float *attn_scratch; /* (threads, attn_scratch_floats) */
    size_t attn_scratch_floats;
    void *dn_scratch;        /* (threads, dn_scratch_bytes) kern_dn_delta's */
    size_t dn_scratch_bytes;
};
