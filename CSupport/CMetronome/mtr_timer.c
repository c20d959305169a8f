/*
 * Timers: create, arm, cancel, destroy, and the cancel guarantee.
 *
 * Every request takes its timer's shard lock and edits that shard's queue
 * directly (mtr_queue.c); nothing waits for the firing thread. The firing
 * thread decides under the same lock which callback to run and records it
 * in shard->callbacks before unlocking, so once cancel returns no new
 * callback can start: the only callback that may still run is one already
 * committed (and cancel_sync waits for that one). Ids carry the slot's
 * generation, so an id used after destroy is refused instead of touching a
 * reused slot (mtr_shard.c).
 */
#include "mtr_engine_state.h"
#include "mtr_queue.h"

#include <errno.h>

int
mtr_timer_create(mtr_engine *engine, void *context, mtr_timer_id *out_timer)
{
	struct mtr_shard *shard = mtr_shard_home_(engine->shards,
	    engine->shard_count);

	mtr_lock_take_(&shard->lock);
	int rc = shard->stopping || atomic_load(&engine->fault) != 0 ?
	    ESHUTDOWN : mtr_slots_take_locked_(shard, context, out_timer);
	mtr_lock_give_(&shard->lock);
	return rc;
}

/* Checks what every arm call is given, @period_ns 0 for a one-shot; EINVAL
 * or EOVERFLOW, else 0. */
static int
mtr_timer_schedule_check_(mtr_clock_id clock, int64_t deadline_ns,
    int64_t period_ns, int64_t leeway_ns, mtr_missed_policy policy)
{
	if (!mtr_clock_valid_(clock) || deadline_ns < 0 || leeway_ns < 0 ||
	    period_ns < 0 || (period_ns > 0 && leeway_ns > period_ns) ||
	    (unsigned)policy > MTR_MISSED_DELAY)
		return EINVAL;
	if (deadline_ns > INT64_MAX - leeway_ns)
		return EOVERFLOW;
	return 0;
}

/* Replaces the schedule of @timer, slot @index: a move within its clock's
 * heap when it is there, which needs no memory, else a remove and an add
 * into room found first (mtr_timer_arm_), so that an ENOMEM leaves the old
 * schedule as it was. */
static void
mtr_timer_arm_locked_(struct mtr_shard *shard, struct mtr_timer *timer,
    uint32_t index, mtr_clock_id clock, int64_t deadline_ns,
    int64_t period_ns, int64_t leeway_ns)
{
	timer->deadline_ns = deadline_ns;
	timer->period_ns = period_ns;
	if (mtr_slot_clock_(timer->heap_slot) == clock) {
		mtr_queue_move_locked_(shard, timer, clock,
		    deadline_ns + leeway_ns);
		return;
	}
	mtr_queue_remove_locked_(shard, timer);
	timer->sequence = 0;
	mtr_queue_add_locked_(shard, index, clock, deadline_ns + leeway_ns);
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
	mtr_lock_take_(&shard->lock);
	*out_timer = mtr_slots_lookup_locked_(shard, *slot, id);
	if (*out_timer == NULL) {
		mtr_lock_give_(&shard->lock);
		return NULL;
	}
	return shard;
}

/*
 * Every arm call: checks the schedule (@period_ns 0 for a one-shot), then
 * replaces the schedule of the timer @id names under its shard's lock. With
 * @out_renamed (mtr_timer_move) the timer takes a new id as well: still odd,
 * so allocated; or, when its slot's ids are spent, a fresh slot, and the
 * old one retires. A callback already begun keeps the old name, and so does
 * its callback record until a destroy of the new one must find it running.
 */
static int
mtr_timer_arm_(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_missed_policy policy, mtr_timer_id *out_renamed)
{
	int rc = mtr_timer_schedule_check_(clock, deadline_ns, period_ns,
	    leeway_ns, policy);
	if (rc != 0)
		return rc;
	uint32_t slot;
	struct mtr_timer *timer;
	struct mtr_shard *shard = mtr_timer_lock_(engine, id, &slot, &timer);
	if (shard == NULL)
		return EINVAL;
	bool spent = out_renamed != NULL && timer->generation > UINT32_MAX - 2;
	if (shard->stopping || atomic_load(&engine->fault) != 0)
		rc = ESHUTDOWN;
	else if (mtr_slot_clock_(timer->heap_slot) != clock)
		rc = mtr_queue_make_room_locked_(shard, clock);
	if (rc == 0 && spent && (rc = mtr_slots_relocate_locked_(shard, slot,
	    &slot)) == 0)
		timer = &shard->timers[slot];
	if (rc == 0) {
		timer->missed_policy = policy;
		mtr_timer_arm_locked_(shard, timer, slot, clock, deadline_ns,
		    period_ns, leeway_ns);
		/* A descriptor that failed the arm is a fault: the engine
		 * stops, and the timer will not fire. */
		if (atomic_load(&engine->fault) != 0)
			rc = ESHUTDOWN;
	}
	if (rc == 0 && out_renamed != NULL) {
		if (!spent)
			timer->generation += 2;
		*out_renamed = mtr_timer_id_make_(shard, slot,
		    timer->generation);
		struct mtr_callback *running =
		    mtr_shard_running_locked_(shard, id);
		if (running != NULL)
			running->timer = *out_renamed;
	}
	mtr_lock_give_(&shard->lock);
	return rc;
}

int
mtr_timer_arm_once(mtr_engine *engine, mtr_timer_id timer, mtr_clock_id clock,
    int64_t deadline_ns, int64_t leeway_ns)
{
	return mtr_timer_arm_(engine, timer, clock, deadline_ns, 0, leeway_ns,
	    MTR_MISSED_SKIP, NULL);
}

int
mtr_timer_arm_repeating(mtr_engine *engine, mtr_timer_id timer,
    mtr_clock_id clock, int64_t start_ns, int64_t period_ns,
    int64_t leeway_ns)
{
	if (period_ns <= 0)
		return EINVAL;
	return mtr_timer_arm_(engine, timer, clock, start_ns, period_ns,
	    leeway_ns, MTR_MISSED_SKIP, NULL);
}

int
mtr_timer_move(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_timer_id *out_timer)
{
	return mtr_timer_arm_(engine, id, clock, deadline_ns, period_ns,
	    leeway_ns, MTR_MISSED_SKIP, out_timer);
}

int
mtr_timer_move_policy(mtr_engine *engine, mtr_timer_id id, mtr_clock_id clock,
    int64_t deadline_ns, int64_t period_ns, int64_t leeway_ns,
    mtr_missed_policy policy, mtr_timer_id *out_timer)
{
	return mtr_timer_arm_(engine, id, clock, deadline_ns, period_ns,
	    leeway_ns, policy, out_timer);
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
	mtr_lock_give_(&shard->lock);
	return 0;
}

int
mtr_timer_cancel_sync(mtr_engine *engine, mtr_timer_id id)
{
	bool waited = false;
	uint32_t slot;
	struct mtr_timer *timer;
	struct mtr_shard *shard = mtr_timer_lock_disarmed_(engine, id, &slot,
	    &timer);
	if (shard == NULL)
		return EINVAL;
	/* A firing thread never waits (mtr_engine_shut_ says why). The wait
	 * holds the engine: a callback may destroy it meanwhile, and then
	 * this thread may be the last to let go. It lasts until the callback
	 * record's count of ends moves, even should the callback move its
	 * timer meanwhile, which renames the record's timer; and that end
	 * disarms the timer again (mtr_fire.c), so a re-arm made meanwhile
	 * does not outlive this call. */
	struct mtr_callback *running = mtr_shard_running_locked_(shard, id);
	if (running != NULL && mtr_firing_engine_ == NULL) {
		uint32_t ends = running->ends;
		mtr_engine_hold_(engine);
		running->waiters++;
		while (running->ends == ends)
			mtr_event_wait_(&shard->callback_done, &shard->lock);
		waited = true;
	}
	mtr_lock_give_(&shard->lock);
	if (waited)
		mtr_engine_let_go_(engine, 1);
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
	struct mtr_callback *running = mtr_shard_running_locked_(shard, id);
	if (running != NULL) {
		/* The thread running the callback holds the context and
		 * releases it when that returns. */
		running->release = true;
		running->released_context = timer->context;
	} else {
		release = timer->context;
		must_release = true;
	}
	mtr_slots_give_back_locked_(shard, slot);
	mtr_lock_give_(&shard->lock);
	if (must_release && engine->config.on_release != NULL)
		engine->config.on_release(release);
	return 0;
}

/* Ages every shard alike: its arm order by @arms, its free slots by
 * @reuses. */
int
mtr_engine_age_for_testing(mtr_engine *engine, uint64_t arms, uint32_t reuses)
{
	int rc = 0;
	for (uint32_t s = 0; s < engine->shard_count && rc == 0; s++) {
		struct mtr_shard *shard = &engine->shards[s];
		mtr_lock_take_(&shard->lock);
		if (shard->stopping) {
			rc = ESHUTDOWN;
		} else if (arms > MTR_ORDER_MAX - shard->next_order) {
			rc = EOVERFLOW;
		} else {
			shard->next_order += arms;
			mtr_slots_age_locked_(shard, reuses);
		}
		mtr_lock_give_(&shard->lock);
	}
	return rc;
}
