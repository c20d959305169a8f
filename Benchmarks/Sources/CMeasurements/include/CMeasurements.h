#ifndef CMEASUREMENTS_H
#define CMEASUREMENTS_H

/*
 * The Linux calls the measurements make that SwiftGlibc does not import. timerfd and
 * malloc_trim come straight from their headers; pthread_attr_setaffinity_np and
 * RUSAGE_THREAD are declared only under _GNU_SOURCE, CPU_SET is a macro and prctl is
 * variadic, which Swift cannot call, so those get a function each.
 */
#include <malloc.h>
#include <pthread.h>
#include <sys/timerfd.h>
#include <sys/types.h>

#pragma clang assume_nonnull begin

/**
 * cmeasurements_get_timer_slack - the calling thread's timer slack
 * @out_ns: receives the slack in nanoseconds, only on success
 *
 * Context: any thread; the slack is per thread (PR_GET_TIMERSLACK).
 * Return: 0, or the errno of prctl.
 */
int cmeasurements_get_timer_slack(unsigned long *out_ns);

/**
 * cmeasurements_attr_pin - make a thread start on one CPU only
 * @attributes: the attributes the thread will be created with
 * @cpu: the CPU, 0 to CPU_SETSIZE - 1
 *
 * Context: before pthread_create, so the thread runs there from its first instruction.
 * Return: 0; EINVAL for a CPU outside the set's range, or the errno of
 * pthread_attr_setaffinity_np.
 */
int cmeasurements_attr_pin(pthread_attr_t *attributes, int cpu);

/**
 * cmeasurements_thread_voluntary_switches - the calling thread's voluntary context switches
 * @out_count: receives the count, only on success
 *
 * Context: any thread; the count is the caller's own (getrusage(RUSAGE_THREAD)): each is
 * the thread blocking, in epoll_wait, read or a futex, and so one wake-up.
 * Return: 0, or the errno of getrusage.
 */
int cmeasurements_thread_voluntary_switches(long *out_count);

#pragma clang assume_nonnull end

#endif
