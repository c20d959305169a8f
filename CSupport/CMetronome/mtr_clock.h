/*
 * The clocks: which are valid, how to read one (mtr_clock.c).
 */
#ifndef MTR_CLOCK_H
#define MTR_CLOCK_H

#include "CMetronome.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MTR_CLOCK_COUNT 3
#define MTR_NS_PER_S INT64_C(1000000000)

static inline bool
mtr_clock_valid_(mtr_clock_id clock)
{
	return (unsigned)clock < MTR_CLOCK_COUNT;
}

int64_t mtr_clock_read_(mtr_clock_id clock);
int mtr_clock_posix_(mtr_clock_id clock);

/*
 * A test's stand-in for what a spin reads of a clock: the suite defines it
 * to step the wall clock under a spin without setting the machine's clock.
 * Only the spin's reads go through it, since the kernel cannot step a
 * timerfd along: a step it did not see would expire every re-arm at once.
 * A weak reference, so a program that does not define it reads the clock
 * as is; not in the public header.
 */
int64_t mtr_clock_spin_for_testing_(int clock, int64_t ns)
    __attribute__((weak));

/* @clock's reading, for a spin. */
static inline int64_t
mtr_clock_read_spin_(mtr_clock_id clock)
{
	int64_t ns = mtr_clock_read_(clock);
	return mtr_clock_spin_for_testing_ != NULL ?
	    mtr_clock_spin_for_testing_((int)clock, ns) : ns;
}

#endif /* MTR_CLOCK_H */
