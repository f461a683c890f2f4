/* prom.h — the Prometheus text exposition format (version 0.0.4), built in memory and
 * written atomically for node_exporter's textfile collector (write a temporary file in
 * the same directory, rename it over the target: a scrape never sees half a file).
 *
 * Rules it keeps: per family one "# HELP" and one "# TYPE" line before its samples, all
 * samples of a family together; metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* (not starting with "__"); label values escape \ " and newline as
 * \\ \" \n; HELP text escapes \ and newline; values are Go-style floats (NaN, +Inf, -Inf);
 * lines end with \n.
 * Not for: serving HTTP, or deciding which metrics exist (tools/cmd_status.c). */
#ifndef SWARMTRAIN_PROM_H
#define SWARMTRAIN_PROM_H

typedef struct prom prom_t;

/* An empty document; NULL when out of memory. */
prom_t *prom_new(void);
void prom_destroy(prom_t **p);

/* Starts family `name` of `type` ("gauge", "counter", "untyped") with help text. A name
 * that breaks the rules or was used before is refused (-1; programmer error). */
int prom_family(prom_t *p, const char *name, const char *type, const char *help);

/* One sample of the current family: labels as n (name, value) pairs in kv[0 .. 2n). A
 * counter's samples get no suffix here: name counters *_total yourself. -1 on a bad label
 * name or when no family was started. */
int prom_sample(prom_t *p, const char *const *kv, int n, double value);

/* The text so far ("" when out of memory was hit: see prom_write). */
const char *prom_text(const prom_t *p);

/* Writes the text to path through path.tmp.PID and rename. 0 or STATUS_EIO /
 * STATUS_ENOMEM with err. */
int prom_write(const prom_t *p, const char *path, char *err);

/* 1 when s is a valid metric name (label 0) or label name (label 1). */
int prom_valid_name(const char *s, int label);

#endif
