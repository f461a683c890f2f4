/* update.h — the model side of a pool's step: one update of a stage from the bodies of
 * the pool's exchange messages. The pool (peer/step.c) decides which messages enter (the
 * update guard, the hash vote, overlapping counts); an update rule turns their bodies into
 * the stage's new parameters, bit-identical on every replica that holds the same bodies.
 *
 * Two rules implement it: DeMo (each body a compressed momentum component,
 * model/demo_opt.h: the mean of the components, p -= lr * sign(IDCT)) and dense (each
 * body a float32 gradient sum of some microbatches: AdamW over their sum, scaled by the
 * microbatches counted). A new optimizer is a new rule; the pool's code does not change.
 *
 * Not for: choosing the messages (peer/step.c), the single-process trainer (train.h). */
#ifndef SWARMTRAIN_UPDATE_H
#define SWARMTRAIN_UPDATE_H

#include "kernels/kernels.h"
#include "model/demo_opt.h"
#include "model/optim.h"
#include "model/stage.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t step;                /* the step the update is for */
    const uint8_t *const *bodies; /* the chosen messages' bodies ... */
    const size_t *lens;
    int n;                       /* ... and how many */
    const uint32_t *weights;     /* DeMo: what each body weighs in the pool's mean (NULL:
                                  * 1 each; demo_opt_apply_w) */
    uint32_t counted;            /* microbatches they count together */
    float replica_gnorm;         /* DeMo: this replica's gradient norm (logged) */
} update_batch_t;

typedef struct {
    float gnorm;       /* logged: AdamW's pre-clip norm of the sum; DeMo: this replica's */
    float stage_gnorm; /* kept in the stage's state, the same on every replica: AdamW's
                        * clipped norm of the sum; DeMo's norm of the update */
} update_result_t;

typedef struct model_update {
    stage_t *st;
    kern_t *k;
    demo_opt_t *dopt;        /* DeMo's rule: its optimizer; NULL for dense */
    const optim_config_t *opt;
    /* Applies b to the stage: 0, or a status with the reason in err (nothing applied). */
    int (*apply)(const struct model_update *u, const update_batch_t *b, update_result_t *out,
                 char *err);
} model_update_t;

/* The rule for a stage: DeMo's when dopt is given, else dense AdamW. The pointers must
 * outlive the rule. */
model_update_t update_rule(stage_t *st, kern_t *k, demo_opt_t *dopt, const optim_config_t *opt);

/* A lookahead: the parameters u->apply(b) would give the stage, into out
 * (stage_num_params floats of backend memory), the stage left as it was (its parameters,
 * gradients, moments and step counter are put back; DeMo's residual momentum is not
 * touched by an update). The overlap's forwards of the next step run on them, with the
 * member's own message as b (peer/serve.c). 0, STATUS_ENOMEM, or apply's status. */
int update_predict(const model_update_t *u, const update_batch_t *b, float *out, char *err);

#endif
