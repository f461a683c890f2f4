/* net.h — a peer's network thread: it owns every ZeroMQ socket, keeps heartbeats and
 * membership gossip on time whatever the compute thread is doing, answers status
 * queries, and hands data messages to the compute thread over an inproc socket.
 *
 * Sockets (docs/protocol.md, "Transport"): one ROUTER bound where the peer listens;
 * one DEALER per known member, connected to the member's advertised address, for
 * everything this peer sends to it. Replies to non-members (the status tool) go back
 * through the ROUTER, and so does everything for an unreachable member (one that does
 * not listen), on the connection that member opened; such a peer hears everything on
 * its DEALERs.
 *
 * Membership: every member entry has a heartbeat counter its owner increments each
 * gossip tick; a higher counter wins on merge. A member whose counter has not moved
 * for `timeout_s` is dead to this peer: its DEALER is closed so that sends to it fail
 * at once, and the compute thread is told (NET_EV_VIEW).
 *
 * The compute thread calls every function below except net_start/net_stop from one
 * thread; they never block on the network.
 *
 * Not for: what the messages mean (peer/).
 */
#ifndef SWARMTRAIN_NET_H
#define SWARMTRAIN_NET_H

#include "swarm/msg.h"
#include "swarm/transport.h"

#include <stddef.h>
#include <stdint.h>

typedef struct net net_t;

typedef struct {
    const char *bind;      /* endpoint to bind, e.g. tcp://127.0.0.1:0 (0: a free port);
                            * NULL: listen nowhere, an unreachable member (behind NAT or a
                            * firewall, docs/protocol.md 3.4) served over the connections it
                            * opens */
    const char *advertise; /* endpoint others use; NULL: the bound endpoint (with bind NULL:
                            * MUST be NULL) */
    uint8_t id[MSG_ID_LEN];
    uint64_t swarm;       /* 0 until known (a joiner before WELCOME) */
    double heartbeat_s;   /* gossip period (0.25) */
    double timeout_s;     /* silence that makes a member dead (3) */
    const char *run_text; /* sent in WELCOME; NULL until known */
    msg_member_t self;    /* initial self entry (stage, state) */
    const uint8_t *sk;    /* the Ed25519 secret key of id (64 octets): signs this peer's
                           * table entry, HELLO and LEAVE (copied); NULL: nothing signed
                           * or checked (tests of the unsigned protocol only) */
    const struct auth *auth; /* CURVE on every socket and a ZAP handler admitting only
                              * the swarm key's holders or the allowlist (auth.h); NULL:
                              * ZeroMQ's NULL mechanism. Borrowed: outlives the net. */
} net_config_t;


/* Starts the network thread; binds, and fills the bound endpoint into *endpoint
 * (256 bytes) when not NULL (a peer that does not listen: its relay address, naming no
 * relay yet). NULL + err on failure (address in use, bad endpoint). */
net_t *net_start(const net_config_t *cfg, char *endpoint, char *err);

/* Says LEAVE to every member and stops the thread (sockets stay open until net_stop);
 * fills *wire (when not NULL) with every byte the peer sent and received, by kind,
 * LEAVE included. NULL-safe; a second call only reads the counters. */
void net_halt(net_t *n, wire_count_t *wire);
/* net_halt for a peer that finished the run: its LEAVE says the run is over
 * (MSG_LEAVE_RUN_OVER), so that a member that missed the end learns it. */
void net_halt_finished(net_t *n, wire_count_t *wire);

/* Halts (net_halt) if not yet, and closes everything; NULL-safe. */
void net_stop(net_t **n);

/* Sends a message to member `dest` (header encoded from m; sender, swarm and seq are
 * filled in). Payload frames as given. Failure to deliver comes back as NET_EV_UNDELIV. */
int net_send(net_t *n, const uint8_t dest[MSG_ID_LEN], msg_t *m, int nframes,
             const void *const *frames, const size_t *lens, char *err);

/* Sends a HELLO to a bootstrap endpoint (not yet a member). */
int net_hello(net_t *n, const char *endpoint, int stage, char *err);

/* Updates this peer's own gossiped entry (stats, stage, state); the heartbeat is the
 * network thread's business. */
void net_set_self(net_t *n, const msg_member_t *self);

/* Tells the network thread the swarm id and run text (a joiner, after WELCOME). */
void net_set_run(net_t *n, uint64_t swarm, const char *run_text);

/* From now on the network thread answers chunk requests (STATE_REQ) for s's stage and
 * step from s itself, at once, while the compute thread runs a pass (it takes a
 * reference); NULL: it answers none (they go to the compute thread again). */
void net_serve_state(net_t *n, xfer_shared_t *s);

/* This peer joined a running pool and contributed: its status answer says after how long
 * (its state in place, its first contributed step; seconds since it started). */
void net_set_join(net_t *n, double state_s, double contrib_s);

/* Closes this peer's connection to live member dest and opens a new one (transport.h,
 * reconnect; what was queued on the old one is lost; nothing for an unreachable member,
 * which holds the connection), and sends it a MEND over the new one, so that it opens its
 * own to this peer anew too (docs/protocol.md 11.3). Nothing for a member not live. */
void net_reconnect(net_t *n, const uint8_t dest[MSG_ID_LEN]);

/* Waits up to timeout_ms for an event; *ev is valid until the next call. 0 on an event,
 * 1 on timeout, negative on failure. */
int net_recv(net_t *n, int timeout_ms, net_ev_t *ev);

/* Counters kept by the network thread, as of the last NET_EV_VIEW. */
uint64_t net_rejected(const net_t *n);

/* The transport a peer uses to reach this network thread (transport.h). */
transport_t net_transport(net_t *n);

#endif
