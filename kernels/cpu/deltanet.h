/* The x86 levels' Gated DeltaNet bodies (kernels/cpu/x86-deltanet.h, compiled once per
 * level by deltanet-avx2.c and deltanet-avx512.c), picked by kernels/deltanet.c when
 * kern_cpu()->level is that level or above. Defined on x86-64 only. */
#pragma once

#include "kernels/ref/deltanet.h"

extern const struct kern_dn_impl kern_dn_impl_avx2;   /* AVX2 + FMA */
extern const struct kern_dn_impl kern_dn_impl_avx512; /* AVX-512 F (+ the avx2 level's) */
