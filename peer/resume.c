/* resume.c — a whole swarm restarts from its peers' stores (`peer --resume`).
 *
 * A resuming peer takes the stage of its store's newest checkpoint and, while nobody
 * serves its stage, publishes the steps of its newest checkpoints of that stage in its
 * member entry (msg_member_t.ckpt). It waits until the swarm's wait_peers members are
 * in its view (or RESUME_WAIT_S), then computes the agreed step, the same on every peer
 * that sees the same table: the newest step s > 0 such that every stage that has any
 * checkpoint among the present members has one at s. A stage with none is rebuilt
 * from its neighbours once the others serve (recover.c). Then:
 *   - it holds the checkpoint of s: restores it and serves from step s;
 *   - a mate holds it: waits for that mate to serve, and downloads from it (state.c);
 *   - nobody agrees on any step: starts as a new swarm would (initial parameters).
 * Not for: choosing who rebuilds a stage (recover.c), the store itself (peer_store.c). */
#include "common/log.h"
#include "common/rng.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <string.h>


int resume_stage(peer_t *p)
{
    int s = p->po.resume ? peer_store_newest_stage(p->ps) : -1;
    if (s >= 0 && p->po.stage >= 0 && s != p->po.stage) {
        fprintf(p->log, "resume: --stage %d, but the store's newest checkpoint is of stage %d: "
                "taking stage %d\n", p->po.stage, s, s);
        peer_event(p, "resume", "decision=%s store_stage=%d asked=%d", "store_stage", s,
                   p->po.stage);
    }
    return s;
}

/* Whether member m holds a checkpoint of step s. */
static int holds(const msg_member_t *m, int64_t s)
{
    for (int c = 0; c < MSG_CKPT_MAX; c++)
        if (m->ckpt[c] == s) return 1;
    return 0;
}

/* The agreed step (see above), 0 when there is none. */
static int64_t agreed_step(const peer_t *p)
{
    int64_t best = 0;
    for (int i = 0; i < p->view.n; i++)
        for (int c = 0; c < MSG_CKPT_MAX; c++) {
            int64_t s = p->view.m[i].ckpt[c];
            if (s <= best) continue;
            int ok = 1;
            for (int st = 0; st < p->dims.S && ok; st++) {
                int any = 0, at = 0;
                for (int j = 0; j < p->view.n; j++) {
                    const msg_member_t *m = &p->view.m[j];
                    if (m->stage != st) continue;
                    any |= m->ckpt[0] > 0;
                    at |= holds(m, s);
                }
                ok = !any || at;
            }
            if (ok) best = s;
        }
    return best;
}

/* What the agreement depends on: the present members, their stages and checkpoint steps.
 * A member shows up in the view (HELLO) before it has taken its stage and published its
 * steps; the settle wait runs from the table's last change, so that it is not decided
 * without them. */
static uint64_t table_hash(const peer_t *p)
{
    uint64_t h = 0x7265;
    for (int i = 0; i < p->view.n; i++) {
        const msg_member_t *m = &p->view.m[i];
        if (m->state == MEMBER_DEAD) continue;
        uint64_t id;
        memcpy(&id, m->id, sizeof id);
        uint64_t e = rng_mix(id, (uint64_t)(uint16_t)m->stage);
        for (int c = 0; c < MSG_CKPT_MAX; c++) e = rng_mix(e, (uint64_t)m->ckpt[c]);
        h += e; /* order-free: the view's order is not the table's */
    }
    return h;
}

/* Restores its own checkpoint of step s and resumes there: 1, or 0 and why in err. */
static int restore_at(peer_t *p, int64_t s, int present, const char *why, char *err)
{
    int64_t got = -1;
    if (peer_store_restore_step(p->ps, p->held.st, p->held.dopt, s, &got, err)) return 0;
    p->po.resume = 0;
    p->resume.agreed = got;
    step_set(p, got);
    fprintf(p->log, "resumed: stage %d from this peer's checkpoint of step %" PRId64
            " (%s; %d peers seen)\n", p->stage, got, why, present);
    peer_event(p, "resumed", "source=%s ckpt_step=%" PRId64 " present=%d", "own_checkpoint", got,
               present);
    return 1;
}

void resume_init(resume_state_t *r)
{
    r->decide = timeout_make("resume.decide", RESUME_WAIT_S);
    r->settle = timeout_make("resume.settle", RESUME_SETTLE_S);
    r->agreed = 0;
    r->table = 0;
    r->tried = 0;
}

int resume_tick(peer_t *p)
{
    if (!timeout_running(&p->resume.decide)) {
        timeout_start(&p->resume.decide, p->now);
        int n = peer_store_ckpt_steps(p->ps, p->stage, p->me.entry.ckpt, MSG_CKPT_MAX);
        fprintf(p->log, "resume: stage %d, %d checkpoint(s) in %s", p->stage, n, p->po.db);
        for (int i = 0; i < n; i++) fprintf(p->log, "%s%" PRId64, i ? ", " : " at step ", p->me.entry.ckpt[i]);
        fprintf(p->log, "; waiting for the others to agree on a step\n");
        fflush(p->log);
        peer_event(p, "resume", "decision=%s ckpts=%d newest=%" PRId64, "wait", n,
                   n > 0 ? p->me.entry.ckpt[0] : -1);
        peer_push_self(p);
    }
    int present = 0;
    for (int i = 0; i < p->view.n; i++) present += p->view.m[i].state != MEMBER_DEAD;
    uint64_t table = table_hash(p);
    if (table != p->resume.table || !timeout_running(&p->resume.settle)) {
        p->resume.table = table;
        timeout_start(&p->resume.settle, p->now);
    }
    if (!timeout_fired(&p->resume.decide, p->now) &&
        (!timeout_fired(&p->resume.settle, p->now) || present < p->join.wait_peers))
        return 0;
    int64_t s = agreed_step(p);
    /* Starting afresh throws away every checkpoint of a member not here yet: it is decided
     * only after resume.decide. On the settle wait alone, two restarted peers holding no
     * checkpoint started the swarm from the initial parameters 0.8 s before the one
     * holding the only checkpoints (step 3) came back (sim restart 4x2 seed 38406200). */
    if (s <= 0 && !timeout_fired(&p->resume.decide, p->now)) return 0;
    /* decided: from here on as any joiner. Its entry keeps the checkpoint steps, so that
     * a peer deciding a moment later sees the same table. */
    p->po.resume = 0;
    p->resume.agreed = s;
    if (s <= 0) {
        fprintf(p->log, "resume: no step every stage has a checkpoint of (%d peers seen): "
                "starting from the initial parameters\n", present);
        peer_event(p, "resume", "decision=%s present=%d", "initial", present);
        return 2;
    }
    char err[STATUS_ERR_LEN] = "";
    if (restore_at(p, s, present, "the newest step every stage has a checkpoint of", err))
        return 1;
    fprintf(p->log, "resume: agreed on step %" PRId64 ", which this peer has no checkpoint of "
            "(%s): its stage's state comes from a mate or the neighbours\n", s, err);
    peer_event(p, "resume", "decision=%s agreed=%" PRId64 " error=%s", "elsewhere", s, err);
    /* The swarm resumes at s: so does this stage. A mate holding s serves it within a
     * moment (it decides on the same table); the wait for one (2 x timeout, state.c)
     * starts now; after it the stage is one nobody holds in a started swarm (its own
     * checkpoint, else CheckFree). Not the initial parameters at step 0, which is what a
     * swarm that has not started would take: its mates would download that. */
    step_set(p, s);
    peer_push_self(p);
    return 3;
}

int resume_with_mates(peer_t *p, int64_t s)
{
    if (!p->po.resume || s <= 0 || s == p->resume.tried) return 0;
    p->resume.tried = s; /* one read of the store per step the mates are at */
    int present = 0;
    for (int i = 0; i < p->view.n; i++) present += p->view.m[i].state != MEMBER_DEAD;
    char err[STATUS_ERR_LEN] = "";
    return restore_at(p, s, present, "the step its mates resumed at", err);
}

void resume_downloaded(peer_t *p)
{
    if (!p->po.resume) return;
    /* it took its state from a mate instead of deciding: it resumed at that step; its
     * store's stage no longer decides anything (a later move goes where it is sent) */
    p->po.resume = 0;
    p->resume.agreed = p->step;
}

int resume_begun(const peer_t *p)
{
    if (p->resume.agreed <= 0) return peer_swarm_started(p);
    return p->join.go || p->stats.served > 0 || p->step > p->resume.agreed;
}
