/* run.c — peer_run: one peer driven by the ZeroMQ network thread (swarm/net.c) on the
 * machine's monotonic clock. The peer itself is the state machine of peer.c; this file
 * only delivers its events, calls its step and waits for the network when it is idle.
 * Not for: the simulator, which drives peers on a virtual clock (sim/simrun.c). */
#include "common/clock.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"
#include "swarm/auth.h"
#include "swarm/handshake.h"
#include "swarm/net.h"

#include <inttypes.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

int peer_run(const peer_options_t *po, char *err)
{
    uint8_t id[MSG_ID_LEN];
    peer_store_t *ps = NULL;
    auth_t *auth = NULL;
    if (sodium_init() < 0) return status_set(err, STATUS_EIO, "libsodium failed to initialize");
    uint8_t *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
    if (!sk) return status_set(err, STATUS_ENOMEM, "out of memory");
    /* identity: a key file, else the store's Ed25519 key when there is a store, else a
     * fresh one */
    if (po->db && !(ps = peer_store_open(po->db, id, err))) goto fail_io;
    if (po->key_file) {
        if (auth_key_read(po->key_file, id, sk, err)) goto fail_io;
    } else if (ps) {
        if (peer_store_secret(ps, id, sk, err)) goto fail_io;
    } else {
        crypto_sign_keypair(id, sk);
    }
    if (po->swarm_key || po->allow) {
        if (!(auth = auth_new(po->swarm_key, po->allow, err)) ||
            auth_set_identity(auth, id, sk, err))
            goto fail_inval;
        if (!auth_self_listed(auth)) {
            char hex[65];
            status_set(err, STATUS_EINVAL, "this peer's key %s is not on %s", auth_hex(id, hex),
                       po->allow);
            goto fail_inval;
        }
    }
    /* refused at the handshake (no key, another swarm key, not on the allowlist): say
     * so and stop, instead of waiting for a HELLO answer that cannot come */
    if (po->join && handshake_check(po->join, auth, 4000, err) == STATUS_EDENIED) {
        peer_event_to(po->events, ps, "refused", -1, -1, "error=%s", err);
        goto fail_denied;
    }
    char endpoint[256];
    net_config_t nc = {.bind = po->listen,
                       .advertise = po->advertise,
                       .heartbeat_s = 0.25,
                       .timeout_s = po->peer_timeout_s,
                       .sk = sk,
                       .auth = auth};
    memcpy(nc.id, id, MSG_ID_LEN);
    nc.self.stage = 0;
    nc.self.state = MEMBER_JOINING;
    nc.self.loss = NAN;
    net_t *net = net_start(&nc, endpoint, err);
    sodium_free(sk);
    sk = NULL;
    if (!net) {
        peer_store_close(&ps);
        auth_destroy(&auth);
        return STATUS_ENET;
    }
    transport_t tp = net_transport(net);
    peer_options_t run_po = *po;
    /* --slowdown X (>= 1) emulates a device X times slower than this CPU whose compute
     * does not compete for the cores: a unit of work takes X times the CPU seconds it used
     * here (not its wall time, which other processes on the cores stretch), and the
     * throughput estimate times passes on the same clock */
    int emulated = po->slowdown >= 1;
    if (!run_po.clock) run_po.clock = emulated ? clock_thread_cpu : clock_now;
    peer_t *p = peer_new(&run_po, &tp, id, err);
    if (!p) {
        net_stop(&net);
        peer_store_close(&ps);
        auth_destroy(&auth);
        return STATUS_EINVAL;
    }
    peer_attach_store(p, ps);
    fprintf(p->log, "peer: listening on %s%s\n", endpoint,
            !auth                               ? ""
            : auth_mode(auth) == AUTH_SWARM_KEY ? " (CURVE, swarm key)"
                                                : " (CURVE, allowlist)");
    peer_event(p, "listening", "endpoint=%s curve=%s", endpoint,
               !auth ? "off" : auth_mode(auth) == AUTH_SWARM_KEY ? "swarm_key" : "allowlist");
    int rc = 0;
    double busy_until = 0;
    while (!(po->stop && *po->stop) && !peer_done(p)) {
        net_ev_t ev;
        double wake;
        /* events first, without waiting while there is work */
        for (int n = 0; n < 64; n++) {
            int r = net_recv(net, 0, &ev);
            if (r < 0) rc = status_set(p->err, STATUS_ENET, "the network thread failed");
            if (r) break;
            if ((rc = peer_on_event(p, &ev, clock_now()))) break;
        }
        /* --slowdown X: the work of a step keeps the emulated device busy until X times
         * the CPU seconds it took here have passed since it began; meanwhile the peer
         * sleeps in the network wait (events still come in: heartbeats flow from the
         * network thread, and what arrives is handled; only compute waits) */
        if (rc) break;
        if (busy_until > clock_now()) {
            double w = busy_until - clock_now();
            int r = net_recv(net, w > 0.005 ? 5 : (int)(w * 1000) + 1, &ev);
            if (r == 0 && (rc = peer_on_event(p, &ev, clock_now()))) break;
            continue;
        }
        double t0 = clock_now(), cpu0 = emulated ? clock_thread_cpu() : 0;
        if ((rc = peer_step(p, t0, &wake))) break;
        if (emulated) busy_until = t0 + po->slowdown * (clock_thread_cpu() - cpu0);
        double idle = wake - clock_now();
        if (idle > 0) { /* idle: wait for the network until the earliest timer (peer_step) */
            int r = net_recv(net, (int)(idle * 1000) + 1, &ev);
            if (r == 0 && (rc = peer_on_event(p, &ev, clock_now()))) break;
        }
    }
    int finished = !rc && peer_done(p) && !peer_left_behind(p);
    if (!rc) peer_finish(p, po->stop && *po->stop ? "asked to stop" : "run done");
    if (rc) status_set(err, rc, "%s", p->err[0] ? p->err : status_str(rc));
    peer_destroy(&p);
    wire_count_t w;
    if (finished) /* after the LEAVE, which says the run is over: every byte moved */
        net_halt_finished(net, &w);
    else
        net_halt(net, &w);
    FILE *log = po->log ? po->log : stdout;
    uint64_t tin = 0, tout = 0;
    fprintf(log, "wire: sent");
    for (int k = 0; k < WIRE_KINDS; k++) {
        fprintf(log, " %s %" PRIu64, transport_wire_name(k), w.out[k]);
        tout += w.out[k];
    }
    fprintf(log, " total %" PRIu64 "; received", tout);
    for (int k = 0; k < WIRE_KINDS; k++) {
        fprintf(log, " %s %" PRIu64, transport_wire_name(k), w.in[k]);
        tin += w.in[k];
    }
    fprintf(log, " total %" PRIu64 "\n", tin);
    fflush(log);
    for (int k = 0; k < WIRE_KINDS; k++) /* after the store closed: the events file only */
        peer_event_to(po->events, NULL, "wire", -1, -1, "of=%s sent=%" PRIu64 " received=%" PRIu64,
                      transport_wire_name(k), w.out[k], w.in[k]);
    net_stop(&net);
    auth_destroy(&auth);
    return rc;
fail_inval:
    peer_store_close(&ps);
    auth_destroy(&auth);
    sodium_free(sk);
    return STATUS_EINVAL;
fail_io:
    peer_store_close(&ps);
    sodium_free(sk);
    return STATUS_EIO;
fail_denied:
    peer_store_close(&ps);
    auth_destroy(&auth);
    sodium_free(sk);
    return STATUS_EDENIED;
}
