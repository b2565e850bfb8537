/* Fast Walsh–Hadamard transform (see kernels/ops.h), one clone per vector width.
 *
 * The same butterflies as the reference (kernels/ref/hadamard.c) in the same order, so
 * the results are bit for bit the reference's: every stage adds or subtracts exactly the
 * same pairs; only the width of the vector that does it changes. The first stages (h < 8)
 * pair neighbours inside one vector; the compiler still vectorizes the wider stages, which
 * are most of the work for n_rot >= 64. */
#include "kernels/ops.h"

#include <math.h>

KERN_CLONES
void kern_hadamard(float *x, int64_t n, int64_t n_rot) {
    const float scale = 1.0f / sqrtf((float)n_rot);
    for (int64_t b = 0; b < n; b += n_rot) {
        float *restrict y = x + b;
        for (int64_t h = 1; h < n_rot; h *= 2)
            for (int64_t i = 0; i < n_rot; i += 2 * h)
                for (int64_t j = 0; j < h; j++) {
                    float u = y[i + j], v = y[i + j + h];
                    y[i + j] = u + v;
                    y[i + j + h] = u - v;
                }
        for (int64_t i = 0; i < n_rot; i++) y[i] *= scale;
    }
}
