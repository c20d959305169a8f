/*
 * A shard: its lock, its life and timer slots (mtr_shard.c) and, per
 * clock, its timer set and timerfd kept at their earliest wake-up
 * (mtr_queue.h); and how a timer id names a shard and a slot.
 */
#ifndef MTR_SHARD_H
#define MTR_SHARD_H

#include "mtr_lock.h"
#include "mtr_run.h"

#include <stdatomic.h>
#include <time.h>

struct event;

/*
 * A timerfd the engine opened, known by its signature: what the engine
 * stores in its interval, which it never fires on (mtr_timerfd_ours_).
 */
struct mtr_timerfd {
	int fd;
	struct timespec signature;
};

/*
 * A callback that one of the engine's two firing threads runs in a shard,
 * the firing thread's or its standby's (mtr_standby.c), each named by its
 * index (mtr_firer).
 */
struct mtr_callback {
	mtr_timer_id timer;     /* the timer whose callback runs, or 0 */
	int64_t since_ns;       /* CLOCK_MONOTONIC when it began */
	uint32_t ends;          /* callbacks this thread ended here */
	/* cancel_sync callers waiting for it: it leaves its timer disarmed
	 * when it returns (mtr_fire.c). */
	uint32_t waiters;
	bool release;           /* its timer was destroyed while it ran */
	void *released_context; /* then: its context, for a forked child */
	/* A firing of the same timer that the other thread met meanwhile: a
	 * timer's callbacks never overlap, so it waits for this one to end,
	 * and keeps its room in its clock's heap meanwhile. */
	bool deferred;
	mtr_clock_id deferred_clock;
	struct mtr_heap_entry deferred_entry;
};

enum mtr_firer {
	MTR_FIRER_THREAD = 0,  /* the engine's firing thread */
	MTR_FIRER_STANDBY = 1, /* its standby, while the firing thread overruns */
	MTR_FIRERS = 2,
};

struct mtr_clock_state {
	struct mtr_timerset set;
	struct event *event;
	struct mtr_shard *shard;
	struct mtr_timerfd timerfd;
	bool firing;      /* the firing thread is in a pass of this clock */
	/* When the timerfd expires; INT64_MAX if disarmed, which is also how
	 * a key of INT64_MAX (292 years) arms it: never, as it would be.
	 * Written under the shard's lock, read by a spin without it. */
	_Atomic int64_t armed_ns;
};

/*
 * A shard: timers, their heaps and timerfds, under a lock of their own.
 * An engine has one, or MTR_SHARDS_MAX at most (mtr_engine_config.shards);
 * each timer lives in one, named by its id, and every timer operation
 * takes only that shard's lock. The one firing thread serves every shard,
 * each wake-up all of them (mtr_fire.c).
 * Aligned so that two shards' locks never share a cache line.
 */
struct mtr_shard {
	_Alignas(64) struct mtr_lock lock;
	struct mtr_event callback_done; /* a callback ended; its waiters wake */
	mtr_engine *engine;
	/* Ored into the slot index of this shard's ids (mtr_shard_of_). */
	uint32_t id_base;
	/* Slots this shard may hand out: its share of the id space. */
	uint32_t max_timers;

	struct mtr_timer *timers;
	uint32_t timer_capacity;
	uint32_t timer_high_water; /* slots ever handed out */
	uint32_t free_head;        /* MTR_NOT_ARMED when empty */
	/* The generation a slot starts from when the array grows back over
	 * slots it gave up: above every id those slots ever had. */
	uint32_t generation_floor;
	/* The live timer count at which a destroy next checks whether the
	 * timer array can shrink: halved at each check, raised with load. */
	uint32_t shrink_check_at;
	uint64_t next_order;

	struct mtr_clock_state clocks[MTR_CLOCK_COUNT];
	struct mtr_run run;     /* of the clock being fired; one at a time */
	mtr_counters counters;  /* this shard's; the engine's are their sum */

	struct mtr_callback callbacks[MTR_FIRERS];
	/* A copy of the engine's, set under this lock, so that timer
	 * operations need no other. */
	bool stopping;
};

/*
 * An id's low 32 bits: the slot index, and on a sharded engine the shard
 * above MTR_SHARD_SHIFT. One shard keeps the whole MTR_MAX_TIMERS.
 */
#define MTR_SHARD_SHIFT 26

static inline mtr_timer_id
mtr_timer_id_make_(const struct mtr_shard *shard, uint32_t slot,
    uint32_t generation)
{
	return ((uint64_t)generation << 32) | shard->id_base | slot;
}

/* The timer @id names at @slot of its shard (mtr_shard.c), or NULL when the
 * id is stale or never existed. Inline: every timer operation starts here. */
static inline struct mtr_timer *
mtr_slots_lookup_locked_(struct mtr_shard *shard, uint32_t slot,
    mtr_timer_id id)
{
	uint32_t generation = (uint32_t)(id >> 32);

	if (slot >= shard->timer_high_water || (generation & 1) == 0)
		return NULL;
	struct mtr_timer *timer = &shard->timers[slot];
	return timer->generation == generation ? timer : NULL;
}

/* A shard's life, of @count in its engine. */
void mtr_shard_init_(struct mtr_shard *shard, mtr_engine *engine,
    uint32_t index, uint32_t count);
/* The shard the calling thread creates its timers in. */
struct mtr_shard *mtr_shard_home_(struct mtr_shard *shards, uint32_t count);
void mtr_shard_add_counters_(struct mtr_shard *shard, mtr_counters *out);
/* Opens a timerfd on @clock and signs it: 0, or the errno that refused it.
 * @flags: timerfd_create's. */
int mtr_timerfd_open_(struct mtr_timerfd *timerfd, mtr_clock_id clock,
    int flags);
/* 0 when the descriptor is still the timerfd the engine opened, else the
 * errno that says it is not (EBADF for another's timerfd). */
int mtr_timerfd_ours_(const struct mtr_timerfd *timerfd);
/* Closes the timerfd if it is still the engine's; returns whether it was. */
bool mtr_timerfd_close_(struct mtr_timerfd *timerfd);

/* The entries @clock's heap keeps room for besides its own: those still in
 * the run list, and those deferred behind a running callback. Each may come
 * back, and with its room kept, putting it back never allocates. */
static inline uint32_t
mtr_shard_kept_locked_(const struct mtr_shard *shard, mtr_clock_id clock)
{
	uint32_t kept = mtr_run_kept_(&shard->run, clock);
	for (int f = 0; f < MTR_FIRERS; f++) {
		const struct mtr_callback *callback = &shard->callbacks[f];
		kept += callback->deferred && callback->deferred_clock == clock;
	}
	return kept;
}

/* The callback record of @id's running callback, or NULL. */
static inline struct mtr_callback *
mtr_shard_running_locked_(struct mtr_shard *shard, mtr_timer_id id)
{
	for (int f = 0; f < MTR_FIRERS; f++) {
		if (shard->callbacks[f].timer == id)
			return &shard->callbacks[f];
	}
	return NULL;
}
/* Closes what is still the shard's own of its timerfds; returns whether
 * all of them were. */
bool mtr_shard_close_fds_(struct mtr_shard *shard);
void mtr_shard_free_events_(struct mtr_shard *shard);
/* The shard's memory; its descriptors and events are the engine's end's. */
void mtr_shard_free_(struct mtr_shard *shard);

/* A shard's timer array, with its lock held (but free). */
int mtr_slots_take_locked_(struct mtr_shard *shard, void *context,
    mtr_timer_id *out_id);
void mtr_slots_give_back_locked_(struct mtr_shard *shard, uint32_t index);
int mtr_slots_relocate_locked_(struct mtr_shard *shard, uint32_t index,
    uint32_t *out_index);
void mtr_slots_age_locked_(struct mtr_shard *shard, uint32_t reuses);
void mtr_slots_free_(struct mtr_shard *shard);

#endif /* MTR_SHARD_H */
