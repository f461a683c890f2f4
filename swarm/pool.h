/* pool.h — a stage pool's step protocol, as one member sees it: which of the step's M
 * microbatches each member counted (PROGRESS), the pool's exchange messages (EXCH, kept a
 * few steps so that any member can relay them), and the hash vote that keeps replicas
 * identical. It does arithmetic on bitmaps and bytes only: no kernels, no sockets, no
 * clock (docs/protocol.md, "Pool protocol").
 *
 * Exactly once: a microbatch's gradient enters a pool's update through the exchange
 * message of the one member that counted it. A step is complete when the union of what
 * the live members counted, plus what the held messages of departed members counted,
 * covers all M (with SkipPipe paths: all the microbatches whose path visits the stage).
 *
 * Not for: deciding when to send (peer/), what a message body means (compress/demo.h).
 */
#ifndef SWARMTRAIN_POOL_H
#define SWARMTRAIN_POOL_H

#include "swarm/msg.h"

#include <stddef.h>
#include <stdint.h>

typedef struct pool pool_t;

typedef struct {
    uint8_t origin[MSG_ID_LEN];
    int part; /* 0: the member's message; 1, 2, ...: supplements (microbatches it counted
               * after sending, when the pool lost a member's share) */
    int64_t step, since;
    uint32_t count;
    uint64_t hash;
    uint8_t *data;
    size_t len;
    uint8_t *counted; /* M bits */
    uint8_t (*claims)[MSG_ID_LEN]; /* part 0: the exchange members its sender expected */
    int nclaims;
} pool_msg_t;

/* A pool of M microbatches per step. NULL on ENOMEM. */
pool_t *pool_new(int M);
void pool_destroy(pool_t **p);

/* Bytes of an M-bit bitmap. */
size_t pool_bitmap_bytes(const pool_t *p);
static inline int pool_bit(const uint8_t *b, int i)
{
    return (b[i >> 3] >> (i & 7)) & 1;
}
static inline void pool_set_bit(uint8_t *b, int i)
{
    b[i >> 3] |= (uint8_t)(1u << (i & 7));
}

/* Moves to `step`: forgets what this member counted, keeps what others reported for it,
 * and forgets progress and messages more than `keep` steps old. */
void pool_begin(pool_t *p, int64_t step, int keep);
int64_t pool_step(const pool_t *p);

/* This member counted microbatch `index` of the current step. */
void pool_count(pool_t *p, uint32_t index);
const uint8_t *pool_mine(const pool_t *p);
uint32_t pool_mine_count(const pool_t *p);

/* A member's PROGRESS: what it counted of `step` (its own bits, not a union), received
 * at `now` (this member's clock). */
void pool_on_progress(pool_t *p, const uint8_t id[MSG_ID_LEN], int64_t step, const uint8_t *bits,
                      double now);
/* The members that reported PROGRESS for the current step: at most cap ids into out;
 * returns how many there are. */
int pool_reporters(const pool_t *p, uint8_t (*out)[MSG_ID_LEN], int cap);

/* When the last PROGRESS of id for the current step arrived (-1: none). */
double pool_heard_at(const pool_t *p, const uint8_t id[MSG_ID_LEN]);

/* The union, for the current step, of this member's bits, the bits of members in
 * live[0, n) and the counted bits of every held message. Into out (bitmap bytes). */
void pool_union(const pool_t *p, const msg_member_t *live, int n, uint8_t *out);

/* Whether anything of the current step was counted: by this member, in a member's
 * PROGRESS or in a held message (training has begun in this pool). */
int pool_counted_any(const pool_t *p);

/* Whether every microbatch the pool expects at its current step (all M, or with SkipPipe
 * paths those whose path visits the stage: pool_set_path) has its bit set. */
int pool_all(const pool_t *p, const uint8_t *bits);

/* SkipPipe (swarm/path.h): from now on the pool of `stage` expects, at each step below
 * `until`, only the microbatches whose path (run seed, S stages, skip ratio) visits it;
 * at `until` and after (the run's skip_until, model/train.h), and with ratio 0, all M
 * (the default). */
void pool_set_path(pool_t *p, uint64_t seed, int S, double ratio, int64_t until, int stage);
/* The bitmap of the microbatches expected at the current step. */
const uint8_t *pool_expected(const pool_t *p);

/* Stores an exchange message (m: origin, step, count, hash, since; flags: its part) with
 * the ids its sender expected to exchange with (claims, claims_len octets: 32 each). 0
 * when kept or a duplicate; STATUS_EMALFORMED when the counted bitmap or the claims have
 * the wrong size; ENOMEM. */
int pool_store(pool_t *p, const msg_t *m, const uint8_t *data, size_t len, const uint8_t *counted,
               size_t counted_len, const uint8_t *claims, size_t claims_len);
const pool_msg_t *pool_find(const pool_t *p, const uint8_t origin[MSG_ID_LEN], int64_t step,
                            int part);

/* The held messages of `step`, every part of every origin: at most cap into out; returns
 * how many there are. */
int pool_messages(const pool_t *p, int64_t step, const pool_msg_t **out, int cap);

/* The union of the counted bits of the held messages of the current step; whether the
 * bits a live member reported (PROGRESS) are all in its held messages. */
void pool_msg_union(const pool_t *p, uint8_t *out);
int pool_member_covered(const pool_t *p, const uint8_t id[MSG_ID_LEN]);
/* The lowest part number of origin's message of `step` not held (the one to ask for). */
int pool_first_missing(const pool_t *p, const uint8_t origin[MSG_ID_LEN], int64_t step);

/* The hash vote over the messages msgs[0, n) of the current step against this member's
 * own (my_hash, my_since, my_id): 1 when this member is on the losing side (the majority
 * of hashes disagrees with it, or a tie that the most senior member's side wins). */
int pool_vote_lost(const pool_msg_t *const *msgs, int n, uint64_t my_hash, int64_t my_since,
                   const uint8_t my_id[MSG_ID_LEN]);

/* The run's last step has no next hash vote: its members report their parameter hash
 * (and since: their serving_from) with PROGRESS of that step instead, kept here for the
 * current step (after pool_on_progress of that report). */
void pool_on_final(pool_t *p, const uint8_t id[MSG_ID_LEN], uint64_t hash, int64_t since);
/* The hash vote over those reports against this member's own, once every other owner in
 * own[0, n) has reported: 1 when this member is on the losing side (pool_vote_lost), 0
 * when not, -1 while a report is missing (or ENOMEM). */
int pool_final_vote(const pool_t *p, const msg_member_t *own, int n, const uint8_t my_id[MSG_ID_LEN],
                    uint64_t my_hash, int64_t my_since);

/* Which of the step's messages msgs[0, n) (in origin, then part order; out[i] set: refused
 * before, never taken) enter the update; take[i] set for each. A message that counts a
 * microbatch already taken is left out whole (a gradient sum cannot be taken apart).
 * First the part 0s, the one that counts the most first, then by id: every member holds
 * every exchange member's part 0 before it applies, so what it takes of them is the same
 * on every member; a REDO's duplicate of one microbatch does not push out a message that
 * counts the whole step (sim heavy seed 6101891: 1 of 4 counted when the smaller id's
 * duplicate came first). Then the supplements the same way, the one that counts the most
 * first, each taken unless it overlaps: a re-send's part of one microbatch does not push
 * out a supplement that counts it and more (sim pause 8x4 seed 7065). M: microbatches per
 * step. 0, or ENOMEM. */
int pool_pick(const pool_msg_t *const *msgs, int n, const int *out, int M, int *take);

#endif
