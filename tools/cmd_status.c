/* cmd_status.c — `swarmtrain status`: a live swarm's pools and peers as tables, or the
 * raw JSON document, once or refreshed in place.
 * Not for: fetching (swarm/status_client.c). */
#include "common/clock.h"
#include "common/status.h"
#include "swarm/status_client.h"
#include "tools/cmd.h"
#include "tools/json.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {
        {"connect", required_argument, 0, 'c'}, {"json", no_argument, 0, 'j'},
        {"watch", optional_argument, 0, 'w'},   {"timeout", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *ep = NULL;
    int as_json = 0, c, timeout_ms = 3000;
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
        case 'h':
            printf(
                "usage: swarmtrain status --connect ENDPOINT [--json] [--watch[=SECONDS]] "
                "[--timeout MS]\n\n"
                "Asks any live peer for its view of the swarm: pools (stage, peers, throughput,\n"
                "step, loss) and peers (id, address, stage, state, uptime, microbatches served,\n"
                "bytes in and out, retries, rejected messages). --json prints the document as\n"
                "the peer sent it; --watch refreshes in place every SECONDS (default 1).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (!ep || optind < argc || timeout_ms <= 0 || watch < 0) {
        fprintf(stderr,
                "usage: swarmtrain status --connect ENDPOINT [--json] [--watch[=SECONDS]]\n");
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
