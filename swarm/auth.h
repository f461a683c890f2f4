/* auth.h — who may join a swarm, and the keys that prove it (docs/protocol.md section 15).
 *
 * Two modes, chosen by the peer's options:
 * - swarm key (--swarm-key FILE): a shared secret. One CURVE key pair is derived from it
 *   (BLAKE2b of the file's contents -> crypto_box_seed_keypair); every socket is a CURVE
 *   server or client with that pair, and the ZAP handler admits only clients that present
 *   its public key. Anyone who holds the file can join; nobody else completes a handshake.
 * - allowlist (--allow FILE): Ed25519 public keys, one a line (hex). Each peer's CURVE pair
 *   is derived from its Ed25519 identity (crypto_sign_ed25519_{pk,sk}_to_curve25519); a
 *   DEALER to member X uses curve(X) as the server key, and the ZAP handler admits only
 *   clients whose CURVE key is curve(k) for some listed k, reporting k as the ZAP user id
 *   so that the receiver can check a header's sender against the key that authenticated
 *   the connection.
 *
 * Also: key files. `swarmtrain keygen` writes a key pair as text ("public HEX", "secret
 * HEX") and its public key alone into FILE.pub, the line an allowlist takes.
 *
 * Not for: sockets' lifetimes or the ZAP socket itself (net.c owns every socket);
 * signatures on messages (members.c, msg.c).
 */
#ifndef SWARMTRAIN_AUTH_H
#define SWARMTRAIN_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define AUTH_ID_LEN    32 /* an Ed25519 public key = a peer id */
#define AUTH_SK_LEN    64 /* an Ed25519 secret key */
#define AUTH_MAX_ALLOW 4096

typedef enum { AUTH_SWARM_KEY = 1, AUTH_ALLOW = 2 } auth_mode_t;

typedef struct auth auth_t;

/* Reads the swarm key file or the allowlist (exactly one of the paths non-NULL). NULL +
 * err when the file cannot be read, is too short (a swarm key needs 16 octets), or a line
 * of the allowlist is not 64 hex digits (blank lines and # comments are skipped). */
auth_t *auth_new(const char *swarm_key_path, const char *allow_path, char *err);

/* NULL-safe; wipes the secret keys. */
void auth_destroy(auth_t **a);

auth_mode_t auth_mode(const auth_t *a);

/* This peer's Ed25519 identity (its CURVE pair in allowlist mode). 0 or a status. */
int auth_set_identity(auth_t *a, const uint8_t pk[AUTH_ID_LEN], const uint8_t sk[AUTH_SK_LEN],
                      char *err);

/* Makes sock a CURVE server that consults ZAP (domain "swarmtrain"). 0 or -1. */
int auth_server(const auth_t *a, void *sock);

/* Makes sock a CURVE client of the server whose peer id is server_id (ignored with a swarm
 * key: every server has the swarm's key). 0 or -1. */
int auth_client(const auth_t *a, void *sock, const uint8_t server_id[AUTH_ID_LEN]);

/* Ids a client may try as the server's when it does not know whom it connects to (a
 * bootstrap endpoint, the status tool): the allowlist in allowlist mode, one entry (any)
 * with a swarm key. Returns how many; *ids points into a. */
int auth_candidates(const auth_t *a, const uint8_t (**ids)[AUTH_ID_LEN]);

/* The ZAP decision for a client that presented CURVE public key `curve`: 1 admitted (and,
 * in allowlist mode, its Ed25519 id into id when not NULL; zeros with a swarm key), 0 refused. */
int auth_admit(const auth_t *a, const uint8_t curve[32], uint8_t id[AUTH_ID_LEN]);

/* Whether this peer's own id is on its allowlist (a swarm key: always). */
int auth_self_listed(const auth_t *a);

/* ---- key files ---- */

/* A fresh Ed25519 pair into path (mode 0600, "public HEX\nsecret HEX\n") and its public key
 * into path.pub. pk (may be NULL) receives it. 0 or a status. */
int auth_keygen(const char *path, uint8_t pk[AUTH_ID_LEN], char *err);

/* Reads a key file written by auth_keygen. 0 or a status (the pair must match). */
int auth_key_read(const char *path, uint8_t pk[AUTH_ID_LEN], uint8_t sk[AUTH_SK_LEN], char *err);

/* 32 random octets as hex into path (mode 0600): a swarm key. 0 or a status. */
int auth_swarm_keygen(const char *path, char *err);

/* Hex of an id (65 chars with the terminator). */
const char *auth_hex(const uint8_t id[AUTH_ID_LEN], char out[65]);

#endif
