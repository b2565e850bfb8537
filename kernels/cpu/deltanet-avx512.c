/* Gated DeltaNet bodies of the x86 level "avx512": AVX-512 F/BW/VL on top of the avx2
 * level's features (kernels/cpu/x86-deltanet.h). */
#include "kernels/cpu/deltanet.h"

#if defined(__x86_64__)
/* The headers come first, outside the region: its target applies to every function
 * declared inside it (clang's attribute pragma is GCC's target pragma). */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"))),   \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#endif
#define DN_SFX(name) name##_avx512
#define DN_LEVEL "avx512"
#define DN_W512 1
#include "kernels/cpu/x86-deltanet.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
