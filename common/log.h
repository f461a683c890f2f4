/* log.h — leveled logging to stderr. The level is tested before anything is formatted.
 * Not for: the per-step training lines, which go to stdout in a fixed grep-able form. */
#ifndef SWARMTRAIN_LOG_H
#define SWARMTRAIN_LOG_H

enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level;

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...)                                                                             \
    do {                                                                                           \
        if (log_level >= LOG_ERROR) log_write(LOG_ERROR, __VA_ARGS__);                             \
    } while (0)
#define log_warn(...)                                                                              \
    do {                                                                                           \
        if (log_level >= LOG_WARN) log_write(LOG_WARN, __VA_ARGS__);                               \
    } while (0)
#define log_info(...)                                                                              \
    do {                                                                                           \
        if (log_level >= LOG_INFO) log_write(LOG_INFO, __VA_ARGS__);                               \
    } while (0)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_level >= LOG_DEBUG) log_write(LOG_DEBUG, __VA_ARGS__);                             \
    } while (0)

#endif
