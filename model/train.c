/* train.c — the single-process training loop: S stages chained in one process, R
 * data-parallel replicas that exchange either dense gradients (AdamW, an exact
 * all-reduce) or DeMo stage messages, an optional codec on every stage boundary, and
 * background checkpoints to a store with exact resume.
 * Not for: argument parsing (tools/cmd_train.c) or the network. */
#include "model/train.h"
#include "common/clock.h"
#include "common/events.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "model/data.h"
#include "model/demo_opt.h"
#include "model/hf_model.h"
#include "model/model.h"
#include "model/outer.h"
#include "model/stage_ckpt.h"
#include "model/update.h"
#include "store/store.h"
#include "swarm/path.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

train_options_t train_defaults(void)
{
    train_options_t o = {0};
    config_preset(&o.cfg, "tiny", NULL);
    o.opt = optim_defaults();
    o.device = "cpu";
    o.steps = 300;
    o.accum = 1;
    o.seed = 1337;
    o.val_batches = 20;
    o.log_every = 1;
    o.val_frac = 0.05;
    o.optimizer = TRAIN_ADAMW;
    o.replicas = 1;
    o.demo = (demo_cfg_t){.chunk = DEMO_DEFAULT_CHUNK,
                          .k = DEMO_DEFAULT_K,
                          .vfmt = DEMO_VAL_F32,
                          .beta = DEMO_DEFAULT_BETA};
    o.codec = -1;
    o.outer_lr = 4.0f;
    o.keep = 3;
    o.checkpoint_budget = STORE_WRITER_BUDGET_DEFAULT;
    return o;
}

static const char *update_name(int u)
{
    static const char *names[] = {"sign", "rms", "rmsprop", "adam", "linear"};
    return u >= 0 && u <= DEMO_UPDATE_LINEAR ? names[u] : "?";
}

static const char *vfmt_name(int v)
{
    return v == DEMO_VAL_SIGN ? "sign" : v == DEMO_VAL_BF16 ? "bf16" : "f32";
}

int64_t train_skip_end(const train_options_t *o)
{
    if (!(o->skip_until > 0 && o->skip_until < 1)) return INT64_MAX;
    return (int64_t)floor(o->skip_until * (double)o->steps + 0.5);
}

double train_skip_at(const train_options_t *o, int64_t step)
{
    return step < train_skip_end(o) ? o->skip : 0;
}

size_t train_options_to_text(const train_options_t *o, char *buf, size_t n)
{
    char cfg[512];
    config_to_text(&o->cfg, cfg, sizeof cfg);
    int w = snprintf(
        buf, n,
        "%sbatch=%d\nstages=%d\noptimizer=%s\nreplicas=%d\naccum=%d\nseed=%" PRIu64
        "\nsteps=%d\nlr=%.9g\nwarmup=%d\nschedule=%s\nmin_lr_frac=%.9g\nwd=%.9g\n"
        "clip=%.9g\nbeta1=%.9g\nbeta2=%.9g\neps=%.9g\ndemo_chunk=%d\ndemo_k=%d\n"
        "demo_values=%s\ndemo_beta=%.9g\ndemo_index=%s\ndemo_update=%s\ncodec=%s\ncodec_block=%"
        "u\nval_batches=%d\n",
        cfg, o->cfg.batch, o->cfg.stages, o->optimizer == TRAIN_DEMO ? "demo" : "adamw",
        o->replicas, o->accum, o->seed, o->steps, (double)o->opt.lr, o->opt.warmup,
        o->opt.schedule == OPTIM_SCHEDULE_COSINE ? "cosine" : "constant",
        (double)o->opt.min_lr_frac, (double)o->opt.wd, (double)o->opt.clip, (double)o->opt.beta1,
        (double)o->opt.beta2, (double)o->opt.eps, o->demo.chunk, o->demo.k, vfmt_name(o->demo.vfmt),
        (double)o->demo.beta, o->demo.imode == DEMO_IDX_SHARED ? "shared" : "topk",
        update_name(o->demo.update), o->codec < 0 ? "none" : codec_name(o->codec), o->codec_block,
        o->val_batches);
    if (w < 0) return 0;
    /* only when set, so that runs on local files keep the text (and hashes) they had */
    if (o->data_sha256[0] && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "data_sha256=%s\ndata_url=%s\n", o->data_sha256,
                      o->data_url); /* the checksum first: it survives a truncated long URL */
    if (w < 0) return 0;
    /* only when set: runs without skipping keep the text (and hashes) they had */
    if (o->skip > 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, "skip=%.9g\n", o->skip);
    if (o->skip > 0 && train_skip_end(o) != INT64_MAX && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "skip_until=%.9g\n", o->skip_until);
    if (o->swap > 0 && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "swap=%.9g\n", o->swap);
    /* only when set: a swarm validates during the run (the leader of stage 0) */
    if (o->val_every > 0 && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "val_every=%d\n", o->val_every);
    /* only when set: swarms gossiping whole tables keep the text (and hashes) they had */
    if (o->swim_every > 0 && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "swim_every=%d\n", o->swim_every);
    if (o->val_skip && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "val_skip_mask=%" PRIu64 "\n", o->val_skip);
    /* only when set: runs without local steps keep the text (and hashes) they had */
    if (o->demo_local > 0 && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "demo_local=%d\nouter_lr=%.9g\nouter_mom=%.9g\n",
                      o->demo_local, (double)o->outer_lr, (double)o->outer_mom);
    /* only when not the DCT: runs with it keep the text (and hashes) they had */
    if (o->demo.xform != DEMO_XFORM_DCT && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "demo_transform=%s\n",
                      demo_xform_name(o->demo.xform));
    /* only when set: runs without them keep the text (and hashes) they had */
    if (o->overlap && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "overlap=1\n");
    if (o->grad_delay && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, "grad_delay=1\n");
    if (w < 0) return 0;
    return (size_t)w < n ? (size_t)w : n ? n - 1 : 0;
}

static int parse_num(const char *key, const char *v, double lo, double hi, double *out, char *err)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi))
        return status_set(err, STATUS_EMALFORMED, "run setting %s=%s is out of range", key, v);
    *out = x;
    return 0;
}

int train_options_from_text(train_options_t *o, const char *text, char *err)
{
    static const char *model_keys[] = {"vocab", "dim",      "layers",     "heads", "ffn",
                                       "seq",   "norm_eps", "rope_theta", "batch", "stages"};
    char line[1100];
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= sizeof line)
            return status_set(err, STATUS_EMALFORMED, "run text: line too long");
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (nl ? 1 : 0);
        if (!len) continue;
        char *v = strchr(line, '=');
        if (!v) return status_set(err, STATUS_EMALFORMED, "run text: '%s' has no '='", line);
        *v++ = 0;
        int is_model = 0;
        for (size_t i = 0; i < sizeof model_keys / sizeof *model_keys; i++)
            is_model |= !strcmp(line, model_keys[i]);
        if (is_model) {
            if (config_set(&o->cfg, line, v, err)) return STATUS_EMALFORMED;
            continue;
        }
        double x = 0;
        int rc = 0;
#define NUM(k, lo, hi, dst)                                                                        \
    else if (!strcmp(line, k))                                                                     \
    {                                                                                              \
        if (!(rc = parse_num(line, v, lo, hi, &x, err))) dst;                                      \
    }
        if (!strcmp(line, "optimizer")) {
            if (!strcmp(v, "adamw"))
                o->optimizer = TRAIN_ADAMW;
            else if (!strcmp(v, "demo"))
                o->optimizer = TRAIN_DEMO;
            else
                rc = status_set(err, STATUS_EMALFORMED, "run text: optimizer '%s'", v);
        } else if (!strcmp(line, "schedule")) {
            if (!strcmp(v, "constant"))
                o->opt.schedule = OPTIM_SCHEDULE_CONSTANT;
            else if (!strcmp(v, "cosine"))
                o->opt.schedule = OPTIM_SCHEDULE_COSINE;
            else
                rc = status_set(err, STATUS_EMALFORMED, "run text: schedule '%s'", v);
        } else if (!strcmp(line, "demo_values")) {
            if (!strcmp(v, "f32"))
                o->demo.vfmt = DEMO_VAL_F32;
            else if (!strcmp(v, "bf16"))
                o->demo.vfmt = DEMO_VAL_BF16;
            else if (!strcmp(v, "sign"))
                o->demo.vfmt = DEMO_VAL_SIGN;
            else
                rc = status_set(err, STATUS_EMALFORMED, "run text: demo_values '%s'", v);
        } else if (!strcmp(line, "data_url")) {
            /* "" is what train_options_to_text writes for a checksum without a URL */
            if (strlen(v) >= sizeof o->data_url || (*v && strncmp(v, "http", 4)))
                rc = status_set(err, STATUS_EMALFORMED, "run text: data_url is not a URL");
            else
                snprintf(o->data_url, sizeof o->data_url, "%s", v);
        } else if (!strcmp(line, "data_sha256")) {
            size_t k = strspn(v, "0123456789abcdef");
            if (k != 64 || v[k])
                rc = status_set(err, STATUS_EMALFORMED,
                                "run text: data_sha256 is not 64 hex digits");
            else
                memcpy(o->data_sha256, v, 65);
        } else if (!strcmp(line, "demo_index")) {
            if (!strcmp(v, "topk"))
                o->demo.imode = DEMO_IDX_TOPK;
            else if (!strcmp(v, "shared"))
                o->demo.imode = DEMO_IDX_SHARED;
            else
                rc = status_set(err, STATUS_EMALFORMED, "run text: demo_index '%s'", v);
        } else if (!strcmp(line, "demo_transform")) {
            if (!strcmp(v, "dct"))
                o->demo.xform = DEMO_XFORM_DCT;
            else if (!strcmp(v, "none"))
                o->demo.xform = DEMO_XFORM_NONE;
            else
                rc = status_set(err, STATUS_EMALFORMED, "run text: demo_transform '%s'", v);
        } else if (!strcmp(line, "demo_update")) {
            if (!strcmp(v, "sign"))
                o->demo.update = DEMO_UPDATE_SIGN;
            else if (!strcmp(v, "rms"))
                o->demo.update = DEMO_UPDATE_RMS;
            else if (!strcmp(v, "rmsprop"))
                o->demo.update = DEMO_UPDATE_RMSPROP;
            else if (!strcmp(v, "adam"))
                o->demo.update = DEMO_UPDATE_ADAM;
            else if (!strcmp(v, "linear"))
                o->demo.update = DEMO_UPDATE_LINEAR;
            else
                rc = status_set(err, STATUS_EMALFORMED, "run text: demo_update '%s'", v);
        } else if (!strcmp(line, "codec")) {
            o->codec = strcmp(v, "none") ? codec_by_name(v) : -1;
            if (strcmp(v, "none") && o->codec < 0)
                rc = status_set(err, STATUS_EMALFORMED, "run text: codec '%s'", v);
        }
        NUM("replicas", 1, 1 << 20, o->replicas = (int)x)
        NUM("accum", 1, 1 << 20, o->accum = (int)x)
        NUM("seed", 0, 1.8e19, o->seed = (uint64_t)x)
        NUM("steps", 0, 2e9, o->steps = (int)x)
        NUM("lr", 0, 1e3, o->opt.lr = (float)x)
        NUM("warmup", 0, 2e9, o->opt.warmup = (int)x)
        NUM("min_lr_frac", 0, 1, o->opt.min_lr_frac = (float)x)
        NUM("wd", 0, 1e3, o->opt.wd = (float)x)
        NUM("clip", 0, 1e30, o->opt.clip = (float)x)
        NUM("beta1", 0, 1, o->opt.beta1 = (float)x)
        NUM("beta2", 0, 1, o->opt.beta2 = (float)x)
        NUM("eps", 0, 1, o->opt.eps = (float)x)
        NUM("demo_chunk", 1, 256, o->demo.chunk = (int)x)
        NUM("demo_k", 1, 65536, o->demo.k = (int)x)
        NUM("demo_beta", 0, 1, o->demo.beta = (float)x)
        NUM("codec_block", 0, 1 << 20, o->codec_block = (uint32_t)x)
        NUM("val_batches", 1, 1 << 20, o->val_batches = (int)x)
        NUM("skip", 0, 1, o->skip = x)
        NUM("skip_until", 0, 1, o->skip_until = x)
        NUM("swap", 0, 1, o->swap = x)
        NUM("val_every", 0, 1 << 30, o->val_every = (int)x)
        NUM("swim_every", 0, 64, o->swim_every = (int)x)
        NUM("val_skip_mask", 0, 1.8e19, o->val_skip = (uint64_t)x)
        NUM("demo_local", 0, 1 << 20, o->demo_local = (int)x)
        NUM("outer_lr", 0, 1e6, o->outer_lr = (float)x)
        NUM("outer_mom", 0, 0.999999, o->outer_mom = (float)x)
        NUM("overlap", 0, 1, o->overlap = (int)x)
        NUM("grad_delay", 0, 1, o->grad_delay = (int)x)
        else rc = status_set(err, STATUS_EMALFORMED, "run text: unknown setting '%s'", line);
#undef NUM
        if (rc) return STATUS_EMALFORMED;
    }
    o->opt.total_steps = o->steps;
    /* a block the codec cannot use (odd for int4) would fail every microbatch later */
    int64_t two = 2;
    codec_params_t cp = {.block = o->codec_block};
    /* subspace's block is a budget per element, too small for two elements by design: it
     * is checked against the run's shapes below */
    int bad_block = o->codec >= 0 && !codec_encoded_size((codec_id_t)o->codec, &cp, &two, 1);
    if (o->codec == CODEC_SUBSPACE) bad_block = 0;
    if (bad_block)
        return status_set(err, STATUS_EMALFORMED, "run text: codec %s cannot use block %u",
                          codec_name(o->codec), o->codec_block);
    if (config_validate(&o->cfg, err)) return STATUS_EMALFORMED;
    if (o->codec == CODEC_SUBSPACE) { /* room for one component: a boundary, a sequence */
        int64_t seq[2] = {o->cfg.seq, o->cfg.dim}, bnd[3] = {o->cfg.batch, o->cfg.seq, o->cfg.dim};
        if (!codec_encoded_size(CODEC_SUBSPACE, &cp, seq, 2) ||
            !codec_encoded_size(CODEC_SUBSPACE, &cp, bnd, 3))
            return status_set(err, STATUS_EMALFORMED,
                              "run text: codec subspace cannot use block %u for this model",
                              o->codec_block);
    }
    if (o->val_skip && !path_valid(o->val_skip, o->cfg.stages))
        return status_set(err, STATUS_EMALFORMED,
                          "run text: val_skip_mask names stage 0, the last "
                          "stage or a stage past it");
    return 0;
}

typedef struct {
    const train_options_t *o;
    kern_t *k;
    data_t *d;
    int R, S;
    model_t **rep;     /* R replicas */
    demo_opt_t **dopt; /* [r * S + s] */
    uint8_t **msg;     /* [r * S + s] stage messages */
    const uint8_t **ptrs;
    size_t *lens;
    uint32_t *wts; /* [R] what each message weighs (demo_opt_apply_w) */
    store_t *db;
    char run_text[2048]; /* everything a resumed run must share with the original */
    char run_hash[17];
    int32_t *tok, *tgt;
    uint64_t val_wire; /* boundary bytes validation passes encoded (not training traffic) */
    int *visits;       /* [r * S + s]: microbatches of this step whose path visited stage s */
    /* local steps (o->demo_local > 0), backend memory: */
    float **psync;        /* [s] the parameters at the last sync (the same for every replica) */
    float **omom;         /* [r * S + s] outer momentum (o->outer_mom > 0) */
    optim_config_t outer; /* the outer step's schedule: lr * outer_lr, no decay, no clip */
    /* --grad-delay, backend memory: */
    float **stash; /* [s] the parameters of the step before (the same for every replica) */
    float **cur;   /* [s] the current ones while the gradient is computed */
    /* --overlap: */
    float **ahead; /* [r] stage 0's lookahead for replica r's next step (backend memory) */
    float *gbody;  /* AdamW: a replica's stage-0 gradient as a message body (host) */
    int ahead_ok;  /* ahead holds a lookahead (not at the first step of this process) */
} run_t;

/* The validation loss of replica 0 run with the stages of mask `skip` left out. */
static int validate_skip(run_t *run, uint64_t skip, float *val, char *err)
{
    const model_config_t *c = &run->o->cfg;
    int n = run->o->val_batches;
    double sum = 0;
    uint64_t b0, b1, e;
    int rc = model_set_skip(run->rep[0], skip, err);
    if (rc) return rc;
    model_wire_stats(run->rep[0], &b0, &e);
    for (int i = 0; i < n; i++) {
        float loss;
        data_val_batch(run->d, i, n, c->batch, run->tok, run->tgt);
        if ((rc = model_eval_micro(run->rep[0], run->tok, run->tgt, &loss, err))) return rc;
        sum += loss;
    }
    model_wire_stats(run->rep[0], &b1, &e);
    run->val_wire += b1 - b0;
    *val = (float)(sum / n);
    return 0;
}

static int validate(run_t *run, float *val, char *err)
{
    return validate_skip(run, 0, val, err);
}

/* An event of the run into the --events file (common/events.h; stage null: all of them);
 * with to_store also into the store's event table, the same fields as its detail: the
 * "val_loss" events (val_step: the 0-based step after which it was measured), which
 * `status --plot` draws. */
static void record(run_t *run, int to_store, const char *kind, int64_t step, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void record(run_t *run, int to_store, const char *kind, int64_t step, const char *fmt, ...)
{
    if (!run->o->events && !(to_store && run->db)) return;
    char fields[1024], detail[1100], err[STATUS_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    events_fields(fields, sizeof fields, fmt, ap);
    va_end(ap);
    events_put(run->o->events, kind, -1, step, fields);
    if (!to_store || !run->db) return;
    events_object(detail, sizeof detail, -1, step, fields);
    if (store_event_add(run->db, kind, detail, err)) log_warn("events: %s", err);
}

/* --grad-delay: the whole model's gradient of `step` is computed on the parameters of
 * the step before. run->stash holds them (at the first step of this process: the current
 * ones, so that step is fresh); they are put in every replica for the passes. */
static void delay_begin(run_t *run, int64_t step, int64_t start)
{
    kern_t *k = run->k;
    for (int s = 0; s < run->S; s++) {
        stage_t *st = model_stage(run->rep[0], s);
        size_t bytes = stage_num_params(st) * sizeof(float);
        if (step == start) kern_copy(k, run->stash[s], stage_params(st), bytes);
        kern_copy(k, run->cur[s], stage_params(st), bytes);
        for (int r = 0; r < run->R; r++)
            kern_copy(k, stage_params(model_stage(run->rep[r], s)), run->stash[s], bytes);
    }
}

/* After the gradient: the current parameters back in place, and stashed for the next
 * step (the update has not been applied yet). */
static void delay_end(run_t *run)
{
    for (int s = 0; s < run->S; s++) {
        size_t bytes = stage_num_params(model_stage(run->rep[0], s)) * sizeof(float);
        for (int r = 0; r < run->R; r++)
            kern_copy(run->k, stage_params(model_stage(run->rep[r], s)), run->cur[s], bytes);
        float *t = run->stash[s];
        run->stash[s] = run->cur[s];
        run->cur[s] = t;
    }
}

/* DeMo's update without the decay: train's demo_opt_prepare decayed already. */
static int apply_demo_prepared(const model_update_t *u, const update_batch_t *b,
                               update_result_t *out, char *err)
{
    out->gnorm = out->stage_gnorm = 0;
    return demo_opt_apply(u->dopt, u->opt, b->step, b->bodies, b->lens, b->n, err);
}

/* --overlap, before the update of `step`: each replica's lookahead for stage 0, the
 * parameters its own share of the step would give alone (update_predict with its own DeMo
 * message, or AdamW with its own gradient on the shared moments), which its next step's
 * stage-0 forwards run on, as a swarm's stage 0 does for the microbatches it starts while
 * its pool exchanges (docs/thin-links.md). */
static int overlap_predict(run_t *run, int64_t step, char *err)
{
    const train_options_t *o = run->o;
    for (int r = 0; r < run->R; r++) {
        stage_t *s0 = model_stage(run->rep[run->dopt ? r : 0], 0);
        model_update_t u = update_rule(s0, run->k, NULL, &o->opt);
        const uint8_t *body = (const uint8_t *)run->gbody;
        size_t len = stage_num_params(s0) * sizeof(float);
        if (run->dopt) {
            u.dopt = run->dopt[r * run->S];
            u.apply = apply_demo_prepared;
            body = run->msg[r * run->S];
            len = demo_opt_msg_size(u.dopt);
        } else {
            kern_download(run->k, run->gbody, stage_grads(model_stage(run->rep[r], 0)), len);
        }
        int n = run->visits[r * run->S];
        update_batch_t b = {.step = step, .bodies = &body, .lens = &len, .n = 1,
                            .counted = (uint32_t)(n ? n : 1)};
        int rc = update_predict(&u, &b, run->ahead[r], err);
        if (rc) return rc;
    }
    run->ahead_ok = 1;
    return 0;
}

/* Forward and backward of every replica's microbatches for `step`; mean loss out.
 * Microbatch r * accum + a (the index a swarm gives it) runs the stages of its SkipPipe
 * path only (swarm/path.h); run->visits counts, per replica and stage, the microbatches
 * that passed through. */
static int compute_grads(run_t *run, int64_t step, double *loss_out, char *err)
{
    const train_options_t *o = run->o;
    int M = run->R * o->accum, S = run->S;
    double sum = 0;
    for (int r = 0; r < run->R; r++) {
        model_zero_grads(run->rep[r]);
        for (int s = 0; s < S; s++) run->visits[r * S + s] = 0;
        for (int a = 0; a < o->accum; a++) {
            float loss;
            uint32_t index = (uint32_t)(r * o->accum + a);
            uint64_t skip = path_skip(o->seed, step, index, M, S, train_skip_at(o, step));
            int swap = path_swap(o->seed, step, index, M, S, o->swap, skip);
            for (int s = 0; s < S; s++) run->visits[r * S + s] += path_on(skip, s);
            data_train_batch(run->d, o->seed, (uint64_t)r, step * o->accum + a, o->cfg.batch,
                             run->tok, run->tgt);
            int rc = model_set_skip(run->rep[r], skip, err);
            if (!rc) rc = model_set_swap(run->rep[r], swap, err);
            if (!rc) rc = model_train_micro(run->rep[r], run->tok, run->tgt, &loss, err);
            if (rc) return rc;
            sum += loss;
        }
        if (model_set_skip(run->rep[r], 0, err) || model_set_swap(run->rep[r], 0, err))
            return STATUS_EINVAL;
    }
    *loss_out = sum / ((double)run->R * o->accum);
    return 0;
}

/* AdamW on the exact mean of all replicas' gradients (what a dense all-reduce gives):
 * replica 0 sums, steps, and hands its parameters to the others. Each stage averages over
 * the microbatches that visited it (all R * accum without skipping), as its swarm pool
 * does over the microbatches it counted. */
static void step_adamw(run_t *run, int64_t step, float *gnorm)
{
    kern_t *k = run->k;
    double sq = 0;
    for (int s = 0; s < run->S; s++) {
        stage_t *s0 = model_stage(run->rep[0], s);
        int n = 0;
        for (int r = 0; r < run->R; r++) n += run->visits[r * run->S + s];
        for (int r = 1; r < run->R; r++)
            kern_axpy(k, stage_grads(s0), 1.0f, stage_grads(model_stage(run->rep[r], s)),
                      stage_num_params(s0));
        float gn;
        optim_adamw_step(s0, &run->o->opt, step, 1.0f / (float)(n ? n : 1), &gn);
        sq += (double)gn * gn;
    }
    *gnorm = (float)sqrt(sq);
    for (int s = 0; s < run->S; s++) {
        stage_t *s0 = model_stage(run->rep[0], s);
        for (int r = 1; r < run->R; r++)
            kern_copy(k, stage_params(model_stage(run->rep[r], s)), stage_params(s0),
                      stage_num_params(s0) * sizeof(float));
    }
}

/* DeMo: every replica prepares its stage messages, then every replica applies the
 * pool's messages, received in its own order (rotated so each sees itself first), as
 * peers would. */
static int step_demo(run_t *run, int64_t step, float *gnorm, char *err)
{
    int R = run->R, S = run->S;
    double sq = 0;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            float n;
            int v = run->visits[r * S + s]; /* what a pool member divides by: its count */
            int rc = demo_opt_prepare(run->dopt[r * S + s], &run->o->opt, step,
                                      1.0f / (float)(v ? v : 1), run->msg[r * S + s], &n, err);
            if (rc) return rc;
            if (r == 0) sq += (double)n * n;
        }
    *gnorm = (float)sqrt(sq);
    if (run->ahead) {
        int rc = overlap_predict(run, step, err);
        if (rc) return rc;
    }
    for (int s = 0; s < S; s++)
        for (int r = 0; r < R; r++) {
            for (int j = 0; j < R; j++) {
                int from = (r + j) % R;
                run->ptrs[j] = run->msg[from * S + s];
                run->lens[j] = demo_opt_msg_size(run->dopt[from * S + s]);
                run->wts[j] = 1u + (uint32_t)run->visits[from * S + s]; /* as a pool weighs it */
            }
            int rc = demo_opt_apply_w(run->dopt[r * S + s], &run->o->opt, step, run->ptrs,
                                      run->lens, run->wts, R, err);
            if (rc) return rc;
        }
    return 0;
}

/* DiLoCo-style local steps (o->demo_local = H): every replica takes an AdamW step on its
 * own gradient (its own moments, no exchange). At a sync (every H steps and the last),
 * each replica's change since the last sync, delta = p_sync - p, is its DeMo "gradient":
 * D = beta D + lr_out delta, the transmitted part goes into its stage message; then every
 * replica restarts from p_sync and applies the pool's messages with the outer schedule
 * (demo_opt_apply, rms update: p_sync - lr_out Q / rms(Q)), optionally through Nesterov
 * momentum, so that all replicas hold identical parameters again. *synced says whether
 * this step synced. */
static int step_local(run_t *run, int64_t step, float *gnorm, int *synced, char *err)
{
    const train_options_t *o = run->o;
    kern_t *k = run->k;
    int R = run->R, S = run->S;
    double sq = 0;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            int v = run->visits[r * S + s];
            float n;
            optim_adamw_step(model_stage(run->rep[r], s), &o->opt, step, 1.0f / (float)(v ? v : 1),
                             &n);
            if (r == 0) sq += (double)n * n;
        }
    *gnorm = (float)sqrt(sq);
    *synced = (step + 1) % o->demo_local == 0 || step + 1 == o->steps;
    if (!*synced) return 0;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            stage_t *st = model_stage(run->rep[r], s);
            size_t P = stage_num_params(st);
            float *g = stage_grads(st);
            kern_copy(k, g, run->psync[s], P * sizeof(float)); /* delta = p_sync - p */
            kern_axpy(k, g, -1.0f, stage_params(st), P);
            int rc = demo_opt_prepare(run->dopt[r * S + s], &run->outer, step, 1.0f,
                                      run->msg[r * S + s], NULL, err);
            if (rc) return rc;
        }
    for (int s = 0; s < S; s++)
        for (int r = 0; r < R; r++) {
            stage_t *st = model_stage(run->rep[r], s);
            size_t P = stage_num_params(st);
            float *p = stage_params(st);
            for (int j = 0; j < R; j++) {
                int from = (r + j) % R;
                run->ptrs[j] = run->msg[from * S + s];
                run->lens[j] = demo_opt_msg_size(run->dopt[from * S + s]);
            }
            kern_copy(k, p, run->psync[s], P * sizeof(float));
            int rc = demo_opt_apply(run->dopt[r * S + s], &run->outer, step, run->ptrs, run->lens,
                                    R, err);
            if (rc) return rc;
            if (run->omom) {
                /* u = p_sync - p (the step just applied); M = mu M + u; p = p_sync - (mu M + u) */
                float *m = run->omom[r * S + s], *u = stage_grads(st);
                float mu = o->outer_mom;
                kern_copy(k, u, run->psync[s], P * sizeof(float));
                kern_axpy(k, u, -1.0f, p, P);
                kern_scale(k, m, mu, P);
                kern_axpy(k, m, 1.0f, u, P);
                kern_axpy(k, p, -mu, m, P);
            }
        }
    for (int s = 0; s < S; s++)
        kern_copy(k, run->psync[s], stage_params(model_stage(run->rep[0], s)),
                  stage_num_params(model_stage(run->rep[0], s)) * sizeof(float));
    return 0;
}

/* Replicas must hold bit-identical parameters after every step. */
static int check_replicas(run_t *run, int64_t step, char *err)
{
    kern_t *k = run->k;
    for (int s = 0; s < run->S; s++) {
        stage_t *s0 = model_stage(run->rep[0], s);
        size_t bytes = stage_num_params(s0) * sizeof(float);
        float *a = malloc(bytes), *b = malloc(bytes);
        int bad = !a || !b;
        if (!bad) kern_download(k, a, stage_params(s0), bytes);
        for (int r = 1; !bad && r < run->R; r++) {
            kern_download(k, b, stage_params(model_stage(run->rep[r], s)), bytes);
            if (memcmp(a, b, bytes)) {
                free(a);
                free(b);
                return status_set(
                    err, STATUS_ECORRUPT,
                    "replica %d diverged from replica 0 in stage %d after step %" PRId64, r, s,
                    step);
            }
        }
        free(a);
        free(b);
        if (bad) return status_set(err, STATUS_ENOMEM, "train: out of memory");
    }
    return 0;
}

/* ---- checkpoints ---------------------------------------------------------------- */

/* The whole in-process run is one checkpoint (stage 0 of the store): blobs
 * "stage.S.params|adam_m|adam_v|adam_t" of replica 0 and "replica.R.stage.S.demo" for
 * DeMo's residual momentum, plus "train" (the next step). Replicas share parameters. */
static int checkpoint(run_t *run, int64_t next_step, char *err)
{
    store_ckpt_t *ck = store_ckpt_new(0, next_step, run->run_text, run->run_hash);
    if (!ck) return status_set(err, STATUS_ENOMEM, "checkpoint: out of memory");
    char name[64];
    int rc = store_ckpt_add_blob(ck, "train.next_step", &next_step, sizeof next_step);
    for (int s = 0; !rc && s < run->S; s++) {
        stage_t *st = model_stage(run->rep[0], s);
        snprintf(name, sizeof name, "stage.%d.", s);
        rc = stage_ckpt_add(ck, name, st);
        for (int r = 0; !rc && run->dopt && r < run->R; r++) {
            snprintf(name, sizeof name, "replica.%d.stage.%d.demo", r, s);
            rc = stage_ckpt_add_demo(ck, name, run->dopt[r * run->S + s], stage_num_params(st));
        }
    }
    if (rc) {
        store_ckpt_destroy(&ck);
        return status_set(err, rc, "checkpoint: could not snapshot (out of memory)");
    }
    store_ckpt_save_async(run->db, &ck);
    return 0;
}

static int restore(run_t *run, int64_t *start, char *err)
{
    store_ckpt_t *ck = NULL;
    int rc = store_ckpt_load_latest(run->db, 0, &ck, err);
    if (rc == STATUS_ENOTFOUND) {
        fprintf(run->o->log ? run->o->log : stdout,
                "resume: no checkpoint in %s; starting at step 0\n", run->o->db);
        return 0;
    }
    if (rc) return rc;
    if (strcmp(store_ckpt_config_hash(ck), run->run_hash)) {
        rc = status_set(err, STATUS_EINVAL,
                        "resume: the checkpoint in %s is from another run configuration "
                        "(its settings:\n%s)",
                        run->o->db, store_ckpt_config_text(ck));
        goto done;
    }
    char name[64];
    const int64_t *next = stage_ckpt_blob(ck, "train.next_step", sizeof(int64_t), err);
    rc = next ? 0 : STATUS_ECORRUPT;
    for (int s = 0; !rc && s < run->S; s++) {
        snprintf(name, sizeof name, "stage.%d.", s);
        for (int r = 0; !rc && r < run->R; r++) {
            stage_t *st = model_stage(run->rep[r], s);
            rc = stage_ckpt_load(ck, name, st, err);
            if (rc || !run->dopt) continue;
            char dname[64];
            snprintf(dname, sizeof dname, "replica.%d.stage.%d.demo", r, s);
            rc = stage_ckpt_load_demo(ck, dname, run->dopt[r * run->S + s], stage_num_params(st),
                                      err);
        }
    }
    if (rc) goto done;
    *start = *next;
    fprintf(run->o->log ? run->o->log : stdout,
            "resume: continuing from the checkpoint at step %" PRId64 " in %s\n", *start,
            run->o->db);
done:
    store_ckpt_destroy(&ck);
    return rc;
}

/* ---- set-up and the loop ---------------------------------------------------------- */

static int setup(run_t *run, char *err)
{
    const train_options_t *o = run->o;
    const model_config_t *c = &o->cfg;
    int rc;
    if ((rc = config_validate(c, err))) return rc;
    if (o->steps < 0 || o->accum < 1 || o->val_batches < 1 || o->replicas < 1 || o->keep < 1 ||
        o->checkpoint_every < 0 || o->stop_after < 0)
        return status_set(err, STATUS_EINVAL,
                          "steps, checkpoint-every and stop-after must be >= 0; accum, replicas, "
                          "keep and val-batches >= 1");
    if ((o->resume || o->checkpoint_every) && !o->db)
        return status_set(err, STATUS_EINVAL, "--resume and --checkpoint-every need --db PATH");
    if (!o->data_path && (rc = data_ensure_default(err))) return rc;
    const char *path = o->data_path ? o->data_path : data_default_path();
    if (!(run->d = data_open(path, c->seq, o->val_frac, err))) return STATUS_EINVAL;
    if (!(run->k = kern_new(o->device, o->threads, err))) return STATUS_ENODEV;
    run->R = o->replicas;
    run->S = c->stages;
    run->rep = calloc((size_t)run->R, sizeof *run->rep);
    size_t BT = (size_t)c->batch * c->seq;
    run->tok = malloc(BT * sizeof *run->tok);
    run->tgt = malloc(BT * sizeof *run->tgt);
    run->visits = calloc((size_t)run->R * (size_t)run->S, sizeof *run->visits);
    if (!(o->skip >= 0 && o->skip <= 1))
        return status_set(err, STATUS_EINVAL, "--skip must be in [0, 1]");
    if (!(o->skip_until >= 0 && o->skip_until <= 1))
        return status_set(err, STATUS_EINVAL, "--skip-until must be in [0, 1]");
    if (!(o->swap >= 0 && o->swap <= 1))
        return status_set(err, STATUS_EINVAL, "--swap must be in [0, 1]");
    if (o->val_skip && !path_valid(o->val_skip, run->S))
        return status_set(err, STATUS_EINVAL,
                          "--skip-stages: only middle stages (1..%d) can be left out", run->S - 2);
    if (!run->rep || !run->tok || !run->tgt || !run->visits)
        return status_set(err, STATUS_ENOMEM, "train: out of memory");
    for (int r = 0; r < run->R; r++) {
        if (!(run->rep[r] = model_new(c, run->k, o->seed, err))) return STATUS_EINVAL;
        if (o->init && (rc = hf_model_load(run->rep[r], o->init, err))) return rc;
        if ((rc = model_set_codec(run->rep[r], o->codec, o->codec_block, err))) return rc;
    }
    if (o->optimizer == TRAIN_DEMO) {
        int n = run->R * run->S;
        run->dopt = calloc((size_t)n, sizeof *run->dopt);
        run->msg = calloc((size_t)n, sizeof *run->msg);
        run->ptrs = calloc((size_t)run->R, sizeof *run->ptrs);
        run->lens = calloc((size_t)run->R, sizeof *run->lens);
        run->wts = calloc((size_t)run->R, sizeof *run->wts);
        if (!run->dopt || !run->msg || !run->ptrs || !run->lens || !run->wts)
            return status_set(err, STATUS_ENOMEM, "train: out of memory");
        for (int i = 0; i < n; i++) {
            if (!(run->dopt[i] =
                      demo_opt_new(model_stage(run->rep[i / run->S], i % run->S), &o->demo, err)))
                return STATUS_EINVAL;
            if (!(run->msg[i] = malloc(demo_opt_msg_size(run->dopt[i]))))
                return status_set(err, STATUS_ENOMEM, "train: out of memory");
        }
    } else if (o->optimizer != TRAIN_ADAMW) {
        return status_set(err, STATUS_EINVAL, "unknown optimizer %d", o->optimizer);
    }
    if (o->demo_local < 0 || (o->demo_local > 0 && o->optimizer != TRAIN_DEMO))
        return status_set(err, STATUS_EINVAL, "--demo-local H needs --optimizer demo and H >= 0");
    if (o->demo_local > 0) {
        if (!(o->outer_lr > 0) || !(o->outer_mom >= 0 && o->outer_mom < 1))
            return status_set(err, STATUS_EINVAL,
                              "--outer-lr must be > 0 and --outer-momentum in [0, 1)");
        if (o->demo.update == DEMO_UPDATE_RMSPROP || o->demo.update == DEMO_UPDATE_ADAM)
            return status_set(err, STATUS_EINVAL,
                              "--demo-local: the rmsprop and adam updates "
                              "would share the local AdamW moments");
        /* a checkpoint at a sync holds what every replica holds (p_sync); resuming would
         * need every replica's AdamW moments too */
        if (o->resume || (o->checkpoint_every && o->checkpoint_every % o->demo_local &&
                           o->checkpoint_every < o->steps))
            return status_set(err, STATUS_EINVAL,
                              "--demo-local: checkpoints only at syncs (--checkpoint-every a "
                              "multiple of H; the last step syncs too) and no --resume: they "
                              "do not carry the replicas' local AdamW moments");
        run->outer = outer_opt(&o->opt, o->outer_lr, o->demo.update == DEMO_UPDATE_LINEAR);
        run->psync = calloc((size_t)run->S, sizeof *run->psync);
        if (o->outer_mom > 0)
            run->omom = calloc((size_t)run->R * (size_t)run->S, sizeof *run->omom);
        if (!run->psync || (o->outer_mom > 0 && !run->omom))
            return status_set(err, STATUS_ENOMEM, "train: out of memory");
        for (int s = 0; s < run->S; s++) {
            stage_t *st = model_stage(run->rep[0], s);
            size_t bytes = stage_num_params(st) * sizeof(float);
            if (!(run->psync[s] = kern_alloc(run->k, bytes)))
                return status_set(err, STATUS_ENOMEM, "train: out of memory");
            kern_copy(run->k, run->psync[s], stage_params(st), bytes);
            for (int r = 0; run->omom && r < run->R; r++) {
                float *m = kern_alloc(run->k, bytes);
                if (!(run->omom[r * run->S + s] = m))
                    return status_set(err, STATUS_ENOMEM, "train: out of memory");
                kern_scale(run->k, m, 0.0f, bytes / sizeof(float));
            }
        }
    }

    if ((o->grad_delay || o->overlap) && o->demo_local > 0)
        return status_set(err, STATUS_EINVAL,
                          "--grad-delay and --overlap: not with --demo-local (replicas differ "
                          "between syncs)");
    if (o->grad_delay) {
        run->stash = calloc((size_t)run->S, sizeof *run->stash);
        run->cur = calloc((size_t)run->S, sizeof *run->cur);
        if (!run->stash || !run->cur) return status_set(err, STATUS_ENOMEM, "train: out of memory");
        for (int s = 0; s < run->S; s++) {
            size_t bytes = stage_num_params(model_stage(run->rep[0], s)) * sizeof(float);
            if (!(run->stash[s] = kern_alloc(run->k, bytes)) ||
                !(run->cur[s] = kern_alloc(run->k, bytes)))
                return status_set(err, STATUS_ENOMEM, "train: out of memory");
        }
    }
    if (o->overlap && run->S > 1) {
        size_t bytes = stage_num_params(model_stage(run->rep[0], 0)) * sizeof(float);
        run->ahead = calloc((size_t)run->R, sizeof *run->ahead);
        if (!run->ahead || !(run->gbody = malloc(bytes)))
            return status_set(err, STATUS_ENOMEM, "train: out of memory");
        for (int r = 0; r < run->R; r++)
            if (!(run->ahead[r] = kern_alloc(run->k, bytes)))
                return status_set(err, STATUS_ENOMEM, "train: out of memory");
    }

    /* What must match for a resumed run to continue the same run. */
    train_options_t same = *o;
    same.val_skip = 0; /* what validation leaves out does not change the run's state */
    size_t tl = train_options_to_text(&same, run->run_text, sizeof run->run_text);
    tl += (size_t)snprintf(run->run_text + tl, sizeof run->run_text - tl, "data=%s\n", path);
    if (o->init && tl < sizeof run->run_text)
        snprintf(run->run_text + tl, sizeof run->run_text - tl, "init=%s\n", o->init);
    snprintf(run->run_hash, sizeof run->run_hash, "%016" PRIx64, rng_hash_str(run->run_text));
    if (o->db) {
        if (!(run->db = store_open(o->db, err))) return STATUS_EIO;
        store_set_keep(run->db, o->keep);
        store_set_writer_budget(run->db, o->checkpoint_budget);
    }
    return 0;
}

static void teardown(run_t *run)
{
    store_close(&run->db);
    for (int i = 0; run->dopt && i < run->R * run->S; i++) {
        demo_opt_destroy(&run->dopt[i]);
        free(run->msg[i]);
    }
    free(run->dopt);
    free(run->msg);
    free(run->ptrs);
    free(run->lens);
    free(run->wts);
    for (int r = 0; run->rep && r < run->R; r++) model_destroy(&run->rep[r]);
    free(run->rep);
    free(run->tok);
    free(run->tgt);
    free(run->visits);
    for (int s = 0; run->psync && s < run->S; s++) kern_free(run->k, run->psync[s]);
    for (int i = 0; run->omom && i < run->R * run->S; i++) kern_free(run->k, run->omom[i]);
    free(run->psync);
    free(run->omom);
    for (int s = 0; run->stash && s < run->S; s++) {
        if (run->stash[s]) kern_free(run->k, run->stash[s]);
        if (run->cur && run->cur[s]) kern_free(run->k, run->cur[s]);
    }
    free(run->stash);
    free(run->cur);
    for (int r = 0; run->ahead && r < run->R; r++)
        if (run->ahead[r]) kern_free(run->k, run->ahead[r]);
    free(run->ahead);
    free(run->gbody);
    kern_destroy(&run->k);
    data_destroy(&run->d);
}

int train_run(const train_options_t *o, train_result_t *res, char *err)
{
    FILE *log = o->log ? o->log : stdout;
    run_t run = {.o = o};
    train_result_t r = {0};
    int rc = setup(&run, err);
    if (rc) goto done;
    const model_config_t *c = &o->cfg;
    size_t BT = (size_t)c->batch * c->seq;
    size_t P = model_num_params(run.rep[0]);
    fprintf(log,
            "train: %zu parameters, %d stage(s), %d replica(s), %s, device %s (%d threads), "
            "data %s (%zu train / %zu held-out bytes)%s\n",
            P, c->stages, run.R, o->optimizer == TRAIN_DEMO ? "DeMo" : "AdamW", kern_name(run.k),
            kern_threads(run.k), o->data_path ? o->data_path : data_default_path(),
            data_train_bytes(run.d), data_val_bytes(run.d), o->skip > 0 ? ", skipping" : "");
    record(&run, 0, "train", -1, "params=%zu stages=%d replicas=%d optimizer=%s device=%s threads=%d",
           P, c->stages, run.R, o->optimizer == TRAIN_DEMO ? "demo" : "adamw", kern_name(run.k),
           kern_threads(run.k));
    if (o->swap > 0)
        fprintf(log,
                "swap: a share %.3g of microbatches swap the end stages' blocks (CheckFree+)\n",
                o->swap);
    if (o->skip > 0)
        fprintf(log, "skip: a share %.3g of middle-stage visits left out (SkipPipe paths)%s\n",
                o->skip,
                train_skip_at(o, o->steps - 1) > 0 ? "" : ", in the first part of the run");
    if (run.dopt) {
        size_t bytes = 0;
        for (int s = 0; s < run.S; s++) bytes += demo_opt_msg_size(run.dopt[s]);
        int H = o->demo_local > 0 ? o->demo_local : 1;
        r.demo_bytes_per_param = (double)bytes / (double)P / H;
        fprintf(log,
                "demo: chunk %d, k %d, values %s, beta %g, indices %s, update %s, transform %s: "
                "%zu bytes per replica per exchange, every %d step(s) = %.5f bytes/param/step "
                "(dense f32 gradient: 4)\n",
                o->demo.chunk, o->demo.k, vfmt_name(o->demo.vfmt), (double)o->demo.beta,
                o->demo.imode == DEMO_IDX_SHARED ? "shared" : "topk", update_name(o->demo.update),
                demo_xform_name(o->demo.xform), bytes, H, r.demo_bytes_per_param);
        record(&run, 0, "demo",
               -1, "chunk=%d k=%d values=%s beta=%g indices=%s update=%s transform=%s bytes=%zu "
               "every=%d bytes_per_param=%.5f",
               o->demo.chunk, o->demo.k, vfmt_name(o->demo.vfmt), (double)o->demo.beta,
               o->demo.imode == DEMO_IDX_SHARED ? "shared" : "topk", update_name(o->demo.update),
               demo_xform_name(o->demo.xform), bytes, H, r.demo_bytes_per_param);
        int linear = o->demo.update == DEMO_UPDATE_LINEAR;
        if (o->demo_local > 0)
            fprintf(log,
                    "local steps: %d AdamW steps per replica between exchanges; outer step %s "
                    "%g x %s, Nesterov momentum %g\n",
                    o->demo_local, linear ? "p -=" : "rms", (double)o->outer_lr,
                    linear ? "Q" : "lr", (double)o->outer_mom);
    }
    int64_t start = 0;
    if (o->resume && (rc = restore(&run, &start, err))) goto done;
    r.start_step = start;

    double t_start = 0;
    int64_t timed_from = start + 1;
    for (int64_t step = start; step < o->steps; step++) {
        double t0 = clock_now();
        if (step == timed_from) t_start = t0;
        double loss;
        float gnorm;
        if (run.stash) delay_begin(&run, step, start);
        for (int i = 0; run.ahead && i < run.R; i++)
            if ((rc = model_set_stale_first(run.rep[i], run.ahead_ok ? run.ahead[i] : NULL, err)))
                goto done;
        if ((rc = compute_grads(&run, step, &loss, err))) goto done;
        if (run.stash) delay_end(&run);
        if (run.ahead && !run.dopt && (rc = overlap_predict(&run, step, err))) goto done;
        if (!isfinite(loss)) {
            rc = status_set(err, STATUS_EINVAL,
                            "loss is not finite at step %" PRId64 " (lr too high?)", step);
            goto done;
        }
        int synced = 1;
        if (run.psync)
            rc = step_local(&run, step, &gnorm, &synced, err);
        else if (run.dopt)
            rc = step_demo(&run, step, &gnorm, err);
        else
            step_adamw(&run, step, &gnorm);
        if (rc) goto done;
        /* with local steps replicas differ between syncs: checked after every sync */
        if (run.R > 1 && synced && (run.psync || (step + 1) % 10 == 0 || step + 1 == o->steps) &&
            (rc = check_replicas(&run, step, err)))
            goto done;
        kern_sync(run.k);
        double dt = clock_now() - t0, tps = (double)BT * o->accum * run.R / dt;
        r.last_loss = (float)loss;
        r.steps_done = (int)(step + 1);
        if (step % o->log_every == 0 || step == o->steps - 1)
            fprintf(log, "step %" PRId64 " loss %.6f lr %.3e gnorm %.3f tok/s %.0f\n", step, loss,
                    optim_lr(&o->opt, step), gnorm, tps);
        record(&run, 0, "step", step, "loss=%.6f lr=%.3e gnorm=%.3f tokens_per_s=%.0f", loss,
               optim_lr(&o->opt, step), gnorm, tps);
        if (run.db) {
            /* bytes_sent: encoded stage-boundary bytes so far (all replicas), as a peer
             * reports what it sent */
            uint64_t wire = 0;
            for (int i = 0; i < run.R; i++) {
                uint64_t wb, we;
                model_wire_stats(run.rep[i], &wb, &we);
                wire += wb;
            }
            store_metric_t m = {.stage = 0,
                                .step = step,
                                .loss = loss,
                                .tokens_per_s = tps,
                                .bytes_sent = (int64_t)(wire - run.val_wire)};
            if (store_metric_add(run.db, &m, err)) log_warn("metrics: %s", err);
            /* A due checkpoint whose writer is still busy or resting is skipped rather than
             * copied for nothing; the last step's is always handed over (and waited for). */
            int last = step + 1 == o->steps || (o->stop_after && step + 1 - start >= o->stop_after);
            if (o->checkpoint_every && ((step + 1) % o->checkpoint_every == 0 || last)) {
                if (!last && !store_ckpt_ready(run.db))
                    r.checkpoints_skipped++;
                else if ((rc = checkpoint(&run, step + 1, err)))
                    goto done;
            }
        }
        if (o->val_every > 0 && (step + 1) % o->val_every == 0 && step + 1 < o->steps) {
            float v;
            if ((rc = validate(&run, &v, err))) goto done;
            fprintf(log, "step %" PRId64 " val_loss %.4f\n", step, v);
            record(&run, 1, "val_loss", step, "val_step=%" PRId64 " val_loss=%.6f final=%d", step,
                   (double)v, 0);
        }
        fflush(log);
        if (o->stop_after && step + 1 - start >= o->stop_after) {
            fprintf(log, "stopping after %d steps as asked (--stop-after)\n", o->stop_after);
            goto finish;
        }
    }
    if (o->steps > timed_from)
        r.tokens_per_s = (double)BT * o->accum * run.R * (double)(o->steps - timed_from) /
                         (clock_now() - t_start);
    if ((rc = validate(&run, &r.val_loss, err))) goto done;
    record(&run, 1, "val_loss", o->steps - 1,
           "val_step=%" PRId64 " val_loss=%.6f final=%d tokens_per_s=%.0f", (int64_t)o->steps - 1,
           (double)r.val_loss, 1, r.tokens_per_s);
    uint64_t wb, we;
    model_wire_stats(run.rep[0], &wb, &we);
    r.wire_bytes_per_elem = we ? (double)wb / (double)we : 0;
    if (we) fprintf(log, "wire: %.3f bytes per boundary element\n", r.wire_bytes_per_elem);
    fprintf(log, "tokens/s %.0f\nval_loss %.4f\n", r.tokens_per_s, r.val_loss);
    if (o->val_skip) {
        char list[256];
        if ((rc = validate_skip(&run, o->val_skip, &r.val_loss_skip, err))) goto done;
        if ((rc = model_set_skip(run.rep[0], 0, err))) goto done;
        fprintf(log, "val_loss_skip %.4f (stages %s left out; whole model %.4f, %+.1f%%)\n",
                r.val_loss_skip, path_format(o->val_skip, list, sizeof list), r.val_loss,
                100.0 * (r.val_loss_skip - r.val_loss) / r.val_loss);
        record(&run, 0, "val_loss_skip", o->steps - 1, "val_loss_skip=%.4f skipped=%s",
               (double)r.val_loss_skip, list);
    }
finish:
    if (run.db) {
        store_writer_stats_t ws;
        store_ckpt_wait(run.db);
        store_writer_stats(run.db, &ws);
        r.checkpoints_failed = (int)ws.failed;
        r.checkpoints_saved = (int)ws.saved;
        r.checkpoints_replaced = (int)ws.replaced;
        r.checkpoint_cpu_s = ws.cpu_s;
        if (o->checkpoint_every)
            fprintf(log,
                    "checkpoints: %d written, %d due but skipped (writer busy or within its "
                    "budget), %d replaced; writer CPU %.2f s\n",
                    r.checkpoints_saved, r.checkpoints_skipped, r.checkpoints_replaced,
                    r.checkpoint_cpu_s);
        if (ws.failed)
            log_warn("%" PRId64 " background checkpoint(s) failed; last: %s", ws.failed,
                     ws.last_err);
    }
    fflush(log);
    if (res) *res = r;
done:
    teardown(&run);
    return rc;
}
