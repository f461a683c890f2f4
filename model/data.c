/* data.c — byte corpus, deterministic sampling and the held-out tail. */
#include "model/data.h"
#include "common/rng.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct data {
    uint8_t *bytes;
    size_t len, train_len;
    int seq;
};

data_t *data_open(const char *path, int seq, double val_frac, char *err)
{
    data_t *d = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        status_set(err, STATUS_EIO, "data file '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (seq <= 0 || !(val_frac > 0 && val_frac < 1)) {
        status_set(err, STATUS_EINVAL, "data: seq must be positive and val_frac in (0, 1)");
        goto fail;
    }
    if (fseek(f, 0, SEEK_END) || ftell(f) < 0) {
        status_set(err, STATUS_EIO, "data file '%s': cannot seek: %s", path, strerror(errno));
        goto fail;
    }
    size_t len = (size_t)ftell(f);
    rewind(f);
    if (len == 0) {
        status_set(err, STATUS_EINVAL, "data file '%s' is empty", path);
        goto fail;
    }
    size_t val = (size_t)((double)len * val_frac);
    if (val < (size_t)seq + 1) val = (size_t)seq + 1;
    if (len < val + (size_t)seq + 1) {
        status_set(err, STATUS_EINVAL,
                   "data file '%s' is too short: %zu bytes, need at least %zu for seq %d "
                   "(a training window and a held-out tail of %zu bytes)",
                   path, len, val + (size_t)seq + 1, seq, val);
        goto fail;
    }
    d = calloc(1, sizeof *d);
    if (!d || !(d->bytes = malloc(len))) {
        status_set(err, STATUS_ENOMEM, "data: out of memory for %zu bytes", len);
        goto fail;
    }
    if (fread(d->bytes, 1, len, f) != len) {
        status_set(err, STATUS_EIO, "data file '%s': short read", path);
        goto fail;
    }
    fclose(f);
    d->len = len;
    d->train_len = len - val;
    d->seq = seq;
    return d;

fail:
    fclose(f);
    data_destroy(&d);
    return NULL;
}

void data_destroy(data_t **d)
{
    if (!d || !*d) return;
    free((*d)->bytes);
    free(*d);
    *d = NULL;
}

size_t data_train_bytes(const data_t *d)
{
    return d->train_len;
}
size_t data_val_bytes(const data_t *d)
{
    return d->len - d->train_len;
}

static void window(const data_t *d, size_t off, int32_t *tokens, int32_t *targets)
{
    for (int t = 0; t < d->seq; t++) {
        tokens[t] = d->bytes[off + t];
        targets[t] = d->bytes[off + t + 1];
    }
}

void data_train_batch(const data_t *d, uint64_t seed, uint64_t stream, int64_t step, int B,
                      int32_t *tokens, int32_t *targets)
{
    rng_t r;
    rng_seed(&r, rng_mix(rng_mix(seed, stream), (uint64_t)step));
    size_t span = d->train_len - (size_t)d->seq; /* offsets 0 .. span-1 keep target in train */
    for (int b = 0; b < B; b++) {
        size_t off = (size_t)rng_below(&r, span);
        window(d, off, tokens + (size_t)b * d->seq, targets + (size_t)b * d->seq);
    }
}

size_t data_val_windows(const data_t *d)
{
    return (data_val_bytes(d) - 1) / (size_t)d->seq;
}

void data_val_batch(const data_t *d, int batch_index, int n_batches, int B, int32_t *tokens,
                    int32_t *targets)
{
    size_t nwin = data_val_windows(d), want = (size_t)n_batches * B;
    for (int b = 0; b < B; b++) {
        size_t i = (size_t)batch_index * B + b;
        /* Spread the windows we use evenly over the tail when there are more than enough. */
        size_t w = want < nwin ? i * nwin / want : i % nwin;
        window(d, d->train_len + w * (size_t)d->seq, tokens + (size_t)b * d->seq,
               targets + (size_t)b * d->seq);
    }
}

const char *data_default_path(void)
{
    static char path[4096];
    const char *cache = getenv("XDG_CACHE_HOME");
    if (cache && *cache)
        snprintf(path, sizeof path, "%s/swarmtrain/kjv.txt", cache);
    else
        snprintf(path, sizeof path, "%s/.cache/swarmtrain/kjv.txt",
                 getenv("HOME") ? getenv("HOME") : ".");
    return path;
}

int data_ensure_default(char *err)
{
    const char *path = data_default_path();
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size > 0) return 0;
    if (stat("/usr/bin/bible", &sb) != 0)
        return status_set(err, STATUS_ENOTFOUND,
                          "default corpus %s is missing and the bible-kjv package is not installed "
                          "(apt-get install bible-kjv, or run tools/demo, or pass --data FILE)",
                          path);
    char cmd[6 * 4096];
    /* The directory and file names come from the environment; quote them for sh. */
    snprintf(cmd, sizeof cmd,
             "d=$(dirname '%s') && mkdir -p \"$d\" && bible -l0 -m 8192 gen1:1-rev22:21 | "
             "sed -nE 's/^  [0-9]+ //p' > '%s.tmp' && test -s '%s.tmp' && mv '%s.tmp' '%s'",
             path, path, path, path, path);
    if (strchr(path, '\'') || system(cmd) != 0)
        return status_set(err, STATUS_EIO, "could not extract the default corpus into %s", path);
    return 0;
}
