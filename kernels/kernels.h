/* kernels — numeric types and the compute kernels the engine calls.
 *
 * Types: enum kern_type uses ggml's type ids (they are what GGUF files store), and one
 * traits row per type (kern_type_traits): name, values per block, bytes per block, and
 * the reference conversions to and from f32. Block layouts equal ggml's byte for byte
 * (kernels/types.h, static_assert'ed).
 *
 * Tiers (STYLE.md "Kernels"): ref/ is the plain-C executable spec of every op; cpu/ holds
 * SIMD variants chosen once at init from CPU features (kern_init()); cuda/ is optional.
 * Every variant is tested against ref with a named tolerance per type.
 *
 * Conventions: destination first, then sources, then sizes (int64_t), strides in bytes.
 * Nothing here allocates on a hot path; callers provide scratch sized by the *_bytes()
 * helpers. Kernels are thread-safe; a kern_pool runs one task at a time. */
#pragma once

#include "base/base.h"
#include "kernels/types.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/deltanet.h"
