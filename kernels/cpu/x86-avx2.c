/* x86 level "avx2": AVX2 + FMA + F16C (Haswell and later, Zen). */
#include "kernels/cpu/x86.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define X86_SFX(name) name##_avx2
#define X86_VNNI 0
#define X86_W512 0
#include "kernels/cpu/x86-kernels.h"
#pragma GCC pop_options
#endif
