/*
 * The firing path: one wake-up of the firing thread, from its timerfd's
 * event to the callback of each timer due.
 *
 * A wake-up fires, in key order, every timer whose window has opened: it
 * takes them out of the heap into the shard's run list under the lock and
 * fires them from there, taking again when the list is done (mtr_run.c).
 * Each callback runs with the shard unlocked, named in shard->callbacks
 * meanwhile; the decision to run it is taken under the lock, which is the
 * cancel guarantee's other half (mtr_timer.c): an entry whose timer was
 * cancelled or moved since the take is skipped. Then the timerfd is
 * re-armed for the rest (mtr_queue.c), the same way down that timer
 * operations arm.
 */
#include "mtr_engine_state.h"
#include "mtr_queue.h"

#include <errno.h>
#include <unistd.h>

/*
 * When, per clock, another of the engine's timerfds needs the thread: its
 * expiry plus the spin window, the latest time its own wake-up would fire
 * its timer (mtr_queue_wake_target_). Earlier than that it is only early,
 * and two spins ending each other's would trade the thread back and forth.
 */
static void
mtr_engine_next_expiries_(mtr_engine *engine,
    const struct mtr_clock_state *state, int64_t limits[MTR_CLOCK_COUNT])
{
	int64_t spin_ns = engine->config.spin_ns;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++)
		limits[c] = INT64_MAX;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			const struct mtr_clock_state *other =
			    &engine->shards[s].clocks[c];
			int64_t armed_ns = atomic_load(&other->armed_ns);
			int64_t limit_ns = armed_ns > INT64_MAX - spin_ns ?
			    INT64_MAX : armed_ns + spin_ns;
			if (other != state && limit_ns < limits[c])
				limits[c] = limit_ns;
		}
	}
}

/* Whether any of @limits has passed on its clock. */
static bool
mtr_any_passed_(const int64_t limits[MTR_CLOCK_COUNT])
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		if (limits[c] != INT64_MAX &&
		    mtr_clock_read_((mtr_clock_id)c) >= limits[c])
			return true;
	}
	return false;
}

/*
 * Spins, unlocked, until @state's clock reads @deadline_ns; or until
 * another of the engine's timerfds has a timer due, since the thread
 * spinning here is the one that would serve it; or until the spin is
 * interrupted (mtr_engine_interrupt_spin_): the timer spun for may be
 * gone, or a new wake-up may come first; or until the spin has lasted its
 * window on the monotonic clock. Only that last bound holds whatever the
 * clocks do: a wall clock stepped back would keep the deadline away for as
 * long as the step, and the re-arm that follows the cut waits on the
 * timerfd instead, which the kernel keeps on the stepped clock. Published
 * before the expiries are read, so that a timerfd moved meanwhile either
 * shows in them or interrupts the spin: the store and the loads are
 * sequentially consistent, as is the mover's store of armed_ns
 * (mtr_queue_set_fd_locked_).
 * Returns whether the deadline was reached.
 */
static bool
mtr_shard_spin_until_locked_(struct mtr_shard *shard,
    struct mtr_clock_state *state, int64_t deadline_ns)
{
	mtr_engine *engine = shard->engine;
	int64_t limits[MTR_CLOCK_COUNT];
	uint32_t epoch = atomic_load(&engine->spin_epoch);

	atomic_store(&engine->spinning, state);
	mtr_lock_give_(&shard->lock);
	mtr_engine_next_expiries_(engine, state, limits);
	int64_t spent_ns = mtr_clock_read_(MTR_CLOCK_MONOTONIC) +
	    engine->config.spin_ns;
	bool reached;
	while (!(reached = mtr_clock_read_spin_(state->set.clock) >=
	    deadline_ns) &&
	    atomic_load_explicit(&engine->spin_epoch, memory_order_relaxed) ==
	    epoch && !mtr_any_passed_(limits) &&
	    mtr_clock_read_(MTR_CLOCK_MONOTONIC) < spent_ns)
		mtr_spin_hint_();
	atomic_store(&engine->spinning, NULL);
	mtr_lock_take_(&shard->lock);
	return reached;
}

/*
 * Computes the tick of @entry, already out of the set; a repeating timer
 * goes back in at its next deadline before its callback runs, so the
 * callback can cancel or re-arm it like any other thread. A firing late by
 * a period or more covers the deadlines it passed as the timer's missed
 * policy says (mtr_missed_policy).
 */
static void
mtr_shard_commit_locked_(struct mtr_shard *shard, mtr_clock_id clock,
    struct mtr_heap_entry entry, int64_t now_ns, mtr_tick *tick)
{
	uint32_t index = entry.timer;
	int64_t due_ns = entry.due_ns;
	struct mtr_timer *timer = &shard->timers[index];
	int64_t leeway_ns = due_ns - timer->deadline_ns;
	int64_t threshold_ns = shard->engine->config.late_threshold_ns;
	bool late = now_ns - due_ns > threshold_ns;
	int64_t missed = 0;

	if (timer->period_ns > 0 && now_ns > timer->deadline_ns &&
	    timer->missed_policy == MTR_MISSED_SKIP)
		missed = (now_ns - timer->deadline_ns) / timer->period_ns;
	tick->scheduled_ns = timer->deadline_ns + missed * timer->period_ns;
	tick->fired_ns = now_ns;
	tick->missed = (uint64_t)missed;
	tick->sequence = timer->sequence + (uint64_t)missed;
	tick->timer = mtr_timer_id_make_(shard, index, timer->generation);
	tick->clock = clock;

	int64_t next_ns;
	bool passed_next = timer->period_ns > 0 &&
	    now_ns - timer->deadline_ns >= timer->period_ns;
	int64_t from_ns = timer->missed_policy == MTR_MISSED_DELAY &&
	    passed_next ? now_ns : tick->scheduled_ns;
	timer->order = MTR_ORDER_NONE;
	if (timer->period_ns > 0 && !__builtin_add_overflow(from_ns,
	    timer->period_ns, &next_ns) && next_ns <= INT64_MAX - leeway_ns) {
		timer->deadline_ns = next_ns;
		timer->sequence = tick->sequence + 1;
		/* The heap kept the room this entry left (mtr_run_kept_). */
		mtr_queue_add_locked_(shard, index, clock, next_ns + leeway_ns);
	}

	shard->counters.fired++;
	shard->counters.missed_periods += tick->missed;
	/* Late is measured from the earliest deadline this firing covers. */
	if (late)
		shard->counters.late++;
}

/*
 * The pass's next entry to fire, in key order, off the run list, which is
 * taken anew when done; false when nothing more of the pass is due, the
 * engine is stopping or faulted, or @me no longer holds the firing
 * (mtr_standby.c): what is left in the list is then the holder's. The
 * engine may have unlocked to spin for a top whose window is about to
 * open. The list's entries may be of another clock than @state's, left by
 * a pass of the other thread.
 */
static bool
mtr_shard_next_locked_(struct mtr_shard *shard, struct mtr_clock_state *state,
    uint64_t pass_order, enum mtr_firer me, struct mtr_heap_entry *out)
{
	mtr_engine *engine = shard->engine;

	while (!shard->stopping && atomic_load(&engine->fault) == 0 &&
	    atomic_load(&engine->firer) == me) {
		const struct mtr_heap_entry *entry =
		    mtr_run_next_locked_(&shard->run, shard->timers);
		if (entry != NULL) {
			*out = *entry;
			return true;
		}
		int64_t now_ns = mtr_clock_read_(state->set.clock);
		if (mtr_run_take_locked_(&shard->run, &state->set,
		    shard->timers, now_ns, pass_order) > 0)
			continue;
		const struct mtr_heap_entry *top = mtr_timerset_top_locked_(
		    &state->set, shard->timers);
		if (top == NULL || top->order >= pass_order)
			return false;
		int64_t deadline_ns = shard->timers[top->timer].deadline_ns;
		if (deadline_ns - now_ns > engine->config.spin_ns)
			return false;
		/* Cut short, the pass ends: the re-arm brings the thread back
		 * once it has served what cut it. Reached, the set may still
		 * have changed meanwhile. */
		if (!mtr_shard_spin_until_locked_(shard, state, deadline_ns))
			return false;
	}
	return false;
}

/*
 * A firing of a timer whose callback the other thread is running waits for
 * that callback's end: a timer's callbacks never overlap. Returns whether
 * it deferred @entry.
 */
static bool
mtr_shard_defer_locked_(struct mtr_shard *shard, enum mtr_firer me,
    mtr_clock_id clock, struct mtr_heap_entry entry)
{
	struct mtr_callback *other = &shard->callbacks[MTR_FIRERS - 1 - me];
	struct mtr_timer *timer = &shard->timers[entry.timer];
	if (other->timer == 0 || other->timer !=
	    mtr_timer_id_make_(shard, entry.timer, timer->generation))
		return false;
	other->deferred = true;
	other->deferred_clock = clock;
	other->deferred_entry = entry;
	return true;
}

/*
 * After @me's callback of @entry's timer: a cancel_sync waiting for it
 * goes on, a destroy made meanwhile releases the context, a firing
 * deferred behind it goes back into its heap (still due, it fires at the
 * next pass), and the firing thread, back from a callback that overran,
 * takes the firing back from its standby.
 */
static void
mtr_shard_callback_ended_locked_(struct mtr_shard *shard, enum mtr_firer me,
    uint32_t index, void *context)
{
	struct mtr_callback *callback = &shard->callbacks[me];

	callback->timer = 0;
	callback->ends++;
	if (callback->waiters > 0) {
		/* cancel_sync disarmed the timer and waits for this callback:
		 * a re-arm made meanwhile, by the callback or a racing thread,
		 * comes before that cancel and is undone with it. A timer
		 * destroyed meanwhile is gone, and its slot may hold another. */
		if (!callback->release)
			mtr_queue_remove_locked_(shard, &shard->timers[index]);
		callback->waiters = 0;
		mtr_event_signal_(&shard->callback_done);
	}
	if (callback->deferred) {
		struct mtr_heap_entry entry = callback->deferred_entry;
		callback->deferred = false;
		if (mtr_run_current_(&entry, shard->timers))
			mtr_queue_add_locked_(shard, entry.timer,
			    callback->deferred_clock,
			    shard->timers[entry.timer].due_ns);
	}
	if (callback->release) {
		callback->release = false;
		mtr_shard_release_locked_(shard, context);
	}
	if (me == MTR_FIRER_THREAD && atomic_load(&shard->engine->firer) !=
	    MTR_FIRER_THREAD) {
		atomic_store(&shard->engine->firer, MTR_FIRER_THREAD);
		mtr_queue_set_alarm_(shard->engine);
	}
}

/*
 * One pass, in one shard, by @me: fire, in key order, every timer whose
 * window has opened, then re-arm the timerfd for the rest. @fired counts
 * the wake-up's firings over every shard. Each callback runs unlocked, and
 * only while the engine has no fault (a call may have reported it since
 * the take); shard->callbacks names it meanwhile so that cancel_sync can
 * wait for it and destroy can hand its context release to this thread.
 */
static void
mtr_shard_fire_due_locked_(struct mtr_shard *shard,
    struct mtr_clock_state *state, enum mtr_firer me, uint64_t *fired)
{
	mtr_engine *engine = shard->engine;
	uint64_t pass_order = shard->next_order;
	struct mtr_heap_entry entry;

	state->firing = true;
	while (mtr_shard_next_locked_(shard, state, pass_order, me, &entry)) {
		mtr_clock_id clock = shard->run.clock;
		if (mtr_shard_defer_locked_(shard, me, clock, entry))
			continue;
		mtr_tick tick;
		mtr_shard_commit_locked_(shard, clock, entry,
		    mtr_clock_read_(clock), &tick);
		if ((*fired)++ > 0)
			shard->counters.coalesced++;
		shard->counters.batched += shard->run.bulk;
		void *context = shard->timers[entry.timer].context;
		shard->callbacks[me].timer = tick.timer;
		shard->callbacks[me].since_ns = clock == MTR_CLOCK_MONOTONIC ?
		    tick.fired_ns : mtr_clock_read_(MTR_CLOCK_MONOTONIC);

		mtr_lock_give_(&shard->lock);
		if (atomic_load(&engine->fault) == 0)
			engine->config.on_fire(context, &tick);
		mtr_lock_take_(&shard->lock);

		mtr_shard_callback_ended_locked_(shard, me, entry.timer,
		    context);
	}
	/* A list this thread gave up (the firing went to the other) is the
	 * other's to finish; one a stop cut short, the stop's to drop. */
	if (shard->run.next == shard->run.count)
		mtr_run_end_(&shard->run);
	state->firing = false;
	mtr_timerset_shrink_locked_(&state->set,
	    mtr_shard_kept_locked_(shard, state->set.clock));
	mtr_queue_rearm_locked_(shard, state->set.clock);
}

/*
 * The standby's pass while it holds the firing (mtr_standby.c): every
 * shard and clock fires what is due, as a wake-up of each would.
 */
void
mtr_fire_standby_pass_(mtr_engine *engine)
{
	uint64_t fired = 0;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		struct mtr_shard *shard = &engine->shards[s];
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			mtr_lock_take_(&shard->lock);
			mtr_shard_fire_due_locked_(shard, &shard->clocks[c],
			    MTR_FIRER_STANDBY, &fired);
			mtr_lock_give_(&shard->lock);
		}
	}
}

/*
 * A wake-up of the firing thread by one of its timerfds. The timerfd is
 * checked as still the engine's before it is read, and again before the
 * thread sleeps: a sweep that closed the engine's descriptors during the
 * pass is so noticed before the thread waits on an epoll instance whose
 * number may be another's by then.
 */
void
mtr_fire_on_timerfd_(int fd, short what, void *arg)
{
	struct mtr_clock_state *state = arg;
	struct mtr_shard *shard = state->shard;
	mtr_engine *engine = shard->engine;
	uint64_t expirations;
	ssize_t n;
	int error = 0;

	(void)what;
	/* In a forked child the timerfds are the parent's: a copy of the
	 * firing thread, back from a callback that forked, reads none. */
	if (engine->inherited)
		return;
	/* Edge-triggered: every expiry is one event, so the monotonic and
	 * boottime timerfds need no read (a syscall on the firing path); the
	 * next timerfd_settime resets their count. The wall clock's read is
	 * how the kernel reports a clock step. */
	if (state->set.clock == MTR_CLOCK_REALTIME) {
		if ((error = mtr_timerfd_ours_(&state->timerfd)) != 0) {
			mtr_engine_fault_(engine, error);
			return;
		}
		do {
			n = read(fd, &expirations, sizeof(expirations));
		} while (n < 0 && errno == EINTR);
		if (n < 0)
			error = errno;
	} else {
		n = sizeof(expirations);
	}
	/* Only a step or nothing to read can fail a read of a timerfd that
	 * is still ours. */
	if (n != (ssize_t)sizeof(expirations) && error != ECANCELED &&
	    error != EAGAIN) {
		mtr_engine_fault_(engine, error != 0 ? error : EIO);
		return;
	}

	mtr_lock_take_(&shard->lock);
	/* An expiry seen in the same epoll_wait as another shard's, whose
	 * wake-up has fired this shard's due timers and re-armed its timerfd
	 * for later since: stale, and the timerfd will wake again. Only that
	 * pass re-arms an expired timerfd, so one shard skips the clock read. */
	if (engine->shard_count > 1 && error != ECANCELED &&
	    atomic_load_explicit(&state->armed_ns, memory_order_relaxed) >
	    mtr_clock_read_(state->set.clock)) {
		mtr_lock_give_(&shard->lock);
		return;
	}
	if (n == (ssize_t)sizeof(expirations)) {
		shard->counters.wakeups++;
	} else if (error == ECANCELED) {
		/* The wall clock was set: re-evaluate every wall timer. */
		shard->counters.clock_steps++;
	}
	uint64_t fired = 0;
	/* it has expired */
	atomic_store_explicit(&state->armed_ns, INT64_MAX, memory_order_relaxed);
	mtr_shard_fire_due_locked_(shard, state, MTR_FIRER_THREAD, &fired);
	mtr_lock_give_(&shard->lock);

	/* The wake-up serves every shard: each fires what is due on this
	 * clock and re-arms for the rest, so that the shards' wake-ups
	 * together stab all their windows as greedily as one heap's would.
	 * Each pass is bounded (mtr_shard_next_locked_), so a shard costs a
	 * lock round trip and a clock read here, never a wait behind a busy
	 * one. */
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		struct mtr_shard *other = &engine->shards[s];
		if (other == shard)
			continue;
		mtr_lock_take_(&other->lock);
		mtr_shard_fire_due_locked_(other,
		    &other->clocks[state->set.clock], MTR_FIRER_THREAD, &fired);
		mtr_lock_give_(&other->lock);
	}
	/* A re-arm checked it already, unless the pass left the clock with
	 * nothing armed. */
	if (atomic_load_explicit(&state->armed_ns, memory_order_relaxed) ==
	    INT64_MAX && (error = mtr_timerfd_ours_(&state->timerfd)) != 0)
		mtr_engine_fault_(engine, error);
}
