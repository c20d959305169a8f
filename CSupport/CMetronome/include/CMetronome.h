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
 *
 * Lifetime: mtr_engine_stop() may race every other call on the engine and
 * may be called from a callback; afterwards calls return errors, never
 * touch freed memory. In a process forked from the one that created an
 * engine, the engine is dead from the instant of the fork, a fork inside
 * one of its callbacks included: it arms nothing and touches none of the
 * descriptors it shares with the parent; create a new engine there.
 *
 * Firing threads: each engine's blocks every signal while it waits, so
 * that the process's signal handlers run elsewhere, and runs callbacks
 * under the signal mask of the thread that created the engine, so that a
 * process a callback starts (fork and exec, posix_spawn, system) gets the
 * mask the process had: posix_spawn and system run no fork handler that
 * could restore it. While a callback runs, a signal sent to the process may
 * so be handled on the firing thread, as on any other thread that takes
 * it; a pass of callbacks is short beside the waits between passes. A
 * firing thread never waits for another: from inside any engine's
 * callback, stop, destroy and cancel_sync (CMetronomeTesting.h) return
 * without waiting, so that engines whose callbacks call each other cannot
 * deadlock.
 *
 * Contexts: free a timer's context in on_release, which comes once, after
 * its last callback has returned; never because a call that ends the
 * timer or its engine returned. Destroy and stop say when they could not
 * wait (EINPROGRESS): a callback may still be running then.
 *
 * Priority: a firing thread given SCHED_FIFO takes shard locks that
 * ordinary threads hold, and the locks do not inherit priority. A holder
 * runs a few dozen instructions with no call that blocks, so an inversion
 * lasts as long as the holder's preemption; a priority-inheriting futex
 * would put a system call in every contended take of every shard lock.
 * Where that bound does not do, pin the firing thread to a CPU that other
 * threads of the process do not use.
 */
#ifndef CMETRONOME_H
#define CMETRONOME_H

#include <stdbool.h>
#include <stdint.h>

#pragma clang assume_nonnull begin

typedef struct mtr_engine mtr_engine;

/* A timer's name: slot index in the low 32 bits, generation in the high.
 * Meaningful only to the engine that made it: an id carries no mark of its
 * engine, so another engine's id may name one of this engine's timers. */
typedef uint64_t mtr_timer_id;

typedef enum __attribute__((enum_extensibility(closed))) mtr_clock_id {
	/* CLOCK_MONOTONIC: stops during suspend; DispatchTime's clock. */
	MTR_CLOCK_MONOTONIC = 0,
	/* CLOCK_BOOTTIME: counts through suspend, like ContinuousClock. */
	MTR_CLOCK_BOOTTIME = 1,
	/* CLOCK_REALTIME: wall time; steps are noticed and re-evaluated. */
	MTR_CLOCK_REALTIME = 2,
} mtr_clock_id;

/*
 * What a repeating timer does with the deadlines a firing passed when it
 * came a period or more after its deadline.
 */
typedef enum __attribute__((enum_extensibility(closed))) mtr_missed_policy {
	/* Fire once for the latest deadline passed, report the earlier ones
	 * in the tick's missed, and go on on the schedule. */
	MTR_MISSED_SKIP = 0,
	/* Fire once for every deadline passed, back to back (each at the
	 * next wake-up, which follows at once), then go on on the schedule. */
	MTR_MISSED_BURST = 1,
	/* Fire once, late, and move the schedule: the next deadline is a full
	 * period after this firing. */
	MTR_MISSED_DELAY = 2,
} mtr_missed_policy;

/* What a callback learns about the firing it is running for. */
typedef struct mtr_tick {
	/* The deadline this firing stands for: the latest one it covers. */
	int64_t scheduled_ns;
	/* The clock when the firing thread committed to this callback. */
	int64_t fired_ns;
	/* Deadlines of a repeating timer skipped ahead of this one because
	 * their windows had closed (MTR_MISSED_SKIP, the default): the
	 * earliest deadline covered is scheduled_ns - missed * period. 0 when
	 * on time, for one-shots and under the other policies. */
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

/* Bounds of the configuration, checked by mtr_engine_config_check(). */
enum {
	/* The highest SCHED_FIFO priority Linux grants. */
	MTR_REALTIME_PRIORITY_MAX = 99,
	/* The longest spin window: past a wake-up's worst latency a spin
	 * buys no precision, only CPU. */
	MTR_SPIN_MAX_NS = 1000000,
	/* Bytes of a thread name, as pthread_setname_np takes it. */
	MTR_THREAD_NAME_MAX = 16,
	/* The most shards an engine splits its timers into. */
	MTR_SHARDS_MAX = 64,
	/* How long a callback runs before the standby fires the engine's
	 * other timers (mtr_engine_config.no_standby). */
	MTR_OVERRUN_MS = 2,
};

/* A field of mtr_engine_config, as mtr_engine_config_check() names it. */
typedef enum __attribute__((enum_extensibility(closed))) mtr_engine_setting {
	MTR_SETTING_NONE = 0,
	MTR_SETTING_ON_FIRE = 1,
	MTR_SETTING_REALTIME_PRIORITY = 2,
	MTR_SETTING_CPU = 3,
	MTR_SETTING_SPIN = 4,
	MTR_SETTING_LATE_THRESHOLD = 5,
	MTR_SETTING_SHARDS = 6,
} mtr_engine_setting;

typedef struct mtr_engine_config {
	/* Required: the callback of every timer of this engine. One function
	 * per engine keeps a timer at 48 bytes; dispatch on the context. */
	mtr_fire_fn _Nullable on_fire;
	/* Optional: releases a timer's context exactly once. */
	mtr_release_fn _Nullable on_release;
	/* 0: normal scheduling; 1...99: ask for SCHED_FIFO at that priority. */
	int realtime_priority;
	/* -1: no affinity; otherwise pin the firing thread to this CPU. */
	int cpu;
	/* 0: sleep until the deadline. Otherwise wake this much early and
	 * spin to the deadline: lower jitter for one core's worth of CPU.
	 * 0...MTR_SPIN_MAX_NS. A cancel, an earlier timer on any clock or
	 * shard, or a stop ends a spin at once. */
	int64_t spin_ns;
	/* A firing later than its window by more than this counts as late.
	 * Must be positive; mtr_engine_config_init() sets 1 ms. */
	int64_t late_threshold_ns;
	/* The firing thread's name (cut to 15 bytes), or NULL for
	 * metronome-N; read during mtr_engine_create() only. */
	const char *_Nullable name;
	/* 0 or 1: one lock and one heap per clock for every timer. 2...
	 * MTR_SHARDS_MAX: that many, each with its own lock, heaps and
	 * timerfds, all fired by the one firing thread. A timer lives in the
	 * shard of the thread that created it (threads take shards in turn),
	 * so threads that create and arm their own timers do not contend.
	 * A wake-up serves every shard, so leeway coalesces across them. The
	 * price: equal deadlines fire in arm order within a shard, and timers
	 * of several shards due at one wake-up fire shard by shard.
	 *
	 * One wake-up fires, in each heap, only the timers armed before it
	 * began; one armed since (a repeating timer whose callback outran its
	 * period, say) fires at the next, so that no clock or shard keeps the
	 * firing thread from the others. */
	uint32_t shards;
	/* false (the default): a second thread and a timerfd stand by to
	 * fire the engine's timers while a callback runs past
	 * MTR_OVERRUN_MS, so that a callback that blocks holds up no other
	 * timer for longer (mtr_counters.takeovers). true: one thread, whose
	 * callback that blocks holds up every other timer until it returns. */
	bool no_standby;
} mtr_engine_config;

/* Fills @config with the defaults: no callbacks, no RT priority, no
 * affinity, no spin window, 1 ms late threshold, a numbered thread name. */
void mtr_engine_config_init(mtr_engine_config *config);

/**
 * mtr_engine_config_check - check a configuration before creating with it
 * @out_setting: receives the first setting out of range, or
 * MTR_SETTING_NONE
 *
 * Context: any thread.
 * Return: 0, or EINVAL when a setting is out of range.
 */
int mtr_engine_config_check(const mtr_engine_config *config,
    mtr_engine_setting *out_setting);

/* Counters, readable at any time: the sum of each shard's snapshot. */
typedef struct mtr_counters {
	uint64_t wakeups;        /* timerfd expirations handled */
	uint64_t fired;          /* callbacks run */
	uint64_t late;           /* firings after window + late threshold */
	uint64_t missed_periods; /* sum of every tick's missed */
	uint64_t armed;          /* timers armed now */
	uint64_t coalesced;      /* firings that shared a wake-up */
	uint64_t clock_steps;    /* wall-clock steps noticed (per shard) */
	uint64_t timers;         /* timers created and not yet destroyed */
	uint64_t batched;        /* firings of a burst's bulk take (mtr_run.c) */
	uint64_t memory_bytes;   /* held for timers, heaps and run lists */
	/* Times a callback of the firing thread ran past MTR_OVERRUN_MS and
	 * the standby fired the engine's timers meanwhile. */
	uint64_t takeovers;
} mtr_counters;

/* How the firing thread's requested settings turned out. Each *_error is 0
 * when granted (or not asked for), else the errno that refused it. */
typedef struct mtr_engine_info {
	int realtime_priority; /* granted SCHED_FIFO priority, 0 if none */
	int realtime_error;
	int cpu;               /* pinned CPU, -1 if none */
	int cpu_error;
	int64_t spin_ns;
	char name[MTR_THREAD_NAME_MAX]; /* the firing thread's name */
	/* 0, or the errno of a descriptor that failed under the engine or
	 * was no longer its own (a timerfd closed by someone else, its number
	 * perhaps reused; any or all of its descriptors): from then on no
	 * callback starts, calls answer ESHUTDOWN, and the engine stops
	 * itself within a second, as mtr_engine_stop() stops it. */
	int fault;
} mtr_engine_info;

/**
 * mtr_engine_create - start an engine and its firing thread
 * @config: the configuration; on_fire is required
 * @out_engine: receives the engine on success
 *
 * A refused SCHED_FIFO priority or CPU affinity is not an error: the engine
 * runs without it and mtr_engine_get_info() reports why.
 *
 * An engine needs seven descriptors: one timerfd per clock, an epoll
 * instance and a pipe, and the standby's timerfd (none with no_standby);
 * each shard after the first, three more timerfds.
 * The engine holds the last three before libevent makes its epoll
 * instance and pipe, and libevent ends the process when the pipe fails:
 * should another thread take those descriptors in between, or the
 * system's file table fill (ENFILE), that is where it does.
 *
 * Context: any thread.
 * Return: 0; EINVAL for a configuration mtr_engine_config_check() refuses;
 * EMFILE/ENFILE when descriptors run out, however few are left; ENOMEM;
 * or the error of pthread_create.
 */
int mtr_engine_create(const mtr_engine_config *config,
    mtr_engine *_Nullable *_Nonnull out_engine);

/**
 * mtr_engine_stop - stop firing, drop every timer, keep the handle valid
 * @engine: an engine
 *
 * Waits for a running callback to return, joins the firing thread, drops
 * every timer and releases every remaining context exactly once, and gives
 * back the memory they took. Calls racing the stop from other threads get
 * ESHUTDOWN or EINVAL; afterwards every timer id is stale (EINVAL) and
 * mtr_timer_create() and the arm calls answer ESHUTDOWN. From inside a
 * callback of any engine it returns at once: this engine's firing thread
 * drops the timers when its running callback returns. In a forked child it
 * drops the inherited timers, releasing their contexts, without touching
 * the parent's descriptors. Idempotent. Not a cancellation point: a
 * pthread_cancel of the caller acts at its next cancellation point after
 * the call.
 *
 * Context: any thread, including a callback of this engine.
 * Return: 0 when every callback had returned and every context was
 * released by the time it returned; EINPROGRESS when it could not wait
 * (from a callback of any engine, or in a forked child inside the
 * callback that forked): a callback of this engine may still be running,
 * and its context is released after it returns.
 */
int mtr_engine_stop(mtr_engine *engine);

/**
 * mtr_engine_destroy - stop the engine and free it
 * @engine: an engine, or NULL (a no-op)
 *
 * mtr_engine_stop(), then frees the engine once no thread is blocked in
 * it (in mtr_engine_stop() or mtr_timer_cancel_sync()) and its firing
 * thread has exited: the last of them frees it. From inside a callback of
 * any engine it returns at once, and this engine's firing thread finishes.
 * The engine must not be used after this call.
 *
 * A context is the owner's to free once on_release has had it, not when
 * this returns: from another engine's callback, this engine's callback may
 * still be running on its own firing thread, with its context, and the
 * call cannot wait for it (the two engines' callbacks might be waiting on
 * each other). EINPROGRESS says so. Not a cancellation point, as
 * mtr_engine_stop().
 *
 * Context: any thread, including a callback of this engine.
 * Return: 0 when every callback had returned and every context was
 * released by the time it returned (and for NULL); EINPROGRESS when it
 * could not wait, as mtr_engine_stop().
 */
int mtr_engine_destroy(mtr_engine *_Nullable engine);

/**
 * mtr_engine_was_stopped - whether @engine was stopped
 *
 * Set as a stop begins, before it releases any context: an on_release
 * callback can tell a release the stop made from one of a destroy of its
 * own timer. A stop the engine makes itself on a fault (see
 * mtr_engine_info.fault) is a stop.
 *
 * Context: any thread, including callbacks of this engine.
 * Return: 1 once mtr_engine_stop() or mtr_engine_destroy() was called or a
 * fault stopped the engine, else 0.
 */
int mtr_engine_was_stopped(const mtr_engine *engine);

/**
 * mtr_engine_is_inherited - whether @engine is a dead copy from a parent
 *
 * Context: any thread.
 * Return: 1 in a forked child for an engine the parent created, else 0.
 */
int mtr_engine_is_inherited(const mtr_engine *engine);

/**
 * mtr_fork_watch - have forks counted from now on (mtr_fork_generation)
 *
 * Creating an engine does it too. Idempotent.
 *
 * Context: any thread.
 */
void mtr_fork_watch(void);

/* What mtr_fork_generation() reads; written only by the fork handler in a
 * child, before the child has a second thread. */
extern uint32_t mtr_fork_count_;

/**
 * mtr_fork_generation - how many forks lie between this process and its
 * ancestor that first watched them
 *
 * A binding keeps it beside state that a thread of its own may leave half
 * done (a callback running): in a forked child, where that thread does not
 * exist, a different count says the work is over. Inline, for a binding
 * reads it on every firing.
 *
 * Context: any thread.
 * Return: 0 in a process not forked since mtr_fork_watch() (or the first
 * engine); each fork adds 1 in the child.
 */
static inline uint32_t
mtr_fork_generation(void)
{
	return mtr_fork_count_;
}

/**
 * mtr_shared_lock - lock the process-wide slot of a binding's shared engine
 *
 * A binding's engine for everyone (the Swift layer's TimerEngine.shared) is
 * looked up, and made on first use, under this lock, which fork() waits
 * for: a child never inherits it held by a thread the child lacks, so its
 * first use there makes the child an engine of its own instead of waiting
 * for good. The slot is static storage: nothing is set up at run time that
 * a fork could catch half done.
 *
 * Context: any thread, callbacks included, but not one that holds it: it
 * is not recursive.
 * Return: the pointer last stored by mtr_shared_unlock(), NULL at first.
 */
void *_Nullable mtr_shared_lock(void);

/**
 * mtr_shared_unlock - store @value in the shared slot and unlock it
 * @value: what mtr_shared_lock() returned, or what replaces it
 *
 * Context: the thread that called mtr_shared_lock().
 */
void mtr_shared_unlock(void *_Nullable value);

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
 * Return: 0, EINVAL for an unknown clock, or ESHUTDOWN once stopped (and
 * in a forked child).
 */
int mtr_engine_clock_changed(mtr_engine *engine, mtr_clock_id clock);

/**
 * mtr_timer_create - make a disarmed timer
 * @context: handed to on_fire and, once, to on_release
 *
 * On a sharded engine the timer lives in the calling thread's shard.
 *
 * Context: any thread, including a callback.
 * Return: 0, ENOMEM, or ESHUTDOWN once the engine is stopping (and in a
 * forked child).
 */
int mtr_timer_create(mtr_engine *engine, void *_Nullable context,
    mtr_timer_id *out_timer);

/**
 * mtr_timer_arm_once - (re)arm a timer to fire once
 * @deadline_ns: absolute time on @clock, >= 0; a past deadline fires within
 *   its window like any other, so at once when deadline + leeway has passed
 * @leeway_ns: >= 0; the timer may fire anywhere in [deadline, deadline+leeway]
 *
 * Replaces any previous schedule: once this returns, no callback for the old
 * schedule starts (one already running is not interrupted).
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0; EINVAL for a stale id, an unknown clock or a negative value;
 * EOVERFLOW when deadline + leeway does not fit in 63 bits; ENOMEM when
 * the timer goes into a clock's timer set it is not in, that set must grow
 * (it keeps room for the timers a burst being fired took out of it), and
 * memory has run out: the timer then keeps its old schedule, and a move
 * within one clock needs no memory; ESHUTDOWN once the engine is stopping
 * (and in a forked child), or has met a fault (mtr_engine_info.fault), in
 * this call or before it: the timer will not fire.
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
 * reports them in its tick's missed count (MTR_MISSED_SKIP;
 * mtr_timer_move_policy() chooses another).
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0; EINVAL for a stale id, an unknown clock, a period <= 0, a
 * negative start or leeway, or a leeway longer than the period; EOVERFLOW
 * when start + leeway does not fit in 63 bits; ENOMEM or ESHUTDOWN as for
 * mtr_timer_arm_once().
 */
int mtr_timer_arm_repeating(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t start_ns, int64_t period_ns,
    int64_t leeway_ns);

/**
 * mtr_timer_move - re-arm a timer under a new id
 * @timer: the timer; stale once this succeeds
 * @period_ns: 0 for a one-shot, else > 0 as in mtr_timer_arm_repeating()
 * @out_timer: receives the timer's new id, only on success
 *
 * Re-arms as mtr_timer_arm_once() or mtr_timer_arm_repeating() do, a later
 * deadline in O(1), and gives the timer a new id: every callback of the new
 * schedule carries it, while a callback the firing thread had already begun
 * for the old schedule carries the old one. An owner that records the new id
 * by the time this returns can so tell the two apart without creating a timer.
 * Destroy and cancel_sync treat a running callback of either id as the
 * timer's. Ids never run out: once a slot's are spent, the timer moves to
 * a fresh slot (and its new id names that one).
 *
 * Context: any thread, including the timer's own callback.
 * Return: 0, or what the arm calls return.
 */
int mtr_timer_move(mtr_engine *engine, mtr_timer_id timer, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_timer_id *out_timer);

/**
 * mtr_timer_move_policy - mtr_timer_move() with a missed-deadline policy
 * @policy: what a late firing of the repeating schedule does with the
 *   deadlines it passed (mtr_missed_policy); a one-shot ignores it
 *
 * Context: any thread, including the timer's own callback.
 * Return: as mtr_timer_move(); EINVAL for an unknown policy.
 */
int mtr_timer_move_policy(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t deadline_ns, int64_t period_ns,
    int64_t leeway_ns, mtr_missed_policy policy, mtr_timer_id *out_timer);

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
 * mtr_timer_destroy - disarm a timer, release its context, retire its id
 *
 * Never waits. If the timer's callback is running, the context is released
 * when that callback returns; otherwise by the time this call returns. The id is
 * stale afterwards, for good: a slot is reused under a new generation, and
 * retired rather than reused once its 2^31 generations are spent.
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

/* What only the contract tests call; here because SwiftPM makes this
 * header the module's umbrella, which must name every header in include/. */
#include "CMetronomeTesting.h"

#endif /* CMETRONOME_H */
