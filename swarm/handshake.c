/* handshake.c — the connecting side's view of a ZMTP/CURVE handshake (handshake.h): a
 * PAIR per watched socket receives its monitor events over inproc.
 * Not for: the listening side (net.c watches its ROUTER for the count of refusals). */
#include "swarm/handshake.h"
#include "common/clock.h"
#include "common/status.h"
#include "swarm/auth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define HANDSHAKE_PROBE_TRIES 128
#define HANDSHAKE_WATCH_MAX   512 /* a context holds 1023 sockets: two per watched one */

typedef struct {
    void *sock, *mon;
    int fails, connected;
} watched_t;

struct handshake_watch {
    void *ctx;
    double t0; /* when it began: the refusal says how long it took */
    int secured, n, ok;
    int auth_code;      /* the ZAP status of a refusal (400), 0: none */
    int mismatch;       /* the server speaks another mechanism */
    int other_protocol; /* a protocol error that is neither (its ZMQ_PROTOCOL_ERROR_*) */
    watched_t w[HANDSHAKE_WATCH_MAX];
};

handshake_watch_t *handshake_watch_new(void *ctx, int secured)
{
    handshake_watch_t *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->ctx = ctx;
    w->t0 = clock_now();
    w->secured = secured != 0;
    return w;
}

void handshake_watch_destroy(handshake_watch_t **wp)
{
    if (!wp || !*wp) return;
    handshake_watch_t *w = *wp;
    for (int i = 0; i < w->n; i++) {
        zmq_socket_monitor(w->w[i].sock, NULL, 0);
        zmq_close(w->w[i].mon);
    }
    free(w);
    *wp = NULL;
}

int handshake_watch_add(handshake_watch_t *w, void *sock, char *err)
{
    if (w->n >= HANDSHAKE_WATCH_MAX)
        return status_set(err, STATUS_EFULL, "handshake watch: more than %d sockets",
                          HANDSHAKE_WATCH_MAX);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://handshake-%p-%d", (void *)w, w->n);
    void *mon = zmq_socket(w->ctx, ZMQ_PAIR);
    int zero = 0;
    if (!mon) return status_set(err, STATUS_ENET, "handshake watch: %s", zmq_strerror(zmq_errno()));
    zmq_setsockopt(mon, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_socket_monitor(sock, ep,
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) ||
        zmq_connect(mon, ep)) {
        int e = zmq_errno();
        zmq_close(mon);
        return status_set(err, STATUS_ENET, "handshake watch: monitor: %s", zmq_strerror(e));
    }
    w->w[w->n++] = (watched_t){.sock = sock, .mon = mon};
    return 0;
}

int handshake_watch_items(const handshake_watch_t *w, void **socks, int max)
{
    int k = 0;
    for (int i = 0; i < w->n && k < max; i++) socks[k++] = w->w[i].mon;
    return k;
}

/* One event of watched socket x (frame 1: event u16, value u32; frame 2: the endpoint). */
static void on_event(handshake_watch_t *w, watched_t *x, uint16_t ev, uint32_t value)
{
    switch (ev) {
    case ZMQ_EVENT_CONNECTED:
        x->connected = 1;
        break;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        w->ok = 1;
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        x->fails++;
        w->auth_code = (int)value;
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        x->fails++;
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
            w->mismatch = 1;
        else
            w->other_protocol = (int)value;
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        x->fails++;
        break;
    default:
        break;
    }
}

handshake_verdict_t handshake_watch_update(handshake_watch_t *w, const char *endpoint, char *err)
{
    for (int i = 0; i < w->n; i++) {
        watched_t *x = &w->w[i];
        for (;;) {
            zmq_msg_t head, addr;
            zmq_msg_init(&head);
            if (zmq_msg_recv(&head, x->mon, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&head);
                break;
            }
            int more = zmq_msg_more(&head);
            if (zmq_msg_size(&head) >= 6) {
                uint16_t ev;
                uint32_t value;
                memcpy(&ev, zmq_msg_data(&head), 2);
                memcpy(&value, (const uint8_t *)zmq_msg_data(&head) + 2, 4);
                on_event(w, x, ev, value);
            }
            zmq_msg_close(&head);
            while (more) { /* the endpoint frame */
                zmq_msg_init(&addr);
                if (zmq_msg_recv(&addr, x->mon, 0) < 0)
                    more = 0;
                else
                    more = zmq_msg_more(&addr);
                zmq_msg_close(&addr);
            }
        }
    }
    if (w->ok) return HANDSHAKE_OK;
    /* A mechanism mismatch is not always reported as one: when the server closes the
     * connection before this side has read its greeting, this side sees "no detail". So
     * for a client without CURVE every kind of failure means a secured swarm. */
    static const char *const secured_swarm =
        "the swarm is secured: it requires a swarm key (--swarm-key FILE) or a key on its "
        "allowlist (--key FILE --allow FILE)";
    const char *why = NULL;
    int all = w->n > 0;
    for (int i = 0; i < w->n; i++) all &= w->w[i].fails >= HANDSHAKE_FAILS;
    if (w->auth_code)
        why = "this peer's key is not on the swarm's allowlist";
    else if (w->mismatch)
        why = w->secured ? "this peer uses CURVE (--swarm-key or --allow) and the swarm does not"
                         : secured_swarm;
    else if (all)
        why = w->secured ? "its CURVE handshake fails: this peer's swarm key is not the swarm's, "
                           "or the endpoint's key is not on this peer's allowlist (or the swarm "
                           "is not secured)"
                         : secured_swarm;
    if (!why) return HANDSHAKE_PENDING;
    double took = clock_now() - w->t0;
    if (w->auth_code)
        status_set(err, STATUS_EDENIED, "%s: %s refused the handshake (ZAP %d, after %.2f s): %s",
                   HANDSHAKE_TOKEN, endpoint, w->auth_code, took, why);
    else
        status_set(err, STATUS_EDENIED, "%s: %s refused the handshake (after %.2f s): %s",
                   HANDSHAKE_TOKEN, endpoint, took, why);
    return HANDSHAKE_REFUSED;
}

/* Whether any watched socket has a TCP connection (or had one). */
static int any_connected(const handshake_watch_t *w)
{
    for (int i = 0; i < w->n; i++)
        if (w->w[i].connected) return 1;
    return 0;
}

int handshake_check(const char *endpoint, const auth_t *auth, int timeout_ms, char *err)
{
    int rc = 0, zero = 0, ns = 0;
    const uint8_t(*cand)[AUTH_ID_LEN] = NULL;
    static const uint8_t none[1][AUTH_ID_LEN];
    int nc = auth ? auth_candidates(auth, &cand) : 1;
    if (!auth) cand = none;
    if (nc > HANDSHAKE_PROBE_TRIES) nc = HANDSHAKE_PROBE_TRIES;
    void *ctx = zmq_ctx_new();
    void **s = calloc((size_t)nc, sizeof *s);
    void **mons = calloc((size_t)nc, sizeof *mons);
    zmq_pollitem_t *items = calloc((size_t)nc, sizeof *items);
    handshake_watch_t *w = handshake_watch_new(ctx, auth != NULL);
    if (!ctx || !s || !mons || !items || !w) {
        rc = status_set(err, STATUS_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < nc; i++) {
        void *d = zmq_socket(ctx, ZMQ_DEALER);
        if (!d) break;
        zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
        if (auth && auth_client(auth, d, cand[i])) {
            zmq_close(d);
            continue;
        }
        s[ns++] = d;
        if ((rc = handshake_watch_add(w, d, err))) goto done;
        if (zmq_connect(d, endpoint) < 0) {
            rc = status_set(err, STATUS_EINVAL, "cannot connect to %s: %s", endpoint,
                            zmq_strerror(zmq_errno()));
            goto done;
        }
    }
    int nm = handshake_watch_items(w, mons, nc);
    for (int i = 0; i < nm; i++) items[i] = (zmq_pollitem_t){mons[i], 0, ZMQ_POLLIN, 0};
    double t0 = clock_now(), end = t0 + timeout_ms / 1000.0;
    double quiet = t0 + (timeout_ms < 2000 ? timeout_ms : 2000) / 1000.0;
    for (;;) {
        handshake_verdict_t v = handshake_watch_update(w, endpoint, err);
        if (v == HANDSHAKE_REFUSED) {
            rc = STATUS_EDENIED;
            break;
        }
        double now = clock_now();
        if (v == HANDSHAKE_OK || now >= end || (now >= quiet && !any_connected(w))) break;
        long wait = (long)((end - now) * 1000) + 1;
        if (wait > 50) wait = 50;
        zmq_poll(items, nm, wait);
    }
done:
    handshake_watch_destroy(&w);
    for (int i = 0; s && i < ns; i++) zmq_close(s[i]);
    free(s);
    free(mons);
    free(items);
    if (ctx) zmq_ctx_term(ctx);
    return rc;
}
