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
 *
 * Nothing here wraps within a process's life. A slot that has spent its
 * 2^31 generations is retired, never reused (48 bytes, after 2^31 reuses).
 * Arm order is renumbered, keeping its sequence, before it spans 2^31, so
 * the wrapping comparison of mtr_entry_before_ stays right for ever.
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
/* Arm order is renumbered when it reaches this: from then on, orders span
 * at most 2^30 (every armed timer) + 2^30 (arms until the next renumber). */
#define MTR_ORDER_RENUMBER_AT (UINT32_C(1) << 30)

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

/* Orders arm order in its wrapping sense: as offsets from @base. */
static int
mtr_order_compare_(const void *a, const void *b, void *base)
{
	uint32_t x = **(uint32_t *const *)a - *(uint32_t *)base;
	uint32_t y = **(uint32_t *const *)b - *(uint32_t *)base;
	return (x > y) - (x < y);
}

/*
 * Gives every entry (heaps and batch), and every order recorded for a
 * lagging key, a new arm order, 0, 1, ... in its current sequence. The
 * heaps and the batch depend on relative order only, so both stay valid
 * without moving an entry.
 */
static int
mtr_timer_renumber_locked_(mtr_engine *engine)
{
	/* Each heap entry may add its timer's recorded order. */
	size_t total = engine->batch.count;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++)
		total += 2 * (size_t)engine->clocks[c].set.count;
	uint32_t **orders = malloc((total + 1) * sizeof(*orders));
	if (orders == NULL)
		return ENOMEM;
	uint32_t n = 0;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		struct mtr_timerset *set = &engine->clocks[c].set;
		for (uint32_t i = 0; i < set->count; i++) {
			struct mtr_heap_entry *entry = &set->entries[i];
			struct mtr_timer *timer = &engine->timers[entry->timer];
			orders[n++] = &entry->order;
			/* A lagging key's recorded order keeps its place too. */
			if (timer->due_ns != entry->due_ns)
				orders[n++] = &timer->rekey_order;
		}
	}
	for (uint32_t i = 0; i < engine->batch.count; i++)
		orders[n++] = &engine->batch.entries[i].order;
	/* Every order lies within 2^31 before the next one. */
	uint32_t base = engine->next_order - (UINT32_C(1) << 31);
	qsort_r(orders, n, sizeof(*orders), mtr_order_compare_, &base);
	for (uint32_t i = 0; i < n; i++)
		*orders[i] = i;
	engine->next_order = n;
	free(orders);
	return 0;
}

/* The next arm order; renumbers first when the span nears 2^31. Should
 * the renumbering find no memory, it is tried again at the next arm, with
 * 2^31 - 2^30 arms to go before order could go wrong. */
static uint32_t
mtr_timer_next_order_locked_(mtr_engine *engine)
{
	if (engine->next_order >= MTR_ORDER_RENUMBER_AT)
		(void)mtr_timer_renumber_locked_(engine);
	return engine->next_order++;
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
	uint32_t heap_index = mtr_slot_index_(timer->heap_slot);
	if (heap_index == 0)
		mtr_engine_interrupt_spin_locked_(engine, clock);
	mtr_timerset_erase_locked_(&engine->clocks[clock].set, engine->timers,
	    heap_index);
}

/* After a timer's key came in earlier, or the timer was armed: a new top
 * ends a spin, and only a new earliest wake-up needs the timerfd moved; in
 * a batch the firing thread re-arms when the batch ends. */
static void
mtr_timer_keyed_earlier_locked_(mtr_engine *engine, mtr_clock_id clock,
    const struct mtr_timer *timer)
{
	struct mtr_clock_state *state = &engine->clocks[clock];
	if (mtr_slot_index_(timer->heap_slot) == 0)
		mtr_engine_interrupt_spin_locked_(engine, clock);
	if (!state->firing && mtr_engine_wake_target_(engine, timer->due_ns,
	    timer->deadline_ns) < state->armed_ns)
		mtr_engine_rearm_locked_(engine, clock);
}

int
mtr_timer_schedule_locked_(mtr_engine *engine, uint32_t index,
    mtr_clock_id clock, int64_t due_ns)
{
	struct mtr_timer *timer = &engine->timers[index];
	int rc = mtr_timerset_push_locked_(&engine->clocks[clock].set,
	    engine->timers, index, due_ns, mtr_timer_next_order_locked_(engine));
	if (rc != 0)
		return rc;
	timer->due_ns = due_ns;
	mtr_timer_keyed_earlier_locked_(engine, clock, timer);
	return 0;
}

/*
 * Gives a timer that is in its clock's heap a new key, with the arm order
 * it takes now, so equal keys still fire in the order they were armed.
 *
 * A later key is only recorded, in O(1): the heap entry keeps its old key,
 * which surfaces no later than the new one would, and is re-keyed then
 * (mtr_timerset_top_locked_, mtr_batch_take_locked_). The timer's own key
 * bounds its entry's, so a key later than the timer's is known to be later
 * without reading the entry. The timerfd stays armed for the old key: that
 * wake-up finds nothing due and re-arms, as after a cancel, once per
 * surfacing rather than once per reschedule. A key no later than the
 * entry's moves the entry in place.
 */
static void
mtr_timer_move_locked_(mtr_engine *engine, struct mtr_timer *timer,
    mtr_clock_id clock, int64_t due_ns)
{
	struct mtr_timerset *set = &engine->clocks[clock].set;
	uint32_t order = mtr_timer_next_order_locked_(engine);
	uint32_t heap_index = mtr_slot_index_(timer->heap_slot);
	bool later = due_ns > timer->due_ns ||
	    due_ns > set->entries[heap_index].due_ns;

	timer->due_ns = due_ns;
	if (heap_index == 0)
		mtr_engine_interrupt_spin_locked_(engine, clock);
	if (later) {
		timer->rekey_order = order;
		return;
	}
	timer->sequence = 0;
	mtr_timerset_rekey_locked_(set, engine->timers, heap_index, due_ns,
	    order);
	mtr_timer_keyed_earlier_locked_(engine, clock, timer);
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
	if (timer != NULL && engine->stopping) {
		rc = ESHUTDOWN;
	} else if (timer != NULL) {
		timer->deadline_ns = deadline_ns;
		timer->period_ns = period_ns;
		if (mtr_slot_clock_(timer->heap_slot) == clock) {
			mtr_timer_move_locked_(engine, timer, clock,
			    deadline_ns + leeway_ns);
			rc = 0;
		} else {
			mtr_timer_disarm_locked_(engine, timer);
			timer->sequence = 0;
			rc = mtr_timer_schedule_locked_(engine, (uint32_t)id,
			    clock, deadline_ns + leeway_ns);
		}
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
		mtr_timer_disarm_locked_(engine, timer);
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
				(void)mtr_timer_next_order_locked_(engine);
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
