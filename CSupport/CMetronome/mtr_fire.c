/*
 * The firing path: one wake-up of the firing thread, from its timerfd's
 * event to the callback of each timer due.
 *
 * A wake-up fires, in key order, every timer whose window has opened: from
 * the heap top one at a time, or from a batch when a burst is due
 * (mtr_batch.c). Each callback runs with the shard unlocked, named in
 * shard->running meanwhile; the decision to run it is taken under the
 * lock, which is the cancel guarantee's other half (mtr_timer.c). Then the
 * timerfd is re-armed for the rest (mtr_queue.c), the same way down that
 * timer operations arm.
 */
#include "mtr_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Spins, unlocked, until @clock reads @deadline_ns, or until the clock's
 * set changes at its top or the engine stops (mtr_shard_interrupt_spin_
 * locked_): the timer spun for may be gone, or an earlier one may be due.
 */
static void
mtr_shard_spin_until_locked_(struct mtr_shard *shard, mtr_clock_id clock,
    int64_t deadline_ns)
{
	uint32_t epoch = atomic_load_explicit(&shard->spin_epoch,
	    memory_order_relaxed);
	shard->spinning_clock = (int)clock;
	mtr_lock_give_(&shard->lock);
	while (mtr_clock_read_(clock) < deadline_ns &&
	    atomic_load_explicit(&shard->spin_epoch, memory_order_relaxed) ==
	    epoch)
		mtr_spin_hint_();
	mtr_lock_take_(&shard->lock);
	shard->spinning_clock = -1;
}

/* Computes the tick of @entry, already out of the set; a repeating timer
 * goes back in at its next deadline before its callback runs, so the
 * callback can cancel or re-arm it like any other thread. */
static void
mtr_shard_commit_locked_(struct mtr_shard *shard, mtr_clock_id clock,
    struct mtr_heap_entry entry, int64_t now_ns, mtr_tick *tick)
{
	uint32_t index = entry.timer;
	int64_t due_ns = entry.due_ns;
	struct mtr_timer *timer = &shard->timers[index];
	int64_t missed = 0;

	/* A firing stands for the latest deadline that has passed and
	 * reports the earlier ones it covers as missed: firing for an earlier
	 * one would leave the passed ones due, to fire back to back. */
	if (timer->period_ns > 0 && now_ns > timer->deadline_ns)
		missed = (now_ns - timer->deadline_ns) / timer->period_ns;
	tick->scheduled_ns = timer->deadline_ns + missed * timer->period_ns;
	tick->fired_ns = now_ns;
	tick->missed = (uint64_t)missed;
	tick->sequence = timer->sequence + (uint64_t)missed;
	tick->timer = mtr_timer_id_make_(shard, index, timer->generation);
	tick->clock = clock;

	int64_t next_ns;
	int64_t leeway_ns = due_ns - timer->deadline_ns;
	if (timer->period_ns > 0 && !__builtin_add_overflow(tick->scheduled_ns,
	    timer->period_ns, &next_ns) && next_ns <= INT64_MAX - leeway_ns) {
		timer->deadline_ns = next_ns;
		timer->sequence = tick->sequence + 1;
		/* Cannot fail: the heap kept the room the entry left, whether
		 * it was popped (an erase shrinks to twice what is left) or
		 * taken into the batch (mtr_batch_lent_). */
		(void)mtr_queue_add_locked_(shard, index, clock,
		    next_ns + leeway_ns);
	}

	shard->counters.fired++;
	shard->counters.missed_periods += tick->missed;
	/* Late is measured from the earliest deadline this firing covers. */
	if (now_ns - due_ns > shard->engine->config.late_threshold_ns)
		shard->counters.late++;
}

/*
 * Takes out the next timer to fire now, from the heap top or the batch,
 * whichever comes first in key order. The batch's entries are all due, so
 * one of them also goes first when the top's window has not opened yet.
 * Returns false when nothing is due; the engine may have unlocked to spin.
 */
static bool
mtr_shard_next_locked_(struct mtr_shard *shard, struct mtr_clock_state *state,
    struct mtr_heap_entry *out, int64_t *now_ns)
{
	struct mtr_batch *batch = &shard->batch;
	mtr_clock_id clock = state->set.clock;

	while (!shard->stopping) {
		const struct mtr_heap_entry *top =
		    mtr_timerset_top_locked_(&state->set, shard->timers);
		const struct mtr_heap_entry *queued =
		    mtr_batch_next_locked_(batch, shard->timers);
		*now_ns = mtr_clock_read_(clock);

		if (top != NULL && (queued == NULL ||
		    mtr_entry_before_(top, queued))) {
			int64_t deadline_ns =
			    shard->timers[top->timer].deadline_ns;
			if (deadline_ns <= *now_ns) {
				if (queued == NULL && mtr_batch_take_locked_(
				    batch, &state->set, shard->timers, *now_ns,
				    shard->next_order))
					continue;
				*out = *top;
				mtr_timerset_erase_locked_(&state->set,
				    shard->timers, 0,
				    mtr_batch_lent_(batch, clock));
				return true;
			}
			if (queued == NULL) {
				if (deadline_ns - *now_ns >
				    shard->engine->config.spin_ns)
					return false;
				mtr_shard_spin_until_locked_(shard, clock,
				    deadline_ns);
				/* the set may have changed meanwhile */
				continue;
			}
		}
		if (queued == NULL)
			return false;
		*out = *queued;
		shard->timers[queued->timer].heap_slot = MTR_NOT_ARMED;
		batch->next++;
		batch->live--;
		shard->counters.batched++;
		return true;
	}
	return false;
}

/*
 * One wake-up, in one shard: fire, in key order, every timer whose window
 * has opened, then re-arm the timerfd for the rest. @fired counts the
 * wake-up's firings over every shard. Each callback runs unlocked;
 * shard->running names it meanwhile so that cancel_sync can wait for it and
 * destroy can hand its context release to this thread.
 */
static void
mtr_shard_fire_due_locked_(struct mtr_shard *shard,
    struct mtr_clock_state *state, uint64_t *fired)
{
	mtr_clock_id clock = state->set.clock;
	struct mtr_heap_entry entry;
	int64_t now_ns;

	state->firing = true;
	while (mtr_shard_next_locked_(shard, state, &entry, &now_ns)) {
		mtr_tick tick;
		mtr_shard_commit_locked_(shard, clock, entry, now_ns, &tick);
		if ((*fired)++ > 0)
			shard->counters.coalesced++;
		void *context = shard->timers[entry.timer].context;
		shard->running = tick.timer;

		mtr_lock_give_(&shard->lock);
		shard->engine->config.on_fire(context, &tick);
		mtr_lock_take_(&shard->lock);

		shard->running = 0;
		if (shard->release_running) {
			shard->release_running = false;
			mtr_shard_release_locked_(shard, context);
		}
		if (shard->sync_waiters > 0)
			mtr_event_signal_(&shard->callback_done);
	}
	state->firing = false;
	/* A batch that is over gives back the room its entries kept. */
	mtr_timerset_shrink_locked_(&state->set,
	    mtr_batch_lent_(&shard->batch, clock));
	mtr_queue_rearm_locked_(shard, clock);
}

void
mtr_fire_on_timerfd_(int fd, short what, void *arg)
{
	struct mtr_clock_state *state = arg;
	struct mtr_shard *shard = state->shard;
	uint64_t expirations;
	ssize_t n;
	int error = 0;

	(void)what;
	/* Edge-triggered: every expiry is one event, so the monotonic and
	 * boottime timerfds need no read (a syscall on the firing path); the
	 * next timerfd_settime resets their count. The wall clock's read is
	 * how the kernel reports a clock step. */
	if (state->set.clock == MTR_CLOCK_REALTIME) {
		do {
			n = read(fd, &expirations, sizeof(expirations));
		} while (n < 0 && errno == EINTR);
		if (n < 0)
			error = errno;
	} else {
		n = sizeof(expirations);
	}
	/* Only a step or nothing to read can fail a timerfd read. */
	if (n != (ssize_t)sizeof(expirations) && error != ECANCELED &&
	    error != EAGAIN) {
		fprintf(stderr, "CMetronome: timerfd read: %s\n",
		    strerror(error));
		abort();
	}

	mtr_lock_take_(&shard->lock);
	/* An expiry seen in the same epoll_wait as another shard's, whose
	 * wake-up has fired this shard's due timers and re-armed its timerfd
	 * for later since: stale, and the timerfd will wake again. Only that
	 * pass re-arms an expired timerfd, so one shard skips the clock read. */
	mtr_engine *engine = shard->engine;
	if (engine->shard_count > 1 && error != ECANCELED &&
	    state->armed_ns > mtr_clock_read_(state->set.clock)) {
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
	state->armed_ns = INT64_MAX; /* it has expired */
	mtr_shard_fire_due_locked_(shard, state, &fired);
	mtr_lock_give_(&shard->lock);

	/* The wake-up serves every shard: each fires what is due on this
	 * clock and re-arms for the rest, so that the shards' wake-ups
	 * together stab all their windows as greedily as one heap's would. */
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		struct mtr_shard *other = &engine->shards[s];
		if (other == shard)
			continue;
		mtr_lock_take_(&other->lock);
		mtr_shard_fire_due_locked_(other,
		    &other->clocks[state->set.clock], &fired);
		mtr_lock_give_(&other->lock);
	}
}
