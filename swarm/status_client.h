/* status_client.h — asks a live peer for its view of the swarm (MSG_STATUS_REQ) and
 * returns the JSON it answers with (docs/protocol.md, "Status").
 * Not for: rendering (tools/cmd_status.c). */
#ifndef SWARMTRAIN_STATUS_CLIENT_H
#define SWARMTRAIN_STATUS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/* Fetches the status JSON of the peer at endpoint within timeout_ms. On success *json
 * is a 0-terminated string the caller frees. STATUS_ETIMEOUT when nobody answers;
 * STATUS_EDENIED when the peer refuses the handshake (err starts with HANDSHAKE_TOKEN,
 * handshake.h: the peer is secured and this client has no key, or the wrong one). */
int status_client_fetch(const char *endpoint, int timeout_ms, char **json, char *err);

/* The same over CURVE (auth.h; NULL: as status_client_fetch). With an allowlist, auth must
 * carry an identity on the peer's allowlist (auth_set_identity); the tool tries the
 * listed keys (the first 256) as the peer's at once. */
struct auth;
int status_client_fetch_auth(const char *endpoint, const struct auth *auth, int timeout_ms,
                             char **json, char *err);

/* Asks n peers at once (endpoints[i], whose peer id is ids[i]: the CURVE server key with
 * an allowlist; ids may be NULL without one) and waits up to timeout_ms for all of them.
 * jsons[i] receives peer i's status JSON (caller frees) or NULL, rcs[i] its status
 * (STATUS_ETIMEOUT: no answer in time). Returns how many answered; -1 with err when
 * nothing could be asked (out of memory). */
int status_client_fetch_many(const char *const *endpoints, const uint8_t (*ids)[32], int n,
                             const struct auth *auth, int timeout_ms, char **jsons, int *rcs,
                             char *err);

#endif
