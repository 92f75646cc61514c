/* fa2_tma_probe: one tile by TMA against the same tile by cp.async (tests
 * only). */
#ifndef FA2_TMA_PROBE_H
#define FA2_TMA_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

/* paged = 0: a 128-row tile whose last 28 rows lie past the tensor; 1: eight 16-row
 * boxes from eight pages. Writes how many bytes of the two shared-memory images differ;
 * returns 0, or 1 on a CUDA error. Needs sm_90. */
int fa2_tma_probe(int paged, long *mismatched_bytes);

#ifdef __cplusplus
}
#endif

#endif
