/*
 * The queues of one shard: for each clock, its armed timers (the timer
 * set) and its timerfd, kept at their earliest wake-up; and the arm order
 * its clocks share. Timer operations (mtr_timer.c) and the firing loop
 * (mtr_fire.c) both arm through here, and this file calls only downward:
 * into the timer set, the run list, the kernel and, when a descriptor
 * fails, the fault (mtr_fault.c).
 *
 * The timerfd moves only for a new earliest wake-up. A timer leaving the
 * top (cancelled, or moved later) leaves it where it is: the early wake-up
 * finds nothing due and re-arms, which is cheaper than a syscall on every
 * cancel and reschedule.
 */
#include "mtr_queue.h"
#include "mtr_engine_state.h"

#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>

/* Moves a clock's timerfd to @target_ns (absolute), or disarms it for
 * INT64_MAX, once it has checked that the descriptor is still the engine's
 * own (mtr_timerfd_ours_): a number the engine no longer owns is never
 * armed, and is the fault it stands for. A wall-clock step is no failure:
 * after one, the kernel arms the timerfd and reports the step to the first
 * settime with ECANCELED, where the firing thread's read would have seen
 * it, so it is counted here and the timerfd expired at once, and the
 * firing thread re-evaluates every wall timer as after a step it saw
 * itself. In a forked child the timerfd is the parent's, so nothing is
 * done. A spin ends: the new wake-up may come before the spun-for
 * deadline. */
void
mtr_queue_set_fd_locked_(struct mtr_clock_state *state, int64_t target_ns)
{
	struct itimerspec spec;
	int flags = TFD_TIMER_ABSTIME;
	mtr_engine *engine = state->shard->engine;

	if (engine->inherited)
		return;
	int error = mtr_timerfd_ours_(&state->timerfd);
	if (error != 0) {
		mtr_engine_fault_(engine, error);
		return;
	}
	memset(&spec, 0, sizeof(spec));
	spec.it_interval = state->timerfd.signature;
	if (target_ns != INT64_MAX) {
		/* it_value 0 would disarm; a past deadline must still fire. */
		if (target_ns < 1)
			target_ns = 1;
		spec.it_value.tv_sec = target_ns / MTR_NS_PER_S;
		spec.it_value.tv_nsec = target_ns % MTR_NS_PER_S;
	}
	if (state->set.clock == MTR_CLOCK_REALTIME)
		flags |= TFD_TIMER_CANCEL_ON_SET;
	while (timerfd_settime(state->timerfd.fd, flags, &spec, NULL) != 0) {
		if (errno == ECANCELED) {
			state->shard->counters.clock_steps++;
			/* Armed all the same: steps that keep coming end no
			 * later than at the expiry wanted. */
			if (target_ns == 1)
				break;
			target_ns = 1;
			spec.it_value.tv_sec = 0;
			spec.it_value.tv_nsec = 1;
			continue;
		}
		if (errno != EINTR) {
			mtr_engine_fault_(engine, errno);
			return;
		}
	}
	/* Sequentially consistent, as are the spin's store of spinning and
	 * its loads of armed_ns (mtr_fire.c): with a relaxed store here the
	 * load of spinning below could pass it (x86 lets a load pass an
	 * earlier store), so that a spin on another shard, starting at that
	 * moment, neither saw this expiry nor was interrupted, and served it
	 * up to spin_ns late. In one total order, one of the two sees the
	 * other. */
	atomic_store(&state->armed_ns, target_ns);
	mtr_engine_interrupt_spin_(engine, NULL);
	/* A firing thread sets it once, at the end of its pass. */
	if (mtr_firing_engine_ != engine)
		mtr_queue_set_alarm_(engine);
}

/* Sets the alarm to @target_ns, a monotonic time, once it has checked that
 * it is still the engine's; @for_expiry: whether it stands for a wake-up
 * due (or a callback's overrun), not for the watch's second. */
static void
mtr_queue_alarm_at_locked_(mtr_engine *engine, int64_t target_ns,
    bool for_expiry)
{
	struct itimerspec spec = { .it_interval = engine->alarm.signature };

	int error = mtr_timerfd_ours_(&engine->alarm);
	if (error != 0) {
		mtr_engine_fault_(engine, error);
		return;
	}
	if (target_ns < 1)
		target_ns = 1;
	spec.it_value.tv_sec = target_ns / MTR_NS_PER_S;
	spec.it_value.tv_nsec = target_ns % MTR_NS_PER_S;
	if (timerfd_settime(engine->alarm.fd, TFD_TIMER_ABSTIME, &spec,
	    NULL) != 0) {
		mtr_engine_fault_(engine, errno);
		return;
	}
	atomic_store(&engine->alarm_ns, target_ns);
	atomic_store(&engine->alarm_for_expiry, for_expiry);
}

/*
 * The standby's alarm: the earliest expiry of the engine's timerfds, read
 * on the monotonic clock, and while the firing thread holds the firing,
 * the start of its wake-up in progress if earlier, MTR_OVERRUN_NS later.
 * The firing thread sets it at the end of every wake-up, which moves it
 * on, so it rings only when that thread is still in a wake-up an overrun
 * after it was due; while the standby fires, it rings at each expiry. It never sleeps longer than the watch's
 * second: a read that a sweep left waiting on a disarmed timerfd would
 * never return.
 */
void
mtr_queue_set_alarm_(mtr_engine *engine)
{
	int64_t offset_ns[MTR_CLOCK_COUNT];
	bool offset_read[MTR_CLOCK_COUNT] = { false };
	int64_t monotonic_ns = mtr_clock_read_(MTR_CLOCK_MONOTONIC);
	int64_t second_ns = monotonic_ns + MTR_NS_PER_S;
	int64_t earliest_ns = second_ns;

	if (engine->inherited || engine->alarm.fd < 0)
		return;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			int64_t armed_ns = atomic_load(
			    &engine->shards[s].clocks[c].armed_ns);
			if (armed_ns == INT64_MAX)
				continue;
			if (c != MTR_CLOCK_MONOTONIC) {
				if (!offset_read[c]) {
					offset_ns[c] = mtr_clock_read_(
					    (mtr_clock_id)c) - monotonic_ns;
					offset_read[c] = true;
				}
				armed_ns -= offset_ns[c];
			}
			if (armed_ns < earliest_ns)
				earliest_ns = armed_ns;
		}
	}
	bool thread_fires = atomic_load(&engine->firer) == MTR_FIRER_THREAD;
	int64_t pass_ns = atomic_load(&engine->pass_since_ns);
	if (thread_fires && pass_ns < earliest_ns)
		earliest_ns = pass_ns;
	bool for_expiry = earliest_ns < second_ns;
	if (for_expiry && thread_fires)
		earliest_ns += MTR_OVERRUN_NS;
	mtr_lock_take_(&engine->alarm_lock);
	/* Unchanged, it needs no syscall: once it has rung, the one it is
	 * set to next differs, as time has moved on. */
	if (earliest_ns != atomic_load(&engine->alarm_ns))
		mtr_queue_alarm_at_locked_(engine, earliest_ns, for_expiry);
	mtr_lock_give_(&engine->alarm_lock);
}

void
mtr_queue_alarm_at_(mtr_engine *engine, int64_t target_ns)
{
	if (engine->inherited || engine->alarm.fd < 0)
		return;
	mtr_lock_take_(&engine->alarm_lock);
	mtr_queue_alarm_at_locked_(engine, target_ns, true);
	mtr_lock_give_(&engine->alarm_lock);
}

void
mtr_queue_ring_alarm_(mtr_engine *engine)
{
	mtr_queue_alarm_at_(engine, 1);
}

static int64_t
mtr_queue_wake_target_(const struct mtr_shard *shard, int64_t due_ns,
    int64_t deadline_ns)
{
	/*
	 * Waking exactly at the latest acceptable time would land every
	 * wake-up's first timer outside its window by the wake-up latency, so
	 * a timer with leeway wakes a margin early (see MTR_WAKE_MARGIN_MAX_NS).
	 * Every stab point moves by the same rule, so wake-ups stay at the
	 * optimum for windows shortened by their margin.
	 */
	int64_t margin_ns = (due_ns - deadline_ns) / 4;
	if (margin_ns > MTR_WAKE_MARGIN_MAX_NS)
		margin_ns = MTR_WAKE_MARGIN_MAX_NS;
	return due_ns - margin_ns - shard->engine->config.spin_ns;
}

void
mtr_queue_rearm_locked_(struct mtr_shard *shard, mtr_clock_id clock)
{
	struct mtr_clock_state *state = &shard->clocks[clock];
	const struct mtr_heap_entry *top = mtr_timerset_top_locked_(&state->set,
	    shard->timers);
	int64_t target_ns = top ? mtr_queue_wake_target_(shard,
	    top->due_ns, shard->timers[top->timer].deadline_ns) : INT64_MAX;

	/* Skip the syscall when the timerfd already expires then. */
	if (target_ns != atomic_load_explicit(&state->armed_ns,
	    memory_order_relaxed))
		mtr_queue_set_fd_locked_(state, target_ns);
}

/* Takes a timer out of its clock's set, if in one, and out of the run
 * list, which skips its entry from now on (mtr_run_current_). */
void
mtr_queue_remove_locked_(struct mtr_shard *shard, struct mtr_timer *timer)
{
	timer->order = MTR_ORDER_NONE;
	if (timer->heap_slot == MTR_NOT_ARMED)
		return;
	mtr_clock_id clock = mtr_slot_clock_(timer->heap_slot);
	uint32_t heap_index = mtr_slot_index_(timer->heap_slot);
	struct mtr_timerset *set = &shard->clocks[clock].set;
	if (heap_index == 0)
		mtr_shard_interrupt_spin_locked_(shard, clock);
	mtr_timerset_erase_locked_(set, shard->timers, heap_index);
	mtr_timerset_shrink_locked_(set, mtr_run_kept_(&shard->run, clock));
}

/* After a timer's key came in earlier, or the timer was armed: a new top
 * ends a spin, and only a new earliest wake-up needs the timerfd moved; in
 * a pass the firing thread re-arms when the pass ends. */
static void
mtr_queue_keyed_earlier_locked_(struct mtr_shard *shard, mtr_clock_id clock,
    const struct mtr_timer *timer)
{
	struct mtr_clock_state *state = &shard->clocks[clock];
	if (mtr_slot_index_(timer->heap_slot) == 0)
		mtr_shard_interrupt_spin_locked_(shard, clock);
	if (!state->firing && mtr_queue_wake_target_(shard, timer->due_ns,
	    timer->deadline_ns) < atomic_load_explicit(&state->armed_ns,
	    memory_order_relaxed))
		mtr_queue_rearm_locked_(shard, clock);
}

/*
 * Makes sure a timer can go into @clock's set without the set growing, so
 * that an arm refused for want of memory is refused before it changes
 * anything.
 */
int
mtr_queue_make_room_locked_(struct mtr_shard *shard, mtr_clock_id clock)
{
	return mtr_timerset_reserve_locked_(&shard->clocks[clock].set,
	    mtr_run_kept_(&shard->run, clock));
}

/* Puts a timer that is in no set into @clock's, with a new arm order; the
 * room is there (mtr_queue_make_room_locked_, or an entry of the run list
 * coming back). 64-bit orders never wrap (MTR_ORDER_MAX). */
void
mtr_queue_add_locked_(struct mtr_shard *shard, uint32_t index,
    mtr_clock_id clock, int64_t due_ns)
{
	struct mtr_timer *timer = &shard->timers[index];
	timer->order = shard->next_order++;
	timer->due_ns = due_ns;
	mtr_timerset_push_locked_(&shard->clocks[clock].set, shard->timers,
	    index, due_ns, timer->order);
	mtr_queue_keyed_earlier_locked_(shard, clock, timer);
}

/*
 * Gives a timer that is in its clock's heap a new key, with the arm order
 * it takes now, so equal keys still fire in the order they were armed.
 *
 * A later key is only recorded, in O(1): the heap entry keeps its old key,
 * which surfaces no later than the new one would, and is re-keyed then
 * (mtr_timerset_top_locked_, mtr_run.c). The timer's own key bounds its
 * entry's, so a key later than the timer's is known to be later without
 * reading the entry. The timerfd stays armed for the old key: that wake-up
 * finds nothing due and re-arms, as after a cancel, once per surfacing
 * rather than once per reschedule. A key no later than the entry's moves
 * the entry in place.
 */
void
mtr_queue_move_locked_(struct mtr_shard *shard, struct mtr_timer *timer,
    mtr_clock_id clock, int64_t due_ns)
{
	struct mtr_timerset *set = &shard->clocks[clock].set;
	uint32_t heap_index = mtr_slot_index_(timer->heap_slot);
	bool later = due_ns > timer->due_ns ||
	    due_ns > set->entries[heap_index].due_ns;

	timer->order = shard->next_order++;
	timer->due_ns = due_ns;
	timer->sequence = 0;
	if (heap_index == 0)
		mtr_shard_interrupt_spin_locked_(shard, clock);
	if (later)
		return;
	mtr_timerset_rekey_locked_(set, shard->timers, heap_index, due_ns,
	    timer->order);
	mtr_queue_keyed_earlier_locked_(shard, clock, timer);
}
