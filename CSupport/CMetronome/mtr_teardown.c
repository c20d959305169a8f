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
 * racing the drop finds its timer in no set; what is left in the run list
 * is the stop's too. */
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
	mtr_run_free_(&shard->run);
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
	for (int f = 0; f < MTR_FIRERS; f++) {
		struct mtr_callback *callback = &shard->callbacks[f];
		if (callback->release) {
			/* Only in a forked child: the parent's thread was to
			 * release it when the callback returned. */
			callback->release = false;
			mtr_shard_release_locked_(shard,
			    callback->released_context);
		}
		callback->deferred = false;
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

/*
 * The engine's descriptors go first, only those still its own: a closed
 * timerfd leaves every epoll set by itself, so the events freed next
 * remove nothing (libevent takes the EBADF of a removal as done). In a
 * forked child that keeps the parent's shared epoll set whole, and the
 * base frees only the child's copies of its own descriptors.
 *
 * After a fault (recorded, or met here as a timerfd no longer the
 * engine's) the events and the event base are left as they are: freeing
 * them would have libevent remove and close its epoll instance and pipe by
 * number, and after a sweep those numbers may be anybody's. What that
 * keeps, a few kilobytes once per faulted engine, is the price of never
 * closing a descriptor that is not the engine's.
 */
void
mtr_engine_free_(mtr_engine *engine)
{
	bool own = atomic_load(&engine->fault) == 0;
	mtr_fork_unregister_(engine);
	for (uint32_t s = 0; s < engine->shard_count; s++)
		own &= mtr_shard_close_fds_(&engine->shards[s]);
	own &= mtr_timerfd_close_(&engine->alarm);
	if (own) {
		for (uint32_t s = 0; s < engine->shard_count; s++)
			mtr_shard_free_events_(&engine->shards[s]);
		if (engine->watch != NULL)
			event_free(engine->watch);
		if (engine->base != NULL)
			event_base_free(engine->base);
	}
	for (uint32_t s = 0; s < engine->shard_count; s++)
		mtr_shard_free_(&engine->shards[s]);
	free(engine->shards);
	pthread_cond_destroy(&engine->thread_done);
	pthread_mutex_destroy(&engine->lock);
	free(engine);
}

/*
 * The last of a firing thread, once its engine is stopping: every timer
 * dropped, the thread marked joined, and its hold let go. A stop that a
 * callback asked for, or a fault, has nobody joining: the thread detaches.
 */
void
mtr_engine_thread_gone_(mtr_engine *engine)
{
	mtr_engine_drop_timers_(engine);
	pthread_mutex_lock(&engine->lock);
	/* Either way, stops waiting meanwhile may go on. */
	bool detach = !engine->join_claimed;
	engine->join_claimed = true;
	engine->joined = true;
	pthread_cond_broadcast(&engine->thread_done);
	pthread_mutex_unlock(&engine->lock);
	if (detach)
		pthread_detach(pthread_self());
	mtr_engine_let_go_(engine, 1);
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
