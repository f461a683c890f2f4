/* view.h — queries on a peer's view of the swarm: the live member table its transport
 * last reported (NET_EV_VIEW). Who serves a stage, who owns which microbatches, which
 * stage a newcomer should take. Any number of members: nothing here has a fixed cap.
 * Not for: keeping the table up to date (membership is the transport's business). */
#ifndef SWARMTRAIN_VIEW_H
#define SWARMTRAIN_VIEW_H

#include "swarm/msg.h"

#include <stdint.h>

typedef struct {
    msg_member_t *m; /* the live members, self included */
    int n, cap;
    msg_member_t *scratch; /* n entries: view_stage's result */
    msg_member_t *owners;  /* n entries: view_owners' result */
    uint8_t *knows;        /* n entries: 1 when that member's gossip carried this member's
                            * entry (view_set_heard): it can answer this member */
    int64_t swarm_step;    /* the highest step a serving member ever showed here: the
                            * swarm's step, which never goes back, kept when every member
                            * it knew is gone (view_set) */
} view_t;

/* Replaces the table with a copy of members[0, n). 0 or STATUS_ENOMEM. Nobody is known
 * to know this member until view_set_heard. */
int view_set(view_t *v, const msg_member_t *members, int n);
/* After view_set: which members know this member, from the transport's table members[0,
 * n) and heard (NET_EV_VIEW's; NULL: none said) - the view may be that table filtered,
 * in the same order. */
void view_set_heard(view_t *v, const msg_member_t *members, const int64_t *heard, int n);
/* Whether member id's gossip carried this member's entry. */
int view_knows(const view_t *v, const uint8_t id[MSG_ID_LEN]);
void view_free(view_t *v);

/* The entry of id, or NULL. */
const msg_member_t *view_find(const view_t *v, const uint8_t id[MSG_ID_LEN]);

/* Members of a stage (serving ones only when serving_only), into v->scratch; returns the
 * count. The result is valid until the next query or view_set. */
int view_stage(view_t *v, int stage, int serving_only, const msg_member_t **out);

/* The serving members of `stage` that take part in `step`'s exchange (serving_from <=
 * step; `self` always counts when it serves that stage), sorted by id, into v->owners
 * (valid until the next view_owners or view_set; view_stage does not touch it).
 * *me is self's index among them or -1. */
int view_owners(view_t *v, int stage, int64_t step, const uint8_t self[MSG_ID_LEN],
                const msg_member_t **out, int *me);

/* Which of own[0, n) owns `key` (rendezvous hashing: the highest hash of (member, key)
 * wins). When a member leaves, only the keys it owned move; -1 when n is 0. */
int view_rendezvous(const msg_member_t *own, int n, uint64_t key);
/* The weight of (member id, key) in that hashing. */
uint64_t view_rendezvous_weight(const uint8_t id[MSG_ID_LEN], uint64_t key);

/* The stage a newcomer should take among S: the one with the least serving throughput
 * (then the fewest members), not counting self. */
int view_weakest_stage(const view_t *v, int S, const uint8_t self[MSG_ID_LEN]);

/* The highest step any serving member of `stage` reports (-1 if none; all stages with
 * stage < 0). */
int64_t view_max_step(const view_t *v, int stage);
/* The swarm's step as far as this view ever knew (swarm_step): what a stage taken from
 * nothing starts at, even once the members that showed it are gone. */
int64_t view_swarm_step(const view_t *v);

#endif
