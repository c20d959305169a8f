/*
 * Timers: create, arm, cancel, destroy, and the cancel guarantee.
 *
 * Every request takes its timer's shard lock and edits that shard's queue
 * directly (mtr_queue.c); nothing waits for the firing thread. The firing
 * thread decides under the same lock which callback to run and records it
 * in shard->running before unlocking, so once cancel returns no new
 * callback can start: the only callback that may still run is one already
 * committed (and cancel_sync waits for that one). Ids carry the slot's
 * generation, so an id used after destroy is refused instead of touching a
 * reused slot.
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

/* The timer an id names in its shard, or NULL when the id is stale or
 * never existed. */
static struct mtr_timer *
mtr_timer_lookup_locked_(struct mtr_shard *shard, uint32_t slot,
    mtr_timer_id id)
{
	uint32_t generation = (uint32_t)(id >> 32);

	if (slot >= shard->timer_high_water || (generation & 1) == 0)
		return NULL;
	struct mtr_timer *timer = &shard->timers[slot];
	return timer->generation == generation ? timer : NULL;
}

static int
mtr_timer_resize_locked_(struct mtr_shard *shard, uint32_t capacity)
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
mtr_timer_grow_locked_(struct mtr_shard *shard)
{
	if (shard->timer_capacity == shard->max_timers)
		return ENOMEM;
	uint32_t capacity = shard->timer_capacity ?
	    shard->timer_capacity * 2 : MTR_TIMERS_MIN;
	if (capacity > shard->max_timers)
		capacity = shard->max_timers;
	return mtr_timer_resize_locked_(shard, capacity);
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
mtr_timer_shrink_locked_(struct mtr_shard *shard)
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
		(void)mtr_timer_resize_locked_(shard, target);
}

void
mtr_timer_array_free_(struct mtr_shard *shard)
{
	free(shard->timers);
	shard->timers = NULL;
	shard->timer_capacity = 0;
	shard->timer_high_water = 0;
	shard->free_head = MTR_NOT_ARMED;
}

size_t
mtr_timer_array_bytes_(const struct mtr_shard *shard)
{
	return (size_t)shard->timer_capacity * sizeof(*shard->timers);
}

/*
 * The shard a thread creates its timers in: threads take tickets in turn
 * on their first create, so distinct threads spread evenly over the shards
 * whatever CPUs they run on (a CPU number would send two threads that
 * started on one CPU to one shard).
 */
static struct mtr_shard *
mtr_timer_home_shard_(mtr_engine *engine)
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

int
mtr_timer_create(mtr_engine *engine, void *context, mtr_timer_id *out_timer)
{
	struct mtr_shard *shard = mtr_timer_home_shard_(engine);
	uint32_t index;
	int rc = 0;

	pthread_mutex_lock(&shard->lock);
	if (shard->stopping) {
		rc = ESHUTDOWN;
	} else if (shard->free_head != MTR_NOT_ARMED) {
		index = shard->free_head;
		shard->free_head = shard->timers[index].heap_slot;
	} else if (shard->timer_high_water < shard->timer_capacity ||
	    (rc = mtr_timer_grow_locked_(shard)) == 0) {
		index = shard->timer_high_water++;
		shard->timers[index].generation = shard->generation_floor;
	}
	if (rc == 0) {
		struct mtr_timer *timer = &shard->timers[index];
		timer->generation++; /* now odd: allocated */
		timer->context = context;
		timer->heap_slot = MTR_NOT_ARMED;
		timer->deadline_ns = 0;
		timer->period_ns = 0;
		timer->sequence = 0;
		shard->counters.timers++;
		if (shard->counters.timers >
		    2 * (uint64_t)shard->shrink_check_at)
			shard->shrink_check_at =
			    (uint32_t)(shard->counters.timers / 2);
		*out_timer = mtr_timer_id_make_(shard, index,
		    timer->generation);
	}
	pthread_mutex_unlock(&shard->lock);
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
mtr_timer_arm_locked_(struct mtr_shard *shard, struct mtr_timer *timer,
    uint32_t index, mtr_clock_id clock, int64_t deadline_ns,
    int64_t period_ns, int64_t leeway_ns)
{
	timer->deadline_ns = deadline_ns;
	timer->period_ns = period_ns;
	if (mtr_slot_clock_(timer->heap_slot) == clock) {
		mtr_queue_move_locked_(shard, timer, clock,
		    deadline_ns + leeway_ns);
		return 0;
	}
	mtr_queue_remove_locked_(shard, timer);
	timer->sequence = 0;
	return mtr_queue_add_locked_(shard, index, clock,
	    deadline_ns + leeway_ns);
}

/*
 * Locks the shard of the live timer @id names and finds the timer there;
 * NULL, with nothing locked, for an id that is stale or names no shard.
 */
static struct mtr_shard *
mtr_timer_lock_(mtr_engine *engine, mtr_timer_id id, uint32_t *slot,
    struct mtr_timer **out_timer)
{
	struct mtr_shard *shard = mtr_shard_of_(engine, id, slot);
	if (shard == NULL)
		return NULL;
	pthread_mutex_lock(&shard->lock);
	*out_timer = mtr_timer_lookup_locked_(shard, *slot, id);
	if (*out_timer == NULL) {
		pthread_mutex_unlock(&shard->lock);
		return NULL;
	}
	return shard;
}

/*
 * Every arm call: checks the schedule (@period_ns 0 for a one-shot), then
 * replaces the schedule of the timer @id names under its shard's lock. With
 * @out_renamed (mtr_timer_move) the timer takes a new id as well: still odd,
 * so allocated. A callback already begun keeps the old name, and so does
 * shard->running until a destroy of the new one must find it running.
 */
static int
mtr_timer_arm_(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_timer_id *out_renamed)
{
	int rc = mtr_timer_schedule_check_(clock, deadline_ns, period_ns,
	    leeway_ns);
	if (rc != 0)
		return rc;
	uint32_t slot;
	struct mtr_timer *timer;
	struct mtr_shard *shard = mtr_timer_lock_(engine, id, &slot, &timer);
	if (shard == NULL)
		return EINVAL;
	if (shard->stopping)
		rc = ESHUTDOWN;
	else if (out_renamed != NULL && timer->generation > UINT32_MAX - 2)
		rc = ERANGE; /* the next name would wrap to the slot's first */
	else
		rc = mtr_timer_arm_locked_(shard, timer, slot, clock,
		    deadline_ns, period_ns, leeway_ns);
	if (rc == 0 && out_renamed != NULL) {
		timer->generation += 2;
		*out_renamed = mtr_timer_id_make_(shard, slot,
		    timer->generation);
		if (shard->running == id)
			shard->running = *out_renamed;
	}
	pthread_mutex_unlock(&shard->lock);
	return rc;
}

int
mtr_timer_arm_once(mtr_engine *engine, mtr_timer_id timer, mtr_clock_id clock,
    int64_t deadline_ns, int64_t leeway_ns)
{
	return mtr_timer_arm_(engine, timer, clock, deadline_ns, 0, leeway_ns,
	    NULL);
}

int
mtr_timer_arm_repeating(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t start_ns, int64_t period_ns,
    int64_t leeway_ns)
{
	if (period_ns <= 0)
		return EINVAL;
	return mtr_timer_arm_(engine, timer, clock, start_ns, period_ns,
	    leeway_ns, NULL);
}

int
mtr_timer_move(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_timer_id *out_timer)
{
	return mtr_timer_arm_(engine, id, clock, deadline_ns, period_ns,
	    leeway_ns, out_timer);
}

/*
 * What cancel, cancel_sync and destroy begin with: mtr_timer_lock_(), then
 * the timer taken out of its set or batch, so no new callback of it starts.
 */
static struct mtr_shard *
mtr_timer_lock_disarmed_(mtr_engine *engine, mtr_timer_id id, uint32_t *slot,
    struct mtr_timer **out_timer)
{
	struct mtr_shard *shard = mtr_timer_lock_(engine, id, slot, out_timer);
	if (shard != NULL)
		mtr_queue_remove_locked_(shard, *out_timer);
	return shard;
}

int
mtr_timer_cancel(mtr_engine *engine, mtr_timer_id id)
{
	uint32_t slot;
	struct mtr_timer *timer;
	struct mtr_shard *shard = mtr_timer_lock_disarmed_(engine, id, &slot,
	    &timer);
	if (shard == NULL)
		return EINVAL;
	pthread_mutex_unlock(&shard->lock);
	return 0;
}

int
mtr_timer_cancel_sync(mtr_engine *engine, mtr_timer_id id)
{
	bool free_now = false;
	uint32_t slot;
	struct mtr_timer *timer;
	struct mtr_shard *shard = mtr_timer_lock_disarmed_(engine, id, &slot,
	    &timer);
	if (shard == NULL)
		return EINVAL;
	/* On the firing thread nothing else of ours can be running, and
	 * waiting for ourselves would never end. The wait holds the engine:
	 * a callback may destroy it meanwhile, and then this thread, not the
	 * firing one, may be the last to let go and free it. */
	if (shard->running == id &&
	    !pthread_equal(pthread_self(), engine->thread)) {
		atomic_fetch_add(&engine->holds, 1);
		shard->sync_waiters++;
		while (shard->running == id)
			pthread_cond_wait(&shard->callback_done, &shard->lock);
		shard->sync_waiters--;
		free_now = mtr_engine_release_hold_(engine);
	}
	pthread_mutex_unlock(&shard->lock);
	if (free_now)
		mtr_engine_free_(engine);
	return 0;
}

int
mtr_timer_destroy(mtr_engine *engine, mtr_timer_id id)
{
	void *release = NULL;
	bool must_release = false;
	uint32_t slot;
	struct mtr_timer *timer;
	struct mtr_shard *shard = mtr_timer_lock_disarmed_(engine, id, &slot,
	    &timer);
	if (shard == NULL)
		return EINVAL;
	if (shard->running == id) {
		/* The firing thread holds the context for the running callback
		 * and releases it when that returns. */
		shard->release_running = true;
		shard->released_context = timer->context;
	} else {
		release = timer->context;
		must_release = true;
	}
	timer->context = NULL;
	/* Now even: free. At 0 the generations are spent and the slot is
	 * retired: reused, it would bring back the ids of its first life. */
	if (++timer->generation != 0) {
		timer->heap_slot = shard->free_head;
		shard->free_head = slot;
	}
	shard->counters.timers--;
	if (shard->counters.timers <= shard->shrink_check_at &&
	    !shard->stopping) {
		mtr_timer_shrink_locked_(shard);
		shard->shrink_check_at = (uint32_t)(shard->counters.timers / 2);
	}
	pthread_mutex_unlock(&shard->lock);
	if (must_release && engine->config.on_release != NULL)
		engine->config.on_release(release);
	return 0;
}

/* Ages one shard: its arm order by @arms, its free slots by @reuses. */
static void
mtr_shard_age_locked_(struct mtr_shard *shard, uint64_t arms, uint32_t reuses)
{
	while (arms > 0) {
		/* Up to the renumbering point in one step, then one real
		 * arm, which renumbers as it would in use. */
		uint64_t room = shard->next_order < MTR_ORDER_RENUMBER_AT ?
		    MTR_ORDER_RENUMBER_AT - shard->next_order : 0;
		uint64_t step = arms < room ? arms : room;
		shard->next_order += (uint32_t)step;
		arms -= step;
		if (arms > 0) {
			(void)mtr_queue_next_order_locked_(shard);
			arms--;
		}
	}
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

/* Ages every shard alike. */
int
mtr_engine_age_for_testing(mtr_engine *engine, uint64_t arms, uint32_t reuses)
{
	int rc = 0;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		struct mtr_shard *shard = &engine->shards[s];
		pthread_mutex_lock(&shard->lock);
		if (shard->stopping)
			rc = ESHUTDOWN;
		else
			mtr_shard_age_locked_(shard, arms, reuses);
		pthread_mutex_unlock(&shard->lock);
	}
	return rc;
}
