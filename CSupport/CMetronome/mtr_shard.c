/*
 * A shard's life and its timer slots. Its life: set up, chosen by the
 * threads that create timers, counted, freed. Its slots: the array that
 * ids index, its free list, and the generations that keep a stale id from
 * reaching a reused slot. What a shard holds is in mtr_shard.h; its
 * timers' operations are mtr_timer.c's, its queues mtr_queue.c's.
 *
 * A slot's generation is odd while it is allocated and even while free,
 * and every id carries the generation it was made with. Nothing here wraps
 * within a process's life: a slot that has spent its 2^31 generations is
 * retired, never reused (48 bytes, after 2^31 reuses).
 *
 * Memory follows the load: the array gives back its free tail when no more
 * than a quarter of it is in use (mtr_slots_shrink_locked_).
 */
#include "mtr_shard.h"

#include <event2/event.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Zeroed, its lock is free and its event has no waiter (mtr_lock.h). */
void
mtr_shard_init_(struct mtr_shard *shard, mtr_engine *engine, uint32_t index,
    uint32_t count)
{
	memset(shard, 0, sizeof(*shard));
	shard->engine = engine;
	bool sharded = count > 1;
	shard->id_base = sharded ? index << MTR_SHARD_SHIFT : 0;
	shard->max_timers = sharded ? UINT32_C(1) << MTR_SHARD_SHIFT :
	    MTR_MAX_TIMERS;
	shard->free_head = MTR_NOT_ARMED;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		shard->clocks[c].fd = -1;
		shard->clocks[c].shard = shard;
		shard->clocks[c].armed_ns = INT64_MAX;
		mtr_timerset_init_(&shard->clocks[c].set, (mtr_clock_id)c);
	}
}

/*
 * The one of @count @shards that a thread creates its timers in: threads
 * take tickets in turn on their first create, so distinct threads spread
 * evenly over the shards whatever CPUs they run on (a CPU number would
 * send two threads that started on one CPU to one shard).
 */
struct mtr_shard *
mtr_shard_home_(struct mtr_shard *shards, uint32_t count)
{
	static _Atomic uint32_t tickets;
	static _Thread_local uint32_t ticket = UINT32_MAX;

	if (count == 1)
		return &shards[0];
	if (ticket == UINT32_MAX)
		ticket = atomic_fetch_add_explicit(&tickets, 1,
		    memory_order_relaxed) & (UINT32_MAX >> 1);
	return &shards[ticket % count];
}

#define MTR_TIMERS_MIN 64

static int
mtr_slots_resize_locked_(struct mtr_shard *shard, uint32_t capacity)
{
	struct mtr_timer *timers = realloc(shard->timers,
	    (size_t)capacity * sizeof(*timers));
	if (timers == NULL)
		return ENOMEM;
	mtr_advise_huge_(timers, (size_t)capacity * sizeof(*timers));
	shard->timers = timers;
	shard->timer_capacity = capacity;
	return 0;
}

static int
mtr_slots_grow_locked_(struct mtr_shard *shard)
{
	if (shard->timer_capacity == shard->max_timers)
		return ENOMEM;
	uint32_t capacity = shard->timer_capacity ?
	    shard->timer_capacity * 2 : MTR_TIMERS_MIN;
	if (capacity > shard->max_timers)
		capacity = shard->max_timers;
	return mtr_slots_resize_locked_(shard, capacity);
}

/*
 * Gives back the array's free tail once three quarters of it are unused.
 * The free list is rebuilt in ascending order on the way, so new timers
 * fill the low slots and the tail keeps draining: a check that could not
 * shrink (a live timer high up) is likely to succeed at the next one.
 * Dropped slots raise generation_floor above every id they ever had, so
 * when the array grows back over them no stale id matches. A check costs
 * O(capacity) and comes each time the live count halves (shrink_check_at),
 * so a peak that drains costs O(log peak) per give-back at worst.
 */
static void
mtr_slots_shrink_locked_(struct mtr_shard *shard)
{
	uint32_t capacity = shard->timer_capacity;
	/* A batch being fired still reads the slots of its entries. */
	if (shard->counters.timers > capacity / 4 ||
	    capacity <= MTR_TIMERS_MIN || shard->batch.entries != NULL)
		return;
	/* Up to the last slot in use, or retired: a retired slot must keep
	 * its place, as every generation it could start again from is taken. */
	uint32_t keep = shard->timer_high_water;
	while (keep > 0 && (shard->timers[keep - 1].generation & 1) == 0 &&
	    shard->timers[keep - 1].generation != 0)
		keep--;
	/* The dropped slots are free, so their generation is past every id
	 * they handed out. */
	for (uint32_t i = keep; i < shard->timer_high_water; i++) {
		if (shard->timers[i].generation > shard->generation_floor)
			shard->generation_floor = shard->timers[i].generation;
	}
	shard->timer_high_water = keep;
	shard->free_head = MTR_NOT_ARMED;
	for (uint32_t i = keep; i-- > 0;) {
		struct mtr_timer *timer = &shard->timers[i];
		/* Retired slots (generation spent) stay out of the list. */
		if ((timer->generation & 1) == 0 && timer->generation != 0) {
			timer->heap_slot = shard->free_head;
			shard->free_head = i;
		}
	}
	uint32_t target = capacity;
	while (target / 2 >= keep && target / 2 >= MTR_TIMERS_MIN &&
	    target / 2 >= shard->counters.timers * 2)
		target /= 2;
	if (target < capacity)
		(void)mtr_slots_resize_locked_(shard, target);
}

int
mtr_slots_take_locked_(struct mtr_shard *shard, void *context,
    mtr_timer_id *out_id)
{
	uint32_t index;
	int rc = 0;

	if (shard->free_head != MTR_NOT_ARMED) {
		index = shard->free_head;
		shard->free_head = shard->timers[index].heap_slot;
	} else if (shard->timer_high_water < shard->timer_capacity ||
	    (rc = mtr_slots_grow_locked_(shard)) == 0) {
		index = shard->timer_high_water++;
		shard->timers[index].generation = shard->generation_floor;
	} else {
		return rc;
	}
	struct mtr_timer *timer = &shard->timers[index];
	timer->generation++; /* now odd: allocated */
	timer->context = context;
	timer->heap_slot = MTR_NOT_ARMED;
	timer->deadline_ns = 0;
	timer->period_ns = 0;
	timer->sequence = 0;
	shard->counters.timers++;
	if (shard->counters.timers > 2 * (uint64_t)shard->shrink_check_at)
		shard->shrink_check_at = (uint32_t)(shard->counters.timers / 2);
	*out_id = mtr_timer_id_make_(shard, index, timer->generation);
	return 0;
}

void
mtr_slots_give_back_locked_(struct mtr_shard *shard, uint32_t index)
{
	struct mtr_timer *timer = &shard->timers[index];

	timer->context = NULL;
	/* Now even: free. At 0 the generations are spent and the slot is
	 * retired: reused, it would bring back the ids of its first life. */
	if (++timer->generation != 0) {
		timer->heap_slot = shard->free_head;
		shard->free_head = index;
	}
	shard->counters.timers--;
	if (shard->counters.timers <= shard->shrink_check_at &&
	    !shard->stopping) {
		mtr_slots_shrink_locked_(shard);
		shard->shrink_check_at = (uint32_t)(shard->counters.timers / 2);
	}
}

void
mtr_slots_age_locked_(struct mtr_shard *shard, uint32_t reuses)
{
	/* A free slot ages up to its last generation, never past it. */
	for (uint32_t i = 0; i < shard->timer_high_water; i++) {
		struct mtr_timer *timer = &shard->timers[i];
		if ((timer->generation & 1) != 0 || timer->generation == 0)
			continue;
		uint64_t aged = (uint64_t)timer->generation + 2 * (uint64_t)reuses;
		timer->generation = aged < UINT32_MAX ? (uint32_t)aged :
		    UINT32_MAX - 1;
	}
}

void
mtr_slots_free_(struct mtr_shard *shard)
{
	free(shard->timers);
	shard->timers = NULL;
	shard->timer_capacity = 0;
	shard->timer_high_water = 0;
	shard->free_head = MTR_NOT_ARMED;
}

static size_t
mtr_slots_bytes_(const struct mtr_shard *shard)
{
	return (size_t)shard->timer_capacity * sizeof(*shard->timers);
}

/* Adds the shard's counters to @out, as one snapshot under its lock. */
void
mtr_shard_add_counters_(struct mtr_shard *shard, mtr_counters *out)
{
	mtr_lock_take_(&shard->lock);
	const mtr_counters *c = &shard->counters;
	out->wakeups += c->wakeups;
	out->fired += c->fired;
	out->late += c->late;
	out->missed_periods += c->missed_periods;
	out->coalesced += c->coalesced;
	out->clock_steps += c->clock_steps;
	out->timers += c->timers;
	out->batched += c->batched;
	for (int k = 0; k < MTR_CLOCK_COUNT; k++) {
		out->armed += shard->clocks[k].set.count;
		out->memory_bytes += mtr_timerset_bytes_(&shard->clocks[k].set);
	}
	out->armed += shard->batch.live;
	out->memory_bytes += mtr_slots_bytes_(shard) +
	    (size_t)shard->batch.count * sizeof(*shard->batch.entries);
	mtr_lock_give_(&shard->lock);
}

void
mtr_shard_close_fds_(struct mtr_shard *shard)
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		struct mtr_clock_state *state = &shard->clocks[c];
		if (state->fd >= 0)
			close(state->fd);
		state->fd = -1;
	}
}

void
mtr_shard_free_(struct mtr_shard *shard)
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		struct mtr_clock_state *state = &shard->clocks[c];
		if (state->event != NULL)
			event_free(state->event);
		mtr_timerset_free_(&state->set);
	}
	mtr_shard_close_fds_(shard);
	mtr_slots_free_(shard);
	mtr_batch_free_(&shard->batch);
}
