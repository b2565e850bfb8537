/* Reference (plain C) fast Walsh–Hadamard transform: the executable spec of
 * kern_hadamard() (kernels/hadamard.c), see kernels/ops.h. */
#include "kernels/ops.h"

#include <math.h>

void kern_ref_hadamard(float *x, int64_t n, int64_t n_rot) {
    const float scale = 1.0f / sqrtf((float)n_rot);
    for (int64_t b = 0; b < n; b += n_rot) {
        float *y = x + b;
        /* log2(n_rot) butterfly stages in natural (Sylvester) order: after the stage of
         * width h, y holds H_2h ⊗ I applied to each 2h-chunk */
        for (int64_t h = 1; h < n_rot; h *= 2)
            for (int64_t i = 0; i < n_rot; i += 2 * h)
                for (int64_t j = i; j < i + h; j++) {
                    float u = y[j], v = y[j + h];
                    y[j] = u + v;
                    y[j + h] = u - v;
                }
        for (int64_t i = 0; i < n_rot; i++) y[i] *= scale;
    }
}
