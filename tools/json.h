/* json.h — just enough JSON reading for what swarmtrain writes for programs: the status
 * document (walk the objects of one top-level array), an object's scalar fields
 * (local's DIR/summary.json), and JSON lines (common/events.h: the peers' and train's
 * events files, and the store's event details). Fields are read as text.
 * Not for: general JSON (nested values are skipped, not read; escapes beyond \" \\ read
 * \uXXXX as '?'). */
#ifndef SWARMTRAIN_JSON_H
#define SWARMTRAIN_JSON_H

#include <stddef.h>
#include <stdio.h>

#define JSON_MAX_FIELDS 64

typedef struct {
    int n;
    char key[JSON_MAX_FIELDS][32];
    char val[JSON_MAX_FIELDS][256];
} json_obj_t;

/* Calls fn for each object in the array at top-level key `array`. Returns the number of
 * objects, or -1 if the text is not what we expect. */
int json_each(const char *json, const char *array, void (*fn)(void *ctx, const json_obj_t *o),
              void *ctx);

/* The scalar fields of the object at key `key` (NULL: the document's own top-level
 * object) into o; nested arrays and objects in it are skipped. 0, or -1 when there is no
 * such object or the text is not JSON we read. */
int json_object(const char *json, const char *key, json_obj_t *o);

/* Calls fn for each line of text that holds one flat JSON object (blank lines are
 * passed over). Returns how many non-blank lines were not such an object: 0 when every
 * line was read. */
int json_lines(const char *text, void (*fn)(void *ctx, const json_obj_t *o), void *ctx);

/* The value of key in o, or "" when absent. */
const char *json_get(const json_obj_t *o, const char *key);

/* The value of key in o as a number; NAN when absent, null or not a number. */
double json_num(const json_obj_t *o, const char *key);

/* Whether o has the key (with any value, null too). */
int json_has(const json_obj_t *o, const char *key);

/* Writes s to f as a JSON string: quoted, '"' and '\\' escaped, control characters as
 * \\u00XX. */
void json_put_string(FILE *f, const char *s);

/* A "val_loss" event's detail from a store (store_event_t.detail): the fields the peers
 * and train write as a JSON object (val_step, val_loss; docs/events.md), or the text
 * "step N val_loss X" of stores written before. 1 with *step and *loss set (the loss
 * finite), else 0. */
int json_val_loss_detail(const char *detail, long long *step, double *loss);

#endif
