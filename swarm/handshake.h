/* handshake.h — whether an endpoint accepts this process's ZMTP/CURVE handshake, seen from
 * the connecting side (libzmq 4.3's socket monitor: ZMQ_EVENT_HANDSHAKE_*).
 *
 * A secured swarm refuses a peer at the handshake: a peer without CURVE meets a CURVE
 * server (mechanism mismatch), a peer with another swarm key cannot even be decrypted (the
 * server drops the connection: "no detail" on this side), a peer whose key is not on the
 * allowlist is refused by ZAP (an ERROR command with status 400). Without a watch the
 * connecting side sees nothing of this and waits for an answer that never comes.
 *
 * A watch observes a set of connecting sockets of one context. Its verdict:
 *   HANDSHAKE_OK        a handshake on one of them completed;
 *   HANDSHAKE_REFUSED   ZAP refused it, or the mechanisms differ, or every socket's
 *                       handshake failed at least HANDSHAKE_FAILS times (a server that
 *                       died during one handshake fails it once, not every time);
 *   HANDSHAKE_PENDING   neither yet (nothing connected, or handshakes in progress).
 * With an allowlist a client that does not know the endpoint's key tries every listed key
 * at once; the wrong ones fail by design, so only all of them failing is a refusal.
 *
 * The machine-readable token of a refusal is HANDSHAKE_TOKEN ("handshake-refused"): the
 * error text of a refusal starts with it, and the tools exit with HANDSHAKE_EXIT_REFUSED.
 * The text also says how long the watch took to decide: "(after S s)" or "(ZAP N, after
 * S s)", S counted from handshake_watch_new.
 * Not for: the server side's count of refusals (net.c), keys (auth.h). */
#ifndef SWARMTRAIN_HANDSHAKE_H
#define SWARMTRAIN_HANDSHAKE_H

#include <stddef.h>

#define HANDSHAKE_TOKEN "handshake-refused"
/* The exit status of `peer` and `status` refused at the handshake. */
#define HANDSHAKE_EXIT_REFUSED 3
/* Failed handshakes per socket, with none completed, that make a refusal. */
#define HANDSHAKE_FAILS 2

typedef enum { HANDSHAKE_PENDING = 0, HANDSHAKE_OK = 1, HANDSHAKE_REFUSED = 2 } handshake_verdict_t;

typedef struct handshake_watch handshake_watch_t;

/* A watch over sockets of ctx (caller keeps ctx). NULL when out of memory. `secured`:
 * whether the watched sockets use CURVE (it words the refusal). */
handshake_watch_t *handshake_watch_new(void *ctx, int secured);

/* Stops monitoring every watched socket (before they are closed) and frees; NULL-safe. */
void handshake_watch_destroy(handshake_watch_t **w);

/* Monitors sock (a connecting socket of the watch's context, before zmq_connect). 0 or a
 * status. */
int handshake_watch_add(handshake_watch_t *w, void *sock, char *err);

/* The monitor sockets to poll (ZMQ_POLLIN) beside one's own; returns how many, up to max,
 * into items. */
int handshake_watch_items(const handshake_watch_t *w, void **socks, int max);

/* Reads every pending monitor event without waiting; returns the verdict so far. On
 * HANDSHAKE_REFUSED err (STATUS_ERR_LEN) says why, starting with HANDSHAKE_TOKEN. */
handshake_verdict_t handshake_watch_update(handshake_watch_t *w, const char *endpoint, char *err);

/* One probe: connects to endpoint as a client with auth's credentials (NULL: no CURVE;
 * with an allowlist one socket per listed key, up to 128), waits up to timeout_ms for a
 * verdict and closes. Ends early when nothing answers at all within min(timeout_ms,
 * 2000) ms (nobody listens yet: not a refusal). Returns 0 (accepted, or no verdict),
 * STATUS_EDENIED with the reason in err, or another status on a local failure. */
struct auth;
int handshake_check(const char *endpoint, const struct auth *auth, int timeout_ms, char *err);

#endif
