/*
 * Timers: create, arm, cancel, destroy, and the cancel guarantee.
 *
 * Every request takes the engine lock and edits its clock's queue directly
 * (mtr_queue.c); nothing waits for the firing thread. The firing thread decides under the
 * same lock which callback to run and records it in engine->running before
 * unlocking, so once cancel returns no new callback can start: the only
 * callback that may still run is one already committed (and cancel_sync
 * waits for that one). Ids carry the slot's generation, so an id used after
 * destroy is refused instead of touching a reused slot.
 *
 * Nothing here wraps within a process's life. A slot that has spent its
 * 2^31 generations is retired, never reused (48 bytes, after 2^31 reuses);
 * arm order is renumbered before it wraps (mtr_queue.c).
 *
 * Memory follows the load: the timer array gives back its free tail when
 * no more than a quarter of it is in use (mtr_timer_shrink_locked_), and
 * each heap halves when a quarter full (mtr_timerset.c).
 */
#include "mtr_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MTR_TIMERS_MIN 64

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
mtr_timer_resize_locked_(mtr_engine *engine, uint32_t capacity)
{
	struct mtr_timer *timers = realloc(engine->timers,
	    (size_t)capacity * sizeof(*timers));
	if (timers == NULL)
		return ENOMEM;
	mtr_advise_huge_(timers, (size_t)capacity * sizeof(*timers));
	engine->timers = timers;
	engine->timer_capacity = capacity;
	return 0;
}

static int
mtr_timer_grow_locked_(mtr_engine *engine)
{
	if (engine->timer_capacity == MTR_MAX_TIMERS)
		return ENOMEM;
	uint32_t capacity = engine->timer_capacity ?
	    engine->timer_capacity * 2 : MTR_TIMERS_MIN;
	if (capacity > MTR_MAX_TIMERS)
		capacity = MTR_MAX_TIMERS;
	return mtr_timer_resize_locked_(engine, capacity);
}

/*
 * Gives back the array's free tail once three quarters of it are unused.
 * The free list is rebuilt in ascending order on the way, so new timers
 * fill the low slots and the tail keeps draining: a check that could not
 * shrink (a live timer high up) is likely to succeed at the next one.
 * Dropped slots raise generation_floor above every id they ever had, so
 * when the array grows back over them no stale id matches. A check costs
 * O(capacity) and comes each time the live count halves (shrink_check_at),
 * so a peak that drains costs O(log peak) per destroy at worst.
 */
static void
mtr_timer_shrink_locked_(mtr_engine *engine)
{
	uint32_t capacity = engine->timer_capacity;
	/* A batch being fired still reads the slots of its entries. */
	if (engine->counters.timers > capacity / 4 ||
	    capacity <= MTR_TIMERS_MIN || engine->batch.entries != NULL)
		return;
	/* Up to the last slot in use, or retired: a retired slot must keep
	 * its place, as every generation it could start again from is taken. */
	uint32_t keep = engine->timer_high_water;
	while (keep > 0 && (engine->timers[keep - 1].generation & 1) == 0 &&
	    engine->timers[keep - 1].generation != 0)
		keep--;
	/* The dropped slots are free, so their generation is past every id
	 * they handed out. */
	for (uint32_t i = keep; i < engine->timer_high_water; i++) {
		if (engine->timers[i].generation > engine->generation_floor)
			engine->generation_floor = engine->timers[i].generation;
	}
	engine->timer_high_water = keep;
	engine->free_head = MTR_NOT_ARMED;
	for (uint32_t i = keep; i-- > 0;) {
		struct mtr_timer *timer = &engine->timers[i];
		/* Retired slots (generation spent) stay out of the list. */
		if ((timer->generation & 1) == 0 && timer->generation != 0) {
			timer->heap_slot = engine->free_head;
			engine->free_head = i;
		}
	}
	uint32_t target = capacity;
	while (target / 2 >= keep && target / 2 >= MTR_TIMERS_MIN &&
	    target / 2 >= engine->counters.timers * 2)
		target /= 2;
	if (target < capacity)
		(void)mtr_timer_resize_locked_(engine, target);
}

void
mtr_timer_array_free_(mtr_engine *engine)
{
	free(engine->timers);
	engine->timers = NULL;
	engine->timer_capacity = 0;
	engine->timer_high_water = 0;
	engine->free_head = MTR_NOT_ARMED;
}

size_t
mtr_timer_array_bytes_(const mtr_engine *engine)
{
	return (size_t)engine->timer_capacity * sizeof(*engine->timers);
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
		engine->timers[index].generation = engine->generation_floor;
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
		if (engine->counters.timers > 2 * (uint64_t)engine->shrink_check_at)
			engine->shrink_check_at =
			    (uint32_t)(engine->counters.timers / 2);
		*out_timer = mtr_timer_id_make_(index, timer->generation);
	}
	pthread_mutex_unlock(&engine->lock);
	return rc;
}

/* Checks what every arm call is given, @period_ns 0 for a one-shot; EINVAL
 * or EOVERFLOW, else 0. */
static int
mtr_timer_schedule_check_(mtr_clock_id clock, int64_t deadline_ns,
    int64_t period_ns, int64_t leeway_ns)
{
	if (!mtr_clock_valid_(clock) || deadline_ns < 0 || leeway_ns < 0 ||
	    period_ns < 0 || (period_ns > 0 && leeway_ns > period_ns))
		return EINVAL;
	if (deadline_ns > INT64_MAX - leeway_ns)
		return EOVERFLOW;
	return 0;
}

/* Replaces the schedule of @timer, slot @index: a move within its clock's
 * heap when it is there, else a remove and an add. */
static int
mtr_timer_arm_locked_(mtr_engine *engine, struct mtr_timer *timer,
    uint32_t index, mtr_clock_id clock, int64_t deadline_ns,
    int64_t period_ns, int64_t leeway_ns)
{
	timer->deadline_ns = deadline_ns;
	timer->period_ns = period_ns;
	if (mtr_slot_clock_(timer->heap_slot) == clock) {
		mtr_queue_move_locked_(engine, timer, clock,
		    deadline_ns + leeway_ns);
		return 0;
	}
	mtr_queue_remove_locked_(engine, timer);
	timer->sequence = 0;
	return mtr_queue_add_locked_(engine, index, clock,
	    deadline_ns + leeway_ns);
}

static int
mtr_timer_arm_(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns)
{
	int rc = mtr_timer_schedule_check_(clock, deadline_ns, period_ns,
	    leeway_ns);
	if (rc != 0)
		return rc;

	rc = EINVAL;
	pthread_mutex_lock(&engine->lock);
	struct mtr_timer *timer = mtr_timer_lookup_locked_(engine, id);
	if (timer != NULL && engine->stopping)
		rc = ESHUTDOWN;
	else if (timer != NULL)
		rc = mtr_timer_arm_locked_(engine, timer, (uint32_t)id, clock,
		    deadline_ns, period_ns, leeway_ns);
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
	if (period_ns <= 0)
		return EINVAL;
	return mtr_timer_arm_(engine, timer, clock, start_ns, period_ns,
	    leeway_ns);
}

int
mtr_timer_move(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_timer_id *out_timer)
{
	int rc = mtr_timer_schedule_check_(clock, deadline_ns, period_ns,
	    leeway_ns);
	if (rc != 0)
		return rc;

	rc = EINVAL;
	pthread_mutex_lock(&engine->lock);
	struct mtr_timer *timer = mtr_timer_lookup_locked_(engine, id);
	if (timer != NULL && engine->stopping) {
		rc = ESHUTDOWN;
	} else if (timer != NULL && timer->generation > UINT32_MAX - 2) {
		/* The next name would wrap onto the slot's first ones. */
		rc = ERANGE;
	} else if (timer != NULL) {
		rc = mtr_timer_arm_locked_(engine, timer, (uint32_t)id, clock,
		    deadline_ns, period_ns, leeway_ns);
		if (rc == 0) {
			/* Still odd: allocated. A callback already begun keeps
			 * the old name, and so does engine->running until a
			 * destroy of the new one must find it running. */
			timer->generation += 2;
			*out_timer = mtr_timer_id_make_((uint32_t)id,
			    timer->generation);
			if (engine->running == id)
				engine->running = *out_timer;
		}
	}
	pthread_mutex_unlock(&engine->lock);
	return rc;
}

/* Disarms the timer an id names; EINVAL for a stale id. */
static int
mtr_timer_cancel_locked_(mtr_engine *engine, mtr_timer_id id)
{
	struct mtr_timer *timer = mtr_timer_lookup_locked_(engine, id);
	if (timer == NULL)
		return EINVAL;
	mtr_queue_remove_locked_(engine, timer);
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
	bool free_now = false;
	pthread_mutex_lock(&engine->lock);
	int rc = mtr_timer_cancel_locked_(engine, id);
	/* On the firing thread nothing else of ours can be running, and
	 * waiting for ourselves would never end. The wait holds the engine:
	 * a callback may destroy it meanwhile, and then this thread, not the
	 * firing one, may be the last to let go and free it. */
	if (rc == 0 && engine->running == id &&
	    !pthread_equal(pthread_self(), engine->thread)) {
		engine->holds++;
		engine->sync_waiters++;
		while (engine->running == id)
			pthread_cond_wait(&engine->callback_done, &engine->lock);
		engine->sync_waiters--;
		free_now = mtr_engine_release_hold_locked_(engine);
	}
	pthread_mutex_unlock(&engine->lock);
	if (free_now)
		mtr_engine_free_(engine);
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
		mtr_queue_remove_locked_(engine, timer);
		if (engine->running == id) {
			/* The firing thread holds the context for the running
			 * callback and releases it when that returns. */
			engine->release_running = true;
			engine->released_context = timer->context;
		} else {
			release = timer->context;
			must_release = true;
		}
		timer->context = NULL;
		/* Now even: free. At 0 the generations are spent and the slot
		 * is retired: reused, it would bring back the ids of its
		 * first life. */
		if (++timer->generation != 0) {
			timer->heap_slot = engine->free_head;
			engine->free_head = (uint32_t)id;
		}
		engine->counters.timers--;
		if (engine->counters.timers <= engine->shrink_check_at &&
		    !engine->stopping) {
			mtr_timer_shrink_locked_(engine);
			engine->shrink_check_at =
			    (uint32_t)(engine->counters.timers / 2);
		}
		rc = 0;
	}
	pthread_mutex_unlock(&engine->lock);
	if (must_release && engine->config.on_release != NULL)
		engine->config.on_release(release);
	return rc;
}

int
mtr_engine_age_for_testing(mtr_engine *engine, uint64_t arms, uint32_t reuses)
{
	int rc = 0;
	pthread_mutex_lock(&engine->lock);
	if (engine->stopping) {
		rc = ESHUTDOWN;
	} else {
		while (arms > 0) {
			/* Up to the renumbering point in one step, then one
			 * real arm, which renumbers as it would in use. */
			uint64_t room = engine->next_order < MTR_ORDER_RENUMBER_AT ?
			    MTR_ORDER_RENUMBER_AT - engine->next_order : 0;
			uint64_t step = arms < room ? arms : room;
			engine->next_order += (uint32_t)step;
			arms -= step;
			if (arms > 0) {
				(void)mtr_queue_next_order_locked_(engine);
				arms--;
			}
		}
		/* A free slot ages up to its last generation, never past it. */
		for (uint32_t i = 0; i < engine->timer_high_water; i++) {
			struct mtr_timer *timer = &engine->timers[i];
			if ((timer->generation & 1) != 0 || timer->generation == 0)
				continue;
			uint64_t aged = (uint64_t)timer->generation + 2 * (uint64_t)reuses;
			timer->generation = aged < UINT32_MAX ? (uint32_t)aged :
			    UINT32_MAX - 1;
		}
	}
	pthread_mutex_unlock(&engine->lock);
	return rc;
}
