#ifndef CMEASUREMENTS_H
#define CMEASUREMENTS_H

/*
 * The Linux calls the measurements make that SwiftGlibc does not import. timerfd and
 * malloc_trim come straight from their headers; gettid is declared only under _GNU_SOURCE
 * and prctl is variadic, which Swift cannot call, so those two get a function each.
 */
#include <malloc.h>
#include <sys/timerfd.h>
#include <sys/types.h>

#pragma clang assume_nonnull begin

/**
 * cmeasurements_gettid - the calling thread's kernel thread id
 *
 * Context: any thread.
 * Return: the id /proc/self/task lists the thread by; it differs from its pthread_t.
 */
pid_t cmeasurements_gettid(void);

/**
 * cmeasurements_get_timer_slack - the calling thread's timer slack
 * @out_ns: receives the slack in nanoseconds, only on success
 *
 * Context: any thread; the slack is per thread (PR_GET_TIMERSLACK).
 * Return: 0, or the errno of prctl.
 */
int cmeasurements_get_timer_slack(unsigned long *out_ns);

#pragma clang assume_nonnull end

#endif
