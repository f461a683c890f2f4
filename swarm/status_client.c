/* status_client.c — one STATUS_REQ / STATUS_REP round trip over a DEALER socket. */
#include "swarm/status_client.h"
#include "common/status.h"
#include "swarm/msg.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int status_client_fetch(const char *endpoint, int timeout_ms, char **json, char *err)
{
    int rc = 0, zero = 0;
    *json = NULL;
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    if (zmq_connect(s, endpoint) < 0) {
        rc = status_set(err, STATUS_EINVAL, "cannot connect to %s: %s", endpoint,
                        zmq_strerror(zmq_errno()));
        goto done;
    }
    msg_t m = {.type = MSG_STATUS_REQ};
    uint8_t hdr[MSG_HEADER_MAX];
    size_t len;
    if ((rc = msg_encode(&m, hdr, sizeof hdr, &len, err))) goto done;
    zmq_send(s, hdr, len, 0);
    zmq_msg_t part;
    int n = 0;
    msg_t reply;
    for (int more = 1; more; n++) {
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, s, 0) < 0) {
            zmq_msg_close(&part);
            rc = status_set(err, STATUS_ETIMEOUT, "no status answer from %s within %d ms", endpoint,
                            timeout_ms);
            goto done;
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
done:
    zmq_close(s);
    zmq_ctx_term(ctx);
    return rc;
}
