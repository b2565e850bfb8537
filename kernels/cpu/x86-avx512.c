/* x86 level "avx512": AVX-512 F/BW/VL + VNNI on top of AVX2/FMA/F16C (Ice Lake, Zen 4):
 * VPDPBUSD for the int8 dots, 512-bit registers for the float tiles. */
#include "kernels/cpu/x86.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define X86_SFX(name) name##_avx512
#define X86_VNNI 1
#define X86_W512 1
#include "kernels/cpu/x86-kernels.h"
#pragma GCC pop_options
#endif
