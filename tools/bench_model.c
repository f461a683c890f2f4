/* bench_model.c — `swarmtrain bench model`: training-step throughput of a config
 * (forward, backward, AdamW) against cblas_sgemm's GFLOP/s measured in the same run,
 * and where the step's time goes. Not for: correctness (tests/). */
#include "common/clock.h"
#include "common/rng.h"
#include "common/status.h"
#include "peer/model.h"
#include "tools/cmd.h"

#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Best GFLOP/s of OpenBLAS's own threaded sgemm over shapes the model uses and one
 * large square product: the ceiling a model step could hope for on this machine. */
static double sgemm_ceiling(int threads, int N, int C, int F, int reps)
{
    int shapes[][3] = {{N, 3 * C, C}, {N, 2 * F, C}, {N, C, F}, {1024, 1024, 1024}};
    size_t max = 0;
    for (int i = 0; i < 4; i++) {
        size_t a = (size_t)shapes[i][0] * shapes[i][2], b = (size_t)shapes[i][1] * shapes[i][2];
        size_t c = (size_t)shapes[i][0] * shapes[i][1];
        size_t m = a > b ? a : b;
        if (c > m) m = c;
        if (m > max) max = m;
    }
    float *A = malloc(max * sizeof(float)), *B = malloc(max * sizeof(float)),
          *Cm = malloc(max * sizeof(float));
    for (size_t i = 0; i < max; i++) A[i] = B[i] = (float)((i % 13) - 6) * 0.01f;
    openblas_set_num_threads(threads);
    double best = 0;
    for (int i = 0; i < 4; i++) {
        int m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, A, k, B, k, 0, Cm, n);
        double t0 = clock_now();
        for (int r = 0; r < reps; r++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, A, k, B, k, 0, Cm, n);
        double g = 2.0 * m * n * k * reps / (clock_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    openblas_set_num_threads(1); /* the cpu backend runs one thread pool: OpenMP */
    free(A);
    free(B);
    free(Cm);
    return best;
}

int bench_model(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"threads", required_argument, 0, 't'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"device", required_argument, 0, 'd'},
                                         {"stages", required_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *config = "small", *device = "cpu";
    int threads = 2, steps = 8, stages = 1, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config = optarg;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'n':
            steps = atoi(optarg);
            break;
        case 'd':
            device = optarg;
            break;
        case 's':
            stages = atoi(optarg);
            break;
        case 'h':
            printf("usage: swarmtrain bench model [--config small] [--threads 2] [--steps 8] "
                   "[--stages 1] [--device cpu]\n");
            return 0;
        default:
            return 2;
        }
    }
    if (threads < 1 || steps < 1 || stages < 1) {
        fprintf(stderr, "swarmtrain bench model: threads, steps and stages must be >= 1\n");
        return 2;
    }
    char err[STATUS_ERR_LEN];
    model_config_t cfg;
    if (config_preset(&cfg, config, err)) {
        fprintf(stderr, "swarmtrain bench model: %s\n", err);
        return 2;
    }
    cfg.stages = stages;
    size_t BT = (size_t)cfg.batch * cfg.seq;
    double ceiling1 = sgemm_ceiling(threads, (int)BT, cfg.dim, cfg.ffn, 10);

    kern_t *k = kern_new(device, threads, err);
    model_t *m = k ? model_new(&cfg, k, 1, err) : NULL;
    int32_t *tok = malloc(BT * sizeof *tok), *tgt = malloc(BT * sizeof *tgt);
    if (!m || !tok || !tgt) {
        fprintf(stderr, "swarmtrain bench model: %s\n", err);
        model_destroy(&m);
        kern_destroy(&k);
        free(tok);
        free(tgt);
        return 1;
    }
    rng_t r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < BT; i++)
        tok[i] = (int32_t)rng_below(&r, 256), tgt[i] = (int32_t)rng_below(&r, 256);
    optim_config_t oc = optim_defaults();
    float loss, gn;
    double t_opt = 0, t_start = 0;
    for (int s = -2; s < steps; s++) { /* two untimed warm-up steps */
        if (s == 0) t_start = clock_now();
        model_zero_grads(m);
        if (model_train_micro(m, tok, tgt, &loss, err)) {
            fprintf(stderr, "swarmtrain bench model: %s\n", err);
            return 1;
        }
        double t0 = clock_now();
        model_adamw_step(m, &oc, s + 2, 1.0f, &gn);
        k->sync(k);
        if (s >= 0) t_opt += clock_now() - t0;
    }
    double dt = clock_now() - t_start;
    double tps = (double)BT * steps / dt;
    double fpt = config_flops_per_token(&cfg);
    double gflops = tps * fpt / 1e9;
    double ceiling2 = sgemm_ceiling(threads, (int)BT, cfg.dim, cfg.ffn, 10);
    double ceiling = ceiling1 > ceiling2 ? ceiling1 : ceiling2;

    printf("bench model: config %s (%zu params, %.3g FLOP/token), batch %d x seq %d, %d stage(s), "
           "device %s, %d threads, %d steps\n",
           config, model_num_params(m), fpt, cfg.batch, cfg.seq, stages, k->name, threads, steps);
    printf("  step time        %.1f ms (optimizer %.1f ms)\n", 1e3 * dt / steps,
           1e3 * t_opt / steps);
    printf("  tokens/s         %.0f\n", tps);
    printf("  model GFLOP/s    %.1f\n", gflops);
    printf("  sgemm GFLOP/s    %.1f  (cblas_sgemm, %d threads, best of model shapes and 1024^3; "
           "before %.1f / after %.1f)\n",
           ceiling, threads, ceiling1, ceiling2);
    printf("  model / sgemm    %.2f\n", gflops / ceiling);

    /* One more step with every op synced and timed, to say where the time goes. */
    for (int i = 0; i < model_num_stages(m); i++) stage_profile(model_stage(m, i), 1);
    double t0 = clock_now();
    model_zero_grads(m);
    model_train_micro(m, tok, tgt, &loss, err);
    double fb = clock_now() - t0;
    double total[STAGE_PROF_N] = {0};
    for (int i = 0; i < model_num_stages(m); i++) {
        const double *p = stage_profile_seconds(model_stage(m, i));
        for (int j = 0; j < STAGE_PROF_N; j++) total[j] += p[j];
        stage_profile(model_stage(m, i), 0);
    }
    printf("  where a forward+backward goes (%.1f ms, ops synced):\n", fb * 1e3);
    double acc = 0;
    for (int j = 0; j < STAGE_PROF_N; j++) {
        printf("    %-10s %7.1f ms  %5.1f%%\n", stage_profile_names[j], total[j] * 1e3,
               100 * total[j] / fb);
        acc += total[j];
    }
    printf("    %-10s %7.1f ms  %5.1f%%  (copies, zeroing, loss download)\n", "untimed",
           (fb - acc) * 1e3, 100 * (fb - acc) / fb);
    printf(
        "  reference (ANCHORS.md, PyTorch 1.13, same model, not measured here): ~1300-1430 tok/s "
        "on 2 threads -> this run is %.2fx of 1300\n",
        tps / 1300.0);
    model_destroy(&m);
    kern_destroy(&k);
    free(tok);
    free(tgt);
    return 0;
}
