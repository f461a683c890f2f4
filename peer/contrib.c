/* contrib.c — a member's side of its pool's step: its state and timers (contrib.h). */
#include "peer/contrib.h"

#include "common/status.h"
#include "swarm/pool.h"

#include <stdlib.h>
#include <string.h>

void contrib_init(contrib_t *c, double peer_timeout_s)
{
    memset(c, 0, sizeof *c);
    c->redo_step = -1;
    c->ahead_step = -1;
    c->progress = timeout_make("step.progress", CONTRIB_PROGRESS_S);
    c->stall = timeout_make("step.stall", CONTRIB_STALL_S);
    c->exch_req = timeout_make("step.exch_req", CONTRIB_ASK_S);
    c->gone_ask = timeout_make("step.gone_ask", CONTRIB_ASK_S);
    c->relay = timeout_make("step.relay", CONTRIB_RELAY_S);
    c->unknown = timeout_make("step.unknown", 2 * peer_timeout_s);
    c->deadline = timeout_make("step.deadline", CONTRIB_DEADLINE_S);
    c->suspect = timeout_make("step.redo_suspect", CONTRIB_SUSPECT_S);
    c->redo_ask = timeout_make("step.redo_ask", CONTRIB_REDO_S);
}

int contrib_alloc(contrib_t *c, int M)
{
    c->nb = ((size_t)M + 7) / 8;
    c->ubuf = calloc(c->nb, 1);
    c->redo_for = calloc(c->nb, 1);
    c->redo_at = calloc((size_t)M, sizeof *c->redo_at);
    c->sent_bits = calloc(c->nb, 1);
    c->resent_bits = calloc(c->nb, 1);
    return c->ubuf && c->redo_for && c->redo_at && c->sent_bits && c->resent_bits ? 0 : STATUS_ENOMEM;
}

void contrib_free(contrib_t *c)
{
    free(c->ubuf);
    free(c->redo_for);
    free(c->redo_at);
    c->redo_at = NULL;
    free(c->sent_bits);
    free(c->resent_bits);
    free(c->grad_save);
    c->ubuf = c->redo_for = c->sent_bits = c->resent_bits = NULL;
    c->grad_save = NULL;
    c->redo_step = -1;
    c->loss_sum = 0;
    c->loss_n = 0;
}

void contrib_reset_step(contrib_t *c)
{
    c->loss_sum = 0, c->loss_n = 0;
    c->exch_sent = 0;
    c->exch_early = 0;
    c->nearly_to = 0;
    if (c->sent_bits) memset(c->sent_bits, 0, c->nb);
    if (c->resent_bits) memset(c->resent_bits, 0, c->nb);
    c->resent_at = 0;
    timeout_stop(&c->relay);
    timeout_stop(&c->unknown);
    timeout_stop(&c->deadline);
    timeout_stop(&c->suspect);
    c->gone_asked = 0;
    c->named_asked = 0;
    c->ngone_owners = 0;
    c->first_at = c->share_at = c->complete_at = 0;
}

void contrib_gone_owner(contrib_t *c, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < c->ngone_owners; i++)
        if (!memcmp(c->gone_owners[i], id, MSG_ID_LEN)) return;
    if (c->ngone_owners < CONTRIB_GONE_MAX)
        memcpy(c->gone_owners[c->ngone_owners++], id, MSG_ID_LEN);
}

void contrib_note_first(contrib_t *c, double now)
{
    if (!(c->first_at > 0)) c->first_at = now;
}

void contrib_begin_serving(contrib_t *c, double now, uint64_t my_hash)
{
    c->my_hash = my_hash;
    c->step_t0 = now;
    c->mended_step = -1;
    timeout_start(&c->stall, now);
}

void contrib_waits(contrib_t *c, double now, int restart)
{
    void (*go)(timeout_t *, double) = restart ? timeout_start : timeout_ensure;
    go(&c->relay, now);
    go(&c->unknown, now);
    go(&c->deadline, now);
}

void contrib_note_loss(contrib_t *c, double loss)
{
    c->loss_sum += loss;
    c->loss_n++;
}

float *contrib_grad_save(contrib_t *c, size_t n)
{
    if (!c->grad_save) c->grad_save = malloc(n * sizeof(float));
    return c->grad_save;
}

void contrib_redo_ask(contrib_t *c, int64_t step, const uint8_t *bits, int M, double now,
                      int earliest)
{
    if (earliest && c->redo_step >= 0 && step != c->redo_step) {
        int pending = 0;
        for (size_t i = 0; i < c->nb && !pending; i++) pending = c->redo_for[i] != 0;
        if (step > c->redo_step && pending) return; /* the earlier step's re-runs first */
        c->redo_step = step - 1; /* replaced below */
    }
    if (step > c->redo_step) {
        c->redo_step = step;
        memset(c->redo_for, 0, c->nb);
        memset(c->redo_at, 0, (size_t)M * sizeof *c->redo_at);
    }
    if (step < c->redo_step) return;
    for (int i = 0; i < M; i++)
        if (pool_bit(bits, i) && !(c->redo_at[i] > 0 && now - c->redo_at[i] < 0.5 * CONTRIB_REDO_S))
            pool_set_bit(c->redo_for, i);
}

void contrib_redo_started(contrib_t *c, int i, double now)
{
    c->redo_for[i >> 3] &= (uint8_t) ~(1u << (i & 7));
    c->redo_at[i] = now;
}
