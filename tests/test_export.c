/* test_export.c — the model out of the swarm: the safetensors writer and reader against
 * the format's rules (raw bytes checked here, malformed files refused), a trained tiny
 * model exported with `swarmtrain export` and read back bit for bit, assembly from peers'
 * stage checkpoints (and its refusals), `train --init` from an export, and greedy
 * `sample` equal to an argmax over model_logits computed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/status.h"
#include "model/assemble.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "model/stage_ckpt.h"
#include "store/store.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/st_export_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return testutil_rmtree(dir);
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static uint64_t u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The file's layout checked from its bytes, without the reader: u64 header length, a
 * header of that length that starts with '{', ends in '}' and trailing spaces only, with
 * the data 8-byte aligned and the size 8 + N + data bytes. */
static void check_raw_layout(const char *path, size_t data_bytes)
{
    size_t len = 0;
    uint8_t *p = testutil_slurp(path, &len);
    assert_non_null(p);
    assert_true(len >= 8);
    uint64_t n = u64le(p);
    assert_int_equal(n % 8, 0);
    assert_int_equal(len, 8 + n + data_bytes);
    assert_int_equal(p[8], '{');
    size_t end = 8 + n;
    while (end > 8 && p[end - 1] == ' ') end--;
    assert_int_equal(p[end - 1], '}');
    assert_true(8 + n - end < 8);
    free(p);
}

static void test_roundtrip(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], path[512];
    float a[6], b[5], s = 3.25f;
    testutil_fill_normal(a, 6, 1, 1.0f);
    testutil_fill_normal(b, 5, 2, 1.0f);
    b[4] = 1.0f + 1.0f / 256; /* halfway between the bf16 values 1 and 1 + 2^-7 */
    safetensors_tensor_t t[3] = {
        {.name = "a.weight", .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "b \"quoted\"\\name", .ndim = 1, .shape = {5}, .data = b},
        {.name = "scalar", .ndim = 0, .data = &s},
    };
    const char *meta[] = {"format", "pt", "note", "line\nbreak"};
    for (int dt = 0; dt < 2; dt++) {
        int dtype = dt ? SAFETENSORS_BF16 : SAFETENSORS_F32;
        size_t es = dt ? 2 : 4;
        snprintf(path, sizeof path, "%s/rt%d.safetensors", dir, dt);
        assert_int_equal(safetensors_write(path, t, 3, dtype, meta, 2, err), 0);
        check_raw_layout(path, 12 * es);
        safetensors_t *f = safetensors_open(path, err);
        if (!f) fail_msg("%s", err);
        assert_int_equal(safetensors_count(f), 3);
        assert_string_equal(safetensors_metadata(f, "format"), "pt");
        assert_string_equal(safetensors_metadata(f, "note"), "line\nbreak");
        assert_null(safetensors_metadata(f, "nope"));
        /* in buffer order, contiguous from 0 */
        size_t at = 0;
        for (int i = 0; i < 3; i++) {
            const safetensors_tensor_t *x = safetensors_at(f, i);
            assert_string_equal(x->name, t[i].name);
            assert_int_equal(x->offset, at);
            assert_int_equal(x->dtype, dtype);
            assert_int_equal(x->ndim, t[i].ndim);
            for (int d = 0; d < x->ndim; d++) assert_int_equal(x->shape[d], t[i].shape[d]);
            at += x->bytes;
        }
        float out[6];
        assert_int_equal(safetensors_read_f32(f, "a.weight", out, 6, err), 0);
        for (int i = 0; i < 6; i++)
            if (dt)
                assert_true(out[i] == safetensors_bf16_to_f32(safetensors_f32_to_bf16(a[i])) &&
                            fabsf(out[i] - a[i]) <= fabsf(a[i]) / 256);
            else
                assert_true(out[i] == a[i]);
        assert_int_equal(safetensors_read_f32(f, t[1].name, out, 5, err), 0);
        if (dt) assert_true(out[4] == 1.0f); /* a tie goes to the even one, 1 */
        assert_int_equal(safetensors_read_f32(f, "a.weight", out, 5, err), STATUS_EINVAL);
        assert_int_equal(safetensors_read_f32(f, "missing", out, 5, err), STATUS_ENOTFOUND);
        safetensors_close(&f);
        assert_null(f);
    }
    safetensors_close(NULL);
}

/* A file with header text h (padded to 8) and `data` bytes of zeros. */
static void write_crafted(const char *path, const char *h, size_t data)
{
    size_t hn = strlen(h), padded = (hn + 7) / 8 * 8;
    uint8_t *p = calloc(1, 8 + padded + data);
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(p + 8, h, hn);
    memset(p + 8 + hn, ' ', padded - hn);
    spit(path, p, 8 + padded + data);
    free(p);
}

static void test_malformed(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    static const struct {
        const char *header;
        size_t data;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4}, /* past end */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8}, /* shape */
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8}, /* dtype */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8}, /* hole */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8}, /* tail */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8}, /* overlap */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8},                                                                       /* duplicate */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4},  /* negative */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4},    /* unclosed */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4}, /* trailing */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4}, /* field */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
         "\"data_offsets\":[0,0]}}",
         0},                                 /* overflow */
        {"{\"__metadata__\":{\"k\":1}}", 0}, /* meta value */
        {"[]", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_crafted(path, bad[i].header, bad[i].data);
        safetensors_t *f = safetensors_open(path, err);
        if (f) fail_msg("crafted file %zu was accepted", i);
    }
    /* the same shapes, well formed, are accepted: the refusals above are for the faults */
    write_crafted(path,
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
                  8);
    safetensors_t *f = safetensors_open(path, err);
    if (!f) fail_msg("%s", err);
    safetensors_close(&f);
    /* no tensors at all (qsort was called on a NULL array: UB, found by fuzz_safetensors) */
    write_crafted(path, "{}", 0);
    f = safetensors_open(path, err);
    if (!f) fail_msg("%s", err);
    assert_int_equal(safetensors_count(f), 0);
    safetensors_close(&f);
    /* a header length beyond the file, and a file too short to hold one */
    uint8_t big[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    spit(path, big, sizeof big);
    assert_null(safetensors_open(path, err));
    spit(path, big, 5);
    assert_null(safetensors_open(path, err));
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    assert_null(safetensors_open(path, err));
}

/* Every truncation of a valid file, and every header byte replaced by a few characters
 * that matter to JSON: refused or accepted, never a crash or a read out of bounds (this
 * runs under ASan in CI). A truncation is always refused. */
static void test_mutations(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], path[512], mpath[512];
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    safetensors_tensor_t t[2] = {{.name = "a", .ndim = 2, .shape = {2, 2}, .data = a},
                                 {.name = "b\u00e9", .ndim = 1, .shape = {2}, .data = b}};
    const char *meta[] = {"k", "v"};
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    snprintf(mpath, sizeof mpath, "%s/mut.safetensors", dir);
    assert_int_equal(safetensors_write(path, t, 2, SAFETENSORS_F32, meta, 1, err), 0);
    size_t len;
    uint8_t *orig = testutil_slurp(path, &len);
    assert_non_null(orig);
    for (size_t cut = 0; cut < len; cut++) {
        spit(mpath, orig, cut);
        safetensors_t *f = safetensors_open(mpath, err);
        if (f) fail_msg("a file cut to %zu of %zu bytes was accepted", cut, len);
    }
    static const char subst[] = "{}[]\",:0 9\x01\xff-";
    uint8_t *m = malloc(len);
    size_t accepted = 0;
    for (size_t i = 0; i < 8 + u64le(orig); i++)
        for (size_t j = 0; j < sizeof subst - 1; j++) {
            memcpy(m, orig, len);
            m[i] = (uint8_t)subst[j];
            spit(mpath, m, len);
            safetensors_t *f = safetensors_open(mpath, err);
            accepted += f != NULL;
            safetensors_close(&f);
        }
    assert_true(accepted > 0); /* e.g. a space for a space, or a changed name */
    free(m);
    free(orig);
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "%s ", testutil_bin());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static char *read_text(const char *path)
{
    size_t n;
    return (char *)testutil_slurp(path, &n);
}

/* Trains tiny for a few steps with two stages into a store, exports it, and checks the
 * file: HF names and shapes, F32, metadata, the parameters bit for bit as assembled from
 * the store, bf16 as the rounding of them, and greedy sampling. */
static void test_export_trained(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], db[512], out[512], path[600];
    snprintf(db, sizeof db, "%s/train.db", dir);
    snprintf(out, sizeof out, "%s/exp", dir);
    assert_int_equal(run("train --data %s --steps 6 --stages 2 --threads 1 --val-batches 2 "
                         "--db %s --checkpoint-every 3 > %s/train.log 2>&1",
                         testutil_corpus(), db, dir),
                     0);
    assert_int_equal(run("export --db %s --out %s > %s/export.log 2>&1", db, out, dir), 0);

    snprintf(path, sizeof path, "%s/model.safetensors", out);
    kern_t *k = kern_new("cpu", 1, err);
    assert_non_null(k);
    assemble_info_t info;
    const char *dbs[] = {db};
    model_t *ref = assemble_from_stores(dbs, 1, k, 1, &info, err);
    if (!ref) fail_msg("%s", err);
    assert_int_equal(info.step, 6);
    assert_int_equal(info.cfg.stages, 2);

    safetensors_t *f = safetensors_open(path, err);
    if (!f) fail_msg("%s", err);
    const model_config_t *c = &info.cfg;
    int L = c->n_layers;
    assert_int_equal(safetensors_count(f), 3 + 9 * L);
    size_t data = 0;
    for (int i = 0; i < safetensors_count(f); i++) {
        assert_int_equal(safetensors_at(f, i)->dtype, SAFETENSORS_F32);
        data += safetensors_at(f, i)->bytes;
    }
    assert_int_equal(data, config_num_params(c) * 4);
    check_raw_layout(path, data);
    static const struct {
        const char *name;
        int rows, cols; /* 0 rows: 1-D */
    } want[] = {{"model.embed_tokens.weight", 'V', 'C'},
                {"model.layers.%d.input_layernorm.weight", 0, 'C'},
                {"model.layers.%d.self_attn.q_proj.weight", 'C', 'C'},
                {"model.layers.%d.self_attn.k_proj.weight", 'C', 'C'},
                {"model.layers.%d.self_attn.v_proj.weight", 'C', 'C'},
                {"model.layers.%d.self_attn.o_proj.weight", 'C', 'C'},
                {"model.layers.%d.post_attention_layernorm.weight", 0, 'C'},
                {"model.layers.%d.mlp.gate_proj.weight", 'F', 'C'},
                {"model.layers.%d.mlp.up_proj.weight", 'F', 'C'},
                {"model.layers.%d.mlp.down_proj.weight", 'C', 'F'},
                {"model.norm.weight", 0, 'C'},
                {"lm_head.weight", 'V', 'C'}};
    for (int l = 0; l < L; l++)
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            char name[128];
            snprintf(name, sizeof name, want[i].name, l);
            const safetensors_tensor_t *t = safetensors_find(f, name);
            if (!t) fail_msg("no %s", name);
            int dims[2], nd = want[i].rows ? 2 : 1, sym[2] = {want[i].rows, want[i].cols};
            if (nd == 1) sym[0] = want[i].cols;
            for (int d = 0; d < nd; d++)
                dims[d] = sym[d] == 'V' ? c->vocab : sym[d] == 'C' ? c->dim : c->ffn;
            assert_int_equal(t->ndim, nd);
            for (int d = 0; d < nd; d++) assert_int_equal(t->shape[d], dims[d]);
        }
    assert_string_equal(safetensors_metadata(f, "format"), "pt");
    assert_string_equal(safetensors_metadata(f, "swarmtrain.step"), "6");
    safetensors_close(&f);

    char *cj = NULL;
    snprintf(path, sizeof path, "%s/config.json", out);
    assert_non_null(cj = read_text(path));
    assert_non_null(strstr(cj, "\"LlamaForCausalLM\""));
    assert_non_null(strstr(cj, "\"tie_word_embeddings\": false"));
    free(cj);
    model_config_t rc;
    assert_int_equal(hf_model_read_config(out, &rc, err), 0);
    assert_int_equal(rc.dim, c->dim);
    assert_int_equal(rc.n_layers, c->n_layers);
    assert_int_equal(rc.n_heads, c->n_heads);
    assert_int_equal(rc.ffn, c->ffn);
    assert_int_equal(rc.seq, c->seq);
    assert_true(rc.norm_eps == c->norm_eps && rc.rope_theta == c->rope_theta);

    /* read back into a one-stage model: the same parameters, the same logits */
    model_t *back = model_new(&rc, k, 99, err);
    assert_non_null(back);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (hf_model_load(back, path, err)) fail_msg("%s", err);
    size_t T = (size_t)c->seq, V = (size_t)c->vocab;
    int32_t *tok = calloc(T, sizeof *tok);
    float *la = malloc(T * V * sizeof *la), *lb = malloc(T * V * sizeof *lb);
    for (size_t i = 0; i < T; i++) tok[i] = (int32_t)("In the beginning God created "[i % 29]);
    assert_int_equal(model_logits(ref, tok, la, err), 0);
    assert_int_equal(model_logits(back, tok, lb, err), 0);
    assert_memory_equal(la, lb, T * V * sizeof *la);

    /* bf16: every value the rounding of the f32 one */
    snprintf(path, sizeof path, "%s/exp16", dir);
    assert_int_equal(run("export --db %s --out %s --dtype bf16 >/dev/null 2>&1", db, path), 0);
    snprintf(path, sizeof path, "%s/exp16/model.safetensors", dir);
    safetensors_t *f16 = safetensors_open(path, err);
    if (!f16) fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    safetensors_t *f32 = safetensors_open(path, err);
    assert_non_null(f32);
    for (int i = 0; i < safetensors_count(f32); i++) {
        const safetensors_tensor_t *a = safetensors_at(f32, i);
        const safetensors_tensor_t *b = safetensors_find(f16, a->name);
        assert_non_null(b);
        assert_int_equal(b->dtype, SAFETENSORS_BF16);
        const float *x = a->data;
        const uint8_t *h = b->data;
        for (size_t j = 0; j < a->bytes / 4; j++)
            assert_int_equal(h[2 * j] | h[2 * j + 1] << 8, safetensors_f32_to_bf16(x[j]));
    }
    safetensors_close(&f16);
    safetensors_close(&f32);

    /* greedy sample = argmax of model_logits here, token by token (prompt + 8 < seq) */
    const char *prompt = "And God";
    size_t plen = strlen(prompt);
    int32_t hist[64];
    for (size_t i = 0; i < plen; i++) hist[i] = prompt[i];
    size_t len = plen;
    for (int g = 0; g < 8; g++) {
        memset(tok, 0, T * sizeof *tok);
        memcpy(tok, hist, len * sizeof *tok);
        assert_int_equal(model_logits(back, tok, lb, err), 0);
        const float *row = lb + (len - 1) * V;
        int best = 0;
        for (size_t v = 1; v < V; v++)
            if (row[v] > row[best]) best = (int)v;
        hist[len++] = best;
    }
    char expect[256] = "", *e = expect;
    for (size_t i = plen; i < len; i++) e += sprintf(e, "%s%d", i > plen ? " " : "", hist[i]);
    for (int from_db = 0; from_db < 2; from_db++)
        for (int again = 0; again < 2; again++) {
            char s_out[600];
            snprintf(s_out, sizeof s_out, "%s/sample%d%d.txt", dir, from_db, again);
            assert_int_equal(run("sample %s %s --prompt '%s' --tokens 8 --temperature 0 --ids > "
                                 "%s 2>&1",
                                 from_db ? "--db" : "--model", from_db ? db : out, prompt, s_out),
                             0);
            char *got = read_text(s_out);
            assert_non_null(got);
            got[strcspn(got, "\n")] = 0;
            assert_string_equal(got, expect);
            free(got);
        }
    /* seeded sampling repeats itself */
    char s1[600], s2[600];
    snprintf(s1, sizeof s1, "%s/s1.txt", dir);
    snprintf(s2, sizeof s2, "%s/s2.txt", dir);
    assert_int_equal(
        run("sample --model %s --tokens 40 --temperature 1 --top-k 5 --seed 7 > %s", out, s1), 0);
    assert_int_equal(
        run("sample --model %s --tokens 40 --temperature 1 --top-k 5 --seed 7 > %s", out, s2), 0);
    char *t1 = read_text(s1), *t2 = read_text(s2);
    assert_non_null(t1);
    assert_non_null(t2);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);

    free(tok);
    free(la);
    free(lb);
    model_destroy(&back);
    model_destroy(&ref);
    kern_destroy(&k);
}

/* Numbers with an upper bound are refused when the options are read (usage error, exit 2,
 * nothing trained), not later by the optimizer that reads them; the bound itself passes. */
static void test_option_bounds(void **state)
{
    (void)state;
    char db[600];
    snprintf(db, sizeof db, "%s/bounds.db", dir);
    int rc = run("train --demo-beta 1.5 --steps 1 --db %s >/dev/null 2>&1", db);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    rc = run("train --demo-local 2 --outer-momentum 1 --steps 1 --db %s >/dev/null 2>&1", db);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    assert_int_equal(access(db, F_OK), -1); /* refused before anything was made */
    rc = run("train --optimizer demo --demo-beta 1 --steps 1 --val-batches 1 --threads 1 "
             "--data %s --db %s >/dev/null 2>&1",
             testutil_corpus(), db);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
}

/* train --init from an export continues where the exported run stopped: its validation
 * loss at step 0 is the exported run's final one. */
static void test_train_init(void **state)
{
    (void)state;
    char db[512], out[512], log[600];
    snprintf(db, sizeof db, "%s/init.db", dir);
    snprintf(out, sizeof out, "%s/initexp", dir);
    assert_int_equal(run("train --data %s --steps 4 --threads 1 --val-batches 3 --db %s "
                         "--checkpoint-every 4 > %s/a.log 2>&1",
                         testutil_corpus(), db, dir),
                     0);
    assert_int_equal(run("export --db %s --out %s >/dev/null 2>&1", db, out), 0);
    assert_int_equal(run("train --data %s --steps 0 --stages 2 --threads 1 --val-batches 3 "
                         "--init %s/model.safetensors > %s/b.log 2>&1",
                         testutil_corpus(), out, dir),
                     0);
    snprintf(log, sizeof log, "%s/a.log", dir);
    char *a = read_text(log);
    snprintf(log, sizeof log, "%s/b.log", dir);
    char *b = read_text(log);
    assert_non_null(a);
    assert_non_null(b);
    const char *va = strstr(a, "val_loss "), *vb = strstr(b, "val_loss ");
    assert_non_null(va);
    assert_non_null(vb);
    assert_true(atof(va + 9) > 0);
    assert_float_equal(atof(va + 9), atof(vb + 9), 1e-4);
    free(a);
    free(b);
    /* a file of another shape is refused */
    assert_int_not_equal(run("train --data %s --steps 0 --dim 32 --threads 1 --init "
                             "%s/model.safetensors >/dev/null 2>&1",
                             testutil_corpus(), out),
                         0);
}

/* One peer-style checkpoint of stage s (prefix "stage.", "peer.step") into a store. */
static void peer_ckpt(const char *path, model_t *m, int s, int64_t step, const char *run_text)
{
    char err[STATUS_ERR_LEN], hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)strlen(run_text) * 7919);
    store_t *st = store_open(path, err);
    if (!st) fail_msg("%s", err);
    store_ckpt_t *ck = store_ckpt_new(s, step, run_text, hash);
    assert_non_null(ck);
    assert_int_equal(store_ckpt_add_blob(ck, "peer.step", &step, sizeof step), 0);
    assert_int_equal(stage_ckpt_add(ck, "stage.", model_stage(m, s)), 0);
    assert_int_equal(store_ckpt_save(st, ck, err), 0);
    store_ckpt_destroy(&ck);
    store_close(&st);
}

static void test_assemble_peers(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], a[512], b[512], c2[512], d[512];
    model_config_t cfg;
    config_preset(&cfg, "tiny", NULL);
    cfg.stages = 2;
    cfg.batch = 1;
    char run_text[1024];
    size_t n = config_to_text(&cfg, run_text, sizeof run_text);
    snprintf(run_text + n, sizeof run_text - n, "batch=16\nstages=2\n");
    kern_t *k = kern_new("ref", 1, err);
    model_t *m = model_new(&cfg, k, 42, err);
    assert_non_null(m);
    snprintf(a, sizeof a, "%s/p0.db", dir);
    snprintf(b, sizeof b, "%s/p1.db", dir);
    snprintf(c2, sizeof c2, "%s/p1late.db", dir);
    snprintf(d, sizeof d, "%s/other.db", dir);
    peer_ckpt(a, m, 0, 10, run_text);
    peer_ckpt(b, m, 1, 10, run_text);
    peer_ckpt(c2, m, 1, 12, run_text);
    char other[1100];
    snprintf(other, sizeof other, "%sseed=5\n", run_text);
    peer_ckpt(d, m, 1, 10, other);

    assemble_info_t info;
    const char *ok[] = {a, b};
    model_t *got = assemble_from_stores(ok, 2, k, 1, &info, err);
    if (!got) fail_msg("%s", err);
    assert_int_equal(info.step, 10);
    for (int s = 0; s < 2; s++)
        assert_memory_equal(stage_params(model_stage(got, s)), stage_params(model_stage(m, s)),
                            stage_num_params(model_stage(m, s)) * sizeof(float));
    model_destroy(&got);
    /* a replica at a later step as well: the common step 10 is still found */
    const char *three[] = {a, c2, b};
    got = assemble_from_stores(three, 3, k, 1, &info, err);
    if (!got) fail_msg("%s", err);
    assert_int_equal(info.step, 10);
    model_destroy(&got);

    const char *missing[] = {a};
    assert_null(assemble_from_stores(missing, 1, k, 1, &info, err));
    assert_non_null(strstr(err, "stage 1"));
    const char *steps[] = {a, c2};
    assert_null(assemble_from_stores(steps, 2, k, 1, &info, err));
    assert_non_null(strstr(err, "different steps"));
    const char *runs[] = {a, d};
    assert_null(assemble_from_stores(runs, 2, k, 1, &info, err));
    assert_non_null(strstr(err, "different runs"));
    char nothere[600];
    snprintf(nothere, sizeof nothere, "%s/nothere.db", dir);
    const char *none[] = {nothere};
    assert_null(assemble_from_stores(none, 1, k, 1, &info, err));
    assert_int_not_equal(access(nothere, F_OK), 0); /* not created by looking */
    /* the binary says so too, and exits non-zero */
    assert_int_not_equal(run("export --db %s --db %s --out %s/x >/dev/null 2>&1", a, d, dir), 0);

    model_destroy(&m);
    kern_destroy(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),      cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_mutations),      cmocka_unit_test(test_assemble_peers),
        cmocka_unit_test(test_export_trained), cmocka_unit_test(test_train_init),
        cmocka_unit_test(test_option_bounds),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
