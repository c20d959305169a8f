/*
 * An engine's end: every timer dropped and its context released once, and
 * the engine freed by whichever holder lets go of it last.
 *
 * Shutdown may race every other call, and a callback may trigger it. Each
 * party that may still touch the engine holds it (engine->holds): its
 * owner until destroy, the firing thread until it exits, and a thread
 * waiting in stop, destroy or cancel_sync. Letting go is each holder's last
 * touch of the engine, after every unlock, and the one that takes the count
 * to 0 frees it, so nothing is read after it is freed.
 */
#include "mtr_engine_state.h"

#include <event2/event.h>
#include <stdlib.h>

/* Takes every timer out of every set at once, so that a cancel or destroy
 * racing the drop finds its timer in no set. */
static void
mtr_shard_disarm_all_locked_(struct mtr_shard *shard)
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		struct mtr_timerset *set = &shard->clocks[c].set;
		for (uint32_t i = 0; i < set->count; i++)
			shard->timers[set->entries[i].timer].heap_slot =
			    MTR_NOT_ARMED;
		set->count = 0;
	}
	struct mtr_batch *batch = &shard->batch;
	for (uint32_t i = batch->next; i < batch->count; i++) {
		struct mtr_timer *timer =
		    &shard->timers[batch->entries[i].timer];
		if (timer->heap_slot == MTR_IN_BATCH)
			timer->heap_slot = MTR_NOT_ARMED;
	}
	mtr_batch_free_(batch);
}

/*
 * Retires every timer and releases each context once; the firing thread
 * does it on its way out, when no callback can be running. Each timer is
 * retired under its shard's lock before its context is released unlocked,
 * so a concurrent destroy either retires it first (and releases it itself)
 * or finds its id stale. Idempotent.
 */
static void
mtr_shard_drop_timers_(struct mtr_shard *shard)
{
	mtr_lock_take_(&shard->lock);
	mtr_shard_disarm_all_locked_(shard);
	if (shard->release_running) {
		/* Only in a forked child: the parent's firing thread was to
		 * release it when the callback returned. */
		shard->release_running = false;
		mtr_shard_release_locked_(shard, shard->released_context);
	}
	for (uint32_t index = 0; index < shard->timer_high_water; index++) {
		struct mtr_timer *timer = &shard->timers[index];
		if ((timer->generation & 1) == 0)
			continue;
		void *context = timer->context;
		mtr_slots_give_back_locked_(shard, index);
		mtr_shard_release_locked_(shard, context);
	}
	/* Every id is stale from now on, so the memory can go. */
	mtr_slots_free_(shard);
	for (int c = 0; c < MTR_CLOCK_COUNT; c++)
		mtr_timerset_free_(&shard->clocks[c].set);
	mtr_lock_give_(&shard->lock);
}

void
mtr_engine_drop_timers_(mtr_engine *engine)
{
	for (uint32_t s = 0; s < engine->shard_count; s++)
		mtr_shard_drop_timers_(&engine->shards[s]);
}

void
mtr_engine_free_(mtr_engine *engine)
{
	mtr_fork_unregister_(engine);
	/* In a forked child the base's epoll instance is the parent's, and
	 * our timerfds are copies of the parent's under the same numbers:
	 * removing our events from it would remove the parent's timerfds.
	 * Closed first, our copies name nothing there to remove (libevent
	 * takes the EBADF of a removal as done), and freeing the base closes
	 * only our copies of its own descriptors. (event_reinit, which gives
	 * the base an epoll instance of its own, would need a descriptor and
	 * memory, and libevent ends the process when it gets neither.) */
	if (engine->inherited) {
		for (uint32_t s = 0; s < engine->shard_count; s++)
			mtr_shard_close_fds_(&engine->shards[s]);
	}
	for (uint32_t s = 0; s < engine->shard_count; s++)
		mtr_shard_free_(&engine->shards[s]);
	if (engine->base != NULL)
		event_base_free(engine->base);
	free(engine->shards);
	pthread_cond_destroy(&engine->thread_done);
	pthread_mutex_destroy(&engine->lock);
	free(engine);
}

void
mtr_engine_hold_(mtr_engine *engine)
{
	atomic_fetch_add(&engine->holds, 1);
}

void
mtr_engine_let_go_(mtr_engine *engine, uint32_t count)
{
	if (atomic_fetch_sub(&engine->holds, count) == count)
		mtr_engine_free_(engine);
}
