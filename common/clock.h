/* clock.h — monotonic time in seconds. */
#ifndef SWARMTRAIN_CLOCK_H
#define SWARMTRAIN_CLOCK_H

/* Seconds from an arbitrary fixed origin, monotonic; can't fail. */
double clock_now(void);

/* CPU seconds the calling thread has used (not time it waited or was descheduled). */
double clock_thread_cpu(void);

/* Sleeps about `seconds` (signals may cut it short). */
void clock_sleep(double seconds);

#endif
