/* follow.c — the following part's rules (follow.h). */
#include "peer/follow.h"

#include <math.h>
#include <string.h>

void follow_init(follow_t *f, double gossip_s)
{
    memset(f, 0, sizeof *f);
    f->gossip_s = gossip_s;
    f->gather = timeout_make("follow.gather", 1.0);
    f->at_step = -1;
    f->heard = f->late_from = f->late_at = -1;
}

void follow_begin(follow_t *f, double now)
{
    f->followed = 0;
    f->pace_known = f->move_pace > 0 && f->pace > 0;
    f->pace_n = f->pace_known ? 1 : 0;
    if (f->pace_known) f->pace_s[0] = f->pace;
    f->move_pace = 0;
    f->first_named_at = f->named_at = 0;
    f->name_due = 0;
    f->t0 = f->watch_t0, f->head0 = f->watch_head0; /* the pace timed while downloading */
    f->watch_t0 = 0;
    f->at_since = now;
    f->named_logged = f->contrib_logged = 0;
    f->heard = f->late_from = f->late_at = -1;
}

void follow_heard(follow_t *f, const msg_member_t *members, const int64_t *heard, int n,
                  int stage, const uint8_t self[MSG_ID_LEN])
{
    int64_t v = FOLLOW_HEARD_ALL;
    int all = 1;
    f->late_from = f->late_at = -1;
    for (int i = 0; i < n; i++) {
        const msg_member_t *m = &members[i];
        if (m->stage != stage || m->state != MEMBER_SERVING || !memcmp(m->id, self, MSG_ID_LEN))
            continue;
        if (heard && heard[2 * i] >= 0 && heard[2 * i + 1] >= heard[2 * i]) {
            /* a mate already at the step named when it heard it (what the named step was
             * counted from, the pool's head in gossip, lagged): that naming can never count */
            f->late_from = heard[2 * i];
            if (heard[2 * i + 1] > f->late_at) f->late_at = heard[2 * i + 1];
        }
        if (!heard || heard[2 * i] < 0 || (v != FOLLOW_HEARD_ALL && heard[2 * i] != v) ||
            heard[2 * i + 1] >= heard[2 * i])
            all = 0;
        else
            v = heard[2 * i];
    }
    f->heard = all ? v : -1;
}

void follow_moving(follow_t *f, int contributed)
{
    f->move_pace = contributed && f->pace > 0 ? f->pace : 0;
    f->alone_since = 0;
}

void follow_downloaded(follow_t *f)
{
    f->pace = f->move_pace; /* 0 but for a mover */
}

void follow_watch(follow_t *f, int64_t head, double now)
{
    if (!f->watch_t0) f->watch_t0 = now, f->watch_head0 = head;
}

void follow_unwatch(follow_t *f)
{
    f->watch_t0 = 0;
}

/* The median of x[0, n), n >= 1 (the mean of the middle two for even n). */
static double median(const double *x, int n)
{
    double v[FOLLOW_PACE_KEEP];
    memcpy(v, x, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void follow_pace(follow_t *f, double step_s, int follower, int at_head)
{
    if (step_s < 0) return;
    if (follower && at_head && f->followed > 0) {
        f->pace_s[f->pace_n++ % FOLLOW_PACE_KEEP] = step_s;
        f->pace = median(f->pace_s, f->pace_n < FOLLOW_PACE_KEEP ? f->pace_n : FOLLOW_PACE_KEEP);
    } else if (!follower) {
        f->pace = f->pace > 0 ? 0.8 * f->pace + 0.2 * step_s : step_s;
    }
}

/* The slowest of the paces timed (the median's samples), else the pace, else 1 s. */
static double pace_slowest(const follow_t *f)
{
    double m = f->pace;
    int n = f->pace_n < FOLLOW_PACE_KEEP ? f->pace_n : FOLLOW_PACE_KEEP;
    for (int i = 0; i < n; i++)
        if (f->pace_s[i] > m) m = f->pace_s[i];
    return m > 0 ? m : 1.0;
}

/* The pool's seconds per step as the head moved since this follower's first step, once it
 * moved FOLLOW_RATE_STEPS steps in half a second or more, or a second passed; 0: not known
 * yet. The steps it applies are no measure: it catches up in bursts, and the head it sees
 * in gossip lags and moves in jumps, a gossip period apart: 3 steps timed across one jump
 * gave 0.026 s a step where the pool took 0.1 s, and a naming 42 steps ahead (4 s). */
static double pool_sps(const follow_t *f, int64_t head, double now)
{
    int64_t d = head - f->head0;
    if ((d < FOLLOW_RATE_STEPS || now - f->t0 < FOLLOW_RATE_MIN_S) && now - f->t0 < 1.0) return 0;
    return (now - f->t0) / (double)(d > 0 ? d : 1);
}

/* The named step `from`, kept no earlier than the pool reaches gossip_s after the first
 * naming (at the pool's pace): a step it would reach sooner is named again further on,
 * with the slack. */
static int64_t keep_due(follow_t *f, int64_t step, int64_t head, int64_t from, double now)
{
    double due = f->first_named_at + f->gossip_s, sps = pool_sps(f, head, now);
    int64_t at = head > step ? head : step;
    if (sps <= 0) sps = pace_slowest(f);
    if (now + (double)(from - at) * sps >= due) return from; /* on time */
    double more = ceil((due - now + FOLLOW_SLACK_S) / sps);
    int64_t later = at + (more < 1 ? 1 : more > 1000 ? 1000 : (int64_t)more);
    if (later <= from) return from;
    f->margin = later - f->first_named_step;
    return later;
}

/* A naming's margin in steps at sps seconds a step: the sooner of FOLLOW_CONFIRM_S at the
 * pool's pace, a step at least (every mate echoes the naming while short of it, or it does
 * not count: follow_heard, and the echo comes within round trips: a mate gossips back at
 * once), or half of gossip_s + FOLLOW_SLACK_S, 2 steps at least (a naming only moves on,
 * to gossip_s: that one errs short). */
static int64_t margin_steps(const follow_t *f, double sps)
{
    double echoed = ceil(FOLLOW_CONFIRM_S / sps),
           gossip = ceil((f->gossip_s + FOLLOW_SLACK_S) / (2 * sps)), m;
    if (echoed < 1) echoed = 1;
    if (gossip < 2) gossip = 2;
    m = echoed < gossip ? echoed : gossip;
    return m > 1000 ? 1000 : (int64_t)m;
}

/* The named step `from`, which a mate echoed from a step at or past it (f->late_at, what
 * follow_heard saw), named again a margin past the furthest such mate: at once, not
 * 2 x FOLLOW_CONFIRM_S later by keep_due. The head in gossip lags the pool by a gossip
 * period and more under load: a follower at step 87 named 91 from a head of 87 while its
 * mate was at 91 already; keep_due then named 116 (gossip_s at the pace measured, which
 * the pool's next steps were slower than): it contributed 5.6 s after its launch, and
 * stage 0 had routed microbatches of 91-93 to it meanwhile (serve.c gives them back). Only
 * while gossip_s since the first naming has not passed: from then on a naming stands. */
static int64_t name_past_late(follow_t *f, int64_t step, int64_t head, int64_t from, double now)
{
    if (f->late_from != from || now >= f->first_named_at + f->gossip_s) return from;
    double sps = pool_sps(f, head, now);
    if (sps <= 0) sps = pace_slowest(f);
    int64_t at = f->late_at > head ? f->late_at : head, m = margin_steps(f, sps);
    if (at < step) at = step;
    int64_t want = at + (m < 2 ? 2 : m);
    if (want <= from) return from;
    f->margin = want - f->first_named_step;
    return want;
}

/* The named step reached before any mate's echo of its naming, or one saying it was late:
 * the echo takes longer than the naming allowed (a thin link's round trip, a head in
 * gossip that lagged the pool by a tick and a link's delay), so it is named again at once,
 * past its step by FOLLOW_CONFIRM_S and the time waited for the echo so far, not by
 * keep_due's gossip_s. Behind 100 Mbit/s + 50 ms, a stage-0 joiner named step 50 from a
 * head of 47 with its mate at 49, reached 50 before the (late) echo came, and keep_due
 * named 78: it contributed 6.3-7.6 s after launch in 2 runs of 8 (bound 5 s). */
static int64_t name_unheard(follow_t *f, int64_t step, int64_t head, double now)
{
    double sps = pool_sps(f, head, now), waited = now - f->named_at;
    if (sps <= 0) sps = pace_slowest(f);
    double m = ceil((FOLLOW_CONFIRM_S + waited) / sps);
    int64_t want = step + (m < 2 ? 2 : m > 1000 ? 1000 : (int64_t)m);
    f->margin = want - f->first_named_step;
    return want;
}

static int64_t name(follow_t *f, int64_t step, int64_t serving_from, int64_t head, double now,
                    int *named);

int64_t follow_name(follow_t *f, int64_t step, int64_t serving_from, int64_t head, double now,
                    int *named)
{
    int64_t v = name(f, step, serving_from, head, now, named);
    if (v != serving_from) f->named_at = now;
    return v;
}

static int64_t name(follow_t *f, int64_t step, int64_t serving_from, int64_t head, double now,
                    int *named)
{
    *named = 0;
    if (!f->t0) f->t0 = now, f->head0 = head > step ? head : step;
    int heard = f->heard == serving_from || f->heard == FOLLOW_HEARD_ALL;
    if (serving_from > step) {
        ++f->followed;
        if (f->first_named_at) {
            if (heard) return serving_from;
            int64_t again = name_past_late(f, step, head, serving_from, now);
            if (again != serving_from || now < f->first_named_at + 2 * FOLLOW_CONFIRM_S)
                return again;
            return keep_due(f, step, head, serving_from, now);
        }
        double sps = pool_sps(f, head, now);
        if (f->followed < 2 || sps <= 0) return serving_from;
        /* counted from the pool's head, which a follower catching up may trail: from its
         * own step, the pool reached the step named before every mate echoed it, and mates
         * that had heard it waited for its message until the next naming reached them
         * (name_past_late names again once a mate's echo says so) */
        int64_t want = (head > step ? head : step) + margin_steps(f, sps);
        if (want >= serving_from) return serving_from;
        f->margin = want - step;
        f->named_sps = sps;
        f->first_named_at = now;
        f->first_named_step = step;
        *named = 1;
        return want;
    }
    if (serving_from == step && f->followed) {
        /* about to contribute, but its mates may not all have heard a naming yet: a mate
         * that applies without this member's message while it applies with it would hold
         * other parameters (the step taken without a naming, its placeholder reached,
         * counts as named now) */
        if (!f->first_named_at) f->first_named_at = now, f->first_named_step = step;
        if (!heard && now < f->first_named_at + f->gossip_s) {
            int64_t again = name_past_late(f, step, step, step, now);
            if (again != step) return again;
            if (f->named_at > 0 && now < f->first_named_at + 2 * FOLLOW_CONFIRM_S)
                return name_unheard(f, step, head, now);
            return keep_due(f, step, step, step, now);
        }
    }
    return serving_from;
}

int follow_alone(follow_t *f, int others, int64_t step, int64_t top, int first,
                 double timeout_s, double now)
{
    if (others > 0) {
        f->alone_since = 0;
        return 0;
    }
    if (!f->alone_since) f->alone_since = now;
    double alone = now - f->alone_since;
    int todo = 0;
    /* twice at most per step, a second apart: every answer carries every message of the
     * step the mate holds, which with AdamW is a dense gradient each */
    if (f->gather_step != step) f->gather_step = step, f->gather_n = 0;
    if (alone > timeout_s && f->gather_n < FOLLOW_GATHER_MAX &&
        (!timeout_running(&f->gather) || timeout_fired(&f->gather, now))) {
        timeout_start(&f->gather, now);
        f->gather_n++;
        todo |= FOLLOW_GATHER;
    }
    if (alone > 2 * timeout_s && (top > step || first)) {
        f->alone_since = 0;
        todo |= top > step ? FOLLOW_RESYNC : FOLLOW_TAKE_OVER;
    }
    return todo;
}

int follow_behind(follow_t *f, int contributor, int64_t step, int64_t ahead, int keep,
                  double now)
{
    if (step != f->at_step) {
        f->at_step = step;
        f->at_since = now;
    }
    double still = now - f->at_since;
    if (contributor) return ahead >= 2 && still > FOLLOW_STALL_S;
    if (ahead <= keep - 2 && still <= FOLLOW_STALL_S) return 0;
    if (ahead <= 1) {
        f->at_since = now;
        return 0;
    }
    return 1;
}
