/* status.h — the one status enum of swarmtrain and its error-text helper.
 * Not for: logging (log.h) or anything that formats for a user beyond one line. */
#ifndef SWARMTRAIN_STATUS_H
#define SWARMTRAIN_STATUS_H

#include <stddef.h>

/* 0 is success; every failure is a negative kind. Details go into an error buffer. */
typedef enum {
    STATUS_OK = 0,
    STATUS_EINVAL = -1,     /* bad argument or configuration */
    STATUS_ENOMEM = -2,     /* allocation failed */
    STATUS_EIO = -3,        /* file or database I/O failed */
    STATUS_EMALFORMED = -4, /* input from disk or network is not well formed */
    STATUS_EVERSION = -5,   /* a version we do not speak */
    STATUS_ECORRUPT = -6,   /* a hash did not verify */
    STATUS_ENOTFOUND = -7,  /* nothing there */
    STATUS_EFULL = -8,      /* disk or quota full */
    STATUS_EBUSY = -9,      /* locked or in use */
    STATUS_ETIMEOUT = -10,  /* a deadline passed */
    STATUS_ENODEV = -11,    /* no usable device */
    STATUS_ENET = -12,      /* network failure */
    STATUS_EDENIED = -13,   /* refused by security policy */
} status_t;

/* The fixed size of every error buffer passed as `char *err`. */
#define STATUS_ERR_LEN 256

/* A short constant description of a status code; can't fail. */
const char *status_str(int status);

/* Formats a message into err (of STATUS_ERR_LEN bytes) when err is not NULL and
 * returns `status`, so that errors read `return status_set(err, STATUS_EINVAL, "...")`. */
int status_set(char *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
