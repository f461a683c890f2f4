/* bench_swarm.c — `swarmtrain bench swarm`: tokens/s of a local swarm of S stages x 1
 * peer against `swarmtrain train --stages S` on the same cores, and of the same swarm
 * with CURVE on every connection (local --secure), arms interleaved (train, swarm, secure
 * swarm, train, ...) so machine drift hits all; then the wire bytes per token of the swarm
 * with f32 against int8 activations.
 * Not for: correctness (tests/test_swarm.c). */
#include "common/clock.h"
#include "tools/cmd.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sodium.h>
#include <unistd.h>
#include <zmq.h>

/* Runs this binary with args (a shell word list), returns the value after `key` in its
 * output (the last one), NAN on failure. */
static double run_and_read(const char *args, const char *key, double *second, const char *key2)
{
    /* our own binary's path (in popen's shell, /proc/self/exe would be the shell) */
    char self[1024], cmd[3072];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NAN;
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", self, args);
    FILE *f = popen(cmd, "r");
    if (!f) return NAN;
    char line[1024];
    double v = NAN;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, key);
        if (p) v = atof(p + strlen(key));
        if (second && key2 && (p = strstr(line, key2))) *second = atof(p + strlen(key2));
    }
    int st = pclose(f);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? v : NAN;
}

/* MB/s of 256 KiB messages from a DEALER to a ROUTER over loopback TCP in this process,
 * with the NULL mechanism or CURVE (what a swarm's activations pay, without the
 * swarm's noise); NAN on failure. */
static double transport_mb_s(int curve)
{
    enum { LEN = 256 << 10, N = 400 };
    void *ctx = zmq_ctx_new(), *r = zmq_socket(ctx, ZMQ_ROUTER), *d = zmq_socket(ctx, ZMQ_DEALER);
    uint8_t spk[32], ssk[32], cpk[32], csk[32];
    int one = 1, zero = 0;
    if (curve) {
        crypto_box_keypair(spk, ssk);
        crypto_box_keypair(cpk, csk);
        zmq_setsockopt(r, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(r, ZMQ_CURVE_SECRETKEY, ssk, 32);
        zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, spk, 32);
        zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, cpk, 32);
        zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, csk, 32);
    }
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    char ep[256];
    size_t eplen = sizeof ep;
    double mbs = NAN;
    uint8_t *buf = calloc(1, LEN);
    if (!buf || zmq_bind(r, "tcp://127.0.0.1:*") ||
        zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &eplen) || zmq_connect(d, ep))
        goto done;
    zmq_send(d, buf, LEN, 0); /* the handshake, outside the timing */
    zmq_msg_t m;
    zmq_msg_init(&m);
    for (int k = 0; k < 2; k++) zmq_msg_recv(&m, r, 0);
    double t0 = clock_now();
    int got = 0;
    for (int i = 0; i < N; i++) {
        zmq_send(d, buf, LEN, 0);
        for (int k = 0; k < 2; k++) got += zmq_msg_recv(&m, r, 0) >= 0;
    }
    zmq_msg_close(&m);
    if (got == 2 * N) mbs = (double)N * LEN / 1e6 / (clock_now() - t0);
done:
    free(buf);
    zmq_close(d);
    zmq_close(r);
    zmq_ctx_term(ctx);
    return mbs;
}

int bench_swarm(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"accum", required_argument, 0, 'a'},
                                         {"stages", required_argument, 0, 's'},
                                         {"rounds", required_argument, 0, 'r'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *config = "small";
    int steps = 4, accum = 8, stages = 2, rounds = 2, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 'n':
            steps = atoi(optarg);
            break;
        case 'a':
            accum = atoi(optarg);
            break;
        case 's':
            stages = atoi(optarg);
            break;
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'h':
            printf("usage: swarmtrain bench swarm [--config small] [--steps 4] [--accum 8] "
                   "[--stages 2] "
                   "[--rounds 2]\n");
            return 0;
        default:
            return 2;
        }
    }
    if (steps < 2 || accum < 1 || stages < 1 || rounds < 1 || strlen(config) > 32) {
        fprintf(stderr, "swarmtrain bench swarm: steps >= 2, accum, stages, rounds >= 1\n");
        return 2;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char train[512], swarm[512];
    snprintf(train, sizeof train,
             "train --config %s --stages %d --steps %d --accum %d --val-batches 1 --threads %ld",
             config, stages, steps, accum, cores);
    snprintf(swarm, sizeof swarm,
             "local --config %s --stages %d --peers %d --steps %d --accum %d --val-batches 1 "
             "--replicas 1 --optimizer adamw --in-flight 2 --quiet",
             config, stages, stages, steps, accum);
    printf("bench swarm: %s, %d stages, %d microbatches per step, %d steps, %ld cores; arms "
           "interleaved %d times\n",
           config, stages, accum, steps, cores, rounds);
    printf("  train: swarmtrain %s\n  swarm: swarmtrain %s --codec f32\n", train, swarm);
    fflush(stdout);
    printf("  secure swarm: swarmtrain %s --codec f32 --secure (CURVE, swarm key)\n", swarm);
    fflush(stdout);
    double t_sum = 0, s_sum = 0, c_sum = 0, wire_f32 = NAN, wire_i8 = NAN;
    for (int r = 0; r < rounds; r++) {
        double t = run_and_read(train, "tokens/s ", NULL, NULL);
        char args[600];
        snprintf(args, sizeof args, "%s --codec f32", swarm);
        double s = run_and_read(args, "tokens/s ", &wire_f32, "wire ");
        snprintf(args, sizeof args, "%s --codec f32 --secure", swarm);
        double cv = run_and_read(args, "tokens/s ", NULL, NULL);
        printf("  round %d: train %.0f tokens/s, swarm %.0f tokens/s (ratio %.2f), CURVE swarm "
               "%.0f tokens/s (CURVE / plain %.2f)\n",
               r + 1, t, s, s / t, cv, cv / s);
        fflush(stdout);
        if (!isfinite(t) || !isfinite(s) || !isfinite(cv)) {
            fprintf(stderr, "swarmtrain bench swarm: a run failed\n");
            return 1;
        }
        t_sum += t, s_sum += s, c_sum += cv;
    }
    char args[600];
    snprintf(args, sizeof args, "%s --codec int8", swarm);
    double s8 = run_and_read(args, "tokens/s ", &wire_i8, "wire ");
    printf("  swarm / train tokens/s  %.2f  (mean of %d rounds; target >= 0.8)\n", s_sum / t_sum,
           rounds);
    printf("  CURVE / plain tokens/s  %.2f  (swarm %.0f, CURVE swarm %.0f tokens/s, mean of %d "
           "rounds)\n",
           c_sum / s_sum, s_sum / rounds, c_sum / rounds, rounds);
    printf("  wire bytes per token    f32 %.0f, int8 %.0f  (%.2fx fewer; int8 run %.0f tokens/s)\n",
           wire_f32, wire_i8, wire_f32 / wire_i8, s8);
    if (sodium_init() >= 0) {
        double plain = transport_mb_s(0), curve = transport_mb_s(1);
        printf("  transport (256 KiB messages, loopback, one connection)  NULL %.0f MB/s, CURVE "
               "%.0f MB/s (%.2f); the f32 swarm moved %.1f MB/s\n",
               plain, curve, curve / plain, wire_f32 * s_sum / rounds / 1e6);
    }
    return 0;
}
