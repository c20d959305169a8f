/*
 * The engine's layout and what its files share: its start and stop
 * (mtr_engine.c), its firing path (mtr_fire.c), its end (mtr_teardown.c),
 * its life across fork() (mtr_fork.c) and its faults (mtr_fault.c). A
 * header below all of them, so that each calls down and none up into
 * mtr_engine.c.
 */
#ifndef MTR_ENGINE_STATE_H
#define MTR_ENGINE_STATE_H

#include "mtr_shard.h"

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

struct event_base;

/*
 * The engine: its shards, its firing thread and its life. The engine lock
 * guards the life (stopping, joining); timer operations take a shard's lock
 * only. Lock order: the engine, then a shard.
 *
 * One count says who may still touch the engine (holds), and whoever takes
 * it to 0 frees the engine, as the last thing it does with it: the owner's
 * reference (dropped by destroy), the firing thread's until it exits, and
 * one for each caller blocked in stop, destroy or cancel_sync.
 */
struct mtr_engine {
	pthread_mutex_t lock;
	pthread_cond_t thread_done;

	struct mtr_shard *shards;
	uint32_t shard_count;
	struct event_base *base;
	struct event *watch;  /* the firing thread's check of its descriptors */
	pthread_t thread;

	/* The standby (mtr_standby.c): its thread, its alarm (a monotonic
	 * timerfd), what the alarm is set to and whether for a wake-up due
	 * (else for the watch's second), and which of the two threads may
	 * start callbacks (mtr_firer). alarm_lock, innermost of all, orders
	 * the alarm's settimes. */
	pthread_t standby;
	bool standby_started;
	_Atomic pid_t thread_tid; /* the firing thread's kernel id */
	struct mtr_timerfd alarm;
	struct mtr_lock alarm_lock;
	_Atomic int64_t alarm_ns;
	_Atomic bool alarm_for_expiry;
	/* CLOCK_MONOTONIC when the firing thread's wake-up began, or
	 * INT64_MAX between wake-ups: a pass in progress is due work. */
	_Atomic int64_t pass_since_ns;
	_Atomic uint32_t firer;
	_Atomic uint64_t takeovers;

	mtr_engine_config config;
	mtr_engine_info info;

	/* Set under the lock; the firing loop reads it without. */
	_Atomic bool stopping;
	bool join_claimed;           /* a thread joins (or detached) the thread */
	bool joined;                 /* the firing thread touches nothing more */
	/* Created before a fork, seen from the child: its descriptors and
	 * thread belong to the parent (mtr_fork.c). */
	bool inherited;
	/* The owner has called destroy: its reference is gone, or going. */
	bool destroyed;
	/* A stop was asked for (stop, destroy or a fault), for
	 * mtr_engine_was_stopped(), which reads it without the lock: in an
	 * on_release callback the stop makes, the engine lock may be held by
	 * the stopping thread. */
	_Atomic bool stop_requested;
	/* The creating thread's signal mask, which callbacks run under, so
	 * that a process they start gets it (mtr_engine.c). */
	sigset_t callback_mask;
	/* Atomic, so that cancel_sync can take a hold under its shard's lock
	 * alone. */
	_Atomic uint32_t holds;
	/* 0, or the errno of a descriptor error that stopped the engine. */
	_Atomic int fault;

	/* The clock state the firing thread spins on, or NULL. Whatever may
	 * make another wake-up due first (a change at that state's top, any
	 * timerfd moved, a stop) bumps spin_epoch to end the spin. */
	struct mtr_clock_state *_Atomic spinning;
	_Atomic uint32_t spin_epoch;

	mtr_engine *fork_prev; /* the registry of live engines */
	mtr_engine *fork_next;
};

/* The shard an id names and its slot there, or NULL for no shard. */
static inline struct mtr_shard *
mtr_shard_of_(mtr_engine *engine, mtr_timer_id id, uint32_t *slot)
{
	uint32_t low = (uint32_t)id;
	if (engine->shard_count == 1) {
		*slot = low;
		return &engine->shards[0];
	}
	uint32_t shard = low >> MTR_SHARD_SHIFT;
	*slot = low & ((UINT32_C(1) << MTR_SHARD_SHIFT) - 1);
	return shard < engine->shard_count ? &engine->shards[shard] : NULL;
}

/* mtr_fire.c: the firing thread's callback for a clock's timerfd, and the
 * standby's pass over every shard and clock while it holds the firing. */
void mtr_fire_on_timerfd_(int fd, short what, void *arg);
void mtr_fire_standby_pass_(mtr_engine *engine);

/* mtr_standby.c */
int mtr_standby_start_(mtr_engine *engine);
void mtr_standby_join_(mtr_engine *engine);
/* mtr_teardown.c: the last of a firing thread (the standby's copy in a
 * forked child ends as the firing thread's would). */
void mtr_engine_thread_gone_(mtr_engine *engine);

/* mtr_teardown.c */
void mtr_engine_drop_timers_(mtr_engine *engine);
void mtr_engine_hold_(mtr_engine *engine);
/* A holder lets go of @count holds; the last one frees the engine. */
void mtr_engine_let_go_(mtr_engine *engine, uint32_t count);
void mtr_engine_free_(mtr_engine *engine);

/* Releases a context with the shard's lock dropped: a release may call the
 * engine. */
static inline void
mtr_shard_release_locked_(struct mtr_shard *shard, void *context)
{
	if (shard->engine->config.on_release == NULL)
		return;
	mtr_lock_give_(&shard->lock);
	shard->engine->config.on_release(context);
	mtr_lock_take_(&shard->lock);
}

/* Ends a spin on @state, or any spin when @state is NULL: the spun-for
 * timer may be gone, or an earlier wake-up may have come. */
static inline void
mtr_engine_interrupt_spin_(mtr_engine *engine,
    const struct mtr_clock_state *state)
{
	const struct mtr_clock_state *spinning = atomic_load(&engine->spinning);
	if (spinning != NULL && (state == NULL || spinning == state))
		atomic_fetch_add(&engine->spin_epoch, 1);
}

static inline void
mtr_shard_interrupt_spin_locked_(struct mtr_shard *shard, mtr_clock_id clock)
{
	mtr_engine_interrupt_spin_(shard->engine, &shard->clocks[clock]);
}

/*
 * mtr_fork.c: the holds the calling thread has on engines outside the
 * firing loop, innermost first: a stop or destroy in progress, which may
 * run release callbacks, and so a fork (mtr_fork.c counts them for the
 * child). @count is what the holder lets go of: its own hold, and for
 * destroy the owner's.
 */
struct mtr_hold {
	mtr_engine *engine;
	uint32_t count;
	struct mtr_hold *next;
};

extern _Thread_local struct mtr_hold *mtr_holds_;

/* mtr_fork.c: the registry that fork() handlers walk (and the shared
 * slot, whose lock they hold). */
void mtr_fork_register_(mtr_engine *engine);
void mtr_fork_unregister_(mtr_engine *engine);

/*
 * mtr_fault.c: the engine whose firing thread the calling thread is, or
 * NULL; set by the firing thread as it starts. A forked child's copy of a
 * firing thread keeps it. Thread-local rather than a pthread_t compared:
 * glibc hands a dead thread's pthread_t to the next thread it creates.
 */
extern _Thread_local mtr_engine *mtr_firing_engine_;
/* mtr_fault.c: which of its engine's two firing threads it is. */
extern _Thread_local enum mtr_firer mtr_firer_;

/* mtr_fault.c: records @error, a descriptor failing under the engine or no
 * longer its own; the first error is the one kept. From then on no
 * callback starts, every call that would arm answers ESHUTDOWN, and the
 * firing thread stops the engine when it next wakes (mtr_engine.c). */
void mtr_engine_fault_(mtr_engine *engine, int error);

#endif /* MTR_ENGINE_STATE_H */
