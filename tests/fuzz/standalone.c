/* standalone.c — a driver for the fuzz targets without libFuzzer: any compiler, any build
 * (the ASan build of tools/test runs it through ctest -L fuzz).
 *
 *   fuzz_X [-runs=N] [-seconds=S] [-seed=N] [CORPUS_DIR_OR_FILE...]
 *   fuzz_X -write-seeds=DIR
 *
 * Runs every corpus file once, then random mutations of them (bit flips, interesting
 * bytes and integers, inserted, deleted, duplicated and spliced ranges, truncation) until
 * N runs in all or S seconds have passed, whichever comes first (default: 100000 runs).
 * Deterministic for a seed and a run count. Prints one line: the runs done and the time.
 * A crash (ASan, UBSan, a failed FUZZ_CHECK) writes the input to ./crash-<target>-<run>
 * first, so that `fuzz_X crash-...` replays it. Without coverage feedback this finds far
 * less than libFuzzer (tools/fuzz); it keeps every target exercised on every CI run.
 *
 * Not for: coverage-guided search (libFuzzer), corpus minimization. */
#include "fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The sanitizers' runtime, when linked (weak: absent in a plain build), calls this back
 * before it ends the process on a report. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

#define MAX_INPUT (1u << 20)

typedef struct {
    uint8_t *p;
    size_t n;
    char *name;
} input_t;

unsigned long long fuzz_accepted;

static input_t *inputs;
static int ninputs, cap_inputs;
static const char *target = "fuzz";
static const uint8_t *cur;
static size_t cur_len;
static unsigned long long cur_run;

static void add_input(const char *name, const uint8_t *p, size_t n)
{
    if (ninputs == cap_inputs) {
        cap_inputs = cap_inputs ? 2 * cap_inputs : 64;
        inputs = realloc(inputs, (size_t)cap_inputs * sizeof *inputs);
        if (!inputs) abort();
    }
    input_t *in = &inputs[ninputs++];
    in->p = malloc(n ? n : 1);
    if (!in->p) abort();
    if (n) memcpy(in->p, p, n);
    in->n = n;
    in->name = strdup(name);
}

static void load_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot read %s\n", target, path);
        exit(2);
    }
    uint8_t *buf = malloc(MAX_INPUT);
    size_t n = fread(buf, 1, MAX_INPUT, f);
    fclose(f);
    add_input(path, buf, n);
    free(buf);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void load_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb)) {
        fprintf(stderr, "%s: no such file or directory: %s\n", target, path);
        exit(2);
    }
    if (!S_ISDIR(sb.st_mode)) {
        load_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) exit(2);
    char **names = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
        sprintf(names[n], "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name); /* the same order on every machine */
    for (int i = 0; i < n; i++) {
        if (!stat(names[i], &sb) && S_ISREG(sb.st_mode)) load_file(names[i]);
        free(names[i]);
    }
    free(names);
}

/* ---- writing the crashing input --------------------------------------------------- */

static void save_current(void)
{
    static int saved;
    if (saved || !cur) return;
    saved = 1;
    char name[128];
    snprintf(name, sizeof name, "crash-%s-%llu", target, cur_run);
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, cur, cur_len);
        (void)w;
        close(fd);
    }
    const char msg[] = "standalone: input written to ./";
    ssize_t w = write(2, msg, sizeof msg - 1);
    w = write(2, name, strlen(name));
    w = write(2, "\n", 1);
    (void)w;
}

static void on_signal(int sig)
{
    save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- mutations ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static size_t below(size_t n)
{
    return n ? (size_t)(next() % n) : 0;
}

static size_t mutate(uint8_t *b, size_t n, size_t cap)
{
    static const uint64_t interesting[] = {0,
                                           1,
                                           0x7f,
                                           0x80,
                                           0xff,
                                           0x100,
                                           0x7fff,
                                           0x8000,
                                           0xffff,
                                           0x10000,
                                           0x7fffffff,
                                           0x80000000,
                                           0xffffffff,
                                           0x100000000ull,
                                           0x7fffffffffffffffull,
                                           0xffffffffffffffffull};
    int k = 1 + (int)below(4);
    for (int i = 0; i < k; i++) {
        switch (below(9)) {
        case 0: /* flip a bit */
            if (n) b[below(n)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* a random byte */
            if (n) b[below(n)] = (uint8_t)next();
            break;
        case 2: { /* an interesting integer, 1..8 bytes, little-endian */
            int w = 1 << below(4);
            if (n < (size_t)w) break;
            size_t at = below(n - (size_t)w + 1);
            uint64_t v = interesting[below(sizeof interesting / sizeof *interesting)];
            if (next() & 1) v = ~v + 1;
            for (int j = 0; j < w; j++) b[at + (size_t)j] = (uint8_t)(v >> (8 * j));
            break;
        }
        case 3: /* truncate */
            n = below(n + 1);
            break;
        case 4: { /* delete a range */
            if (!n) break;
            size_t at = below(n), len = 1 + below(n - at < 16 ? n - at : 16);
            memmove(b + at, b + at + len, n - at - len);
            n -= len;
            break;
        }
        case 5: { /* insert random bytes */
            size_t len = 1 + below(8);
            if (n + len > cap) break;
            size_t at = below(n + 1);
            memmove(b + at + len, b + at, n - at);
            for (size_t j = 0; j < len; j++) b[at + j] = (uint8_t)next();
            n += len;
            break;
        }
        case 6: { /* duplicate a range */
            if (!n) break;
            size_t at = below(n), len = 1 + below(n - at < 64 ? n - at : 64);
            if (n + len > cap) break;
            size_t to = below(n + 1);
            uint8_t tmp[64];
            memcpy(tmp, b + at, len);
            memmove(b + to + len, b + to, n - to);
            memcpy(b + to, tmp, len);
            n += len;
            break;
        }
        case 7: { /* splice: the tail of another input */
            const input_t *o = &inputs[below((size_t)ninputs)];
            if (!o->n) break;
            size_t from = below(o->n), at = below(n + 1);
            size_t len = o->n - from;
            if (at + len > cap) len = cap - at;
            memcpy(b + at, o->p + from, len);
            n = at + len;
            break;
        }
        default: /* add or subtract a little from a byte */
            if (n) b[below(n)] += (uint8_t)(below(35) - 17);
            break;
        }
    }
    return n;
}

/* ---- main ----------------------------------------------------------------------------- */

static const char *seed_dir;
static int seeds_written;

static void write_seed(void *ctx, const char *name, const uint8_t *data, size_t len)
{
    (void)ctx;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", seed_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "%s: cannot write %s\n", target, path);
        exit(2);
    }
    seeds_written++;
}

static void add_seed(void *ctx, const char *name, const uint8_t *data, size_t len)
{
    (void)ctx;
    add_input(name, data, len);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs one input from its own allocation of exactly its size (so ASan sees overreads). */
static void run_one(const uint8_t *p, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) abort();
    if (n) memcpy(copy, p, n);
    cur = copy;
    cur_len = n;
    LLVMFuzzerTestOneInput(copy, n);
    cur = NULL;
    free(copy);
    cur_run++;
}

int main(int argc, char **argv)
{
    const char *slash = strrchr(argv[0], '/');
    target = slash ? slash + 1 : argv[0];
    unsigned long long runs = 0;
    double seconds = 0;
    int use_builtin = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "-runs=", 6))
            runs = strtoull(a + 6, NULL, 10);
        else if (!strncmp(a, "-seconds=", 9))
            seconds = strtod(a + 9, NULL);
        else if (!strncmp(a, "-seed=", 6))
            rng_state ^= strtoull(a + 6, NULL, 10) * 0x2545f4914f6cdd1dull;
        else if (!strncmp(a, "-write-seeds=", 13))
            seed_dir = a + 13;
        else if (a[0] == '-') {
            fprintf(stderr,
                    "usage: %s [-runs=N] [-seconds=S] [-seed=N] [CORPUS...]\n"
                    "       %s -write-seeds=DIR\n",
                    target, target);
            return 2;
        } else {
            load_path(a);
            use_builtin = 0;
        }
    }
    if (seed_dir) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", seed_dir);
        for (char *s = dir + 1; *s; s++) /* mkdir -p */
            if (*s == '/') {
                *s = 0;
                mkdir(dir, 0755);
                *s = '/';
            }
        mkdir(dir, 0755);
        fuzz_seeds(write_seed, NULL);
        printf("%s: %d seeds written to %s\n", target, seeds_written, seed_dir);
        return 0;
    }
    if (use_builtin) fuzz_seeds(add_seed, NULL); /* no corpus given: the encoders' seeds */
    if (!runs && seconds <= 0) runs = 100000;
    signal(SIGABRT, on_signal);
    signal(SIGSEGV, on_signal);
    signal(SIGFPE, on_signal);
    signal(SIGBUS, on_signal);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current);
    double t0 = now_s();
    int nseeds = ninputs;
    for (int i = 0; i < ninputs && (!runs || cur_run < runs); i++)
        run_one(inputs[i].p, inputs[i].n);
    run_one(NULL, 0); /* the empty input */
    uint8_t *buf = malloc(MAX_INPUT);
    if (!buf) abort();
    while (!runs || cur_run < runs) {
        if (seconds > 0 && (cur_run & 63) == 0 && now_s() - t0 >= seconds) break;
        size_t n = 0;
        if (ninputs) {
            const input_t *s = &inputs[below((size_t)ninputs)];
            n = s->n < MAX_INPUT ? s->n : MAX_INPUT;
            memcpy(buf, s->p, n);
        }
        n = mutate(buf, n, MAX_INPUT);
        run_one(buf, n);
    }
    double dt = now_s() - t0;
    printf("%s: Done %llu runs (%d seeds, the rest mutations) in %.1f s, %llu accepted, no crash\n",
           target, cur_run, nseeds, dt, fuzz_accepted);
    free(buf);
    for (int i = 0; i < ninputs; i++) {
        free(inputs[i].p);
        free(inputs[i].name);
    }
    free(inputs);
    if (!fuzz_accepted) {
        fprintf(stderr, "%s: no input was accepted by the decoders: are the seeds stale?\n",
                target);
        return 1;
    }
    return 0;
}
