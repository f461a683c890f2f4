/* train.c — the single-process training loop (S stages chained in one process). */
#include "peer/train.h"
#include "common/clock.h"
#include "common/status.h"
#include "peer/data.h"
#include "peer/model.h"

#include <math.h>
#include <stdlib.h>

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
    return o;
}

static int validate(model_t *m, const data_t *d, const model_config_t *c, int n_batches,
                    int32_t *tok, int32_t *tgt, float *val, char *err)
{
    double sum = 0;
    for (int i = 0; i < n_batches; i++) {
        float loss;
        data_val_batch(d, i, n_batches, c->batch, tok, tgt);
        int rc = model_eval_micro(m, tok, tgt, &loss, err);
        if (rc) return rc;
        sum += loss;
    }
    *val = (float)(sum / n_batches);
    return 0;
}

int train_run(const train_options_t *o, train_result_t *res, char *err)
{
    FILE *log = o->log ? o->log : stdout;
    const model_config_t *c = &o->cfg;
    kern_t *k = NULL;
    data_t *d = NULL;
    model_t *m = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    int rc = config_validate(c, err);
    if (rc) return rc;
    if (o->steps < 0 || o->accum < 1 || o->val_batches < 1)
        return status_set(err, STATUS_EINVAL, "steps must be >= 0, accum and val_batches >= 1");
    if (!o->data_path && (rc = data_ensure_default(err))) return rc;
    const char *path = o->data_path ? o->data_path : data_default_path();
    if (!(d = data_open(path, c->seq, o->val_frac, err))) return STATUS_EINVAL;
    if (!(k = kern_new(o->device, o->threads, err))) {
        rc = STATUS_ENODEV;
        goto done;
    }
    if (!(m = model_new(c, k, o->seed, err))) {
        rc = STATUS_EINVAL;
        goto done;
    }
    size_t BT = (size_t)c->batch * c->seq;
    tok = malloc(BT * sizeof *tok);
    tgt = malloc(BT * sizeof *tgt);
    if (!tok || !tgt) {
        rc = status_set(err, STATUS_ENOMEM, "train: out of memory");
        goto done;
    }
    fprintf(log, "train: %zu parameters, %d stage(s), device %s (%d threads), data %s (%zu train / %zu held-out bytes)\n",
            model_num_params(m), c->stages, k->name, k->threads, path, data_train_bytes(d),
            data_val_bytes(d));

    train_result_t r = {0};
    double t_start = 0;
    for (int step = 0; step < o->steps; step++) {
        double t0 = clock_now();
        if (step == 1) t_start = t0;
        model_zero_grads(m);
        double loss_sum = 0;
        for (int a = 0; a < o->accum; a++) {
            float loss;
            data_train_batch(d, o->seed, 0, (int64_t)step * o->accum + a, c->batch, tok, tgt);
            if ((rc = model_train_micro(m, tok, tgt, &loss, err))) goto done;
            loss_sum += loss;
        }
        float gnorm;
        model_adamw_step(m, &o->opt, step, 1.0f / o->accum, &gnorm);
        k->sync(k);
        double dt = clock_now() - t0;
        r.last_loss = (float)(loss_sum / o->accum);
        if (!isfinite(r.last_loss)) {
            rc = status_set(err, STATUS_EINVAL, "loss is not finite at step %d (lr too high?)", step);
            goto done;
        }
        r.steps_done = step + 1;
        if (step % o->log_every == 0 || step == o->steps - 1)
            fprintf(log, "step %d loss %.4f lr %.3e gnorm %.3f tok/s %.0f\n", step, r.last_loss,
                    optim_lr(&o->opt, step), gnorm, (double)BT * o->accum / dt);
        if (o->val_every > 0 && (step + 1) % o->val_every == 0 && step + 1 < o->steps) {
            float v;
            if ((rc = validate(m, d, c, o->val_batches, tok, tgt, &v, err))) goto done;
            fprintf(log, "step %d val_loss %.4f\n", step, v);
        }
        fflush(log);
    }
    if (o->steps > 1) r.tokens_per_s = (double)BT * o->accum * (o->steps - 1) / (clock_now() - t_start);
    if ((rc = validate(m, d, c, o->val_batches, tok, tgt, &r.val_loss, err))) goto done;
    fprintf(log, "tokens/s %.0f\nval_loss %.4f\n", r.tokens_per_s, r.val_loss);
    fflush(log);
    if (res) *res = r;
done:
    free(tok);
    free(tgt);
    model_destroy(&m);
    kern_destroy(&k);
    data_destroy(&d);
    return rc;
}
