/*
 * The standby: a second thread per engine that fires the engine's timers
 * while the firing thread runs a callback that overran (a handler that
 * blocks: a log flush, a lock held too long, a name lookup), so that one
 * handler holds up no other timer for more than MTR_OVERRUN_NS and a wake-up.
 * A handler that returns promptly runs on the firing thread as ever.
 *
 * It sleeps in a read of its alarm, a timerfd that the firing thread moves
 * on at the end of every pass (mtr_queue_set_alarm_), an overrun past the
 * next expiry: the alarm rings only when that thread is late. Then, if the
 * firing thread is in a callback that began an overrun ago and is blocked
 * in it (the kernel has it asleep: waiting for a lock, I/O, a sleep), the
 * standby takes the firing (engine->firer): it fires what is due in every shard
 * and clock, and its alarm rings at each expiry from then on. The firing
 * thread takes the firing back when its callback returns, and the standby
 * lets go after its own callback, if it is in one; only the holder starts
 * callbacks, and a timer whose callback one thread runs fires on the
 * other only after it (mtr_fire.c). Counted in takeovers.
 *
 * A callback that runs (computes) or that a busy machine has preempted is
 * left alone: handing its engine to another thread would only run two
 * callbacks at once on a machine that has no core for the second, and
 * callbacks that start in key order would record their starts out of it.
 *
 * What it does not cover: a second handler that blocks while the first
 * still does (on the standby itself) holds the rest up until one returns;
 * a handler that computes for long holds the engine as any work on its
 * thread would.
 * Go's runtime hands a blocked thread's processor to another in the same
 * way, and starts as many threads as it needs; one standby covers the
 * case of one slow handler at a time.
 */
#include "mtr_engine_state.h"
#include "mtr_queue.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The firing thread's running callback: where it runs, and how many
 * callbacks the thread had ended there before it. */
struct mtr_standby_seen {
	uint32_t shard;
	uint32_t ends;
};

/* When the firing thread's running callback overruns (CLOCK_MONOTONIC),
 * or INT64_MAX when it runs none; @seen names that callback. */
static int64_t
mtr_standby_overrun_at_(mtr_engine *engine, struct mtr_standby_seen *seen)
{
	int64_t at_ns = INT64_MAX;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		struct mtr_shard *shard = &engine->shards[s];
		struct mtr_callback *callback =
		    &shard->callbacks[MTR_FIRER_THREAD];
		mtr_lock_take_(&shard->lock);
		if (callback->timer != 0 &&
		    callback->since_ns + MTR_OVERRUN_NS < at_ns) {
			at_ns = callback->since_ns + MTR_OVERRUN_NS;
			seen->shard = s;
			seen->ends = callback->ends;
		}
		mtr_lock_give_(&shard->lock);
	}
	return at_ns;
}

/*
 * Takes the firing if the callback @seen still runs, under the lock its
 * end takes: that end then finds the firing taken and takes it back. A
 * callback that ended since, while the standby read /proc, leaves the
 * firing with the thread, which could otherwise never take it back: it
 * does so only as a callback of its own ends, and only the holder starts
 * callbacks.
 */
static bool
mtr_standby_take_over_(mtr_engine *engine, struct mtr_standby_seen seen)
{
	struct mtr_shard *shard = &engine->shards[seen.shard];
	struct mtr_callback *callback = &shard->callbacks[MTR_FIRER_THREAD];

	mtr_lock_take_(&shard->lock);
	bool running = callback->timer != 0 && callback->ends == seen.ends;
	if (running)
		atomic_store(&engine->firer, MTR_FIRER_STANDBY);
	mtr_lock_give_(&shard->lock);
	return running;
}

/*
 * Whether the firing thread is asleep in the kernel, as /proc says (its
 * state after the command's closing parenthesis). Without /proc, or with
 * no descriptor to read it, it counts as blocked.
 */
static bool
mtr_standby_thread_blocked_(mtr_engine *engine)
{
	char path[64], stat[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat",
	    (int)atomic_load(&engine->thread_tid));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	ssize_t n = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	if (n <= 0)
		return true;
	stat[n] = '\0';
	const char *end = strrchr(stat, ')');
	return end == NULL || end[1] != ' ' || end[2] != 'R';
}

static void *
mtr_standby_thread_(void *arg)
{
	mtr_engine *engine = arg;
	uint64_t expirations;

	mtr_firing_engine_ = engine;
	mtr_firer_ = MTR_FIRER_STANDBY;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	/* In a forked child the alarm is the parent's: a copy of the standby,
	 * back from the callback that forked, reads it no more. */
	while (!engine->inherited && !atomic_load(&engine->stopping) &&
	    atomic_load(&engine->fault) == 0) {
		int error = mtr_timerfd_ours_(&engine->alarm);
		if (error == 0 && read(engine->alarm.fd, &expirations,
		    sizeof(expirations)) < 0 && errno != EINTR)
			error = errno;
		if (error != 0)
			mtr_engine_fault_(engine, error);
		if (atomic_load(&engine->stopping) ||
		    atomic_load(&engine->fault) != 0)
			break;
		if (atomic_load(&engine->firer) == MTR_FIRER_THREAD) {
			int64_t now_ns = mtr_clock_read_(MTR_CLOCK_MONOTONIC);
			/* Moved on since it rang: the firing thread re-armed. */
			if (atomic_load(&engine->alarm_ns) > now_ns)
				continue;
			struct mtr_standby_seen seen = { 0, 0 };
			int64_t overrun_ns = mtr_standby_overrun_at_(engine,
			    &seen);
			/* Overrun but running or preempted: look again an
			 * overrun on. */
			if (overrun_ns <= now_ns &&
			    !mtr_standby_thread_blocked_(engine)) {
				mtr_queue_alarm_at_(engine, now_ns + MTR_OVERRUN_NS);
				continue;
			}
			if (overrun_ns > now_ns) {
				/* Not overrun (yet): look again when the running
				 * callback would overrun; while the thread is late
				 * between callbacks (a busy machine, a long take),
				 * an overrun on; else (the watch's second, nothing
				 * due) at the next expiry. */
				if (overrun_ns != INT64_MAX)
					mtr_queue_alarm_at_(engine, overrun_ns);
				else if (atomic_load(&engine->alarm_for_expiry))
					mtr_queue_alarm_at_(engine,
					    now_ns + MTR_OVERRUN_NS);
				else
					mtr_queue_set_alarm_(engine);
				continue;
			}
			if (!mtr_standby_take_over_(engine, seen)) {
				mtr_queue_set_alarm_(engine);
				continue;
			}
			atomic_fetch_add(&engine->takeovers, 1);
		}
		pthread_sigmask(SIG_SETMASK, &engine->callback_mask, NULL);
		mtr_fire_standby_pass_(engine);
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, NULL);
		mtr_queue_set_alarm_(engine);
	}
	/* In a forked child, a copy of the standby back from the callback
	 * that forked ends the engine as a copy of the firing thread would
	 * (the fork stopped it). */
	if (engine->inherited) {
		pthread_sigmask(SIG_SETMASK, &engine->callback_mask, NULL);
		mtr_engine_thread_gone_(engine);
	}
	return NULL;
}

/* Starts the standby; the caller has blocked every signal, as for the
 * firing thread. */
int
mtr_standby_start_(mtr_engine *engine)
{
	int rc = pthread_create(&engine->standby, NULL, mtr_standby_thread_,
	    engine);
	engine->standby_started = rc == 0;
	return rc;
}

/* Rings the alarm, which a stopping engine's standby leaves its loop on,
 * and waits for it. The firing thread joins it on its way out: the standby
 * may be in a callback, which a stop waits for as for the firing thread's. */
void
mtr_standby_join_(mtr_engine *engine)
{
	if (!engine->standby_started || engine->inherited)
		return;
	mtr_queue_ring_alarm_(engine);
	pthread_join(engine->standby, NULL);
	engine->standby_started = false;
}
