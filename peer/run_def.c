/* run_def.c — a swarm run's definition and its text form (run_def.h). */
#include "peer/run_def.h"

#include "common/rng.h"
#include "common/status.h"

#include <stdio.h>
#include <string.h>

int run_def_found(run_def_t *d, const train_options_t *train, int wait_peers,
                  const uint8_t founder_id[32], char *err)
{
    d->train = *train;
    d->wait_peers = wait_peers;
    size_t n = train_options_to_text(&d->train, d->text, sizeof d->text);
    int w = snprintf(d->text + n, sizeof d->text - n, "swarm.wait_peers=%d\n", wait_peers);
    if (w < 0 || n + (size_t)w >= sizeof d->text)
        return status_set(err, STATUS_EINVAL, "run text longer than %d octets", RUN_DEF_TEXT_MAX);
    uint64_t salt;
    memcpy(&salt, founder_id, 8);
    d->swarm = rng_mix(rng_hash_str(d->text), salt);
    return 0;
}

int run_def_read(run_def_t *d, const uint8_t *text, size_t len, uint64_t swarm, char *err)
{
    if (len >= sizeof d->text)
        return status_set(err, STATUS_EMALFORMED, "run text longer than %d octets",
                          RUN_DEF_TEXT_MAX);
    memcpy(d->text, text, len);
    d->text[len] = 0;
    d->swarm = swarm;
    d->wait_peers = 0;
    /* the swarm's own settings follow the training run's, as "swarm.key=value" lines */
    char train_text[sizeof d->text];
    memcpy(train_text, d->text, sizeof train_text);
    /* The founder's text ends with the swarm line and a newline: a text cut short anywhere
     * lacks one or the other (a WELCOME whose frame was cut: sim corrupt seed 303 took one
     * cut from 461 to 224 octets, every key after the cut at its default) */
    char *sw = strstr(train_text, "swarm.");
    if (!len || text[len - 1] != '\n' || !sw || (sw != train_text && sw[-1] != '\n'))
        return status_set(err, STATUS_EMALFORMED,
                          "run text does not end with its swarm line and a newline (cut short?)");
    if (sscanf(sw, "swarm.wait_peers=%d", &d->wait_peers) != 1 || d->wait_peers < 0)
        return status_set(err, STATUS_EMALFORMED, "run text: bad swarm settings");
    *sw = 0;
    d->train = train_defaults();
    return train_options_from_text(&d->train, train_text, err) ? STATUS_EMALFORMED : 0;
}
