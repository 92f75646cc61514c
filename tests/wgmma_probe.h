/* fa2_wgmma_probe: one wgmma GEMM against a double-precision product (tests only). */
#ifndef FA2_WGMMA_PROBE_H
#define FA2_WGMMA_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

/* mode bits: 1 = B MN-major, 2 = A from registers, 4 = swap B's LBO/SBO (diagnosis).
 * Writes the relative L2 error of C; returns 0, or 1 on a CUDA error. Needs sm_90. */
int fa2_wgmma_probe(int mode, double *max_rel_err);

#ifdef __cplusplus
}
#endif

#endif
