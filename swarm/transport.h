/* transport.h — the seam between a peer and the network. A peer sends through a
 * transport_t and is handed events (net_ev_t) by whoever drives it; it never touches a
 * socket or reads a clock. Two implementations: the ZeroMQ network thread (net.c,
 * net_transport) and the simulated network (sim.c), in which many peers run in one
 * process on a virtual clock.
 *
 * Membership (gossip, failure detection, HELLO/WELCOME, LEAVE) is the transport's
 * business: the peer sees it as NET_EV_VIEW events carrying the live member table, and
 * WELCOME as a message.
 *
 * Not for: what the messages mean (peer/), their octets (msg.h).
 */
#ifndef SWARMTRAIN_TRANSPORT_H
#define SWARMTRAIN_TRANSPORT_H

#include "swarm/msg.h"
#include "swarm/xfer.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    NET_EV_NONE = 0,
    NET_EV_MSG,     /* a data message: msg, frames */
    NET_EV_VIEW,    /* the member table changed or was refreshed: members, nmembers */
    NET_EV_UNDELIV, /* a send failed: dest, msg (the header that was not delivered) */
} net_ev_type_t;

/* What the bytes on the wire are for: every message a transport sends or receives is
 * counted under the kind of its type, header frame and payload frames together
 * (transport_wire_kind). */
typedef enum {
    WIRE_ACT = 0, /* FWD: activations forward */
    WIRE_GRAD,    /* BWD: gradients back */
    WIRE_EXCH,    /* EXCH, EXCH_REQ: the pool's exchange (DeMo or dense sums) */
    WIRE_STATE,   /* STATE_REQ, STATE_REP: stage state transfer */
    WIRE_CTL,     /* the pool's and the pipeline's control: PROGRESS, NACK, REDO, STATUS... */
    WIRE_MEMB,    /* membership: GOSSIP, PROBE, HELLO, WELCOME, LEAVE */
    WIRE_KINDS
} wire_kind_t;

/* Bytes by kind, in (received) and out (sent). */
typedef struct {
    uint64_t in[WIRE_KINDS], out[WIRE_KINDS];
} wire_count_t;

/* The kind of a message type (an unknown type counts as control). */
static inline int transport_wire_kind(int type)
{
    switch (type) {
    case MSG_FWD: return WIRE_ACT;
    case MSG_BWD: return WIRE_GRAD;
    case MSG_EXCH:
    case MSG_EXCH_REQ: return WIRE_EXCH;
    case MSG_STATE_REQ:
    case MSG_STATE_REP: return WIRE_STATE;
    case MSG_GOSSIP:
    case MSG_PROBE:
    case MSG_HELLO:
    case MSG_WELCOME:
    case MSG_LEAVE: return WIRE_MEMB;
    default: return WIRE_CTL;
    }
}

/* Names of the kinds, for logs and status ("activations", ...). */
static inline const char *transport_wire_name(int kind)
{
    static const char *const names[WIRE_KINDS] = {"activations", "gradients", "exchange",
                                                  "state", "control", "membership"};
    return kind >= 0 && kind < WIRE_KINDS ? names[kind] : "?";
}

typedef struct {
    int type;
    msg_t msg;
    /* payload frames of NET_EV_MSG (valid until the handler returns) */
    int nframes;
    const uint8_t *frame[4];
    size_t frame_len[4];
    /* NET_EV_VIEW: the whole table, self included, dead members excluded */
    const msg_member_t *members;
    int nmembers;
    /* NET_EV_VIEW: what each of those members holds of this peer (members_view_heard):
     * heard[2i] the serving_from of this peer it last gossiped (-1: none), heard[2i + 1]
     * its own step when it first held that value; NULL when the transport does not say */
    const int64_t *heard;
    uint64_t rejected; /* NET_EV_VIEW: malformed messages the transport refused so far */
    /* NET_EV_VIEW: times the transport's own heartbeat came late (the whole process was
     * frozen or starved: the members took its silence for death) and the last such gap */
    uint64_t pauses;
    double last_pause_s;
    /* NET_EV_VIEW: the last of those pauses some member vouched for (docs/protocol.md
     * 10.8: it answered this peer's ASK without doubt, or every member asked answered): the
     * peer is still in the run; 0: none */
    uint64_t vouched;
    wire_count_t wire; /* NET_EV_VIEW: bytes this peer's transport moved so far, by kind */
    uint8_t dest[MSG_ID_LEN];
} net_ev_t;

/* What a peer may ask of its transport. Every call returns at once. */
typedef struct {
    void *ctx;
    /* Sends m (sender, swarm and seq are filled in) with nframes payloads to member
     * dest. 0 when queued; a failure to deliver later comes back as NET_EV_UNDELIV. */
    int (*send)(void *ctx, const uint8_t dest[MSG_ID_LEN], msg_t *m, int nframes,
                const void *const *frames, const size_t *lens, char *err);
    /* Sends HELLO to a bootstrap endpoint (a joiner, not yet a member). */
    int (*hello)(void *ctx, const char *endpoint, int stage, char *err);
    /* This peer's own gossiped entry (stats, stage, state, step). */
    void (*set_self)(void *ctx, const msg_member_t *self);
    /* The swarm id and run text, once known (sent in WELCOME to joiners). */
    void (*set_run)(void *ctx, uint64_t swarm, const char *run_text);
    /* From now on chunk requests for s's stage and step are answered by the transport
     * itself from s (it takes a reference), whatever the peer is computing; others still
     * come to the peer. NULL: none any more. NULL hook (the simulator): the peer answers
     * every request. */
    void (*serve_state)(void *ctx, xfer_shared_t *s);
    /* This peer joined a running pool: seconds from its start to its state in place and to
     * its first contributed step, for its status answer. NULL hook (the simulator): none. */
    void (*set_join)(void *ctx, double state_s, double contrib_s);
    /* The connection to live member dest looks dead (what it should have answered went
     * unanswered past custody's time while the member stayed live): it is opened anew. A
     * connection can die with nothing to say so: a NAT mapping or a middlebox's flow
     * expired, a half-open TCP connection after a cut, a connection libzmq took over (net.c
     * new_dealer). NULL hook (the simulator): its connections do not die that way. */
    void (*reconnect)(void *ctx, const uint8_t dest[MSG_ID_LEN]);
} transport_t;

#endif
