/* fuzz_json.c — fuzz target: the JSON reader of `swarmtrain status` and `local`
 * (tools/json.c), which reads the JSON a peer sends in STATUS_REP and the events files
 * and summary the peers and local write.
 *
 * Input: the document (cut at the first NUL). The arrays asked for are the ones
 * cmd_status.c reads ("peers", "pools"); then the document as one object (json_object,
 * its own and the one at "wire_sent") and as JSON lines (json_lines).
 * Invariants: the count returned is the number of objects handed over; every object has
 * at most JSON_MAX_FIELDS fields, each key and value a terminated string within its
 * buffer, found again by json_get.
 *
 * Not for: general JSON. */
#include "fuzz.h"

#include "tools/json.h"

#include <string.h>

static void on_obj(void *ctx, const json_obj_t *o)
{
    int *calls = ctx;
    (*calls)++;
    FUZZ_CHECK(o->n >= 0 && o->n <= JSON_MAX_FIELDS);
    for (int i = 0; i < o->n; i++) {
        FUZZ_CHECK(memchr(o->key[i], 0, sizeof o->key[i]) != NULL);
        FUZZ_CHECK(memchr(o->val[i], 0, sizeof o->val[i]) != NULL);
        FUZZ_CHECK(json_get(o, o->key[i]) != NULL);
    }
    FUZZ_CHECK(json_get(o, "no such key in any status document") != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    static const char *arrays[] = {"peers", "pools"};
    for (int a = 0; a < 2; a++) {
        int calls = 0;
        int n = json_each(text, arrays[a], on_obj, &calls);
        FUZZ_CHECK(n == -1 || n == calls);
        fuzz_accepted += n > 0;
    }
    json_obj_t o;
    static const char *keys[] = {NULL, "wire_sent"};
    for (int k = 0; k < 2; k++)
        if (json_object(text, keys[k], &o) == 0) {
            int one = 0;
            on_obj(&one, &o);
            fuzz_accepted++;
        }
    int lines = 0;
    FUZZ_CHECK(json_lines(text, on_obj, &lines) >= 0);
    fuzz_accepted += lines > 0;
    free(text);
    return 0;
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static const char doc[] =
        "{\"swarm\":\"00ff\",\"step\":12,\"peers\":[{\"id\":\"a1b2c3d4\",\"stage\":0,"
        "\"state\":\"serving\",\"throughput\":12.5,\"loss\":null,\"addr\":\"tcp://1.2.3.4:5\"},"
        "{\"id\":\"e5f6\",\"stage\":1,\"note\":\"a \\\"quoted\\\" \\\\ \\u00e9 text\"}],"
        "\"pools\":[{\"stage\":0,\"peers\":2,\"step\":12}],\"nested\":{\"x\":[1,2,{}]}}";
    emit(ctx, "status", (const uint8_t *)doc, sizeof doc - 1);
    static const char lines[] =
        "{\"t\":1.5,\"kind\":\"moved\",\"stage\":1,\"step\":4,\"from\":0,\"to\":1,\"why\":\"x\"}\n"
        "\n{\"t\":2,\"kind\":\"left\",\"stage\":null,\"step\":null}\n";
    emit(ctx, "lines", (const uint8_t *)lines, sizeof lines - 1);
    static const char empty[] = "{\"peers\":[],\"pools\":[]}";
    emit(ctx, "empty", (const uint8_t *)empty, sizeof empty - 1);
}
