/* cmd_status.c — `swarmtrain status`: a live swarm's pools and peers as tables, or the
 * raw JSON document, once or refreshed in place.
 * Not for: fetching (swarm/status_client.c). */
#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"
#include "swarm/status_client.h"
#include "tools/cmd.h"
#include "tools/json.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void pool_row(void *ctx, const json_obj_t *o)
{
    (void)ctx;
    printf("  %-6s %-6s %-12s %-8s %-8s\n", json_get(o, "stage"), json_get(o, "peers"),
           json_get(o, "throughput"), json_get(o, "step"), json_get(o, "loss"));
}

static void peer_row(void *ctx, const json_obj_t *o)
{
    (void)ctx;
    char id[17];
    snprintf(id, sizeof id, "%s", json_get(o, "id"));
    double in = atof(json_get(o, "bytes_in")) / 1e6, out = atof(json_get(o, "bytes_out")) / 1e6;
    printf("  %-16s %-24s %-5s %-8s %-7s %-7s %-9s %9.1f %9.1f %-7s %-8s\n", id,
           json_get(o, "addr"), json_get(o, "stage"), json_get(o, "state"), json_get(o, "uptime_s"),
           json_get(o, "step"), json_get(o, "served"), in, out, json_get(o, "retries"),
           json_get(o, "rejected"));
}

static int show(const char *json)
{
    printf("pools:\n  %-6s %-6s %-12s %-8s %-8s\n", "stage", "peers", "samples/s", "step", "loss");
    if (json_each(json, "pools", pool_row, NULL) < 0) return -1;
    printf("peers:\n  %-16s %-24s %-5s %-8s %-7s %-7s %-9s %9s %9s %-7s %-8s\n", "id", "address",
           "stage", "state", "uptime", "step", "served", "MB in", "MB out", "retries", "rejected");
    if (json_each(json, "peers", peer_row, NULL) < 0) return -1;
    return 0;
}

/* A peer's own store, read while the peer may be writing it (WAL readers do not block the
 * writer): its checkpoints, last events and last metrics rows. */
static int show_store(const char *path, int as_json, int verify)
{
    enum { N = 20 };
    char err[STATUS_ERR_LEN];
    if (access(path, F_OK) != 0) { /* a store is read here, never created */
        fprintf(stderr, "swarmtrain status: %s: no such store\n", path);
        return 1;
    }
    store_t *s = store_open(path, err);
    if (!s) {
        fprintf(stderr, "swarmtrain status: %s\n", err);
        return 1;
    }
    store_ckpt_info_t ck[N];
    store_event_t ev[N];
    store_metric_t me[N];
    int nck = 0, nev = 0, nme = 0;
    if (store_ckpt_list(s, verify, ck, N, &nck, err) || store_event_last(s, N, ev, &nev, err) ||
        store_metric_last(s, N, me, &nme, err)) {
        fprintf(stderr, "swarmtrain status: %s\n", err);
        store_close(&s);
        return 1;
    }
    store_close(&s);
    static const char *const ver[3] = {"unchecked", "BAD", "ok"};
    if (as_json) {
        printf("{\"checkpoints\":[");
        for (int i = 0; i < nck; i++)
            printf("%s{\"id\":%lld,\"stage\":%d,\"step\":%lld,\"time\":%.3f,\"bytes\":%lld,"
                   "\"blobs\":%d,\"verified\":%d}",
                   i ? "," : "", (long long)ck[i].id, ck[i].stage, (long long)ck[i].step,
                   ck[i].time, (long long)ck[i].bytes, ck[i].nblobs, ck[i].verified);
        printf("],\"events\":[");
        for (int i = 0; i < nev; i++) {
            printf("%s{\"time\":%.3f,\"kind\":\"%s\",\"detail\":\"", i ? "," : "", ev[i].time,
                   ev[i].kind);
            for (const char *c = ev[i].detail; *c; c++)
                if (*c == '"' || *c == '\\')
                    printf("\\%c", *c);
                else if ((unsigned char)*c >= 0x20)
                    putchar(*c);
            printf("\"}");
        }
        printf("],\"metrics\":[");
        for (int i = 0; i < nme; i++) {
            printf("%s{\"time\":%.3f,\"stage\":%d,\"step\":%lld,\"loss\":", i ? "," : "",
                   me[i].time, me[i].stage, (long long)me[i].step);
            if (isfinite(me[i].loss))
                printf("%.6g", me[i].loss);
            else
                printf("null");
            printf(",\"tokens_per_s\":%.1f,\"bytes_sent\":%lld,\"bytes_recv\":%lld}",
                   me[i].tokens_per_s, (long long)me[i].bytes_sent, (long long)me[i].bytes_recv);
        }
        printf("]}\n");
        return 0;
    }
    printf("store %s\ncheckpoints (newest first):\n  %-6s %-6s %-9s %-10s %-6s %s\n", path, "id",
           "stage", "step", "MB", "blobs", "hashes");
    for (int i = 0; i < nck; i++)
        printf("  %-6lld %-6d %-9lld %-10.1f %-6d %s\n", (long long)ck[i].id, ck[i].stage,
               (long long)ck[i].step, (double)ck[i].bytes / 1e6, ck[i].nblobs,
               ver[ck[i].verified + 1]);
    printf("events (oldest first):\n");
    for (int i = 0; i < nev; i++) {
        char when[32] = "?";
        time_t t = (time_t)ev[i].time;
        struct tm tm;
        if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        printf("  %s UTC  %-10s %s\n", when, ev[i].kind, ev[i].detail);
    }
    printf("metrics (oldest first):\n  %-6s %-9s %-10s %-10s %-10s %-10s\n", "stage", "step",
           "loss", "tokens/s", "MB sent", "MB recv");
    for (int i = 0; i < nme; i++)
        printf("  %-6d %-9lld %-10.4f %-10.0f %-10.1f %-10.1f\n", me[i].stage,
               (long long)me[i].step, me[i].loss, me[i].tokens_per_s,
               (double)me[i].bytes_sent / 1e6, (double)me[i].bytes_recv / 1e6);
    return 0;
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {
        {"connect", required_argument, 0, 'c'}, {"json", no_argument, 0, 'j'},
        {"watch", optional_argument, 0, 'w'},   {"timeout", required_argument, 0, 't'},
        {"db", required_argument, 0, 'd'},      {"verify", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *ep = NULL, *db = NULL;
    int as_json = 0, c, timeout_ms = 3000, verify = 0;
    double watch = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            ep = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'w':
            watch = optarg ? atof(optarg) : 1.0;
            break;
        case 't':
            timeout_ms = atoi(optarg);
            break;
        case 'd':
            db = optarg;
            break;
        case 'v':
            verify = 1;
            break;
        case 'h':
            printf(
                "usage: swarmtrain status --connect ENDPOINT [--json] [--watch[=SECONDS]] "
                "[--timeout MS]\n"
                "       swarmtrain status --db PATH [--json] [--verify]\n\n"
                "Asks any live peer for its view of the swarm: pools (stage, peers, throughput,\n"
                "step, loss) and peers (id, address, stage, state, uptime, microbatches served,\n"
                "bytes in and out, retries, rejected messages). --json prints the document as\n"
                "the peer sent it; --watch refreshes in place every SECONDS (default 1).\n"
                "--db reads one peer's store instead (also while the peer runs): its\n"
                "checkpoints (--verify checks every hash), last events and metrics.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (db && !ep && optind == argc) return show_store(db, as_json, verify);
    if (!ep || db || optind < argc || timeout_ms <= 0 || watch < 0) {
        fprintf(stderr, "usage: swarmtrain status --connect ENDPOINT [--json] [--watch[=SECONDS]]\n"
                        "       swarmtrain status --db PATH [--json] [--verify]\n");
        return 2;
    }
    for (;;) {
        char err[STATUS_ERR_LEN], *json = NULL;
        if (status_client_fetch(ep, timeout_ms, &json, err)) {
            fprintf(stderr, "swarmtrain status: %s\n", err);
            return 1;
        }
        if (watch > 0) printf("\033[H\033[2J");
        if (as_json)
            printf("%s\n", json);
        else if (show(json)) {
            fprintf(stderr, "swarmtrain status: the peer's answer is not a status document\n");
            free(json);
            return 1;
        }
        free(json);
        fflush(stdout);
        if (watch <= 0) return 0;
        clock_sleep(watch);
    }
}
