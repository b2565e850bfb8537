/* Gated DeltaNet bodies of the x86 level "avx2": AVX2 + FMA (+ F16C, as the avx2 level of
 * kernels/matmul.c requires) (kernels/cpu/x86-deltanet.h). */
#include "kernels/cpu/deltanet.h"

#if defined(__x86_64__)
/* The headers come first, outside the region: its target applies to every function
 * declared inside it (clang's attribute pragma is GCC's target pragma). */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define DN_SFX(name) name##_avx2
#define DN_LEVEL "avx2"
#define DN_W512 0
#include "kernels/cpu/x86-deltanet.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
