/*
 * CMetronomeTesting - calls of the firing core that the Metronome library
 * does not make: the contract tests use them to reach states and orders
 * that the library reaches only through its own means (its own
 * cancel-and-wait, years of arms).
 */
#ifndef CMETRONOME_TESTING_H
#define CMETRONOME_TESTING_H

#include "CMetronome.h"

#pragma clang assume_nonnull begin

/**
 * mtr_timer_cancel_sync - disarm a timer and wait for its running callback
 *
 * As mtr_timer_cancel(), then waits until no callback of the timer is
 * running, and leaves the timer disarmed: an arm or move of it made while
 * it waited, by the running callback or by another thread, is undone, as
 * if made before the cancel. From any engine's firing thread (a callback,
 * this engine's or another's) it does not wait: there it is
 * mtr_timer_cancel().
 *
 * Context: any thread. The caller must not hold a lock that the callback
 * takes.
 * Return: 0, or EINVAL for a stale id.
 */
int mtr_timer_cancel_sync(mtr_engine *engine, mtr_timer_id timer);

/**
 * mtr_engine_age_for_testing - skip ahead the engine's counters, for tests
 * @arms: arm operations to count as done (arm order advances by this much)
 * @reuses: create/destroy cycles to count as done on every free slot
 *
 * Lets a test reach old arm orders and the end of slot generations in
 * microseconds instead of years. Never needed otherwise.
 *
 * Context: any thread.
 * Return: 0; ESHUTDOWN once stopped; EOVERFLOW when arm order would pass
 * 2^63 (arms never reach it: centuries at a billion a second).
 */
int mtr_engine_age_for_testing(mtr_engine *engine, uint64_t arms,
    uint32_t reuses);

#pragma clang assume_nonnull end

#endif /* CMETRONOME_TESTING_H */
