/* x86 level "avx2": AVX2 + FMA + F16C (Haswell and later, Zen). */
#include "kernels/cpu/x86.h"

#if defined(__x86_64__)
/* The headers come first, outside the region: its target applies to every function
 * declared inside it. clang has no `#pragma GCC target`; its attribute pragma is the same
 * thing. */
#include <immintrin.h>
#include <string.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define X86_SFX(name) name##_avx2
#define X86_VNNI 0
#define X86_W512 0
#include "kernels/cpu/x86-kernels.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
