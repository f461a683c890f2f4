/* fuzz_safetensors.c — fuzz target: safetensors files as `--init` reads them
 * (model/safetensors.c): the length prefix, the JSON header, dtypes, shapes, offsets and
 * the coverage rule.
 *
 * Input: the file's bytes (written to a memory file that safetensors_open reads).
 * Invariants: an accepted file's tensors, in offset order, cover its buffer exactly, each
 * of shape x dtype size bytes, found again by name; float tensors convert; a file of F32
 * tensors written back (safetensors_write) reads back to the same names, shapes and bytes.
 *
 * Not for: what the tensors mean (model/hf_model.c). */
#define _GNU_SOURCE
#include "fuzz.h"

#include "common/status.h"
#include "model/safetensors.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int mfd = -1;
static char mpath[64], wpath[128];

static void setup(void)
{
    if (mfd >= 0) return;
    mfd = memfd_create("fuzz_safetensors", 0);
    FUZZ_CHECK(mfd >= 0);
    snprintf(mpath, sizeof mpath, "/proc/self/fd/%d", mfd);
    snprintf(wpath, sizeof wpath, "/tmp/fuzz_safetensors.%d", (int)getpid());
}

static size_t numel(const safetensors_tensor_t *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    FUZZ_CHECK(ftruncate(mfd, 0) == 0);
    FUZZ_CHECK(pwrite(mfd, data, size, 0) == (ssize_t)size);
    char err[STATUS_ERR_LEN];
    safetensors_t *st = safetensors_open(mpath, err);
    if (!st) return 0;
    fuzz_accepted++;
    FUZZ_CHECK(size >= 8 && safetensors_header_len(st) <= size - 8);
    size_t buffer = size - 8 - (size_t)safetensors_header_len(st), at = 0;
    int n = safetensors_count(st), all_f32 = 1;
    FUZZ_CHECK(n >= 0 && !safetensors_at(st, n) && !safetensors_at(st, -1));
    for (int i = 0; i < n; i++) {
        const safetensors_tensor_t *t = safetensors_at(st, i);
        FUZZ_CHECK(t && t->name && t->ndim >= 0 && t->ndim <= SAFETENSORS_MAX_DIMS);
        FUZZ_CHECK(safetensors_dtype_name(t->dtype) != NULL);
        FUZZ_CHECK(t->offset == at && t->bytes == numel(t) * safetensors_dtype_size(t->dtype));
        FUZZ_CHECK((const uint8_t *)t->data - (const uint8_t *)safetensors_at(st, 0)->data ==
                   (ptrdiff_t)t->offset);
        at += t->bytes;
        FUZZ_CHECK(safetensors_find(st, t->name) == t);
        all_f32 &= t->dtype == SAFETENSORS_F32 && t->ndim >= 1;
        if ((t->dtype == SAFETENSORS_F32 || t->dtype == SAFETENSORS_BF16 ||
             t->dtype == SAFETENSORS_F16) &&
            numel(t) <= 4096) {
            float out[4096];
            FUZZ_CHECK(safetensors_read_f32(st, t->name, out, numel(t), err) == 0);
        }
    }
    FUZZ_CHECK(at == buffer);
    if (all_f32 && n >= 1 && n <= 16) {
        safetensors_tensor_t w[16];
        for (int i = 0; i < n; i++) w[i] = *safetensors_at(st, i);
        if (safetensors_write(wpath, w, n, SAFETENSORS_F32, NULL, 0, err) == 0) {
            safetensors_t *back = safetensors_open(wpath, err);
            FUZZ_CHECK(back && safetensors_count(back) == n);
            for (int i = 0; i < n; i++) {
                const safetensors_tensor_t *b = safetensors_find(back, w[i].name);
                FUZZ_CHECK(b && b->ndim == w[i].ndim && b->bytes == w[i].bytes);
                FUZZ_CHECK(!memcmp(b->shape, w[i].shape, sizeof b->shape));
                FUZZ_CHECK(!b->bytes || !memcmp(b->data, w[i].data, b->bytes));
            }
            safetensors_close(&back);
            unlink(wpath);
        }
    }
    safetensors_close(&st);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

static void emit_file(fuzz_emit_fn emit, void *ctx, const char *name, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return;
    uint8_t buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    emit(ctx, name, buf, n);
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    setup();
    float a[12], b[5], s[1] = {3.5f};
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.25f - 1;
    for (int i = 0; i < 5; i++) b[i] = (float)-i;
    safetensors_tensor_t t[4] = {
        {.name = "model.embed_tokens.weight", .ndim = 2, .shape = {3, 4}, .data = a},
        {.name = "model.norm.weight", .ndim = 1, .shape = {5}, .data = b},
        {.name = "scalar", .ndim = 0, .data = s},
        {.name = "empty", .ndim = 2, .shape = {0, 3}, .data = a},
    };
    const char *meta[] = {"format", "pt", "swarmtrain", "a \"quoted\" \\ value \x01"};
    char err[STATUS_ERR_LEN];
    if (safetensors_write(wpath, t, 2, SAFETENSORS_F32, NULL, 0, err) == 0)
        emit_file(emit, ctx, "f32-two", wpath);
    if (safetensors_write(wpath, t, 4, SAFETENSORS_BF16, meta, 2, err) == 0)
        emit_file(emit, ctx, "bf16-meta-scalar-empty", wpath);
    if (safetensors_write(wpath, t, 1, SAFETENSORS_F32, meta, 1, err) == 0)
        emit_file(emit, ctx, "f32-one-meta", wpath);
    unlink(wpath);
    /* dtypes the writer does not make */
    static const char i8[] = "{\"x\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                             "\"y\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[2,4]},"
                             "\"z\":{\"dtype\":\"BOOL\",\"shape\":[1,1],\"data_offsets\":[4,5]}}";
    uint8_t buf[256];
    size_t hl = sizeof i8 - 1, pad = (8 - hl % 8) % 8;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((hl + pad) >> (8 * i));
    memcpy(buf + 8, i8, hl);
    memset(buf + 8 + hl, ' ', pad);
    memcpy(buf + 8 + hl + pad, "\x01\xff\x00\x3c\x01", 5);
    emit(ctx, "i8-f16-bool", buf, 8 + hl + pad + 5);
}
