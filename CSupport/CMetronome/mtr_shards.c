/*
 * A shard's life and its share of the engine's work: set up, chosen by the
 * threads that create timers, counted, freed. What a shard holds is in
 * mtr_shard.h; its timers' operations are mtr_timer.c's, its queues
 * mtr_queue.c's.
 */
#include "mtr_engine.h"

#include <event2/event.h>
#include <string.h>
#include <unistd.h>

/* Zeroed, its lock is free and its event has no waiter (mtr_lock.h). */
void
mtr_shard_init_(struct mtr_shard *shard, mtr_engine *engine, uint32_t index)
{
	memset(shard, 0, sizeof(*shard));
	shard->engine = engine;
	bool sharded = engine->shard_count > 1;
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
 * The shard a thread creates its timers in: threads take tickets in turn
 * on their first create, so distinct threads spread evenly over the shards
 * whatever CPUs they run on (a CPU number would send two threads that
 * started on one CPU to one shard).
 */
struct mtr_shard *
mtr_shard_home_(mtr_engine *engine)
{
	static _Atomic uint32_t tickets;
	static _Thread_local uint32_t ticket = UINT32_MAX;

	if (engine->shard_count == 1)
		return &engine->shards[0];
	if (ticket == UINT32_MAX)
		ticket = atomic_fetch_add_explicit(&tickets, 1,
		    memory_order_relaxed) & (UINT32_MAX >> 1);
	return &engine->shards[ticket % engine->shard_count];
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
