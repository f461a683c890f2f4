/* guard.c — the update guard's rules (guard.h): refusals, expulsion, the norm bound. */
#include "peer/guard.h"

#include <stdlib.h>
#include <string.h>

void guard_init(guard_t *g)
{
    memset(g, 0, sizeof *g);
}

void guard_forget_norms(guard_t *g)
{
    memset(g->norms, 0, sizeof g->norms);
    g->nnorms = 0;
}

static int find_bad(const guard_t *g, const uint8_t *id)
{
    for (int i = 0; i < g->nbad; i++)
        if (!memcmp(g->bad[i].id, id, MSG_ID_LEN)) return i;
    return -1;
}

int guard_refused(guard_t *g, const uint8_t *origin, int64_t step, int direct)
{
    if (!direct) return 0;
    int i = find_bad(g, origin);
    if (i < 0) {
        if (g->nbad == GUARD_BAD_MAX) return 0; /* beyond the table: refused, not expelled */
        i = g->nbad++;
        memset(&g->bad[i], 0, sizeof g->bad[i]);
        memcpy(g->bad[i].id, origin, MSG_ID_LEN);
        g->bad[i].last_step = -1;
    }
    /* one per step: every member that receives the same messages expels at the same step */
    if (g->bad[i].expelled || step <= g->bad[i].last_step) return 0;
    g->bad[i].last_step = step;
    if (++g->bad[i].refused < GUARD_EXPEL_AFTER) return 0;
    g->bad[i].expelled = 1;
    return 1;
}

int guard_refusals(const guard_t *g, const uint8_t *origin)
{
    int i = find_bad(g, origin);
    return i >= 0 ? g->bad[i].refused : 0;
}

int guard_expelled(const guard_t *g, const uint8_t *id)
{
    int i = find_bad(g, id);
    return i >= 0 && g->bad[i].expelled;
}

int guard_any(const guard_t *g)
{
    return g->nbad > 0;
}

int guard_view(const guard_t *g, const msg_member_t *in, int n, msg_member_t *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!guard_expelled(g, in[i].id)) out[k++] = in[i];
    return k;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int guard_norm_ok(const guard_t *g, double norm)
{
    int n = g->nnorms < GUARD_NORMS ? g->nnorms : GUARD_NORMS;
    if (!n) return 1;
    double v[GUARD_NORMS];
    memcpy(v, g->norms, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return norm <= GUARD_NORM_FACTOR * v[n < GUARD_NORMS_MED ? n - 1 : (n - 1) / 2];
}

void guard_norm_note(guard_t *g, double norm, uint32_t counted)
{
    if (norm > 0 && counted > 0) g->norms[g->nnorms++ % GUARD_NORMS] = norm;
}
