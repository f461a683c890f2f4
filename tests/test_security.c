/* test_security.c — who may join, signed membership, and bounded updates
 * (docs/protocol.md section 15).
 * - handshake: with an allowlist or a swarm key every socket is CURVE; a peer not on the
 *   allowlist, or with another swarm key, is refused at the handshake, counted with its key
 *   and address, and never appears in status; an admitted one does;
 * - forged gossip: a member entry not signed by the member it describes is ignored
 *   (a greater heartbeat, a changed field, an unknown member vouched for by another);
 * - replay: a signed HELLO or LEAVE is taken once; a replayed one (its counter not above the
 *   last taken) and a forged one (bad signature) are refused and counted;
 * - key files: keygen writes a pair that reads back, a tampered one is refused;
 * - refused, says why: `peer --join` and `status --connect` without the swarm key, with
 *   another, or with a key not on the allowlist exit 3 within 5 s naming the reason;
 * - the norm bound's scale: a message that counted nothing sets none, and one near-empty
 *   early norm does not refuse an honest update (the bound is on the largest of fewer
 *   than 3 norms, then on their median); a 1e29 update is refused from the first norm;
 * - poisoned member (real processes, `local --secure --poison`): a member that sends
 *   well-framed DeMo bodies every step, NaN values at even steps and values of 1e29 at odd
 *   ones (or, in a second run, out-of-order indices), is refused and expelled,
 *   nobody waits 30 s for it, and the honest peers' validation loss matches a run without it
 *   within 1%.
 * Argument: "unit" (the in-process cases) or "poison" (the swarm runs); none: all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/status.h"
#include "peer/peer_impl.h"
#include "store/store.h"
#include "swarm/auth.h"
#include "swarm/handshake.h"
#include "swarm/members.h"
#include "swarm/msg.h"
#include "swarm/net.h"
#include "swarm/status_client.h"
#include "record.h"
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/st_secXXXXXX");
    return mkdtemp(dir) && sodium_init() >= 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return testutil_rmtree(dir);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* The status document's count of refused handshakes. */
static long long refused_of(const char *json)
{
    json_obj_t top;
    if (!json || json_object(json, NULL, &top) || !json_has(&top, "refused")) return -1;
    return (long long)json_num(&top, "refused");
}

/* The answering peer's count of refused messages: its row, the first of "peers". */
static long long rejected_of(const char *json)
{
    int n;
    json_obj_t *rows = record_rows(json, "peers", &n);
    long long v = n > 0 && json_has(&rows[0], "rejected") ? (long long)json_num(&rows[0], "rejected") : -1;
    free(rows);
    return v;
}

/* ---- in-process peers: a network thread each ------------------------------------------ */

typedef struct {
    uint8_t pk[32], sk[64];
    char hex[65];
    char ep[256];
    auth_t *auth;
    net_t *net;
} node_t;

static void node_keys(node_t *n)
{
    memset(n, 0, sizeof *n);
    crypto_sign_keypair(n->pk, n->sk);
    auth_hex(n->pk, n->hex);
}

/* A file of lines into dir/name; returns its path (static buffer per call site). */
static const char *write_file(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void node_auth(node_t *n, const char *swarm_key, const char *allow)
{
    char err[STATUS_ERR_LEN];
    n->auth = auth_new(swarm_key, allow, err);
    if (!n->auth) fail_msg("auth_new: %s", err);
    assert_int_equal(auth_set_identity(n->auth, n->pk, n->sk, err), 0);
}

/* Starts n's network thread; founding: it knows the swarm and the run (answers HELLO). */
static void node_start(node_t *n, int founding)
{
    char err[STATUS_ERR_LEN];
    net_config_t nc = {.bind = "tcp://127.0.0.1:0",
                       .heartbeat_s = 0.1,
                       .timeout_s = 10,
                       .sk = n->sk,
                       .auth = n->auth,
                       .swarm = founding ? 0x5ec0 : 0,
                       .run_text = founding ? "stages=1\n" : NULL};
    memcpy(nc.id, n->pk, 32);
    nc.self.state = MEMBER_SERVING;
    nc.self.loss = NAN;
    n->net = net_start(&nc, n->ep, err);
    if (!n->net) fail_msg("net_start: %s", err);
}

static void node_stop(node_t *n)
{
    net_stop(&n->net);
    auth_destroy(&n->auth);
}

/* The status document of `of`, asked with `as`'s credentials (NULL: none). */
static char *status_of(const node_t *of, const node_t *as)
{
    char *json = NULL, err[STATUS_ERR_LEN];
    if (status_client_fetch_auth(of->ep, as ? as->auth : NULL, 2000, &json, err)) return NULL;
    return json;
}

/* Polls of's status until `id` is listed (want 1) or not (want 0), up to seconds. */
static int wait_listed(const node_t *of, const node_t *as, const char *id, int want, double s)
{
    double end = clock_now() + s;
    do {
        char *j = status_of(of, as);
        int has = j && strstr(j, id) != NULL;
        free(j);
        if (has == want) return 1;
        clock_sleep(0.1);
    } while (clock_now() < end);
    return 0;
}

/* Polls of's status (asked with as's credentials) until pick's count of it reaches min, up
 * to s seconds: what a message the test sent did shows in a count once the peer's network
 * thread has taken it, which on a loaded machine may be seconds later. Returns the last
 * count seen (-1: no answer), which the caller checks. */
static long long wait_count(const node_t *of, const node_t *as, long long (*pick)(const char *),
                            long long min, double s)
{
    double end = clock_now() + s;
    long long v = -1;
    do {
        char *j = status_of(of, as);
        v = j ? pick(j) : -1;
        free(j);
        if (v >= min) break;
        clock_sleep(0.1);
    } while (clock_now() < end);
    return v;
}

/* With an allowlist: B (listed) joins A and shows in its status; C (not listed, its own
 * list naming A) is refused at the handshake, counted with its CURVE key and address, and
 * never listed; the status tool without credentials gets no answer. */
static void test_allowlist_handshake(void **state)
{
    (void)state;
    node_t a, b, c;
    node_keys(&a), node_keys(&b), node_keys(&c);
    char list[256], list_c[256], p1[256], p2[256];
    snprintf(list, sizeof list, "# members\n%s\n\n%s\n", a.hex, b.hex);
    snprintf(list_c, sizeof list_c, "%s\n%s\n", a.hex, c.hex);
    node_auth(&a, NULL, write_file("allow", list, p1, sizeof p1));
    node_auth(&b, NULL, p1);
    node_auth(&c, NULL, write_file("allow_c", list_c, p2, sizeof p2));
    node_start(&a, 1);
    node_start(&b, 0);
    node_start(&c, 0);
    char err[STATUS_ERR_LEN];
    assert_int_equal(net_hello(b.net, a.ep, 0, err), 0);
    assert_int_equal(net_hello(c.net, a.ep, 0, err), 0);
    if (!wait_listed(&a, &b, b.hex, 1, 10)) fail_msg("B was not listed by A within 10 s");
    /* C's connection is refused at the handshake: A counts it once its ZAP handler ran */
    long long r = wait_count(&a, &b, refused_of, 1, 10);
    if (r < 1) fail_msg("A counted no refused handshake (C's) within 10 s (count %lld)", r);
    char *j = status_of(&a, &b);
    assert_non_null(j);
    assert_null(strstr(j, c.hex));
    assert_int_equal(count(j, "\"id\":"), 2);
    assert_true(refused_of(j) >= 1);
    assert_non_null(strstr(j, "\"security\":\"allowlist\""));
    /* the refusal names C's CURVE key (the handshake knows no other) and its address */
    uint8_t ccurve[32];
    char chex[65];
    assert_int_equal(crypto_sign_ed25519_pk_to_curve25519(ccurve, c.pk), 0);
    assert_non_null(strstr(j, auth_hex(ccurve, chex)));
    assert_non_null(strstr(j, "\"addr\":\"127.0.0.1\""));
    printf("allowlist: B admitted, C refused (%lld refusals)\n", refused_of(j));
    free(j);
    /* nobody without a listed key gets a status answer, and C gets none either */
    assert_null(status_of(&a, NULL));
    assert_null(status_of(&a, &c));
    node_stop(&c);
    node_stop(&b);
    node_stop(&a);
}

/* With a swarm key: a holder joins; a peer with another key is refused and never listed. */
static void test_swarm_key_handshake(void **state)
{
    (void)state;
    node_t a, b, e;
    node_keys(&a), node_keys(&b), node_keys(&e);
    char k1[256], k2[256], err[STATUS_ERR_LEN];
    snprintf(k1, sizeof k1, "%s/swarm1.key", dir);
    snprintf(k2, sizeof k2, "%s/swarm2.key", dir);
    assert_int_equal(auth_swarm_keygen(k1, err), 0);
    assert_int_equal(auth_swarm_keygen(k2, err), 0);
    node_auth(&a, k1, NULL);
    node_auth(&b, k1, NULL);
    node_auth(&e, k2, NULL);
    node_start(&a, 1);
    node_start(&b, 0);
    node_start(&e, 0);
    assert_int_equal(net_hello(b.net, a.ep, 0, err), 0);
    assert_int_equal(net_hello(e.net, a.ep, 0, err), 0);
    if (!wait_listed(&a, &b, b.hex, 1, 10)) fail_msg("B was not listed by A within 10 s");
    /* E's connection is refused at the handshake: A counts it once its ZAP handler ran */
    long long r = wait_count(&a, &b, refused_of, 1, 10);
    if (r < 1) fail_msg("A counted no refused handshake (E's) within 10 s (count %lld)", r);
    char *j = status_of(&a, &b);
    assert_non_null(j);
    assert_null(strstr(j, e.hex));
    assert_true(refused_of(j) >= 1);
    assert_non_null(strstr(j, "\"security\":\"swarm-key\""));
    free(j);
    assert_null(status_of(&a, &e));
    /* a short key file is refused */
    char p[256];
    assert_null(auth_new(write_file("short.key", "tooshort", p, sizeof p), NULL, err));
    node_stop(&e);
    node_stop(&b);
    node_stop(&a);
}

/* ---- refused at the handshake: the connecting side says why (swarm/handshake.h) ------- */

/* Runs `swarmtrain ARGS` with stdout and stderr into dir/NAME.log, up to limit seconds;
 * returns the exit status (-1: killed at the limit) and the seconds it took in *took. */
static int run_bin(const char *name, const char *args, double limit, double *took)
{
    char log[256];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    double t0 = clock_now();
    pid_t pid = testutil_start(log, args);
    assert_true(pid > 0);
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) break;
        if (clock_now() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            *took = clock_now() - t0;
            return -1;
        }
        clock_sleep(0.02);
    }
    *took = clock_now() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp_log(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.log", dir, name);
    return testutil_slurp(path, NULL);
}

/* `swarmtrain ARGS` must be refused: exit status 3, its message carrying the refusal's
 * token (and, as a reason, `reason`), decided within 5 s of the connection attempt (the
 * "after S s" the program reports). The whole process gets 10 s: starting and ending an
 * ASan binary (and its re-exec) on a loaded 2-core machine took up to 4 s of it. */
static void expect_refused(const char *name, const char *args, const char *reason)
{
    double took = 0, decided = -1;
    int rc = run_bin(name, args, 20, &took);
    char *out = slurp_log(name);
    const char *a = out ? strstr(out, "after ") : NULL;
    if (a) sscanf(a, "after %lf s", &decided);
    printf("%s: exit %d after %.2f s (decided after %.2f s): %s", name, rc, took, decided,
           out ? out : "(no output)\n");
    if (rc != HANDSHAKE_EXIT_REFUSED || !(decided >= 0 && decided <= 5.0) || took > 10.0 ||
        !out || !strstr(out, HANDSHAKE_TOKEN) || !strstr(out, reason)) {
        free(out);
        fail_msg("%s: wanted exit %d, decided within 5 s, with \"%s\" and \"%s\"", name,
                 HANDSHAKE_EXIT_REFUSED, HANDSHAKE_TOKEN, reason);
    }
    free(out);
}

/* A secured swarm's member (in process) and processes that knock without the right key:
 * `peer --join` and `status --connect` end within 5 s with exit status 3 and the reason:
 * no key at all (a mechanism mismatch), another swarm key (the handshake fails every
 * time), a key not on the allowlist (ZAP refuses). The refusal is also an event in the
 * refused peer's store. The member's own key still gets its status. */
static void test_refused_says_why(void **state)
{
    (void)state;
    node_t a;
    node_keys(&a);
    char k1[256], k2[256], err[STATUS_ERR_LEN], args[2048];
    snprintf(k1, sizeof k1, "%s/swarm1.key", dir);
    snprintf(k2, sizeof k2, "%s/swarm2.key", dir);
    assert_int_equal(auth_swarm_keygen(k1, err), 0);
    assert_int_equal(auth_swarm_keygen(k2, err), 0);
    node_auth(&a, k1, NULL);
    node_start(&a, 1);
    const char *peer = "peer --threads 1 --data";
    snprintf(args, sizeof args, "%s %s --join %s --db %s/nokey.db", peer, testutil_corpus(), a.ep,
             dir);
    expect_refused("peer_nokey", args, "requires a swarm key");
    snprintf(args, sizeof args, "%s %s --join %s --swarm-key %s", peer, testutil_corpus(), a.ep,
             k2);
    expect_refused("peer_otherkey", args, "swarm key is not the swarm's");
    snprintf(args, sizeof args, "status --connect %s", a.ep);
    expect_refused("status_nokey", args, "requires a swarm key");
    snprintf(args, sizeof args, "status --connect %s --swarm-key %s", a.ep, k2);
    expect_refused("status_otherkey", args, "swarm key is not the swarm's");
    double took;
    snprintf(args, sizeof args, "status --connect %s --swarm-key %s --json", a.ep, k1);
    assert_int_equal(run_bin("status_key", args, 20, &took), 0);
    /* the refusal is recorded in the refused peer's store */
    char db[256];
    snprintf(db, sizeof db, "%s/nokey.db", dir);
    store_t *st = store_open(db, err);
    assert_non_null(st);
    store_event_t ev[8];
    int n = 0, found = 0;
    assert_int_equal(store_event_last(st, 8, ev, &n, err), 0);
    for (int i = 0; i < n; i++)
        found |= !strcmp(ev[i].kind, "refused") && strstr(ev[i].detail, HANDSHAKE_TOKEN);
    store_close(&st);
    assert_true(found);
    node_stop(&a);
    /* an allowlist that does not name B: ZAP refuses B's key */
    char list[256], list_b[256], p1[256], p2[256], keyb[256];
    uint8_t pkb[32];
    snprintf(keyb, sizeof keyb, "%s/b.key", dir);
    assert_int_equal(auth_keygen(keyb, pkb, err), 0);
    char hexb[65];
    auth_hex(pkb, hexb);
    node_keys(&a);
    snprintf(list, sizeof list, "%s\n", a.hex);
    snprintf(list_b, sizeof list_b, "%s\n%s\n", a.hex, hexb);
    node_auth(&a, NULL, write_file("allow", list, p1, sizeof p1));
    write_file("allow_b", list_b, p2, sizeof p2);
    node_start(&a, 1);
    snprintf(args, sizeof args, "%s %s --join %s --key %s --allow %s", peer, testutil_corpus(),
             a.ep, keyb, p2);
    expect_refused("peer_notlisted", args, "not on the swarm's allowlist");
    snprintf(args, sizeof args, "status --connect %s --key %s --allow %s", a.ep, keyb, p2);
    expect_refused("status_notlisted", args, "not on the swarm's allowlist");
    node_stop(&a);
}

/* ---- signed membership ----------------------------------------------------------------- */

static msg_member_t entry(const node_t *n, uint64_t heartbeat, int state)
{
    msg_member_t m;
    memset(&m, 0, sizeof m);
    memcpy(m.id, n->pk, 32);
    snprintf(m.addr, sizeof m.addr, "tcp://127.0.0.1:9");
    m.state = (uint8_t)state;
    m.heartbeat = heartbeat;
    m.loss = NAN;
    return m;
}

static void test_forged_gossip(void **state)
{
    (void)state;
    node_t a, b, c;
    node_keys(&a), node_keys(&b), node_keys(&c);
    msg_member_t self = entry(&a, 1, MEMBER_SERVING);
    char err[STATUS_ERR_LEN];
    members_t *t = members_new(&self, 0, NULL, err);
    assert_non_null(t);
    members_set_signing(t, a.sk);
    /* B's own entry, signed by B: taken */
    msg_member_t v = entry(&b, 10, MEMBER_SERVING);
    msg_member_sign(&v, b.sk);
    assert_int_equal(members_merge(t, &v, 1, 0), 1);
    assert_true(members_at(t, members_find(t, b.pk))->alive);
    /* "B is leaving", heartbeat 11, signed by C: ignored, B stays alive */
    msg_member_t f = entry(&b, 11, MEMBER_LEAVING);
    msg_member_sign(&f, c.sk);
    assert_int_equal(members_merge(t, &f, 1, 1), 0);
    assert_true(members_at(t, members_find(t, b.pk))->alive);
    assert_int_equal(members_at(t, members_find(t, b.pk))->m.heartbeat, 10);
    assert_int_equal(members_forged(t), 1);
    /* B's genuine entry with one field changed after signing (its address): ignored */
    msg_member_t g = entry(&b, 12, MEMBER_SERVING);
    msg_member_sign(&g, b.sk);
    snprintf(g.addr, sizeof g.addr, "tcp://10.6.6.6:1");
    assert_int_equal(members_merge(t, &g, 1, 2), 0);
    assert_string_equal(members_at(t, members_find(t, b.pk))->m.addr, "tcp://127.0.0.1:9");
    assert_int_equal(members_forged(t), 2);
    /* an unknown member vouched for by another: not added */
    msg_member_t h = entry(&c, 5, MEMBER_SERVING);
    msg_member_sign(&h, b.sk);
    members_merge(t, &h, 1, 3);
    assert_int_equal(members_find(t, c.pk), -1);
    /* a replayed (older) genuine entry: ignored without a check; a newer one: taken */
    assert_int_equal(members_merge(t, &v, 1, 4), 0);
    msg_member_t w = entry(&b, 13, MEMBER_LEAVING);
    msg_member_sign(&w, b.sk);
    assert_int_equal(members_merge(t, &w, 1, 5), 1);
    assert_false(members_at(t, members_find(t, b.pk))->alive);
    /* a probe candidate relayed in state DEAD verifies as its owner signed it */
    msg_member_t d = entry(&c, 7, MEMBER_SERVING);
    msg_member_sign(&d, c.sk);
    d.state = MEMBER_DEAD;
    members_merge(t, &d, 1, 6);
    assert_true(members_find(t, c.pk) > 0);
    assert_int_equal(members_forged(t), 3);
    /* the table's own entry goes out signed */
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(members_encode(t, &buf, &len, err), 0);
    msg_member_t out[4];
    int k = 0;
    assert_int_equal(msg_members_decode(buf, len, out, 4, &k, err), 0);
    assert_true(k >= 1 && msg_member_verify(&out[0], out[0].state));
    free(buf);
    members_destroy(&t);
    /* without signing (the simulator) nothing is checked */
    t = members_new(&self, 0, NULL, err);
    assert_int_equal(members_merge(t, &f, 1, 0), 0); /* unknown + leaving: not added anyway */
    msg_member_t u = entry(&c, 3, MEMBER_SERVING);
    assert_int_equal(members_merge(t, &u, 1, 0), 1);
    members_destroy(&t);
}

/* A raw member socket speaking to A's ROUTER under B's id. */
static void send_hdr(void *s, const node_t *from, msg_t *m, const uint8_t *sign_sk)
{
    uint8_t hdr[MSG_HEADER_MAX];
    size_t len;
    char err[STATUS_ERR_LEN];
    memcpy(m->sender, from->pk, 32);
    assert_int_equal(msg_encode(m, hdr, sizeof hdr, &len, err), 0);
    if (sign_sk) msg_sign(hdr, len, sign_sk);
    assert_int_equal(zmq_send(s, hdr, len, 0), (int)len);
}

static void test_replayed_control(void **state)
{
    (void)state;
    node_t a, b, c;
    node_keys(&a), node_keys(&b), node_keys(&c);
    node_start(&a, 1);
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, b.pk, 32);
    assert_int_equal(zmq_connect(s, a.ep), 0);
    msg_t hello = {.type = MSG_HELLO, .stage = 0, .swarm = 0x5ec0, .seq = 1000};
    snprintf(hello.addr, sizeof hello.addr, "tcp://127.0.0.1:9");
    msg_t leave = {.type = MSG_LEAVE, .swarm = 0x5ec0, .seq = 2000};
    snprintf(leave.text, sizeof leave.text, "leaving");
    /* a HELLO signed by someone else: refused */
    /* Each refusal is waited for in A's count of rejected messages (up to 10 s: the
     * connection is made and the message taken by A's network thread meanwhile), and what
     * A lists is read after it, so that a check of what did not happen follows the proof
     * that A handled the message. */
    send_hdr(s, &b, &hello, c.sk);
    long long rej0 = wait_count(&a, NULL, rejected_of, 1, 10);
    if (rej0 < 1) fail_msg("A rejected no forged HELLO within 10 s (count %lld)", rej0);
    char *j = status_of(&a, NULL);
    assert_non_null(j);
    assert_null(strstr(j, b.hex));
    free(j);
    /* signed by B: B joins */
    send_hdr(s, &b, &hello, b.sk);
    if (!wait_listed(&a, NULL, b.hex, 1, 10)) fail_msg("B's HELLO not taken within 10 s");
    /* its LEAVE: B is gone */
    send_hdr(s, &b, &leave, b.sk);
    if (!wait_listed(&a, NULL, b.hex, 0, 10)) fail_msg("B's LEAVE not taken within 10 s");
    /* the same HELLO again (counter 1000 <= 2000): a replay, refused; B stays gone */
    send_hdr(s, &b, &hello, b.sk);
    long long rej1 = wait_count(&a, NULL, rejected_of, rej0 + 1, 10);
    if (rej1 < rej0 + 1)
        fail_msg("A did not reject the replayed HELLO within 10 s (rejected %lld -> %lld)", rej0,
                 rej1);
    j = status_of(&a, NULL);
    assert_non_null(j);
    assert_null(strstr(j, b.hex));
    free(j);
    /* a fresh HELLO (a higher counter) is taken again: the member came back */
    hello.seq = 3000;
    send_hdr(s, &b, &hello, b.sk);
    if (!wait_listed(&a, NULL, b.hex, 1, 10)) fail_msg("B's fresh HELLO not taken within 10 s");
    /* ... and a replayed LEAVE (counter 2000 <= 3000) does not make it leave */
    send_hdr(s, &b, &leave, b.sk);
    long long rej2 = wait_count(&a, NULL, rejected_of, rej1 + 1, 10);
    if (rej2 < rej1 + 1)
        fail_msg("A did not reject the replayed LEAVE within 10 s (rejected %lld -> %lld)", rej1,
                 rej2);
    j = status_of(&a, NULL);
    assert_non_null(j);
    assert_non_null(strstr(j, b.hex));
    printf("replay: forged and replayed control refused (rejected %lld -> %lld)\n", rej0,
           rejected_of(j));
    free(j);
    zmq_close(s);
    zmq_ctx_term(ctx);
    node_stop(&a);
}

static void test_key_files(void **state)
{
    (void)state;
    char path[256], err[STATUS_ERR_LEN], pub[300];
    uint8_t pk[32], pk2[32], sk[64];
    snprintf(path, sizeof path, "%s/id.key", dir);
    assert_int_equal(auth_keygen(path, pk, err), 0);
    assert_int_equal(auth_key_read(path, pk2, sk, err), 0);
    assert_memory_equal(pk, pk2, 32);
    /* the .pub file is an allowlist of one */
    snprintf(pub, sizeof pub, "%s.pub", path);
    auth_t *a = auth_new(NULL, pub, err);
    assert_non_null(a);
    uint8_t curve[32], id[32];
    assert_int_equal(crypto_sign_ed25519_pk_to_curve25519(curve, pk), 0);
    assert_int_equal(auth_admit(a, curve, id), 1);
    assert_memory_equal(id, pk, 32);
    curve[0] ^= 1;
    assert_int_equal(auth_admit(a, curve, NULL), 0);
    auth_destroy(&a);
    /* a pair whose halves do not match is refused */
    /* The file ends "secret <128 hex>\n"; the last 32 bytes of an Ed25519 secret key are
     * its public key, so changing the secret's last hex digit always breaks the pair.
     * The whole file is read, changed in memory and written back: a read followed by a
     * write on one stream with no positioning call between is undefined in C. */
    char text[1024];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    assert_true(len > 2 && len < sizeof text && text[len - 1] == '\n');
    char *digit = &text[len - 2];
    char was = *digit;
    *digit = was == '0' ? '1' : '0';
    assert_int_not_equal(*digit, was);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(auth_key_read(path, pk2, sk, err), STATUS_ECORRUPT);
    /* a malformed allowlist line is refused */
    char p[256];
    assert_null(auth_new(NULL, write_file("bad_allow", "abcd\n", p, sizeof p), err));
}

/* ---- a poisoned member in a real swarm ---------------------------------------------------- */

/* Runs `swarmtrain local ARGS` into dir/NAME.log within seconds; returns the exit status. */
static int run_local(const char *name, const char *args, double seconds)
{
    char log[256], words[4096];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    snprintf(words, sizeof words, "local %s --dir %s/%s --data %s --threads 1 --quiet", args, dir,
             name, testutil_corpus());
    pid_t pid = testutil_start(log, words);
    assert_true(pid > 0);
    double end = clock_now() + seconds;
    int st;
    while (clock_now() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        clock_sleep(0.05);
    }
    printf("local %s did not exit within %.0f s: killed (exit -1)\n", name, seconds);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* The validation loss local's summary reports (the honest peers' leader measures it). */
static double val_loss(const char *name)
{
    char path[256];
    json_obj_t top;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    free(record_summary(path, &top));
    return json_num(&top, "val_loss");
}

/* How many events of `kind` peer `peer` of the run recorded. */
static int peer_events(const char *name, int peer, const char *kind)
{
    char path[256];
    int n;
    snprintf(path, sizeof path, "%s/%s/peer%d.events.jsonl", dir, name, peer);
    free(record_events(path, kind, &n));
    return n;
}

/* The honest peers keep the same identities in both runs (stores made by `keygen --db`
 * and copied into each run's directory), and so does the poisoned one: the split of each
 * step's microbatches goes by the members' ids (rendezvous hashing), so with the same ids
 * a run is repeated loss for loss, and the two runs differ only by what the poisoned
 * member did (its share of steps 0 and 1, refused, is lost). */
static void seed_stores(const char *name)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/%s && cp %s/ids/peer0.db %s/ids/peer1.db %s/%s/", dir,
             name, dir, dir, dir, name);
    assert_int_equal(system(cmd), 0);
    if (strcmp(name, "clean")) /* the poisoned member's too: the whole run repeats */
        snprintf(cmd, sizeof cmd, "cp %s/ids/peer2.db %s/%s/", dir, dir, name);
    assert_int_equal(system(cmd), 0);
}

/* Shared indices (every replica sends the same coefficients): with top-k indices each
 * replica's choice follows its own momentum, and any change of who counted what in the
 * first steps (here: the poisoned member's share of steps 0 and 1) moves the final loss by
 * up to 2% either way; with shared indices by 0.1-0.5%. */
#define RUN                                                                                        \
    "--stages 1 --optimizer demo --demo-index shared --steps 50 --batch 8 --replicas 4 "          \
    "--log-every 20"

static void check_refused(const char *name)
{
    for (int i = 0; i < 2; i++) { /* the honest peers: refused its updates, expelled it */
        assert_true(peer_events(name, i, "expelled") >= 1);
        assert_int_equal(peer_events(name, i, "step_deadline"), 0); /* nobody waited for it */
    }
}

static void test_poisoned_member(void **state)
{
    (void)state;
    char cmd[1024];
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "mkdir -p %s/ids && %s keygen --db %s/ids/peer%d.db > /dev/null",
                 dir, testutil_bin(), dir, i);
        assert_int_equal(system(cmd), 0);
    }
    seed_stores("clean");
    assert_int_equal(run_local("clean", "--peers 2 " RUN, 120), 0);
    double base = val_loss("clean");
    assert_false(isnan(base));
    /* NaN at even steps (the format check), 1e29 at odd ones (the norm bound) */
    seed_stores("mix");
    double t0 = clock_now();
    assert_int_equal(run_local("mix", "--peers 3 " RUN " --secure --poison 2:mix", 120), 0);
    double v = val_loss("mix");
    printf("NaN/1e29 member: val_loss %.4f (without the member %.4f, %+.2f%%), %.1f s\n", v, base,
           100 * (v - base) / base, clock_now() - t0);
    check_refused("mix");
    assert_true(fabs(v - base) <= 0.01 * base);
    /* out-of-order indices need top-k bodies: refused and expelled, nobody waits for it */
    seed_stores("index");
    t0 = clock_now();
    assert_int_equal(run_local("index",
                               "--peers 3 --stages 1 --optimizer demo --steps 20 --batch 8 "
                               "--replicas 4 --secure --poison 2:index",
                               120),
                     0);
    printf("index member: val_loss %.4f, %.1f s\n", val_loss("index"), clock_now() - t0);
    check_refused("index");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest unit[] = {
        cmocka_unit_test_setup_teardown(test_allowlist_handshake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swarm_key_handshake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_gossip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replayed_control, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_says_why, setup, teardown),
    };
    const struct CMUnitTest poison[] = {
        cmocka_unit_test_setup_teardown(test_poisoned_member, setup, teardown),
    };
    const char *which = argc > 1 ? argv[1] : "";
    int rc = 0;
    if (!*which || !strcmp(which, "unit")) rc |= cmocka_run_group_tests(unit, NULL, NULL);
    if (!*which || !strcmp(which, "poison")) rc |= cmocka_run_group_tests(poison, NULL, NULL);
    return rc;
}
