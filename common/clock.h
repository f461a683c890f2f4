/* clock.h — monotonic time in seconds. */
#ifndef SWARMTRAIN_CLOCK_H
#define SWARMTRAIN_CLOCK_H

/* Seconds from an arbitrary fixed origin, monotonic; can't fail. */
double clock_now(void);

/* Sleeps about `seconds` (signals may cut it short). */
void clock_sleep(double seconds);

#endif
