/* guard.c — bounded updates: what a peer keeps about members whose exchange messages it
 * refused (a non-finite value, an index out of range, a norm far above the pool's recent
 * updates), and their expulsion after repeated refusals: an expelled member is left out
 * of this peer's view (never waited for, never routed to) and its messages are dropped.
 * Not for: checking the messages themselves (demo_opt.c) or when to apply (step.c). */
#include "common/log.h"
#include "peer/peer_impl.h"

#include <stdlib.h>
#include <string.h>

static int find_bad(const peer_t *p, const uint8_t *id)
{
    for (int i = 0; i < p->nbad; i++)
        if (!memcmp(p->bad[i].id, id, MSG_ID_LEN)) return i;
    return -1;
}

int guard_refused(peer_t *p, const uint8_t *origin, int64_t step, int direct, const char *why)
{
    if (!direct || peer_is_self(p, origin)) return 0;
    int i = find_bad(p, origin);
    if (i < 0) {
        if (p->nbad == GUARD_BAD_MAX) return 0; /* beyond the table: refused, not expelled */
        i = p->nbad++;
        memset(&p->bad[i], 0, sizeof p->bad[i]);
        memcpy(p->bad[i].id, origin, MSG_ID_LEN);
        p->bad[i].last_step = -1;
    }
    /* one per step: every member that receives the same messages expels at the same step */
    if (p->bad[i].expelled || step <= p->bad[i].last_step) return 0;
    p->bad[i].last_step = step;
    if (++p->bad[i].refused < GUARD_EXPEL_AFTER) return 0;
    p->bad[i].expelled = 1;
    char h[9];
    log_warn("peer: expelled %s from stage %d's pool: %d of its updates refused (last: %s)",
             peer_idhex(origin, h), p->stage, p->bad[i].refused, why);
    if (p->ps)
        peer_store_event(p->ps, "expelled", "peer %s: %d updates refused, last: %s",
                         peer_idhex(origin, h), p->bad[i].refused, why);
    /* out of the view at once: not waited for at this step, nor routed to */
    msg_member_t *v = malloc((size_t)(p->view.n ? p->view.n : 1) * sizeof *v);
    if (v) {
        int k = guard_view(p, p->view.m, p->view.n, v);
        view_set(&p->view, v, k);
        free(v);
    }
    return 1;
}

int guard_expelled(const peer_t *p, const uint8_t *id)
{
    int i = find_bad(p, id);
    return i >= 0 && p->bad[i].expelled;
}

int guard_view(const peer_t *p, const msg_member_t *in, int n, msg_member_t *out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!guard_expelled(p, in[i].id)) out[k++] = in[i];
    return k;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int guard_norm_ok(const peer_t *p, double norm)
{
    int n = p->nnorms < GUARD_NORMS ? p->nnorms : GUARD_NORMS;
    if (!n) return 1;
    double v[GUARD_NORMS];
    memcpy(v, p->norms, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return norm <= GUARD_NORM_FACTOR * v[n < GUARD_NORMS_MED ? n - 1 : (n - 1) / 2];
}

void guard_norm_note(peer_t *p, double norm, uint32_t counted)
{
    /* an update of zero (no learning rate yet, nothing counted) says nothing of the scale */
    if (norm > 0 && counted > 0) p->norms[p->nnorms++ % GUARD_NORMS] = norm;
}
