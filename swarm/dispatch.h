/* dispatch.h — the membership and dispatch core of one peer's network side: what happens
 * to the bytes of a message that arrived, and how the bytes of one that leaves are made.
 * It decodes and checks every header (version, payload count, swarm id, the connection's
 * routing id, an allowlisted key, the signature and counter of signed control), answers
 * HELLO with WELCOME and STATUS_REQ with the caller's JSON, merges GOSSIP and WELCOME
 * tables, takes LEAVE, gossips at each tick (to every live member or `gossip_fanout` of
 * them, and to one member that died of silence: a probe), and hands every data message to
 * the program. It counts every byte in and out by kind (transport.h) and every refusal.
 * Unreachable members (docs/protocol.md 3.4): a peer whose own address is a relay address
 * names a relay at each tick, and what it sends to another unreachable member goes whole
 * inside a RELAY through that relay; a RELAY for another member is passed on unchanged,
 * one for this peer unwrapped and taken as its sender's.
 *
 * No sockets and no clock: the ZeroMQ network thread (net.c) and the simulator (sim.c)
 * both own one per peer and give it bytes and the time; it sends through the io
 * callbacks below. So the simulator runs exactly the checks, framing and membership that
 * a real peer runs (docs/protocol.md 17).
 *
 * Not for: sockets, CURVE, ZAP, threads (net.c); delays and faults (sim.c); what data
 * messages mean (peer/).
 */
#ifndef SWARMTRAIN_DISPATCH_H
#define SWARMTRAIN_DISPATCH_H

#include "swarm/members.h"
#include "swarm/msg.h"
#include "swarm/transport.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dispatch dispatch_t;

/* How the core reaches the network and the program. Frames are given header first. */
typedef struct {
    void *ctx;
    /* Sends frames to live member e over its connection: 0 sent (queued), -1 not. For an
     * unreachable member (its address a relay address) that is the connection e opened to
     * this peer (net.c: the ROUTER, addressed by e's id); never called so while this peer is
     * unreachable too (the core relays instead). */
    int (*send)(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                const size_t *len);
    /* Sends frames to e, a member that died of silence, over a connection of its own (a
     * probe; members.h). 0 sent, -1 not. */
    int (*probe)(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                 const size_t *len);
    /* Answers on the connection a message came in on (STATUS_REP to the status tool, which
     * is no member): conn is that connection's routing id. 0 sent, -1 not. */
    int (*reply)(void *ctx, const uint8_t *conn, size_t conn_len, int nframes,
                 const void *const *data, const size_t *len);
    /* A data message (or WELCOME) for the program: the decoded header and the frames as
     * they came, header first; valid during the call only. */
    void (*deliver)(void *ctx, const msg_t *m, int nframes, const void *const *data,
                    const size_t *len);
    /* The live table changed (HELLO, LEAVE, a merge that changed it). */
    void (*view)(void *ctx);
    /* STATUS_REQ's answer: JSON the caller frees (free()), its length in *len; NULL: none. */
    char *(*status)(void *ctx, size_t *len);
    /* A member came up or went down (members.h hooks); NULL: nothing to do. */
    void (*up)(void *ctx, members_entry_t *e);
    void (*down)(void *ctx, members_entry_t *e, const char *why);
    /* A message was refused; warn: a forgery or replay worth a warning. NULL: quiet. */
    void (*refused)(void *ctx, const char *why, int warn);
    /* The connection to live member e looks dead: open it anew. why: SWIM found its own
     * answers to this peer's pings stopped coming while others vouched for it (10.7 rule
     * 13), or it said so (a MEND, 11.3). NULL: the transport's connections do not die
     * that way (the simulator). */
    void (*reconnect)(void *ctx, members_entry_t *e, const char *why);
} dispatch_io_t;

typedef struct {
    msg_member_t self;   /* this peer's entry: id, addr, stage, state */
    uint64_t heartbeat;  /* its first heartbeat (0: 1) */
    const uint8_t *sk;   /* Ed25519 secret key of self.id (64 octets, copied): signs HELLO,
                          * LEAVE and the own table entry, and turns the checks of
                          * signatures on; NULL: nothing signed or checked */
    uint64_t swarm;      /* 0 until known (a joiner) */
    const char *run_text; /* NULL until known */
    double timeout_s;    /* silence that makes a member dead */
    double forget_s;     /* members dead of silence are probed this long */
    int gossip_fanout;   /* 0: GOSSIP to every live member each tick; else this many */
    /* SWIM membership (docs/protocol.md 10.7) instead of whole-table gossip: a ping every
     * swim_every ticks (0: gossip), swim_k members asked to ping for it when it goes
     * unanswered a tick, news pushed to swim_fanout members; suspected members die after
     * timeout_s */
    int swim_every, swim_k, swim_fanout;
    double tick_s;       /* seconds between the caller's dispatch_tick calls (0: 0.25) */
    double wall_offset;  /* added to the core's clock gives the wall clock's seconds (the
                          * probe ring's period number, 10.7 rule 2; a simulator's single
                          * clock: 0) */
} dispatch_config_t;

/* NULL + err when out of memory. io is copied. */
dispatch_t *dispatch_new(const dispatch_config_t *cfg, const dispatch_io_t *io, double now,
                         char *err);
/* NULL-safe; calls no hook. */
void dispatch_destroy(dispatch_t **d);

/* The member table ([0] is this peer), for the owner's reads and its own entry's fields. */
members_t *dispatch_members(dispatch_t *d);

/* The swarm id and run text, once known (WELCOME carries them to joiners). */
void dispatch_set_run(dispatch_t *d, uint64_t swarm, const char *run_text);
uint64_t dispatch_swarm(const dispatch_t *d);
const char *dispatch_run_text(const dispatch_t *d);

/* Encodes m's header into buf (cap octets): fills swarm, sender and seq (signed control:
 * a counter at least clock_us, strictly increasing, so a restarted peer is not taken for
 * a replay), signs it when it is a signed type and a key is set. The length, or 0 with
 * err on a field out of range. */
size_t dispatch_header(dispatch_t *d, msg_t *m, uint64_t clock_us, uint8_t *buf, size_t cap,
                       char *err);

/* Sends an encoded message (header first) to member id, counting it: 0, or -1 when id is
 * not a live member or io->send failed (the caller reports it undelivered). An id not in
 * the table at all gets it on the connection it opened to this peer (io->reply, routing id
 * = its id), if it has one: the answer to a request from a newcomer that heard of this peer
 * before this peer heard of it (a joiner's first state request in a burst of joiners went
 * unanswered and was asked again 10 s later; docs/protocol.md 3.1). */
int dispatch_send(dispatch_t *d, const uint8_t id[MSG_ID_LEN], int nframes,
                  const void *const *data, const size_t *len);

/* An answer from live member id is overdue (11.3): this peer's connection to it opened
 * anew (io->reconnect), and a PROBE MEND sent over the new one, on which the member opens
 * its connection to this peer anew; at most once per 5 s per member (0, nothing done,
 * within that). 0 sent, -1 not (not a live member). */
int dispatch_mend(dispatch_t *d, const uint8_t id[MSG_ID_LEN]);

/* Counts frames the owner sent by itself (HELLO to a bootstrap endpoint). */
void dispatch_count_out(dispatch_t *d, int nframes, const void *const *data, const size_t *len);

/* What arrived on a connection whose routing id is conn (conn_len octets): frames, the
 * header first. user: with an allowlist, the connection's CURVE key in hex (the ZAP user
 * id; NULL: the connection had none), checked against the sender when check_user. Returns
 * 0 when taken (answered, merged or delivered), or a negative status when refused, err
 * saying why (counted in dispatch_rejected). */
int dispatch_on_frames(dispatch_t *d, const uint8_t *conn, size_t conn_len, int check_user,
                       const char *user, int nframes, const void *const *data,
                       const size_t *len, double now, char *err);

/* This peer's own entry from its program (members_set_self). When its serving_from
 * changed (a newcomer named the first step it contributes to, docs/protocol.md 9.5), its
 * heartbeat goes up and every live member gets its GOSSIP now, not at the next tick. */
void dispatch_set_self(dispatch_t *d, const msg_member_t *self, double now);

/* The heartbeat: uptime, own heartbeat + 1, timeouts (members_tick), then GOSSIP to the
 * live members (all, or gossip_fanout of them drawn with r) and to one probe candidate
 * (drawn with r). r: any random number from the owner's source. */
void dispatch_tick(dispatch_t *d, double now, uint64_t r);

/* Pauses noticed so far (a tick later than DISPATCH_JUMP_S x the usual gap: the process
 * was frozen or starved; dispatch_tick then does not take the silence across it for the
 * members' death, members_resume), and the seconds they lasted. */
#define DISPATCH_JUMP_S 1.5
uint64_t dispatch_pauses(const dispatch_t *d, double *paused_s);
/* The last such pause's length (0: none yet). */
double dispatch_last_pause(const dispatch_t *d);
/* The last pause longer than the member timeout that members vouched for (0: none): after
 * such a pause the core asks up to 16 members it knew, its own stage's first, whether it is
 * still in the run (PROBE ASK, in either membership; docs/protocol.md 10.8), again every
 * second for 4 member timeouts. An ANSWER that can vouch (its sender not asking itself,
 * up since before the pause) vouches, and so do answers from every member asked (a whole
 * swarm paused and woke); the question is settled once the stage mates asked answered too
 * (their entries then in the table), or 2 s later. */
uint64_t dispatch_vouched(const dispatch_t *d);

/* LEAVE (code: 0 or MSG_LEAVE_RUN_OVER; text why) to every live member, this peer's entry
 * marked leaving. A LEAVE that says the run is over is also handed to the program. */
void dispatch_leave(dispatch_t *d, int code, const char *why, uint64_t clock_us);

/* RELAYs this peer passed on as a relay (docs/protocol.md 3.4), and in *dropped (when not
 * NULL) those it could not: their member was unknown, dead, or its connection full. */
uint64_t dispatch_relayed(const dispatch_t *d, uint64_t *dropped);

/* Bytes in and out by kind, and messages refused, so far. */
const wire_count_t *dispatch_wire(const dispatch_t *d);
uint64_t dispatch_rejected(const dispatch_t *d);
/* MENDs taken: connections to their senders opened anew (11.3). */
uint64_t dispatch_mends(const dispatch_t *d);
/* Refusals counted by the owner (a refused payload found by the program): added to the
 * count above and to the own entry's `rejected`. */
void dispatch_add_rejected(dispatch_t *d, uint64_t n);

#endif
