/* json.h — just enough JSON reading for the status document: walk the objects of one
 * top-level array and read their scalar fields as text.
 * Not for: general JSON (no nesting beyond that, no escapes beyond \" \\ \uXXXX-as-?). */
#ifndef SWARMTRAIN_JSON_H
#define SWARMTRAIN_JSON_H

#include <stddef.h>

#define JSON_MAX_FIELDS 32

typedef struct {
    int n;
    char key[JSON_MAX_FIELDS][32];
    char val[JSON_MAX_FIELDS][160];
} json_obj_t;

/* Calls fn for each object in the array at top-level key `array`. Returns the number of
 * objects, or -1 if the text is not what we expect. */
int json_each(const char *json, const char *array, void (*fn)(void *ctx, const json_obj_t *o),
              void *ctx);

/* The value of key in o, or "" when absent. */
const char *json_get(const json_obj_t *o, const char *key);

#endif
