/* record.h — the tests' readers of what a run recorded (docs/events.md): a file's text,
 * the JSON lines of an events file, local's DIR/summary.json, the rows of a JSON array.
 * Tests read these, never the wording of logs. Paths are whole (the caller joins its
 * directory). A malformed record fails the test (cmocka). */
#ifndef SWARMTRAIN_TEST_RECORD_H
#define SWARMTRAIN_TEST_RECORD_H

#include "tools/json.h"

/* The text of the file at path (caller frees); fails the test when there is none. */
char *record_text(const char *path);
/* The objects of the array `array` of a JSON document (caller frees); *n: how many. */
json_obj_t *record_rows(const char *json, const char *array, int *n);
/* The events of `kind` (NULL: all) of the JSON lines file at path, in order (caller
 * frees; the objects point into nothing the caller must keep); *n: how many (0 when there
 * is no such file). */
json_obj_t *record_events(const char *path, const char *kind, int *n);
/* The last event of `kind` at path into o; 0 when there is none. */
int record_last_event(const char *path, const char *kind, json_obj_t *o);
/* The summary.json of a local run's directory: its text (caller frees) and its top-level
 * scalars into top. */
char *record_summary(const char *run_dir, json_obj_t *top);

#endif
