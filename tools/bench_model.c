/* bench_model.c — `swarmtrain bench model`: training-step throughput of a config
 * (forward, backward, AdamW): tokens/s and model FLOP/s, against cblas_sgemm's GFLOP/s
 * measured in the same run on a host backend, and as model FLOP utilization (MFU) of the
 * device's peak on a GPU; and where the step's time goes.
 * Not for: correctness (tests/). */
#include "common/clock.h"
#include "common/rng.h"
#include "common/status.h"
#include "model/model.h"
#include "tools/cmd.h"
#include "tools/json.h"
#ifdef SWARMTRAIN_HAVE_CUDA
#include "kernels/cuda/kern_cuda.h"
#endif

#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Dense peaks in TFLOP/s of the GPUs this workplace lends, by the vendor's datasheet for
 * the SXM parts: TF32 tensor-core math (without sparsity) and plain fp32. The H200 has the
 * H100's arithmetic (/work/.library/device/H200.md: dense bf16 ~990, fp32 ~67; TF32 is
 * half of bf16 on Hopper). Names as cudaGetDeviceProperties gives them. */
#ifdef SWARMTRAIN_HAVE_CUDA
static const struct {
    const char *name;
    double tf32, fp32;
} gpu_peaks[] = {
    {"NVIDIA H200", 494.7, 66.9},
    {"NVIDIA H100 80GB HBM3", 494.7, 66.9},
};
#endif

/* The peak for backend k in TFLOP/s, and what it is ("TF32 tensor-core peak of ...");
 * 0 when unknown. */
static double device_peak(kern_t *k, char *what, size_t n)
{
#ifdef SWARMTRAIN_HAVE_CUDA
    if (!strncmp(kern_name(k), "cuda:", 5)) {
        int tf32 = kern_cuda_tf32(k);
        for (size_t i = 0; i < sizeof gpu_peaks / sizeof gpu_peaks[0]; i++)
            if (!strcmp(kern_name(k) + 5, gpu_peaks[i].name)) {
                snprintf(what, n, "dense %s peak of the %s, datasheet",
                         tf32 ? "TF32 tensor-core" : "fp32", gpu_peaks[i].name);
                return tf32 ? gpu_peaks[i].tf32 : gpu_peaks[i].fp32;
            }
    }
#endif
    snprintf(what, n, "no peak known for %s: pass --peak-tflops", kern_name(k));
    return 0;
}

/* Where tools/ref_llama.py is: SWARMTRAIN_REF_LLAMA, else SWARMTRAIN_SOURCE/tools/, else
 * two folders above this binary (a build tree: build/tools/swarmtrain), else the package's
 * /usr/share/swarmtrain/. 0 when found. */
static int find_ref_script(char *path, size_t n)
{
    const char *env = getenv("SWARMTRAIN_REF_LLAMA"), *src = getenv("SWARMTRAIN_SOURCE");
    if (env && *env) {
        snprintf(path, n, "%s", env);
        return access(path, R_OK);
    }
    if (src && *src) {
        int w = snprintf(path, n, "%s/tools/ref_llama.py", src);
        if (w > 0 && (size_t)w < n && !access(path, R_OK)) return 0;
    }
    char exe[2048];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = 0;
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(exe, '/');
            if (slash) *slash = 0;
        }
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            int w = snprintf(path, n, "%s/tools/ref_llama.py", exe);
            if (w > 0 && (size_t)w < n && !access(path, R_OK)) return 0;
        }
    }
    snprintf(path, n, "/usr/share/swarmtrain/ref_llama.py");
    return access(path, R_OK);
}

/* The speed reference measured in this command: the same model and threads in PyTorch
 * (tools/ref_llama.py --bench, run by /usr/bin/python3 or SWARMTRAIN_PYTHON). Its tokens/s
 * and torch's version, or 0 and why not. */
static double torch_reference(const model_config_t *cfg, int threads, int steps, char *version,
                              size_t vn, char *why, size_t n)
{
    const char *py = getenv("SWARMTRAIN_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    char script[2048], cmd[4096], line[512];
    if (access(py, X_OK)) {
        snprintf(why, n, "%s not found", py);
        return 0;
    }
    if (find_ref_script(script, sizeof script) || strchr(script, '\'') || strchr(py, '\'')) {
        snprintf(why, n, "tools/ref_llama.py not found (SWARMTRAIN_REF_LLAMA=PATH names it)");
        return 0;
    }
    snprintf(cmd, sizeof cmd,
             "'%s' '%s' --bench --dim %d --layers %d --heads %d --ffn %d --seq %d --batch %d "
             "--vocab %d --norm-eps %g --rope-theta %g --threads %d --steps %d 2>&1",
             py, script, cfg->dim, cfg->n_layers, cfg->n_heads, cfg->ffn, cfg->seq, cfg->batch,
             cfg->vocab, (double)cfg->norm_eps, (double)cfg->rope_theta, threads, steps);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(why, n, "cannot run %s", py);
        return 0;
    }
    double tps = 0;
    int no_torch = 0;
    char ver[64] = "";
    while (fgets(line, sizeof line, f)) {
        double t;
        if (sscanf(line, "ref_llama bench: tokens/s %lf torch %63s", &t, ver) == 2 && t > 0)
            tps = t;
        no_torch |= strstr(line, "torch not importable") != NULL;
    }
    int st = pclose(f);
    if (tps > 0 && st == 0) {
        snprintf(version, vn, "%s", ver);
        return tps;
    }
    snprintf(why, n, "%s",
             no_torch ? "torch is not importable by the python that runs it"
                      : "the PyTorch reference failed");
    return 0;
}

#define BENCH_MAX_SETS 32

int bench_model(int argc, char **argv)
{
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"threads", required_argument, 0, 't'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"device", required_argument, 0, 'd'},
                                         {"stages", required_argument, 0, 's'},
                                         {"set", required_argument, 0, 'S'},
                                         {"peak-tflops", required_argument, 0, 'p'},
                                         {"no-reference", no_argument, 0, 'R'},
                                         {"json", required_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *config = "small", *device = "cpu", *sets[BENCH_MAX_SETS], *json_path = NULL;
    int threads = 2, steps = 8, stages = 0, nsets = 0, c, reference = 1;
    double peak = 0;
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
            if (stages < 1) {
                fprintf(stderr, "swarmtrain bench model: --stages must be >= 1\n");
                return 2;
            }
            break;
        case 'S':
            if (nsets == BENCH_MAX_SETS) {
                fprintf(stderr, "swarmtrain bench model: at most %d --set\n", BENCH_MAX_SETS);
                return 2;
            }
            sets[nsets++] = optarg;
            break;
        case 'p':
            peak = atof(optarg);
            if (!(peak > 0)) {
                fprintf(stderr, "swarmtrain bench model: --peak-tflops wants a positive number\n");
                return 2;
            }
            break;
        case 'R':
            reference = 0;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 'h':
            printf("usage: swarmtrain bench model [--config tiny|small|large] [--set key=value]... "
                   "[--threads 2] [--steps 8] [--stages 1] [--device cpu|cuda|ref|auto] "
                   "[--peak-tflops X] [--no-reference] [--json FILE]\n"
                   "  --set          overrides a field of the config (dim, layers, heads, ffn, "
                   "seq, batch, vocab, stages, norm_eps, rope_theta); repeatable\n"
                   "  --peak-tflops  the device's peak for model FLOP utilization (MFU); known "
                   "for H100/H200 (TF32 or fp32 as the backend runs)\n"
                   "  reference: on the CPU, the same model and threads in PyTorch, measured in "
                   "this command (tools/ref_llama.py --bench by /usr/bin/python3, or "
                   "SWARMTRAIN_PYTHON; the script: SWARMTRAIN_REF_LLAMA) when torch is "
                   "importable, and this run's ratio to it; else no ratio. --no-reference: skip "
                   "it\n"
                   "  --json FILE    also writes the figures as one JSON object: config, threads, "
                   "steps, tokens_s, gflops, and reference {tokens_s, torch, ratio} or "
                   "{none: why}\n");
            return 0;
        default:
            return 2;
        }
    }
    if (threads < 1 || steps < 1) {
        fprintf(stderr, "swarmtrain bench model: threads and steps must be >= 1\n");
        return 2;
    }
    char err[STATUS_ERR_LEN];
    model_config_t cfg;
    if (config_preset(&cfg, config, err)) {
        fprintf(stderr, "swarmtrain bench model: %s\n", err);
        return 2;
    }
    for (int i = 0; i < nsets; i++) {
        char key[32];
        const char *eq = strchr(sets[i], '=');
        size_t kl = eq ? (size_t)(eq - sets[i]) : 0;
        if (!eq || !kl || kl >= sizeof key) {
            fprintf(stderr, "swarmtrain bench model: --set '%s': expected key=value\n", sets[i]);
            return 2;
        }
        memcpy(key, sets[i], kl);
        key[kl] = 0;
        if (config_set(&cfg, key, eq + 1, err)) {
            fprintf(stderr, "swarmtrain bench model: --set: %s\n", err);
            return 2;
        }
    }
    if (stages) cfg.stages = stages;
    stages = cfg.stages;
    if (config_validate(&cfg, err)) {
        fprintf(stderr, "swarmtrain bench model: %s\n", err);
        return 2;
    }
    size_t BT = (size_t)cfg.batch * cfg.seq;

    kern_t *k = kern_new(device, threads, err);
    /* The sgemm ceiling is the host's: measured only for host backends. */
    int host = k && !kern_on_device(k);
    double ceiling1 = host ? sgemm_ceiling(threads, (int)BT, cfg.dim, cfg.ffn, 10) : 0;
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
        kern_sync(k);
        if (s >= 0) t_opt += clock_now() - t0;
    }
    double dt = clock_now() - t_start;
    double tps = (double)BT * steps / dt;
    double fpt = config_flops_per_token(&cfg);
    double gflops = tps * fpt / 1e9;
    double ceiling2 = host ? sgemm_ceiling(threads, (int)BT, cfg.dim, cfg.ffn, 10) : 0;
    double ceiling = ceiling1 > ceiling2 ? ceiling1 : ceiling2;

    printf("bench model: config %s%s (dim %d, %d layers, %d heads, ffn %d; %zu params, %.3g "
           "FLOP/token), batch %d x seq %d, %d stage(s), device %s, %d threads, %d steps\n",
           config, nsets ? " with --set" : "", cfg.dim, cfg.n_layers, cfg.n_heads, cfg.ffn,
           model_num_params(m), fpt, cfg.batch, cfg.seq, stages, kern_name(k),
           kern_on_device(k) ? 1 : threads, steps);
    printf("  step time        %.1f ms (optimizer %.1f ms)\n", 1e3 * dt / steps,
           1e3 * t_opt / steps);
    printf("  tokens/s         %.0f\n", tps);
    printf("  model GFLOP/s    %.1f\n", gflops);
    if (host) {
        printf("  sgemm GFLOP/s    %.1f  (cblas_sgemm, %d threads, best of model shapes and "
               "1024^3; before %.1f / after %.1f)\n",
               ceiling, threads, ceiling1, ceiling2);
        printf("  model / sgemm    %.2f\n", gflops / ceiling);
    }
    char peak_what[160];
    if (peak > 0)
        snprintf(peak_what, sizeof peak_what, "given by --peak-tflops");
    else
        peak = device_peak(k, peak_what, sizeof peak_what);
    if (peak > 0)
        printf("  MFU              %.1f%%  (model FLOP/s over a peak of %.1f TFLOP/s: %s)\n",
               100 * gflops / 1e3 / peak, peak, peak_what);
    else if (kern_on_device(k))
        printf("  MFU              unknown (%s)\n", peak_what);

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
    /* A ratio only against a reference measured in this command on this machine: a figure
     * from another CPU (ANCHORS.md's) says nothing about this one. */
    char why[256] = "", ver[64] = "";
    double ref = 0;
    if (!reference) {
        snprintf(why, sizeof why, "--no-reference");
        printf("  reference        none (--no-reference): no ratio\n");
    } else if (!host) {
        snprintf(why, sizeof why, "the PyTorch reference runs on the CPU");
        printf("  reference        none: the PyTorch reference runs on the CPU: no ratio\n");
    } else {
        ref = torch_reference(&cfg, threads, steps, ver, sizeof ver, why, sizeof why);
        if (ref > 0)
            printf("  reference        %.0f tok/s: PyTorch %s, same model, %d threads, measured "
                   "now (tools/ref_llama.py --bench) -> this run is %.2fx of it\n",
                   ref, ver, threads, tps / ref);
        else
            printf("  reference        none measured here (%s): no ratio\n", why);
    }
    FILE *f = json_path ? fopen(json_path, "w") : NULL;
    if (json_path && !f) fprintf(stderr, "swarmtrain bench model: cannot write %s\n", json_path);
    if (f) {
        fprintf(f, "{\"config\":");
        json_put_string(f, config);
        fprintf(f, ",\"device\":");
        json_put_string(f, kern_name(k));
        fprintf(f, ",\"threads\":%d,\"steps\":%d,\"tokens_s\":%.1f,\"gflops\":%.2f,\"reference\":",
                kern_on_device(k) ? 1 : threads, steps, tps, gflops);
        if (ref > 0) {
            fprintf(f, "{\"tokens_s\":%.1f,\"torch\":", ref);
            json_put_string(f, ver);
            fprintf(f, ",\"ratio\":%.4f}}\n", tps / ref);
        } else {
            fprintf(f, "{\"none\":");
            json_put_string(f, why);
            fprintf(f, "}}\n");
        }
        fclose(f);
    }
    int rc = json_path && !f;
#ifdef SWARMTRAIN_HAVE_CUDA
    const char *cerr = strncmp(kern_name(k), "cuda:", 5) ? NULL : kern_cuda_last_error(k);
    if (cerr) {
        fprintf(stderr, "swarmtrain bench model: the numbers above are void: %s\n", cerr);
        rc = 1;
    }
#endif
    model_destroy(&m);
    kern_destroy(&k);
    free(tok);
    free(tgt);
    return rc;
}
