/* status_client.c — one STATUS_REQ / STATUS_REP round trip over a DEALER socket, or, with
 * CURVE (auth.h), over one DEALER per candidate server key: with an allowlist the tool does
 * not know which listed key the endpoint has, and only the right one completes a handshake. */
#include "swarm/status_client.h"
#include "common/clock.h"
#include "common/status.h"
#include "swarm/auth.h"
#include "swarm/handshake.h"
#include "swarm/msg.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* With an allowlist the tool tries the first this many listed keys as the peer's. */
#define STATUS_CLIENT_TRIES 256

/* Reads one answer from s; 0, or a status. */
static int read_answer(void *s, char **json, char *err)
{
    zmq_msg_t part;
    msg_t reply;
    int rc = 0, n = 0;
    for (int more = 1; more; n++) {
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, s, 0) < 0) {
            zmq_msg_close(&part);
            return status_set(err, STATUS_EMALFORMED, "status answer cut short");
        }
        more = zmq_msg_more(&part);
        if (n == 0 && (msg_decode(zmq_msg_data(&part), zmq_msg_size(&part), &reply, err) ||
                       reply.type != MSG_STATUS_REP)) {
            rc = STATUS_EMALFORMED;
        } else if (n == 1 && !rc) {
            size_t l = zmq_msg_size(&part);
            if ((*json = malloc(l + 1))) {
                memcpy(*json, zmq_msg_data(&part), l);
                (*json)[l] = 0;
            }
        }
        zmq_msg_close(&part);
    }
    if (!rc && !*json) rc = status_set(err, STATUS_EMALFORMED, "status answer without a body");
    return rc;
}

int status_client_fetch_auth(const char *endpoint, const auth_t *auth, int timeout_ms, char **json,
                             char *err)
{
    int rc = 0, zero = 0, ns = 0;
    *json = NULL;
    const uint8_t(*cand)[AUTH_ID_LEN] = NULL;
    int nc = auth ? auth_candidates(auth, &cand) : 1;
    if (nc > STATUS_CLIENT_TRIES)
        nc = STATUS_CLIENT_TRIES; /* sockets, not handshakes, are the cost */
    void *ctx = zmq_ctx_new();
    void **s = calloc((size_t)nc, sizeof *s);
    void **mons = calloc((size_t)nc, sizeof *mons);
    zmq_pollitem_t *items = calloc((size_t)(2 * nc), sizeof *items);
    /* a refusal at the handshake is told apart from silence (handshake.h) */
    handshake_watch_t *hw = handshake_watch_new(ctx, auth != NULL);
    msg_t m = {.type = MSG_STATUS_REQ};
    uint8_t hdr[MSG_HEADER_MAX];
    size_t len;
    if (!s || !mons || !items || !hw) {
        rc = status_set(err, STATUS_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = msg_encode(&m, hdr, sizeof hdr, &len, err))) goto done;
    for (int i = 0; i < nc; i++) {
        void *d = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
        if (auth && auth_client(auth, d, cand[i])) {
            zmq_close(d);
            continue;
        }
        s[ns] = d;
        items[ns] = (zmq_pollitem_t){d, 0, ZMQ_POLLIN, 0};
        ns++;
        if ((rc = handshake_watch_add(hw, d, err))) goto done;
        if (zmq_connect(d, endpoint) < 0) {
            rc = status_set(err, STATUS_EINVAL, "cannot connect to %s: %s", endpoint,
                            zmq_strerror(zmq_errno()));
            goto done;
        }
        zmq_send(d, hdr, len, ZMQ_DONTWAIT);
    }
    int nm = handshake_watch_items(hw, mons, nc);
    for (int i = 0; i < nm; i++) items[ns + i] = (zmq_pollitem_t){mons[i], 0, ZMQ_POLLIN, 0};
    double end = clock_now() + timeout_ms / 1000.0;
    for (;;) {
        if (handshake_watch_update(hw, endpoint, err) == HANDSHAKE_REFUSED) {
            rc = STATUS_EDENIED;
            goto done;
        }
        long wait = (long)((end - clock_now()) * 1000);
        if (wait <= 0 || zmq_poll(items, ns + nm, wait) < 0) {
            rc = status_set(err, STATUS_ETIMEOUT, "no status answer from %s within %d ms", endpoint,
                            timeout_ms);
            goto done;
        }
        for (int i = 0; i < ns; i++)
            if (items[i].revents & ZMQ_POLLIN) {
                rc = read_answer(s[i], json, err);
                goto done;
            }
    }
done:
    handshake_watch_destroy(&hw);
    for (int i = 0; s && i < ns; i++) zmq_close(s[i]);
    free(s);
    free(mons);
    free(items);
    zmq_ctx_term(ctx);
    return rc;
}

int status_client_fetch(const char *endpoint, int timeout_ms, char **json, char *err)
{
    return status_client_fetch_auth(endpoint, NULL, timeout_ms, json, err);
}

int status_client_fetch_many(const char *const *endpoints, const uint8_t (*ids)[32], int n,
                             const auth_t *auth, int timeout_ms, char **jsons, int *rcs, char *err)
{
    int zero = 0, answered = 0, waiting = 0;
    for (int i = 0; i < n; i++) jsons[i] = NULL, rcs[i] = STATUS_ETIMEOUT;
    if (n <= 0) return 0;
    void *ctx = zmq_ctx_new();
    void **s = calloc((size_t)n, sizeof *s);
    zmq_pollitem_t *items = calloc((size_t)n, sizeof *items);
    int *at = calloc((size_t)n, sizeof *at); /* items[j] is peer at[j] */
    msg_t m = {.type = MSG_STATUS_REQ};
    uint8_t hdr[MSG_HEADER_MAX];
    size_t len;
    if (!ctx || !s || !items || !at || msg_encode(&m, hdr, sizeof hdr, &len, err)) {
        if (!err || !*err) status_set(err, STATUS_ENOMEM, "out of memory");
        answered = -1;
        goto done;
    }
    for (int i = 0; i < n; i++) {
        void *d = zmq_socket(ctx, ZMQ_DEALER);
        if (!d) {
            rcs[i] = STATUS_ENET;
            continue;
        }
        zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
        if ((auth && auth_client(auth, d, ids ? ids[i] : NULL)) ||
            zmq_connect(d, endpoints[i]) < 0) {
            rcs[i] = STATUS_EINVAL; /* no key for it, or not an endpoint */
            zmq_close(d);
            continue;
        }
        zmq_send(d, hdr, len, ZMQ_DONTWAIT);
        s[i] = d;
        waiting++;
    }
    double end = clock_now() + timeout_ms / 1000.0;
    while (waiting > 0) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (s[i] && rcs[i] == STATUS_ETIMEOUT) {
                items[k] = (zmq_pollitem_t){s[i], 0, ZMQ_POLLIN, 0};
                at[k++] = i;
            }
        long wait = (long)((end - clock_now()) * 1000);
        if (wait <= 0 || zmq_poll(items, k, wait) < 0) break;
        for (int j = 0; j < k; j++)
            if (items[j].revents & ZMQ_POLLIN) {
                int i = at[j];
                char e2[STATUS_ERR_LEN];
                rcs[i] = read_answer(s[i], &jsons[i], e2);
                if (rcs[i] == 0) answered++;
                waiting--;
            }
    }
done:
    for (int i = 0; s && i < n; i++)
        if (s[i]) zmq_close(s[i]);
    free(s);
    free(items);
    free(at);
    if (ctx) zmq_ctx_term(ctx);
    return answered;
}
