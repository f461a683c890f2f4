/* clock.h — monotonic time in seconds, and the wall clock for records. */
#ifndef SWARMTRAIN_CLOCK_H
#define SWARMTRAIN_CLOCK_H

/* Seconds from an arbitrary fixed origin, monotonic; can't fail. */
double clock_now(void);

/* Seconds since the Unix epoch (CLOCK_REALTIME): for records read by other processes
 * (common/events.h), never for timing. Can't fail. */
double clock_wall(void);

/* CPU seconds the calling thread has used (not time it waited or was descheduled). */
double clock_thread_cpu(void);

/* Sleeps about `seconds` (signals may cut it short). */
void clock_sleep(double seconds);

#endif
