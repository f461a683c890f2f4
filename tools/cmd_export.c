/* cmd_export.c — `swarmtrain export`: a whole model from stage checkpoints in stores,
 * written as model.safetensors + config.json in the Hugging Face LLaMA layout.
 * Not for: the format (model/safetensors.c), the names (model/hf_model.c) or finding the
 * checkpoints (model/assemble.c). */
#include "common/status.h"
#include "kernels/kernels.h"
#include "model/assemble.h"
#include "model/hf_model.h"
#include "model/safetensors.h"
#include "tools/cmd.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MAX_DBS 64

static void usage(FILE *f)
{
    fprintf(f, "usage: swarmtrain export --db PATH [--db PATH ...] --out DIR [--dtype f32|bf16]\n\n"
               "Assembles one model from the newest stage checkpoints in the stores given (the\n"
               "peers' stores of a swarm, one stage each, or one `train --db` store) and writes\n"
               "DIR/model.safetensors (Hugging Face LLaMA tensor names) and DIR/config.json\n"
               "(LlamaForCausalLM), loadable with transformers' from_pretrained(DIR).\n"
               "Refuses checkpoints of different runs, stages whose newest checkpoints share no\n"
               "step, and stores that lack a stage.\n\n"
               "  --db PATH      a store (repeat for every peer's store)\n"
               "  --out DIR      output directory (created if missing)\n"
               "  --dtype T      f32 (default, exact) or bf16 (half the size)\n");
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"out", required_argument, 0, 'o'},
                                         {"dtype", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *dbs[MAX_DBS], *out = NULL;
    int ndb = 0, dtype = SAFETENSORS_F32, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (ndb == MAX_DBS) {
                fprintf(stderr, "swarmtrain export: at most %d --db\n", MAX_DBS);
                return 2;
            }
            dbs[ndb++] = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 't':
            if (!strcmp(optarg, "f32"))
                dtype = SAFETENSORS_F32;
            else if (!strcmp(optarg, "bf16"))
                dtype = SAFETENSORS_BF16;
            else {
                fprintf(stderr, "swarmtrain export: --dtype %s: use f32 or bf16\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!ndb || !out || optind < argc) {
        usage(stderr);
        return 2;
    }
    char err[STATUS_ERR_LEN];
    kern_t *k = kern_new("ref", 1, err);
    if (!k) {
        fprintf(stderr, "swarmtrain export: %s\n", err);
        return 1;
    }
    assemble_info_t info;
    model_t *m = assemble_from_stores(dbs, ndb, k, 1, &info, err);
    int rc = m ? hf_model_save(m, out, dtype, info.step, info.run_text, err) : 1;
    if (rc) {
        fprintf(stderr, "swarmtrain export: %s\n", err);
    } else {
        printf("export: %zu parameters, %d stage(s), step %" PRId64 ", run %s, %s -> %s/%s, "
               "%s/%s\n",
               model_num_params(m), info.cfg.stages, info.step, info.run_hash,
               safetensors_dtype_name(dtype), out, HF_MODEL_WEIGHTS, out, HF_MODEL_CONFIG);
    }
    model_destroy(&m);
    kern_destroy(&k);
    return rc ? 1 : 0;
}
