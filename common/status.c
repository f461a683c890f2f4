/* status.c — names of status codes and the error-buffer helper. */
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *status_str(int status)
{
    switch (status) {
    case STATUS_OK:
        return "ok";
    case STATUS_EINVAL:
        return "invalid argument";
    case STATUS_ENOMEM:
        return "out of memory";
    case STATUS_EIO:
        return "I/O error";
    case STATUS_EMALFORMED:
        return "malformed input";
    case STATUS_EVERSION:
        return "unsupported version";
    case STATUS_ECORRUPT:
        return "corrupt data";
    case STATUS_ENOTFOUND:
        return "not found";
    case STATUS_EFULL:
        return "storage full";
    case STATUS_EBUSY:
        return "busy";
    case STATUS_ETIMEOUT:
        return "timed out";
    case STATUS_ENODEV:
        return "no device";
    case STATUS_ENET:
        return "network error";
    case STATUS_EDENIED:
        return "denied";
    default:
        return "unknown status";
    }
}

int status_set(char *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, STATUS_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return status;
}
