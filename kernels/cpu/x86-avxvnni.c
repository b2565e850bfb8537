/* x86 level "avxvnni": the avx2 level plus AVX-VNNI (VEX-encoded VPDPBUSD / VPDPWSSD on
 * 256-bit registers: Alder Lake and later Intel cores without AVX-512, Zen 5): the int8
 * dots of the 256-bit bodies in one instruction where PMADDUBSW + PMADDWD + PADDD took
 * three, and no 16-bit pair sums to saturate (U mode for q8_0, iq4_nl and iq4_xs). */
#include "kernels/cpu/x86.h"

#if defined(__x86_64__)
/* The headers come first, outside the region: its target applies to every function
 * declared inside it. clang has no `#pragma GCC target`; its attribute pragma is the same
 * thing. */
#include <immintrin.h>
#include <string.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif
#define X86_SFX(name) name##_avxvnni
#define X86_VNNI 1
#define X86_W512 0
#include "kernels/cpu/x86-kernels.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
