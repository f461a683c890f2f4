/* bench_codecs.c — `swarmtrain bench codecs`: what the compress/ codecs cost and lose on
 * the real signal, in one run.
 *   1. The `small` model cut in 2 stages trains a few AdamW steps on the real corpus; on
 *      the last step the tap captures the forward activation and the backward gradient at
 *      the stage boundary. For every activation codec: bytes per element, relative L2
 *      error, max error relative to the tensor's absmax, on activations and gradients
 *      separately; encode and decode throughput against memcpy of the same bytes.
 *   2. DeMo bytes per parameter per step for the `small` model's tensor table, for each
 *      value format and k, against a dense fp32 ring all-reduce.
 *   3. With --loss-steps N: what each codec costs in loss. The same model trains N steps
 *      (train_run, 2 stages, the same seed and data: equal tokens) once per codec of
 *      --loss-codecs (default f32, int8, subspace) with the codec on every boundary both
 *      ways; its wire bytes per element and validation loss, against int8's.
 * Not for: tests; this measures, it asserts nothing. */
#include "tools/cmd.h"

#include "common/clock.h"
#include "common/status.h"
#include "compress/codec.h"
#include "compress/demo.h"
#include "model/data.h"
#include "model/train.h"
#include "model/demo_opt.h"
#include "model/model.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the tap keeps: the last boundary-0 activation and gradient it saw. */
typedef struct {
    int on;
    float *x[2]; /* [is_grad] */
    size_t n[2];
} capture_t;

static void capture_tap(void *ctx, int boundary, int is_grad, const float *x, size_t n)
{
    capture_t *c = ctx;
    if (!c->on || boundary != 0) return;
    float *p = realloc(c->x[is_grad], n * sizeof(float));
    if (!p) return;
    memcpy(p, x, n * sizeof(float));
    c->x[is_grad] = p;
    c->n[is_grad] = n;
}

typedef struct {
    const char *label;
    codec_id_t id;
    uint32_t block;
} bench_codec_t;

static const bench_codec_t bench_list[] = {
    {"f32", CODEC_F32, 0},           {"f16", CODEC_F16, 0},
    {"bf16", CODEC_BF16, 0},         {"int8 b32", CODEC_INT8, 32},
    {"int8 b64", CODEC_INT8, 64},    {"int8 b128", CODEC_INT8, 128},
    {"int4 b32", CODEC_INT4, 32},    {"int4 b64", CODEC_INT4, 64},
    {"int4 b128", CODEC_INT4, 128},  {"lowrank", CODEC_LOWRANK, 0},
    {"lowrank/2", CODEC_LOWRANK, 0}, {"lowrank*2", CODEC_LOWRANK, 0},
    {"subspace", CODEC_SUBSPACE, 0}, {"subsp 0.2", CODEC_SUBSPACE, 200},
};
#define BENCH_NCODECS ((int)(sizeof bench_list / sizeof bench_list[0]))

/* Keeps a result observable so that no copy or decode is optimized away. */
static volatile float bench_sink;

/* Best seconds of one memcpy of bytes, over reps. */
static double time_memcpy(void *dst, const void *src, size_t bytes, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = clock_now();
        memcpy(dst, src, bytes);
        double t = clock_now() - t0;
        bench_sink += ((const float *)dst)[r % 7];
        if (t < best) best = t;
    }
    return best;
}

typedef struct {
    double bpe;     /* encoded bytes (header included) per element */
    double rel_l2;  /* ||x - x'|| / ||x|| */
    double max_rel; /* max |x - x'| / max |x| */
    double enc_s, dec_s;
} codec_result_t;

/* Encodes and decodes x (shape) reps times with the codec; 0 or -1 (message printed). */
static int bench_one(const bench_codec_t *bc, const float *x, const int64_t *shape, int ndim,
                     size_t n, uint8_t *buf, size_t cap, float *y, int reps, codec_result_t *res)
{
    codec_params_t prm = {bc->block};
    char err[STATUS_ERR_LEN];
    size_t w = 0;
    res->enc_s = res->dec_s = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = clock_now();
        int rc = codec_encode(bc->id, &prm, x, shape, ndim, buf, cap, &w, err);
        double t1 = clock_now();
        if (!rc) rc = codec_decode(buf, w, y, n, NULL, NULL, err);
        double t2 = clock_now();
        if (rc) {
            fprintf(stderr, "bench codecs: %s: %s\n", bc->label, err);
            return -1;
        }
        bench_sink += y[r % n];
        if (t1 - t0 < res->enc_s) res->enc_s = t1 - t0;
        if (t2 - t1 < res->dec_s) res->dec_s = t2 - t1;
    }
    double se = 0, sx = 0, me = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - (double)y[i]), a = fabs((double)x[i]);
        se += e * e;
        sx += a * a;
        if (e > me) me = e;
        if (a > mx) mx = a;
    }
    res->bpe = (double)w / (double)n;
    res->rel_l2 = sx > 0 ? sqrt(se / sx) : 0;
    res->max_rel = mx > 0 ? me / mx : 0;
    return 0;
}

/* Signal statistics: rms, absmax, and the share of 64-blocks' absmax over the rms. */
static void signal_stats(const float *x, size_t n, double *rms, double *absmax, double *blk_ratio)
{
    double s = 0, m = 0, br = 0;
    size_t nb = 0;
    for (size_t i = 0; i < n; i += 64, nb++) {
        double bs = 0, bm = 0;
        size_t e = i + 64 < n ? i + 64 : n;
        for (size_t j = i; j < e; j++) {
            double a = fabs((double)x[j]);
            bs += a * a;
            if (a > bm) bm = a;
        }
        s += bs;
        if (bm > m) m = bm;
        if (bs > 0) br += bm / sqrt(bs / (double)(e - i));
    }
    *rms = n ? sqrt(s / (double)n) : 0;
    *absmax = m;
    *blk_ratio = nb ? br / (double)nb : 0;
}

/* Trains the model `steps` AdamW steps on the corpus and captures the last step's
 * boundary tensors into cap. 0 or -1 (message printed). */
static int capture_boundary(const model_config_t *cfg, int threads, int steps, capture_t *cap,
                            double *step_s, float *last_loss)
{
    char err[STATUS_ERR_LEN];
    if (data_ensure_default(err)) {
        fprintf(stderr, "bench codecs: %s\n", err);
        return -1;
    }
    data_t *d = data_open(data_default_path(), cfg->seq, 0.05, err);
    kern_t *k = d ? kern_new("cpu", threads, err) : NULL;
    model_t *m = k ? model_new(cfg, k, 1337, err) : NULL;
    size_t BT = (size_t)cfg->batch * cfg->seq;
    int32_t *tok = malloc(BT * sizeof *tok), *tgt = malloc(BT * sizeof *tgt);
    int rc = -1;
    if (!m || !tok || !tgt) {
        fprintf(stderr, "bench codecs: %s\n", m ? "out of memory" : err);
        goto done;
    }
    model_set_tap(m, capture_tap, cap);
    optim_config_t oc = optim_defaults();
    double t0 = clock_now();
    for (int s = 0; s < steps; s++) {
        cap->on = s == steps - 1;
        data_train_batch(d, 1337, 0, s, cfg->batch, tok, tgt);
        model_zero_grads(m);
        if (model_train_micro(m, tok, tgt, last_loss, err)) {
            fprintf(stderr, "bench codecs: %s\n", err);
            goto done;
        }
        float gn;
        model_adamw_step(m, &oc, s, 1.0f, &gn);
    }
    *step_s = (clock_now() - t0) / steps;
    rc = cap->x[0] && cap->x[1] ? 0 : -1;
    if (rc) fprintf(stderr, "bench codecs: the tap saw no boundary tensors\n");
done:
    model_destroy(&m);
    kern_destroy(&k);
    data_destroy(&d);
    free(tok);
    free(tgt);
    return rc;
}

static int bench_activation_codecs(const model_config_t *cfg, const capture_t *cap, int reps)
{
    size_t n = cap->n[0];
    if (cap->n[1] != n) {
        fprintf(stderr, "bench codecs: activation and gradient sizes differ\n");
        return -1;
    }
    int64_t shape[3] = {cfg->batch, cfg->seq, cfg->dim};
    size_t bufcap = codec_encoded_size(CODEC_F32, NULL, shape, 3);
    uint8_t *buf = malloc(bufcap);
    float *y = malloc(n * sizeof(float)), *mc = malloc(n * sizeof(float));
    if (!buf || !y || !mc) {
        free(buf);
        free(y);
        free(mc);
        fprintf(stderr, "bench codecs: out of memory\n");
        return -1;
    }
    const char *what[2] = {"activations (forward)", "gradients (backward)"};
    for (int g = 0; g < 2; g++) {
        double rms, am, br;
        signal_stats(cap->x[g], n, &rms, &am, &br);
        printf("  %s: %zu elements, rms %.3g, absmax %.3g (%.1f x rms), mean 64-block "
               "absmax/rms %.2f\n",
               what[g], n, rms, am, am / rms, br);
    }
    double t_mc = time_memcpy(mc, cap->x[0], n * sizeof(float), reps);
    double gb = (double)n * sizeof(float) / 1e9;
    printf("  memcpy of the same %.2f MB of floats: %.1f GB/s (best of %d)\n",
           n * sizeof(float) / 1e6, gb / t_mc, reps);
    printf("\n  %-10s %6s | %9s %9s | %9s %9s | %8s %8s %6s %6s\n", "codec", "B/elem", "act relL2",
           "act max", "grad relL2", "grad max", "enc GB/s", "dec GB/s", "enc/mc", "dec/mc");
    int rc = 0;
    uint32_t rank = codec_block_for(CODEC_LOWRANK, NULL, shape, 3);
    for (int c = 0; c < BENCH_NCODECS && !rc; c++) {
        codec_result_t r[2];
        bench_codec_t bc = bench_list[c];
        char label[32];
        if (bc.id == CODEC_LOWRANK) { /* the default rank, half and twice it */
            bc.block = strchr(bc.label, '/')   ? (rank + 1) / 2
                       : strchr(bc.label, '*') ? 2 * rank
                                               : rank;
            snprintf(label, sizeof label, "lowrank%u", bc.block);
            bc.label = label;
        }
        for (int g = 0; g < 2 && !rc; g++)
            rc = bench_one(&bc, cap->x[g], shape, 3, n, buf, bufcap, y, reps, &r[g]);
        if (rc) break;
        double enc = r[0].enc_s < r[1].enc_s ? r[0].enc_s : r[1].enc_s;
        double dec = r[0].dec_s < r[1].dec_s ? r[0].dec_s : r[1].dec_s;
        printf("  %-10s %6.3f | %9.2e %9.2e | %9.2e %9.2e | %8.2f %8.2f %6.2f %6.2f\n", bc.label,
               r[0].bpe, r[0].rel_l2, r[0].max_rel, r[1].rel_l2, r[1].max_rel, gb / enc, gb / dec,
               t_mc / enc, t_mc / dec);
    }
    printf("  (B/elem includes the 40-byte header; max = max|x-x'| / absmax of the tensor; "
           "GB/s of float input (encode) or output (decode), best of %d; x/mc = throughput "
           "over memcpy's)\n",
           reps);
    free(buf);
    free(y);
    free(mc);
    return rc;
}

/* DeMo bytes one replica sends per parameter per step for the whole model: every stage's
 * stage message (version 2: one header per stage, bit-packed bodies). */
static int bench_demo_bytes(const model_config_t *cfg, int threads)
{
    char err[STATUS_ERR_LEN];
    kern_t *k = kern_new("cpu", threads, err);
    model_t *m = k ? model_new(cfg, k, 1, err) : NULL;
    if (!m) {
        fprintf(stderr, "bench codecs: %s\n", err);
        kern_destroy(&k);
        return -1;
    }
    size_t P = model_num_params(m);
    static const struct {
        const char *name;
        demo_vfmt_t f;
    } fmts[] = {{"f32", DEMO_VAL_F32}, {"bf16", DEMO_VAL_BF16}, {"sign", DEMO_VAL_SIGN}};
    static const int ks[] = {32, 8, 4, 2, 1};
    const int R = 4;
    double ring_r = 2.0 * (R - 1) / R * 4.0;
    printf("  model %zu params in %d stage(s); chunk %d. Ring all-reduce of fp32 gradients "
           "sends 2(R-1)/R x 4 B/param: %.1f at R = %d, -> 8 for large R.\n",
           P, model_num_stages(m), DEMO_DEFAULT_CHUNK, ring_r, R);
    printf("  %-5s %3s | %10s %9s | %8s %8s %8s | %9s %9s\n", "vals", "k", "bytes/step", "B/param",
           "matrices", "1-D", "embed", "vs ring 8", "vs R=4");
    int rc = 0;
    for (int f = 0; f < 3; f++) {
        for (int ki = 0; ki < 5; ki++) {
            size_t total = 0, b_mat = 0, b_1d = 0, b_emb = 0;
            size_t p_mat = 0, p_1d = 0, p_emb = 0;
            /* v2 stage messages: one header per stage, bit-packed bodies; the groups
             * are counted by their bodies' bits */
            demo_cfg_t dc = {DEMO_DEFAULT_CHUNK, ks[ki],           fmts[f].f,     DEMO_DEFAULT_BETA,
                             DEMO_IDX_TOPK,      DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
            for (int s = 0; s < model_num_stages(m); s++) {
                int nt;
                const stage_tensor_t *t = stage_tensors(model_stage(m, s), &nt);
                total += demo_opt_stage_bytes(t, nt, &dc);
                for (int i = 0; i < nt; i++) {
                    size_t b = (size_t)((demo_body_bits(t[i].rows, t[i].cols, DEMO_DEFAULT_CHUNK,
                                                        ks[ki], fmts[f].f) +
                                         7) /
                                        8);
                    if (t[i].ndim == 1) {
                        b_1d += b;
                        p_1d += t[i].numel;
                    } else if (!strcmp(t[i].name, "tok_embeddings.weight")) {
                        b_emb += b;
                        p_emb += t[i].numel;
                    } else {
                        b_mat += b;
                        p_mat += t[i].numel;
                    }
                }
            }
            /* cross-check against the size of the messages demo_opt really makes, once */
            if (f == 2 && ks[ki] == 4) {
                size_t check = 0;
                for (int s = 0; s < model_num_stages(m) && !rc; s++) {
                    demo_opt_t *o = demo_opt_new(model_stage(m, s), &dc, err);
                    if (!o) {
                        fprintf(stderr, "bench codecs: %s\n", err);
                        rc = -1;
                        break;
                    }
                    check += demo_opt_msg_size(o);
                    demo_opt_destroy(&o);
                }
                if (!rc && check != total) {
                    fprintf(stderr, "bench codecs: demo_opt says %zu bytes, the sum %zu\n", check,
                            total);
                    rc = -1;
                }
            }
            double bpp = (double)total / (double)P;
            printf("  %-5s %3d | %10zu %9.5f | %8.5f %8.4f %8.5f | %8.0fx %8.0fx\n", fmts[f].name,
                   ks[ki], total, bpp, p_mat ? (double)b_mat / p_mat : 0,
                   p_1d ? (double)b_1d / p_1d : 0, p_emb ? (double)b_emb / p_emb : 0, 8.0 / bpp,
                   ring_r / bpp);
        }
    }
    printf("  (B/param = all stage messages / all params; matrices, 1-D, embed = each group's "
           "bytes / its params; vs = how many times fewer bytes than the ring)\n");
    model_destroy(&m);
    kern_destroy(&k);
    return rc;
}

/* Part 3: trains the model `steps` steps once per codec of the comma-separated list
 * (NAME[:BLOCK]) and prints bytes per element and val_loss against int8's. 0 or -1. */
static int bench_codec_loss(const char *preset, int threads, int steps, const char *list)
{
    char err[STATUS_ERR_LEN], names[256];
    snprintf(names, sizeof names, "%s", list);
    FILE *quiet = fopen("/dev/null", "w");
    if (!quiet) {
        fprintf(stderr, "bench codecs: cannot open /dev/null\n");
        return -1;
    }
    double ref = 0;
    int rc = 0, n = 0;
    printf("  %-14s %8s %10s %9s %8s\n", "codec", "B/elem", "val_loss", "vs int8", "tok/s");
    for (char *save = NULL, *tok = strtok_r(names, ",", &save); tok && !rc;
         tok = strtok_r(NULL, ",", &save), n++) {
        train_options_t o = train_defaults();
        if (config_preset(&o.cfg, preset, err)) {
            fprintf(stderr, "bench codecs: %s\n", err);
            rc = -1;
            break;
        }
        o.cfg.stages = 2;
        o.steps = steps;
        o.threads = threads;
        o.log = quiet;
        o.log_every = 1 << 30;
        char *colon = strchr(tok, ':');
        if (colon) *colon = 0;
        o.codec = strcmp(tok, "none") ? codec_by_name(tok) : -1;
        o.codec_block = colon ? (uint32_t)strtoul(colon + 1, NULL, 10) : 0;
        if (strcmp(tok, "none") && o.codec < 0) {
            fprintf(stderr, "bench codecs: unknown codec %s\n", tok);
            rc = -1;
            break;
        }
        train_result_t res;
        if (train_run(&o, &res, err)) {
            fprintf(stderr, "bench codecs: %s: %s\n", tok, err);
            rc = -1;
            break;
        }
        if (o.codec == CODEC_INT8 && !ref) ref = res.val_loss;
        char label[48];
        snprintf(label, sizeof label, "%s%s%s", tok, colon ? ":" : "", colon ? colon + 1 : "");
        printf("  %-14s %8.4f %10.4f", label, o.codec < 0 ? 4.0 : res.wire_bytes_per_elem,
               (double)res.val_loss);
        if (ref > 0 && o.codec != CODEC_INT8)
            printf(" %+8.2f%%", 100.0 * ((double)res.val_loss / ref - 1.0));
        else
            printf(" %9s", o.codec == CODEC_INT8 ? "(ref)" : "");
        printf(" %8.0f\n", res.tokens_per_s);
        fflush(stdout);
    }
    printf("  (%d steps each, %s, 2 stages, seed 1337: equal tokens; the codec on every "
           "boundary both ways; none = exact f32 hand-over, 4 B/elem; vs int8 = val_loss "
           "over int8's, when int8 ran first)\n",
           steps, preset);
    fclose(quiet);
    return rc;
}

int bench_codecs(int argc, char **argv)
{
    static const struct option opts[] = {{"steps", required_argument, 0, 'n'},
                                         {"config", required_argument, 0, 'c'},
                                         {"threads", required_argument, 0, 't'},
                                         {"reps", required_argument, 0, 'r'},
                                         {"loss-steps", required_argument, 0, 'L'},
                                         {"loss-codecs", required_argument, 0, 'C'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int steps = 20, threads = 2, reps = 15, loss_steps = 0, c;
    const char *preset = "small", *loss_codecs = "int8,f32,subspace";
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            steps = atoi(optarg);
            break;
        case 'c':
            preset = optarg;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        case 'L':
            loss_steps = atoi(optarg);
            break;
        case 'C':
            loss_codecs = optarg;
            break;
        case 'h':
            printf("usage: swarmtrain bench codecs [--config small] [--steps 20] [--threads 2]\n"
                   "                                [--reps 15] [--loss-steps N]\n"
                   "                                [--loss-codecs int8,f32,subspace]\n"
                   "  trains --config (default small; 2 stages, cpu) --steps AdamW steps on the "
                   "default corpus,\n"
                   "  measures every activation codec on the last step's boundary activation\n"
                   "  and gradient (--reps timed repetitions, best kept), then prints DeMo\n"
                   "  bytes/param/step for `small` per value format and k; with --loss-steps N,\n"
                   "  trains --config N steps once per codec of --loss-codecs (NAME[:BLOCK],\n"
                   "  none = exact f32) and prints bytes/element and val_loss against int8.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (steps < 1 || threads < 1 || reps < 1 || loss_steps < 0) {
        fprintf(stderr, "swarmtrain bench codecs: steps, threads and reps must be >= 1\n");
        return 2;
    }
    char err[STATUS_ERR_LEN];
    model_config_t cfg;
    if (config_preset(&cfg, preset, err)) {
        fprintf(stderr, "bench codecs: %s\n", err);
        return 2;
    }
    cfg.stages = 2;
    capture_t cap = {0};
    double step_s = 0;
    float loss = 0;
    printf("bench codecs: model %s, 2 stages, cpu, %d threads\n", preset, threads);
    int rc = capture_boundary(&cfg, threads, steps, &cap, &step_s, &loss);
    if (!rc) {
        printf("1. activation codecs on the boundary tensors of the last of %d AdamW steps on "
               "the corpus (loss %.3f, %.2f s/step)\n",
               steps, (double)loss, step_s);
        rc = bench_activation_codecs(&cfg, &cap, reps);
    }
    if (!rc) {
        printf("\n2. DeMo bytes per parameter per step, one replica's stage messages\n");
        rc = bench_demo_bytes(&cfg, threads);
    }
    if (!rc && loss_steps > 0) {
        printf("\n3. validation loss per codec at equal tokens\n");
        rc = bench_codec_loss(preset, threads, loss_steps, loss_codecs);
    }
    free(cap.x[0]);
    free(cap.x[1]);
    return rc ? 1 : 0;
}
