/* x86 SIMD levels of the matmul dispatch table (kernels/ref/matmul.h). Each fill function
 * overwrites the entries its level has kernels for; call it only when kern_cpu() reports
 * the features the level needs (avx2: AVX2+FMA+F16C; avxvnni: + AVX-VNNI; avx512: avx2's
 * + AVX512F/BW/VL/VNNI). */
#pragma once

#include "kernels/ref/matmul.h"

void kern_impl_fill_avx2(struct kern_impl *impl);
/* avxvnni: the avx2 level + AVX-VNNI (its 256-bit int8 dots in VPDPBUSD) */
void kern_impl_fill_avxvnni(struct kern_impl *impl);
void kern_impl_fill_avx512(struct kern_impl *impl);
/* avx512bf16: + AVX512_BF16; overwrites the avx512 level's bf16 tile16 only */
void kern_impl_fill_avx512bf16(struct kern_impl *impl);
