/* auth.c — swarm keys, allowlists and CURVE key derivation (auth.h). No sockets are owned
 * here: net.c and the status client hand theirs in to be configured. */
#include "swarm/auth.h"
#include "common/status.h"

#include <ctype.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

struct auth {
    auth_mode_t mode;
    /* swarm key: the swarm's CURVE pair; allowlist: this peer's */
    uint8_t cpk[32], csk[32];
    int have_self;
    uint8_t self[AUTH_ID_LEN];
    /* allowlist: Ed25519 ids and their CURVE keys */
    uint8_t (*ids)[AUTH_ID_LEN];
    uint8_t (*curves)[32];
    int n;
};

static int unhex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = s[2 * i + j];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= (unsigned)(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= (unsigned)(c - 'A' + 10);
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

const char *auth_hex(const uint8_t id[AUTH_ID_LEN], char out[65])
{
    for (int i = 0; i < AUTH_ID_LEN; i++) snprintf(out + 2 * i, 3, "%02x", id[i]);
    return out;
}

/* The whole file (at most 1 MiB) into a fresh buffer; NULL + err. */
static char *slurp(const char *path, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        status_set(err, STATUS_EIO, "cannot read %s", path);
        return NULL;
    }
    char *b = malloc((1 << 20) + 1);
    size_t n = b ? fread(b, 1, 1 << 20, f) : 0;
    int big = b && fgetc(f) != EOF;
    fclose(f);
    if (!b || big) {
        free(b);
        status_set(err, big ? STATUS_EINVAL : STATUS_ENOMEM, "%s: %s", path,
                   big ? "larger than 1 MiB" : "out of memory");
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

static int parse_allow(auth_t *a, char *text, const char *path, char *err)
{
    int cap = 16, line = 0;
    a->ids = malloc((size_t)cap * AUTH_ID_LEN);
    a->curves = malloc((size_t)cap * 32);
    if (!a->ids || !a->curves) return status_set(err, STATUS_ENOMEM, "out of memory");
    for (char *s = text, *next; s && *s; s = next) {
        next = strchr(s, '\n');
        if (next) *next++ = 0;
        line++;
        while (*s && isspace((unsigned char)*s)) s++;
        size_t l = strlen(s);
        while (l && isspace((unsigned char)s[l - 1])) s[--l] = 0;
        if (!l || s[0] == '#') continue;
        uint8_t id[AUTH_ID_LEN];
        if (l != 2 * AUTH_ID_LEN || unhex(s, AUTH_ID_LEN, id))
            return status_set(err, STATUS_EINVAL, "%s line %d: not a public key (64 hex digits)",
                              path, line);
        if (a->n == AUTH_MAX_ALLOW)
            return status_set(err, STATUS_EINVAL, "%s: more than %d keys", path, AUTH_MAX_ALLOW);
        if (a->n == cap) {
            cap *= 2;
            void *p = realloc(a->ids, (size_t)cap * AUTH_ID_LEN), *q;
            if (!p) return status_set(err, STATUS_ENOMEM, "out of memory");
            a->ids = p;
            if (!(q = realloc(a->curves, (size_t)cap * 32)))
                return status_set(err, STATUS_ENOMEM, "out of memory");
            a->curves = q;
        }
        if (crypto_sign_ed25519_pk_to_curve25519(a->curves[a->n], id))
            return status_set(err, STATUS_EINVAL, "%s line %d: not a valid Ed25519 key", path,
                              line);
        memcpy(a->ids[a->n++], id, AUTH_ID_LEN);
    }
    if (!a->n) return status_set(err, STATUS_EINVAL, "%s: no keys", path);
    return 0;
}

auth_t *auth_new(const char *swarm_key_path, const char *allow_path, char *err)
{
    if (!swarm_key_path == !allow_path) {
        status_set(err, STATUS_EINVAL, "give either --swarm-key or --allow, not both");
        return NULL;
    }
    if (sodium_init() < 0) {
        status_set(err, STATUS_EIO, "libsodium failed to initialize");
        return NULL;
    }
    auth_t *a = calloc(1, sizeof *a);
    size_t len = 0;
    char *text = slurp(swarm_key_path ? swarm_key_path : allow_path, &len, err);
    if (!a || !text) goto fail;
    if (swarm_key_path) {
        a->mode = AUTH_SWARM_KEY;
        if (len < 16) {
            status_set(err, STATUS_EINVAL, "%s: a swarm key needs at least 16 octets",
                       swarm_key_path);
            goto fail;
        }
        uint8_t seed[crypto_box_SEEDBYTES];
        crypto_generichash(seed, sizeof seed, (const uint8_t *)text, len,
                           (const uint8_t *)"swarmtrain swarm key, CURVE", 27);
        crypto_box_seed_keypair(a->cpk, a->csk, seed);
        sodium_memzero(seed, sizeof seed);
    } else {
        a->mode = AUTH_ALLOW;
        if (parse_allow(a, text, allow_path, err)) goto fail;
    }
    sodium_memzero(text, len);
    free(text);
    return a;
fail:
    if (text) sodium_memzero(text, len);
    free(text);
    auth_destroy(&a);
    return NULL;
}

void auth_destroy(auth_t **ap)
{
    if (!ap || !*ap) return;
    auth_t *a = *ap;
    sodium_memzero(a->csk, sizeof a->csk);
    free(a->ids);
    free(a->curves);
    free(a);
    *ap = NULL;
}

auth_mode_t auth_mode(const auth_t *a)
{
    return a->mode;
}

int auth_set_identity(auth_t *a, const uint8_t pk[AUTH_ID_LEN], const uint8_t sk[AUTH_SK_LEN],
                      char *err)
{
    memcpy(a->self, pk, AUTH_ID_LEN);
    a->have_self = 1;
    if (a->mode != AUTH_ALLOW) return 0;
    if (!sk) return status_set(err, STATUS_EINVAL, "an allowlist needs this peer's secret key");
    if (crypto_sign_ed25519_pk_to_curve25519(a->cpk, pk) ||
        crypto_sign_ed25519_sk_to_curve25519(a->csk, sk))
        return status_set(err, STATUS_EINVAL, "cannot derive a CURVE key from the identity");
    return 0;
}

int auth_self_listed(const auth_t *a)
{
    if (a->mode != AUTH_ALLOW) return 1;
    for (int i = 0; i < a->n; i++)
        if (!memcmp(a->ids[i], a->self, AUTH_ID_LEN)) return 1;
    return 0;
}

int auth_server(const auth_t *a, void *sock)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "swarmtrain", 10) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->csk, 32))
        return -1;
    return 0;
}

int auth_client(const auth_t *a, void *sock, const uint8_t server_id[AUTH_ID_LEN])
{
    uint8_t server[32];
    if (a->mode == AUTH_SWARM_KEY)
        memcpy(server, a->cpk, 32);
    else if (!server_id || crypto_sign_ed25519_pk_to_curve25519(server, server_id))
        return -1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, 32) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, a->cpk, 32) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->csk, 32))
        return -1;
    return 0;
}

int auth_candidates(const auth_t *a, const uint8_t (**ids)[AUTH_ID_LEN])
{
    static const uint8_t any[1][AUTH_ID_LEN];
    if (a->mode == AUTH_SWARM_KEY) {
        *ids = any;
        return 1;
    }
    *ids = (const uint8_t(*)[AUTH_ID_LEN])a->ids;
    return a->n;
}

int auth_admit(const auth_t *a, const uint8_t curve[32], uint8_t id[AUTH_ID_LEN])
{
    if (id) memset(id, 0, AUTH_ID_LEN);
    if (a->mode == AUTH_SWARM_KEY) return !sodium_memcmp(curve, a->cpk, 32);
    for (int i = 0; i < a->n; i++)
        if (!sodium_memcmp(curve, a->curves[i], 32)) {
            if (id) memcpy(id, a->ids[i], AUTH_ID_LEN);
            return 1;
        }
    return 0;
}

/* ---- key files ---- */

static int write_private(const char *path, const char *text, char *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return status_set(err, STATUS_EIO, "cannot write %s", path);
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n;
    ok &= fchmod(fd, 0600) == 0;
    ok &= close(fd) == 0;
    return ok ? 0 : status_set(err, STATUS_EIO, "cannot write %s", path);
}

int auth_keygen(const char *path, uint8_t pk_out[AUTH_ID_LEN], char *err)
{
    if (sodium_init() < 0) return status_set(err, STATUS_EIO, "libsodium failed to initialize");
    uint8_t pk[AUTH_ID_LEN], sk[AUTH_SK_LEN];
    char text[512], hex[65], pubpath[4096];
    crypto_sign_keypair(pk, sk);
    int n = snprintf(text, sizeof text,
                     "# swarmtrain Ed25519 key pair: keep secret\npublic %s\nsecret ",
                     auth_hex(pk, hex));
    for (int i = 0; i < AUTH_SK_LEN; i++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%02x", sk[i]);
    snprintf(text + n, sizeof text - (size_t)n, "\n");
    sodium_memzero(sk, sizeof sk);
    int rc = write_private(path, text, err);
    sodium_memzero(text, sizeof text);
    if (rc) return rc;
    snprintf(pubpath, sizeof pubpath, "%s.pub", path);
    FILE *f = fopen(pubpath, "w");
    if (!f || fprintf(f, "%s\n", hex) < 0 || fclose(f)) {
        if (f) fclose(f);
        return status_set(err, STATUS_EIO, "cannot write %s", pubpath);
    }
    if (pk_out) memcpy(pk_out, pk, AUTH_ID_LEN);
    return 0;
}

int auth_key_read(const char *path, uint8_t pk[AUTH_ID_LEN], uint8_t sk[AUTH_SK_LEN], char *err)
{
    if (sodium_init() < 0) return status_set(err, STATUS_EIO, "libsodium failed to initialize");
    size_t len = 0;
    char *text = slurp(path, &len, err);
    if (!text) return STATUS_EIO;
    int have = 0, rc = 0;
    for (char *s = text, *next; s && *s; s = next) {
        next = strchr(s, '\n');
        if (next) *next++ = 0;
        size_t l = strlen(s);
        while (l && isspace((unsigned char)s[l - 1])) s[--l] = 0;
        if (!strncmp(s, "public ", 7) && l == 7 + 64 && !unhex(s + 7, AUTH_ID_LEN, pk))
            have |= 1;
        else if (!strncmp(s, "secret ", 7) && l == 7 + 128 && !unhex(s + 7, AUTH_SK_LEN, sk))
            have |= 2;
    }
    sodium_memzero(text, len);
    free(text);
    uint8_t check[AUTH_ID_LEN];
    if (have != 3)
        rc = status_set(err, STATUS_EINVAL, "%s: not a key file (swarmtrain keygen)", path);
    else if (crypto_sign_ed25519_sk_to_pk(check, sk) || memcmp(check, pk, AUTH_ID_LEN))
        rc = status_set(err, STATUS_ECORRUPT, "%s: the secret key does not match the public key",
                        path);
    if (rc) sodium_memzero(sk, AUTH_SK_LEN);
    return rc;
}

int auth_swarm_keygen(const char *path, char *err)
{
    if (sodium_init() < 0) return status_set(err, STATUS_EIO, "libsodium failed to initialize");
    uint8_t k[32];
    char text[128];
    randombytes_buf(k, sizeof k);
    int n = snprintf(text, sizeof text, "# swarmtrain swarm key: whoever holds it may join\n");
    for (int i = 0; i < 32; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%02x", k[i]);
    snprintf(text + n, sizeof text - (size_t)n, "\n");
    sodium_memzero(k, sizeof k);
    int rc = write_private(path, text, err);
    sodium_memzero(text, sizeof text);
    return rc;
}
