/*
 * The engine: its event_base, its firing thread and one timerfd per clock.
 *
 * The firing thread sleeps in libevent (epoll) on the timerfds. A timerfd,
 * unlike an epoll_wait or nanosleep timeout, is not stretched by the
 * thread's timer slack (50 us by default), so the wake-up lands on the
 * armed nanosecond as closely as the kernel's hrtimers allow.
 *
 * Only the firing thread touches the event_base once the engine runs
 * (create and destroy touch it while the thread is not running), so the
 * base needs no libevent locking and nothing waits for the firing thread: a
 * producer that makes a new earliest deadline calls timerfd_settime itself,
 * and destroy wakes the loop by expiring a timerfd.
 */
#include "mtr_internal.h"

#include <event2/event.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define MTR_DEFAULT_LATE_THRESHOLD_NS 1000000

void
mtr_engine_config_init(mtr_engine_config *config)
{
	memset(config, 0, sizeof(*config));
	config->cpu = -1;
	config->late_threshold_ns = MTR_DEFAULT_LATE_THRESHOLD_NS;
}

/* Moves a clock's timerfd to @target_ns (absolute), or disarms it for
 * INT64_MAX. Failure means a bad descriptor or argument: our bug. */
static void
mtr_clock_set_fd_locked_(struct mtr_clock_state *state, int64_t target_ns)
{
	struct itimerspec spec;
	int flags = TFD_TIMER_ABSTIME;

	memset(&spec, 0, sizeof(spec));
	if (target_ns != INT64_MAX) {
		/* it_value 0 would disarm; a past deadline must still fire. */
		if (target_ns < 1)
			target_ns = 1;
		spec.it_value.tv_sec = target_ns / 1000000000;
		spec.it_value.tv_nsec = target_ns % 1000000000;
	}
	if (state->set.clock == MTR_CLOCK_REALTIME)
		flags |= TFD_TIMER_CANCEL_ON_SET;
	while (timerfd_settime(state->fd, flags, &spec, NULL) != 0) {
		if (errno != EINTR) {
			fprintf(stderr, "CMetronome: timerfd_settime: %s\n",
			    strerror(errno));
			abort();
		}
	}
	state->armed_ns = target_ns;
}

int64_t
mtr_engine_wake_target_(const mtr_engine *engine, int64_t due_ns,
    int64_t deadline_ns)
{
	/*
	 * Waking exactly at the latest acceptable time would land every
	 * batch's first timer outside its window by the wake-up latency, so
	 * a timer with leeway wakes a margin early (see MTR_WAKE_MARGIN_MAX_NS).
	 * Every stab point moves by the same rule, so wake-ups stay at the
	 * optimum for windows shortened by their margin.
	 */
	int64_t margin_ns = (due_ns - deadline_ns) / 4;
	if (margin_ns > MTR_WAKE_MARGIN_MAX_NS)
		margin_ns = MTR_WAKE_MARGIN_MAX_NS;
	return due_ns - margin_ns - engine->config.spin_ns;
}

void
mtr_engine_rearm_locked_(mtr_engine *engine, mtr_clock_id clock)
{
	struct mtr_clock_state *state = &engine->clocks[clock];
	const struct mtr_heap_entry *top = mtr_timerset_top_locked_(&state->set);
	int64_t target_ns = top ? mtr_engine_wake_target_(engine,
	    top->due_ns, engine->timers[top->timer].deadline_ns) : INT64_MAX;

	/* Skip the syscall when the timerfd already expires then. */
	if (target_ns != state->armed_ns)
		mtr_clock_set_fd_locked_(state, target_ns);
}

/* Spins, unlocked, until @clock reads @deadline_ns or the engine stops. */
static void
mtr_engine_spin_until_locked_(mtr_engine *engine, mtr_clock_id clock,
    int64_t deadline_ns)
{
	pthread_mutex_unlock(&engine->lock);
	while (mtr_clock_read_(clock) < deadline_ns)
		__builtin_ia32_pause();
	pthread_mutex_lock(&engine->lock);
}

/* Computes the tick of @entry, already out of the set; a repeating timer
 * goes back in at its next deadline before its callback runs, so the
 * callback can cancel or re-arm it like any other thread. */
static void
mtr_engine_commit_locked_(mtr_engine *engine, mtr_clock_id clock,
    struct mtr_heap_entry entry, int64_t now_ns, mtr_tick *tick)
{
	uint32_t index = entry.timer;
	int64_t due_ns = entry.due_ns;
	struct mtr_timer *timer = &engine->timers[index];
	int64_t missed = 0;

	if (timer->period_ns > 0) {
		/* Later deadlines whose windows have closed are skipped: the
		 * firing stands for the last of them and reports how many it
		 * skipped, never bursting. One whose window is still open is
		 * not missed: it fires next. */
		int64_t closed_ns = now_ns - (due_ns - timer->deadline_ns) -
		    timer->deadline_ns;
		if (closed_ns > 0)
			missed = (closed_ns - 1) / timer->period_ns;
	}
	tick->scheduled_ns = timer->deadline_ns + missed * timer->period_ns;
	tick->fired_ns = now_ns;
	tick->missed = (uint64_t)missed;
	tick->sequence = timer->sequence + (uint64_t)missed;
	tick->timer = ((uint64_t)timer->generation << 32) | index;
	tick->clock = clock;

	int64_t next_ns;
	int64_t leeway_ns = due_ns - timer->deadline_ns;
	if (timer->period_ns > 0 && !__builtin_add_overflow(tick->scheduled_ns,
	    timer->period_ns, &next_ns) && next_ns <= INT64_MAX - leeway_ns) {
		timer->deadline_ns = next_ns;
		timer->sequence = tick->sequence + 1;
		/* Cannot fail: the entry's removal left room. */
		(void)mtr_timer_schedule_locked_(engine, index, clock,
		    next_ns + leeway_ns);
	}

	engine->counters.fired++;
	engine->counters.missed_periods += tick->missed;
	/* Late is measured from the earliest deadline this firing covers. */
	if (now_ns - due_ns > engine->config.late_threshold_ns)
		engine->counters.late++;
}

/*
 * Takes out the next timer to fire now, from the heap top or the batch,
 * whichever comes first in key order. The batch's entries are all due, so
 * one of them also goes first when the top's window has not opened yet.
 * Returns false when nothing is due; the engine may have unlocked to spin.
 */
static bool
mtr_engine_next_locked_(mtr_engine *engine, struct mtr_clock_state *state,
    struct mtr_heap_entry *out, int64_t *now_ns)
{
	struct mtr_batch *batch = &engine->batch;
	mtr_clock_id clock = state->set.clock;

	while (!engine->stopping) {
		const struct mtr_heap_entry *top =
		    mtr_timerset_top_locked_(&state->set);
		const struct mtr_heap_entry *queued =
		    mtr_batch_next_locked_(batch, engine->timers);
		*now_ns = mtr_clock_read_(clock);

		if (top != NULL && (queued == NULL ||
		    mtr_entry_before_(top, queued))) {
			int64_t deadline_ns =
			    engine->timers[top->timer].deadline_ns;
			if (deadline_ns <= *now_ns) {
				if (queued == NULL && mtr_batch_take_locked_(
				    batch, &state->set, engine->timers, *now_ns,
				    engine->next_order))
					continue;
				*out = *top;
				mtr_timerset_erase_locked_(&state->set,
				    engine->timers, 0);
				return true;
			}
			if (queued == NULL) {
				if (deadline_ns - *now_ns > engine->config.spin_ns)
					return false;
				mtr_engine_spin_until_locked_(engine, clock,
				    deadline_ns);
				continue; /* the set may have changed meanwhile */
			}
		}
		if (queued == NULL)
			return false;
		*out = *queued;
		engine->timers[queued->timer].heap_slot = MTR_NOT_ARMED;
		batch->next++;
		batch->live--;
		engine->counters.batched++;
		return true;
	}
	return false;
}

/*
 * One wake-up: fire, in key order, every timer whose window has opened.
 * Each callback runs unlocked; engine->running names it meanwhile so that
 * cancel_sync can wait for it and destroy can hand its context release to
 * this thread.
 */
static void
mtr_engine_fire_due_locked_(mtr_engine *engine, struct mtr_clock_state *state)
{
	mtr_clock_id clock = state->set.clock;
	uint64_t fired_this_wakeup = 0;
	struct mtr_heap_entry entry;
	int64_t now_ns;

	state->firing = true;
	state->armed_ns = INT64_MAX; /* it has expired */
	while (mtr_engine_next_locked_(engine, state, &entry, &now_ns)) {
		mtr_tick tick;
		mtr_engine_commit_locked_(engine, clock, entry, now_ns, &tick);
		if (fired_this_wakeup++ > 0)
			engine->counters.coalesced++;
		void *context = engine->timers[entry.timer].context;
		engine->running = tick.timer;

		pthread_mutex_unlock(&engine->lock);
		engine->config.on_fire(context, &tick);
		pthread_mutex_lock(&engine->lock);

		engine->running = 0;
		if (engine->release_running) {
			engine->release_running = false;
			if (engine->config.on_release != NULL) {
				pthread_mutex_unlock(&engine->lock);
				engine->config.on_release(context);
				pthread_mutex_lock(&engine->lock);
			}
		}
		if (engine->sync_waiters > 0)
			pthread_cond_broadcast(&engine->callback_done);
	}
	state->firing = false;
	mtr_engine_rearm_locked_(engine, clock);
}

static void
mtr_engine_on_timerfd_(evutil_socket_t fd, short what, void *arg)
{
	struct mtr_clock_state *state = arg;
	mtr_engine *engine = state->engine;
	uint64_t expirations;
	ssize_t n;

	(void)what;
	/* Edge-triggered: every expiry is one event, so the monotonic and
	 * boottime timerfds need no read (a syscall on the firing path); the
	 * next timerfd_settime resets their count. The wall clock's read is
	 * how the kernel reports a clock step. */
	if (state->set.clock == MTR_CLOCK_REALTIME) {
		do {
			n = read(fd, &expirations, sizeof(expirations));
		} while (n < 0 && errno == EINTR);
	} else {
		n = sizeof(expirations);
	}

	pthread_mutex_lock(&engine->lock);
	if (n == (ssize_t)sizeof(expirations)) {
		engine->counters.wakeups++;
	} else if (n < 0 && errno == ECANCELED) {
		/* The wall clock was set: re-evaluate every wall timer. */
		engine->counters.clock_steps++;
	} else if (n < 0 && errno != EAGAIN) {
		fprintf(stderr, "CMetronome: timerfd read: %s\n",
		    strerror(errno));
		abort();
	}
	mtr_engine_fire_due_locked_(engine, state);
	pthread_mutex_unlock(&engine->lock);
}

/* Retires every timer and releases its context; the firing thread does it
 * on its way out, so no callback can be running. */
static void
mtr_engine_drop_timers_(mtr_engine *engine)
{
	for (;;) {
		void *context = NULL;
		bool found = false;

		pthread_mutex_lock(&engine->lock);
		for (int c = 0; c < MTR_CLOCK_COUNT; c++)
			engine->clocks[c].set.count = 0;
		mtr_batch_free_(&engine->batch);
		while (engine->timer_high_water > 0 && !found) {
			struct mtr_timer *timer =
			    &engine->timers[--engine->timer_high_water];
			if (timer->generation & 1) {
				context = timer->context;
				found = true;
				engine->counters.timers--;
			}
		}
		engine->free_head = MTR_NOT_ARMED;
		pthread_mutex_unlock(&engine->lock);
		if (!found)
			return;
		if (engine->config.on_release != NULL)
			engine->config.on_release(context);
	}
}

static void
mtr_engine_free_(mtr_engine *engine)
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		struct mtr_clock_state *state = &engine->clocks[c];
		if (state->event != NULL)
			event_free(state->event);
		if (state->fd >= 0)
			close(state->fd);
		mtr_timerset_free_(&state->set);
	}
	if (engine->base != NULL)
		event_base_free(engine->base);
	free(engine->timers);
	pthread_cond_destroy(&engine->callback_done);
	pthread_mutex_destroy(&engine->lock);
	free(engine);
}

static bool
mtr_engine_stopping_(mtr_engine *engine)
{
	pthread_mutex_lock(&engine->lock);
	bool stopping = engine->stopping;
	pthread_mutex_unlock(&engine->lock);
	return stopping;
}

static void *
mtr_engine_thread_(void *arg)
{
	mtr_engine *engine = arg;

	while (!mtr_engine_stopping_(engine))
		event_base_loop(engine->base, EVLOOP_ONCE);
	mtr_engine_drop_timers_(engine);

	pthread_mutex_lock(&engine->lock);
	bool free_on_exit = engine->free_on_exit;
	pthread_mutex_unlock(&engine->lock);
	if (free_on_exit) {
		pthread_detach(pthread_self());
		mtr_engine_free_(engine);
	}
	return NULL;
}

/*
 * libevent's epoll backend opens a socketpair for signals and, when it
 * cannot, exits the process (evsig_init_). Probing for the descriptors
 * first turns exhaustion into EMFILE here instead.
 */
static int
mtr_engine_probe_descriptors_(void)
{
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		return errno;
	int epoll = epoll_create1(EPOLL_CLOEXEC);
	int rc = epoll < 0 ? errno : 0;
	close(pair[0]);
	close(pair[1]);
	if (epoll >= 0)
		close(epoll);
	return rc;
}

static int
mtr_engine_open_base_(mtr_engine *engine)
{
	int rc;
	/* The timerfds first: they fail cleanly when descriptors run out. */
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		engine->clocks[c].fd = timerfd_create(
		    mtr_clock_posix_((mtr_clock_id)c), TFD_NONBLOCK | TFD_CLOEXEC);
		if (engine->clocks[c].fd < 0)
			return errno;
	}
	if ((rc = mtr_engine_probe_descriptors_()) != 0)
		return rc;

	struct event_config *config = event_config_new();
	if (config == NULL)
		return ENOMEM;
	/* Without it libevent reads CLOCK_MONOTONIC_COARSE (1-4 ms). */
	event_config_set_flag(config, EVENT_BASE_FLAG_PRECISE_TIMER);
	event_config_set_flag(config, EVENT_BASE_FLAG_NOLOCK);
	/* Edge-triggered events (epoll) or nothing: with poll an unread
	 * timerfd would stay readable and spin the loop. EVENT_NOEPOLL and
	 * friends in the environment must not change that. */
	event_config_set_flag(config, EVENT_BASE_FLAG_IGNORE_ENV);
	event_config_require_features(config, EV_FEATURE_ET | EV_FEATURE_O1);
	errno = 0;
	engine->base = event_base_new_with_config(config);
	rc = errno;
	event_config_free(config);
	if (engine->base == NULL)
		return rc == EMFILE || rc == ENFILE ? rc : ENOMEM;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		struct mtr_clock_state *state = &engine->clocks[c];
		state->event = event_new(engine->base, state->fd,
		    EV_READ | EV_PERSIST | EV_ET, mtr_engine_on_timerfd_,
		    state);
		if (state->event == NULL || event_add(state->event, NULL) != 0)
			return ENOMEM;
	}
	return 0;
}

/* A refused setting is reported, not fatal: the engine still works. */
static void
mtr_engine_apply_thread_settings_(mtr_engine *engine)
{
	const mtr_engine_config *config = &engine->config;

	engine->info.cpu = -1;
	engine->info.spin_ns = config->spin_ns;
	if (config->realtime_priority > 0) {
		struct sched_param param = {
			.sched_priority = config->realtime_priority };
		int rc = pthread_setschedparam(engine->thread, SCHED_FIFO,
		    &param);
		engine->info.realtime_error = rc;
		engine->info.realtime_priority =
		    rc == 0 ? config->realtime_priority : 0;
	}
	if (config->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(config->cpu, &set);
		int rc = pthread_setaffinity_np(engine->thread, sizeof(set),
		    &set);
		engine->info.cpu_error = rc;
		engine->info.cpu = rc == 0 ? config->cpu : -1;
	}
}

static bool
mtr_engine_config_valid_(const mtr_engine_config *config)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF);

	return config->on_fire != NULL && config->realtime_priority >= 0 &&
	    config->realtime_priority <= 99 && config->spin_ns >= 0 &&
	    config->late_threshold_ns >= 0 && config->cpu >= -1 &&
	    config->cpu < cpus && config->cpu < CPU_SETSIZE;
}

int
mtr_engine_create(const mtr_engine_config *config, mtr_engine **out_engine)
{
	if (!mtr_engine_config_valid_(config))
		return EINVAL;
	mtr_engine *engine = calloc(1, sizeof(*engine));
	if (engine == NULL)
		return ENOMEM;
	engine->config = *config;
	if (engine->config.late_threshold_ns == 0)
		engine->config.late_threshold_ns =
		    MTR_DEFAULT_LATE_THRESHOLD_NS;
	engine->free_head = MTR_NOT_ARMED;
	pthread_mutex_init(&engine->lock, NULL);
	pthread_cond_init(&engine->callback_done, NULL);
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		engine->clocks[c].fd = -1;
		engine->clocks[c].engine = engine;
		engine->clocks[c].armed_ns = INT64_MAX;
		mtr_timerset_init_(&engine->clocks[c].set, (mtr_clock_id)c);
	}

	int rc = mtr_engine_open_base_(engine);
	if (rc == 0)
		rc = pthread_create(&engine->thread, NULL, mtr_engine_thread_,
		    engine);
	if (rc != 0) {
		mtr_engine_free_(engine);
		return rc;
	}
	mtr_engine_apply_thread_settings_(engine);
	*out_engine = engine;
	return 0;
}

/* Asks the firing thread to leave its loop. Returns whether the caller is
 * that thread. */
static bool
mtr_engine_request_stop_locked_(mtr_engine *engine)
{
	if (pthread_equal(pthread_self(), engine->thread))
		return true;
	if (!engine->stopping) {
		/* An expired timerfd stays readable, so this wake-up is never
		 * lost whatever the loop is doing. */
		mtr_clock_set_fd_locked_(&engine->clocks[MTR_CLOCK_MONOTONIC],
		    1);
	}
	engine->stopping = true;
	return false;
}

/* Joins the firing thread once, however many threads stop concurrently. */
static void
mtr_engine_join_locked_(mtr_engine *engine)
{
	if (engine->join_claimed) {
		while (!engine->joined)
			pthread_cond_wait(&engine->callback_done,
			    &engine->lock);
		return;
	}
	engine->join_claimed = true;
	pthread_mutex_unlock(&engine->lock);
	pthread_join(engine->thread, NULL);
	pthread_mutex_lock(&engine->lock);
	engine->joined = true;
	pthread_cond_broadcast(&engine->callback_done);
}

void
mtr_engine_stop(mtr_engine *engine)
{
	pthread_mutex_lock(&engine->lock);
	if (mtr_engine_request_stop_locked_(engine))
		engine->stopping = true; /* the loop ends after this callback */
	else
		mtr_engine_join_locked_(engine);
	pthread_mutex_unlock(&engine->lock);
}

void
mtr_engine_destroy(mtr_engine *engine)
{
	if (engine == NULL)
		return;
	pthread_mutex_lock(&engine->lock);
	if (mtr_engine_request_stop_locked_(engine)) {
		/* From a callback: the firing thread frees the engine on its
		 * way out, once the callback has returned. */
		engine->stopping = true;
		engine->free_on_exit = true;
		pthread_mutex_unlock(&engine->lock);
		return;
	}
	mtr_engine_join_locked_(engine);
	pthread_mutex_unlock(&engine->lock);
	mtr_engine_free_(engine);
}

int
mtr_engine_get_counters(mtr_engine *engine, mtr_counters *out_counters)
{
	pthread_mutex_lock(&engine->lock);
	*out_counters = engine->counters;
	out_counters->armed = 0;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++)
		out_counters->armed += engine->clocks[c].set.count;
	out_counters->armed += engine->batch.live;
	pthread_mutex_unlock(&engine->lock);
	return 0;
}

int
mtr_engine_get_info(mtr_engine *engine, mtr_engine_info *out_info)
{
	*out_info = engine->info;
	return 0;
}

int
mtr_engine_clock_changed(mtr_engine *engine, mtr_clock_id clock)
{
	if (!mtr_clock_valid_(clock))
		return EINVAL;
	pthread_mutex_lock(&engine->lock);
	engine->counters.clock_steps++;
	/* Expire the timerfd now: the firing thread fires what is due and
	 * re-arms for the rest. */
	mtr_clock_set_fd_locked_(&engine->clocks[clock], 1);
	pthread_mutex_unlock(&engine->lock);
	return 0;
}
