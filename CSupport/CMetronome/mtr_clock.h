/*
 * The clocks: which are valid, how to read one (mtr_clock.c).
 */
#ifndef MTR_CLOCK_H
#define MTR_CLOCK_H

#include "CMetronome.h"

#include <stdbool.h>
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

#endif /* MTR_CLOCK_H */
