/*
 * CMetronome - the firing core of Metronome.
 *
 * One engine is one firing thread sleeping in a libevent event_base on one
 * timerfd per clock. Every armed timer lives in one indexed 4-ary heap per
 * clock, keyed on its latest acceptable firing time (deadline + leeway); the
 * timerfd is armed at the heap's top, and each wake-up fires every timer whose
 * window [deadline, deadline + leeway] has opened (see mtr_timerset.c).
 *
 * Conventions: every call returns 0 or a positive errno value; results go
 * through out-parameters written only on success; nothing aborts on bad input.
 * Timers are named by a 64-bit id that carries a generation, so an id used
 * after mtr_timer_destroy() is answered with EINVAL, never a use-after-free.
 * Times are nanoseconds on the named clock, as clock_gettime() reads it.
 */
#ifndef CMETRONOME_H
#define CMETRONOME_H

#include <stdint.h>

#pragma clang assume_nonnull begin

typedef struct mtr_engine mtr_engine;

/* A timer's name: slot index in the low 32 bits, generation in the high. */
typedef uint64_t mtr_timer_id;

typedef enum __attribute__((enum_extensibility(closed))) mtr_clock_id {
	/* CLOCK_MONOTONIC: stops during suspend; DispatchTime's clock. */
	MTR_CLOCK_MONOTONIC = 0,
	/* CLOCK_BOOTTIME: counts through suspend, like ContinuousClock. */
	MTR_CLOCK_BOOTTIME = 1,
	/* CLOCK_REALTIME: wall time; steps are noticed and re-evaluated. */
	MTR_CLOCK_REALTIME = 2,
} mtr_clock_id;

/* What a callback learns about the firing it is running for. */
typedef struct mtr_tick {
	/* The deadline this firing stands for: the latest one it covers. */
	int64_t scheduled_ns;
	/* The clock when the firing thread committed to this callback. */
	int64_t fired_ns;
	/* Deadlines of a repeating timer skipped before this one because
	 * their windows had closed: a late timer fires once and reports them
	 * here instead of bursting. 0 when on time and for one-shots. The
	 * earliest deadline covered is scheduled_ns - missed * period. */
	uint64_t missed;
	/* Index of scheduled_ns on the schedule (start + k * period); each
	 * tick's sequence is the previous one's + its missed + 1. */
	uint64_t sequence;
	mtr_timer_id timer;
	mtr_clock_id clock;
} mtr_tick;

/* Called on the firing thread, without any engine lock held. */
typedef void (*mtr_fire_fn)(void *_Nullable context,
    const mtr_tick *_Nonnull tick);
/* Called exactly once per timer context, after its last callback. */
typedef void (*mtr_release_fn)(void *_Nullable context);

typedef struct mtr_engine_config {
	/* Required: the callback of every timer of this engine. One function
	 * per engine keeps a timer at 40 bytes; dispatch on the context. */
	mtr_fire_fn _Nullable on_fire;
	/* Optional: releases a timer's context exactly once. */
	mtr_release_fn _Nullable on_release;
	/* 0: normal scheduling; 1...99: ask for SCHED_FIFO at that priority. */
	int realtime_priority;
	/* -1: no affinity; otherwise pin the firing thread to this CPU. */
	int cpu;
	/* 0: sleep until the deadline. Otherwise wake this much early and
	 * spin to the deadline: lower jitter for one core's worth of CPU. */
	int64_t spin_ns;
	/* A firing later than its window by more than this counts as late;
	 * 0 means the default of 1 ms. */
	int64_t late_threshold_ns;
} mtr_engine_config;

/* Fills @config with the defaults: no callbacks, no RT priority, no
 * affinity, no spin window, 1 ms late threshold. */
void mtr_engine_config_init(mtr_engine_config *config);

/* Counters, readable at any time; each a snapshot under the engine lock. */
typedef struct mtr_counters {
	uint64_t wakeups;        /* timerfd expirations handled */
	uint64_t fired;          /* callbacks run */
	uint64_t late;           /* firings after window + late threshold */
	uint64_t missed_periods; /* sum of every tick's missed */
	uint64_t armed;          /* timers in the timer set now */
	uint64_t coalesced;      /* firings that shared a wake-up */
	uint64_t clock_steps;    /* wall-clock steps noticed */
	uint64_t timers;         /* timers created and not yet destroyed */
	uint64_t batched;        /* firings drained from a sorted burst batch */
} mtr_counters;

/* How the firing thread's requested settings turned out. Each *_error is 0
 * when granted (or not asked for), else the errno that refused it. */
typedef struct mtr_engine_info {
	int realtime_priority; /* granted SCHED_FIFO priority, 0 if none */
	int realtime_error;
	int cpu;               /* pinned CPU, -1 if none */
	int cpu_error;
	int64_t spin_ns;
} mtr_engine_info;

/**
 * mtr_engine_create - start an engine and its firing thread
 * @config: the configuration; on_fire is required
 * @out_engine: receives the engine on success
 *
 * A refused SCHED_FIFO priority or CPU affinity is not an error: the engine
 * runs without it and mtr_engine_get_info() reports why.
 *
 * Context: any thread.
 * Return: 0; EINVAL for a NULL on_fire, a priority outside 0...99, a
 * negative spin window or late threshold, or a CPU outside the machine;
 * EMFILE/ENFILE when descriptors run out; ENOMEM; or the error of
 * pthread_create.
 */
int mtr_engine_create(const mtr_engine_config *config,
    mtr_engine *_Nullable *_Nonnull out_engine);

/**
 * mtr_engine_stop - stop firing, drop every timer, keep the handle valid
 * @engine: an engine
 *
 * Waits for a running callback to return, joins the firing thread, drops
 * every timer and releases every remaining context exactly once. Afterwards
 * every timer id is stale (EINVAL) and mtr_timer_create() answers
 * ESHUTDOWN, so other threads racing the stop get errors, never a freed
 * engine. From inside a callback it returns at once; the firing thread
 * drops the timers when the callback returns. Idempotent.
 *
 * Context: any thread, including a callback of this engine.
 */
void mtr_engine_stop(mtr_engine *engine);

/**
 * mtr_engine_destroy - stop the engine and free it
 * @engine: an engine, or NULL (a no-op)
 *
 * mtr_engine_stop(), then frees the engine. From inside a callback of this
 * engine it returns at once and the firing thread frees the engine when the
 * callback returns. The engine must not be used after this call.
 *
 * Context: any thread, including a callback of this engine.
 */
void mtr_engine_destroy(mtr_engine *_Nullable engine);

/**
 * mtr_engine_get_counters - read the engine's counters
 * Context: any thread.
 * Return: 0.
 */
int mtr_engine_get_counters(mtr_engine *engine, mtr_counters *out_counters);

/**
 * mtr_engine_get_info - how the firing thread's settings turned out
 * Context: any thread.
 * Return: 0.
 */
int mtr_engine_get_info(mtr_engine *engine, mtr_engine_info *out_info);

/**
 * mtr_engine_clock_changed - re-evaluate every timer on @clock
 *
 * The engine calls this itself when the kernel reports a wall-clock step
 * (TFD_TIMER_CANCEL_ON_SET); it is public so the path can be tested where
 * the clock cannot be set. Due timers fire, the rest are re-armed.
 *
 * Context: any thread.
 * Return: 0, or EINVAL for an unknown clock.
 */
int mtr_engine_clock_changed(mtr_engine *engine, mtr_clock_id clock);

/**
 * mtr_timer_create - make a disarmed timer
 * @context: handed to on_fire and, once, to on_release
 *
 * Context: any thread, including a callback.
 * Return: 0, ENOMEM, or ESHUTDOWN once the engine is being destroyed.
 */
int mtr_timer_create(mtr_engine *engine, void *_Nullable context,
    mtr_timer_id *out_timer);

/**
 * mtr_timer_arm_once - (re)arm a timer to fire once
 * @deadline_ns: absolute time on @clock, >= 0; a past deadline fires at once
 * @leeway_ns: >= 0; the timer may fire anywhere in [deadline, deadline+leeway]
 *
 * Replaces any previous schedule: once this returns, no callback for the old
 * schedule starts (one already running is not interrupted).
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0; EINVAL for a stale id, an unknown clock or a negative value;
 * EOVERFLOW when deadline + leeway does not fit in 63 bits.
 */
int mtr_timer_arm_once(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t deadline_ns, int64_t leeway_ns);

/**
 * mtr_timer_arm_repeating - (re)arm a timer on an absolute schedule
 * @start_ns: the first deadline, >= 0; deadline k is start + k * period
 * @period_ns: > 0
 * @leeway_ns: 0...period
 *
 * Error never accumulates: each deadline is computed from @start_ns. A
 * firing so late that later windows have closed skips those deadlines and
 * reports them in its tick's missed count; it never bursts.
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0; EINVAL for a stale id, an unknown clock, a period <= 0, a
 * negative start or leeway, or a leeway longer than the period; EOVERFLOW
 * when start + leeway does not fit in 63 bits.
 */
int mtr_timer_arm_repeating(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t start_ns, int64_t period_ns,
    int64_t leeway_ns);

/**
 * mtr_timer_cancel - disarm a timer without waiting
 *
 * Once this returns no new callback of the timer starts; a callback the
 * firing thread had already begun may still be running. Cancelling a
 * disarmed timer is a no-op.
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0, or EINVAL for a stale id.
 */
int mtr_timer_cancel(mtr_engine *engine, mtr_timer_id timer);

/**
 * mtr_timer_cancel_sync - disarm a timer and wait for its running callback
 *
 * As mtr_timer_cancel(), then waits until no callback of the timer is
 * running. From the engine's firing thread (the timer's own callback or
 * another one) it returns at once instead of deadlocking.
 *
 * Context: any thread. The caller must not hold a lock that the callback
 * takes.
 * Return: 0, or EINVAL for a stale id.
 */
int mtr_timer_cancel_sync(mtr_engine *engine, mtr_timer_id timer);

/**
 * mtr_timer_destroy - disarm a timer, release its context, retire its id
 *
 * Never waits. If the timer's callback is running, the context is released
 * when that callback returns; otherwise before this call returns. The id is
 * stale afterwards.
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0, or EINVAL for a stale id.
 */
int mtr_timer_destroy(mtr_engine *engine, mtr_timer_id timer);

/**
 * mtr_clock_now - read a clock
 * Context: any thread.
 * Return: 0, or EINVAL for an unknown clock.
 */
int mtr_clock_now(mtr_clock_id clock, int64_t *out_ns);

#pragma clang assume_nonnull end

#endif /* CMETRONOME_H */
