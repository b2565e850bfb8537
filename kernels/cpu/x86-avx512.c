/* x86 level "avx512": AVX-512 F/BW/VL + VNNI on top of AVX2/FMA/F16C (Ice Lake, Zen 4):
 * VPDPBUSD for the int8 dots, 512-bit registers for the float tiles. */
#include "kernels/cpu/x86.h"

#if defined(__x86_64__)
/* The headers come first, outside the region: its target applies to every function
 * declared inside it. clang has no `#pragma GCC target`; its attribute pragma is the same
 * thing. */
#include <immintrin.h>
#include <string.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif
#define X86_SFX(name) name##_avx512
#define X86_VNNI 1
#define X86_W512 1
#include "kernels/cpu/x86-kernels.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
