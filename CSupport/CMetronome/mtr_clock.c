/*
 * Clocks by name: clock_gettime on the clock a timerfd of the same name uses
 * (through the vDSO: no syscall on x86_64 or aarch64).
 */
#include "mtr_clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int
mtr_clock_posix_(mtr_clock_id clock)
{
	switch (clock) {
	case MTR_CLOCK_MONOTONIC:
		return CLOCK_MONOTONIC;
	case MTR_CLOCK_BOOTTIME:
		return CLOCK_BOOTTIME;
	case MTR_CLOCK_REALTIME:
		return CLOCK_REALTIME;
	}
	return CLOCK_MONOTONIC;
}

int64_t
mtr_clock_read_(mtr_clock_id clock)
{
	struct timespec ts;

	/* The only failures are an invalid clock or address: our bug. */
	if (clock_gettime(mtr_clock_posix_(clock), &ts) != 0) {
		fprintf(stderr, "CMetronome: clock_gettime failed: %d\n", errno);
		abort();
	}
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int
mtr_clock_now(mtr_clock_id clock, int64_t *out_ns)
{
	if (!mtr_clock_valid_(clock))
		return EINVAL;
	*out_ns = mtr_clock_read_(clock);
	return 0;
}
