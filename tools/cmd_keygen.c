/* cmd_keygen.c — `swarmtrain keygen`: writes an Ed25519 key pair a user can hand around
 * (FILE: the pair, mode 0600; FILE.pub: the public key, one allowlist line), a swarm key,
 * or prints the public key of a peer's store. Not for: the key formats (swarm/auth.h). */
#include "common/status.h"
#include "peer/peer_store.h"
#include "swarm/auth.h"
#include "tools/cmd.h"

#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: swarmtrain keygen --out FILE          a key pair: FILE (secret, 0600) and\n"
               "                                             FILE.pub (the public key)\n"
               "       swarmtrain keygen --swarm-key --out FILE  a swarm key (a shared secret)\n"
               "       swarmtrain keygen --db PATH           print the public key of a store\n"
               "A peer uses a pair with `peer --key FILE`; `peer --allow LIST` admits the public\n"
               "keys in LIST (one a line: cat *.pub > LIST); `peer --swarm-key FILE` admits\n"
               "whoever holds FILE. docs/protocol.md section 15.\n");
}

int cmd_keygen(int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"swarm-key", no_argument, 0, 's'},
                                         {"db", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *db = NULL;
    int swarm = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 's':
            swarm = 1;
            break;
        case 'd':
            db = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !out == !db || (swarm && !out)) {
        usage(stderr);
        return 2;
    }
    char err[STATUS_ERR_LEN], hex[65];
    uint8_t pk[AUTH_ID_LEN];
    if (db) {
        peer_store_t *ps = peer_store_open(db, pk, err);
        if (!ps) {
            fprintf(stderr, "swarmtrain keygen: %s\n", err);
            return 1;
        }
        peer_store_close(&ps);
        printf("%s\n", auth_hex(pk, hex));
        return 0;
    }
    if (swarm) {
        if (auth_swarm_keygen(out, err)) {
            fprintf(stderr, "swarmtrain keygen: %s\n", err);
            return 1;
        }
        printf("swarm key written to %s (give it to every member; whoever holds it may join)\n",
               out);
        return 0;
    }
    if (auth_keygen(out, pk, err)) {
        fprintf(stderr, "swarmtrain keygen: %s\n", err);
        return 1;
    }
    printf("%s\n", auth_hex(pk, hex));
    fprintf(stderr, "key pair written to %s, public key to %s.pub\n", out, out);
    return 0;
}
