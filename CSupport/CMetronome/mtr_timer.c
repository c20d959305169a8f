/*
 * Timers: create, arm, cancel, destroy, and the cancel guarantee.
 *
 * Every request takes the engine lock and edits the timer set directly;
 * nothing waits for the firing thread. The firing thread decides under the
 * same lock which callback to run and records it in engine->running before
 * unlocking, so once cancel returns no new callback can start: the only
 * callback that may still run is one already committed (and cancel_sync
 * waits for that one). Ids carry the slot's generation, so an id used after
 * destroy is refused instead of touching a reused slot.
 */
#include "mtr_internal.h"

#include <errno.h>
#include <stdlib.h>

static inline mtr_timer_id
mtr_timer_id_make_(uint32_t index, uint32_t generation)
{
	return ((uint64_t)generation << 32) | index;
}

/* The timer an id names, or NULL when the id is stale or never existed. */
static struct mtr_timer *
mtr_timer_lookup_locked_(mtr_engine *engine, mtr_timer_id id)
{
	uint32_t index = (uint32_t)id;
	uint32_t generation = (uint32_t)(id >> 32);

	if (index >= engine->timer_high_water || (generation & 1) == 0)
		return NULL;
	struct mtr_timer *timer = &engine->timers[index];
	return timer->generation == generation ? timer : NULL;
}

static int
mtr_timer_grow_locked_(mtr_engine *engine)
{
	if (engine->timer_capacity == MTR_MAX_TIMERS)
		return ENOMEM;
	uint32_t capacity = engine->timer_capacity ?
	    engine->timer_capacity * 2 : 64;
	if (capacity > MTR_MAX_TIMERS)
		capacity = MTR_MAX_TIMERS;
	struct mtr_timer *timers = realloc(engine->timers,
	    (size_t)capacity * sizeof(*timers));
	if (timers == NULL)
		return ENOMEM;
	mtr_advise_huge_(timers, (size_t)capacity * sizeof(*timers));
	engine->timers = timers;
	engine->timer_capacity = capacity;
	return 0;
}

int
mtr_timer_create(mtr_engine *engine, void *context, mtr_timer_id *out_timer)
{
	uint32_t index;
	int rc = 0;

	pthread_mutex_lock(&engine->lock);
	if (engine->stopping) {
		rc = ESHUTDOWN;
	} else if (engine->free_head != MTR_NOT_ARMED) {
		index = engine->free_head;
		engine->free_head = engine->timers[index].heap_slot;
	} else if (engine->timer_high_water < engine->timer_capacity ||
	    (rc = mtr_timer_grow_locked_(engine)) == 0) {
		index = engine->timer_high_water++;
		engine->timers[index].generation = 0;
	}
	if (rc == 0) {
		struct mtr_timer *timer = &engine->timers[index];
		timer->generation++; /* now odd: allocated */
		timer->context = context;
		timer->heap_slot = MTR_NOT_ARMED;
		timer->deadline_ns = 0;
		timer->period_ns = 0;
		timer->sequence = 0;
		engine->counters.timers++;
		*out_timer = mtr_timer_id_make_(index, timer->generation);
	}
	pthread_mutex_unlock(&engine->lock);
	return rc;
}

void
mtr_timer_disarm_locked_(mtr_engine *engine, struct mtr_timer *timer)
{
	if (timer->heap_slot == MTR_NOT_ARMED)
		return;
	if (timer->heap_slot == MTR_IN_BATCH) {
		/* The batch skips an entry whose timer left it. */
		timer->heap_slot = MTR_NOT_ARMED;
		engine->batch.live--;
		return;
	}
	/* The timerfd is left as it is: an early wake-up finds nothing due
	 * and re-arms, which is cheaper than a syscall on every cancel. */
	mtr_clock_id clock = mtr_slot_clock_(timer->heap_slot);
	mtr_timerset_erase_locked_(&engine->clocks[clock].set, engine->timers,
	    mtr_slot_index_(timer->heap_slot));
}

int
mtr_timer_schedule_locked_(mtr_engine *engine, uint32_t index,
    mtr_clock_id clock, int64_t due_ns)
{
	struct mtr_clock_state *state = &engine->clocks[clock];
	int rc = mtr_timerset_push_locked_(&state->set, engine->timers, index,
	    due_ns, engine->next_order++);
	if (rc != 0)
		return rc;
	/* Only a new earliest wake-up needs the timerfd moved; in a batch the
	 * firing thread re-arms when the batch ends. */
	if (!state->firing && mtr_engine_wake_target_(engine, due_ns,
	    engine->timers[index].deadline_ns) < state->armed_ns)
		mtr_engine_rearm_locked_(engine, clock);
	return 0;
}

static int
mtr_timer_arm_(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns)
{
	if (!mtr_clock_valid_(clock) || deadline_ns < 0 || leeway_ns < 0)
		return EINVAL;
	if (deadline_ns > INT64_MAX - leeway_ns)
		return EOVERFLOW;

	int rc = EINVAL;
	pthread_mutex_lock(&engine->lock);
	struct mtr_timer *timer = mtr_timer_lookup_locked_(engine, id);
	if (timer != NULL) {
		mtr_timer_disarm_locked_(engine, timer);
		timer->deadline_ns = deadline_ns;
		timer->period_ns = period_ns;
		timer->sequence = 0;
		rc = mtr_timer_schedule_locked_(engine, (uint32_t)id, clock,
		    deadline_ns + leeway_ns);
	}
	pthread_mutex_unlock(&engine->lock);
	return rc;
}

int
mtr_timer_arm_once(mtr_engine *engine, mtr_timer_id timer, mtr_clock_id clock,
    int64_t deadline_ns, int64_t leeway_ns)
{
	return mtr_timer_arm_(engine, timer, clock, deadline_ns, 0, leeway_ns);
}

int
mtr_timer_arm_repeating(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t start_ns, int64_t period_ns,
    int64_t leeway_ns)
{
	if (period_ns <= 0 || leeway_ns > period_ns)
		return EINVAL;
	return mtr_timer_arm_(engine, timer, clock, start_ns, period_ns,
	    leeway_ns);
}

/* Disarms the timer an id names; EINVAL for a stale id. */
static int
mtr_timer_cancel_locked_(mtr_engine *engine, mtr_timer_id id)
{
	struct mtr_timer *timer = mtr_timer_lookup_locked_(engine, id);
	if (timer == NULL)
		return EINVAL;
	mtr_timer_disarm_locked_(engine, timer);
	return 0;
}

int
mtr_timer_cancel(mtr_engine *engine, mtr_timer_id id)
{
	pthread_mutex_lock(&engine->lock);
	int rc = mtr_timer_cancel_locked_(engine, id);
	pthread_mutex_unlock(&engine->lock);
	return rc;
}

int
mtr_timer_cancel_sync(mtr_engine *engine, mtr_timer_id id)
{
	pthread_mutex_lock(&engine->lock);
	int rc = mtr_timer_cancel_locked_(engine, id);
	/* On the firing thread nothing else of ours can be running, and
	 * waiting for ourselves would never end. */
	if (rc == 0 && !pthread_equal(pthread_self(), engine->thread)) {
		engine->sync_waiters++;
		while (engine->running == id)
			pthread_cond_wait(&engine->callback_done, &engine->lock);
		engine->sync_waiters--;
	}
	pthread_mutex_unlock(&engine->lock);
	return rc;
}

int
mtr_timer_destroy(mtr_engine *engine, mtr_timer_id id)
{
	void *release = NULL;
	bool must_release = false;
	int rc = EINVAL;

	pthread_mutex_lock(&engine->lock);
	struct mtr_timer *timer = mtr_timer_lookup_locked_(engine, id);
	if (timer != NULL) {
		mtr_timer_disarm_locked_(engine, timer);
		if (engine->running == id) {
			/* The firing thread holds the context for the running
			 * callback and releases it when that returns. */
			engine->release_running = true;
		} else {
			release = timer->context;
			must_release = true;
		}
		timer->generation++; /* now even: free */
		timer->context = NULL;
		timer->heap_slot = engine->free_head;
		engine->free_head = (uint32_t)id;
		engine->counters.timers--;
		rc = 0;
	}
	pthread_mutex_unlock(&engine->lock);
	if (must_release && engine->config.on_release != NULL)
		engine->config.on_release(release);
	return rc;
}
