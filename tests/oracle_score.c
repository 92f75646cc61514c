/* The score variants for the oracles. See oracle_score.h. */
#include "oracle_score.h"

#include <math.h>

double oracle_score(const fa2_problem_t *p, const oracle_score_t *m, int64_t h, int64_t i,
                    int64_t j, double x)
{
    if (!m)
        return x;
    double s = m->softcap > 0.0 ? m->softcap * tanh(x / m->softcap) : x;
    if (m->alibi_slopes) {
        const int64_t dist = i + p->seqlen_k - p->seqlen_q - j;
        s -= (double)m->alibi_slopes[h] * (double)(dist < 0 ? -dist : dist);
    }
    return s;
}

double oracle_score_slope(const oracle_score_t *m, double x)
{
    if (!m || m->softcap <= 0.0)
        return 1.0;
    const double t = tanh(x / m->softcap);
    return 1.0 - t * t;
}

double oracle_sink(const oracle_score_t *m, int64_t h)
{
    return m && m->sinks ? (double)m->sinks[h] : -INFINITY;
}
