/*
 * The engine: its event_base, its firing thread, and its shards, each with
 * one timerfd per clock.
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
 * and destroy wakes the loop by expiring a timerfd. Each wake-up is
 * mtr_fire.c's; an engine's end, mtr_teardown.c's.
 *
 * A fault (a descriptor closed or replaced under the engine, mtr_fault.c)
 * is a flag that the firing thread reads between passes and before every
 * callback. What brings the thread to it when no timerfd of the engine can
 * wake it any more is the watch: a libevent timeout, once a second, in
 * which the thread checks that every timerfd is still its own
 * (mtr_timerfd_ours_). So one idle wake-up a second is what it costs that
 * a stop of an engine whose descriptors were all swept away returns, and
 * that arms on such an engine stop succeeding within a second; the
 * firing-thread fault tests (CoreFaultStopTests) hang without it. Nothing
 * else wakes or interrupts the thread: a cancellation would unwind it out
 * of epoll_wait, and glibc loads a library for that on first use, which
 * aborts the process when no descriptor is left to load it with.
 */
#include "mtr_engine_state.h"
#include "mtr_queue.h"

#include <event2/event.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define MTR_DEFAULT_LATE_THRESHOLD_NS 1000000
/* An event base on epoll opens an epoll instance and a signal pipe. */
#define MTR_BASE_DESCRIPTORS 3
/* How often the firing thread checks its descriptors (the watch). */
#define MTR_WATCH_S 1

void
mtr_engine_config_init(mtr_engine_config *config)
{
	memset(config, 0, sizeof(*config));
	config->cpu = -1;
	config->late_threshold_ns = MTR_DEFAULT_LATE_THRESHOLD_NS;
}

static void mtr_engine_request_stop_locked_(mtr_engine *engine);

/*
 * libevent's callback for a timerfd: the firing pass, under the creating
 * thread's signal mask. A process a callback starts (fork and exec,
 * posix_spawn, system) inherits the mask of the thread that starts it, and
 * must not start deaf to SIGTERM; outside the pass, which is nearly always,
 * every signal is blocked, so that a process-directed signal's handler runs
 * on another thread whenever one can take it.
 */
static void
mtr_engine_on_timerfd_(int fd, short what, void *arg)
{
	mtr_engine *engine = ((struct mtr_clock_state *)arg)->shard->engine;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &engine->callback_mask, NULL);
	atomic_store(&engine->pass_since_ns,
	    mtr_clock_read_(MTR_CLOCK_MONOTONIC));
	mtr_fire_on_timerfd_(fd, what, arg);
	atomic_store(&engine->pass_since_ns, INT64_MAX);
	mtr_queue_set_alarm_(engine);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
}

/* The watch: a timerfd that is no longer the engine's is the fault. */
static void
mtr_engine_watch_(int fd, short what, void *arg)
{
	mtr_engine *engine = arg;

	(void)fd;
	(void)what;
	if (engine->inherited)
		return;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			int error = mtr_timerfd_ours_(
			    &engine->shards[s].clocks[c].timerfd);
			if (error != 0)
				mtr_engine_fault_(engine, error);
		}
	}
	int error = engine->alarm.fd < 0 ? 0 : mtr_timerfd_ours_(&engine->alarm);
	if (error != 0)
		mtr_engine_fault_(engine, error);
}

/*
 * The firing thread's end: the stop, the standby joined, then the timers
 * dropped and the thread gone (mtr_engine_thread_gone_), under the creating
 * thread's mask (a release may start a process).
 */
static void
mtr_engine_thread_end_(mtr_engine *engine)
{
	pthread_sigmask(SIG_SETMASK, &engine->callback_mask, NULL);
	pthread_mutex_lock(&engine->lock);
	mtr_engine_request_stop_locked_(engine);
	pthread_mutex_unlock(&engine->lock);
	mtr_standby_join_(engine);
	mtr_engine_thread_gone_(engine);
}

/*
 * The firing thread: the loop until a stop or a fault, then its end. In a
 * forked child its copy, back from the callback that forked, leaves the
 * loop at once: the child's engines are stopped from the fork on.
 */
static void *
mtr_engine_thread_(void *arg)
{
	mtr_engine *engine = arg;

	mtr_firing_engine_ = engine;
	atomic_store(&engine->thread_tid, gettid());
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	while (!atomic_load_explicit(&engine->stopping, memory_order_acquire) &&
	    !atomic_load_explicit(&engine->fault, memory_order_acquire)) {
		errno = 0;
		if (event_base_loop(engine->base, EVLOOP_ONCE) < 0)
			mtr_engine_fault_(engine, errno != 0 ? errno : EIO);
	}
	mtr_engine_thread_end_(engine);
	return NULL;
}

/*
 * libevent's epoll backend opens an epoll instance and a signal pipe and,
 * when the pipe fails, exits the process (evsig_init_). Holding as many
 * descriptors as it needs, and giving them back just before it runs, turns
 * exhaustion into EMFILE here instead.
 */
static int
mtr_engine_reserve_descriptors_(int reserved[MTR_BASE_DESCRIPTORS])
{
	for (int i = 0; i < MTR_BASE_DESCRIPTORS; i++) {
		reserved[i] = eventfd(0, EFD_CLOEXEC);
		if (reserved[i] < 0) {
			int rc = errno;
			while (i-- > 0)
				close(reserved[i]);
			return rc;
		}
	}
	return 0;
}

static int
mtr_engine_open_base_(mtr_engine *engine)
{
	int reserved[MTR_BASE_DESCRIPTORS];
	int rc;
	/* The timerfds first: they fail cleanly when descriptors run out. The
	 * standby's alarm blocks its reads. */
	if (!engine->config.no_standby) {
		if ((rc = mtr_timerfd_open_(&engine->alarm, MTR_CLOCK_MONOTONIC,
		    TFD_CLOEXEC)) != 0)
			return rc;
		mtr_queue_set_alarm_(engine);
	}
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			rc = mtr_timerfd_open_(
			    &engine->shards[s].clocks[c].timerfd,
			    (mtr_clock_id)c, TFD_NONBLOCK | TFD_CLOEXEC);
			if (rc != 0)
				return rc;
		}
	}

	struct event_config *config = event_config_new();
	if (config == NULL)
		return ENOMEM;
	/* No EVENT_BASE_FLAG_PRECISE_TIMER: the engine registers no libevent
	 * timeout, and the flag costs a timerfd and a timerfd_settime before
	 * every epoll_wait. */
	event_config_set_flag(config, EVENT_BASE_FLAG_NOLOCK);
	/* Edge-triggered events (epoll) or nothing: with poll an unread
	 * timerfd would stay readable and spin the loop. EVENT_NOEPOLL and
	 * friends in the environment must not change that. */
	event_config_set_flag(config, EVENT_BASE_FLAG_IGNORE_ENV);
	event_config_require_features(config, EV_FEATURE_ET | EV_FEATURE_O1);
	if ((rc = mtr_engine_reserve_descriptors_(reserved)) != 0) {
		event_config_free(config);
		return rc;
	}
	for (int i = 0; i < MTR_BASE_DESCRIPTORS; i++)
		close(reserved[i]);
	errno = 0;
	engine->base = event_base_new_with_config(config);
	rc = errno;
	event_config_free(config);
	if (engine->base == NULL)
		return rc == EMFILE || rc == ENFILE ? rc : ENOMEM;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			struct mtr_clock_state *state =
			    &engine->shards[s].clocks[c];
			state->event = event_new(engine->base, state->timerfd.fd,
			    EV_READ | EV_PERSIST | EV_ET,
			    mtr_engine_on_timerfd_, state);
			if (state->event == NULL ||
			    event_add(state->event, NULL) != 0)
				return ENOMEM;
		}
	}
	struct timeval every = { .tv_sec = MTR_WATCH_S };
	engine->watch = event_new(engine->base, -1, EV_PERSIST,
	    mtr_engine_watch_, engine);
	if (engine->watch == NULL || event_add(engine->watch, &every) != 0)
		return ENOMEM;
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

/* Names the firing thread as top -H and gdb show it: the configured name,
 * or metronome-N for the N-th engine of the process. */
static void
mtr_engine_name_thread_(mtr_engine *engine)
{
	static _Atomic uint32_t engines_created;
	uint32_t number = atomic_fetch_add_explicit(&engines_created, 1,
	    memory_order_relaxed) + 1;

	if (engine->config.name != NULL && engine->config.name[0] != '\0')
		snprintf(engine->info.name, sizeof(engine->info.name), "%s",
		    engine->config.name);
	else
		snprintf(engine->info.name, sizeof(engine->info.name),
		    "metronome-%u", number);
	engine->config.name = NULL; /* the caller's string is not kept */
	(void)pthread_setname_np(engine->thread, engine->info.name);
	if (engine->standby_started) {
		char standby[MTR_THREAD_NAME_MAX];
		snprintf(standby, sizeof(standby), "%.*s.s",
		    MTR_THREAD_NAME_MAX - 3, engine->info.name);
		(void)pthread_setname_np(engine->standby, standby);
	}
}

/* Which setting is out of range, or 0 for a valid configuration. */
int
mtr_engine_config_check(const mtr_engine_config *config,
    mtr_engine_setting *out_setting)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	mtr_engine_setting bad = MTR_SETTING_NONE;

	if (config->on_fire == NULL)
		bad = MTR_SETTING_ON_FIRE;
	else if (config->realtime_priority < 0 ||
	    config->realtime_priority > MTR_REALTIME_PRIORITY_MAX)
		bad = MTR_SETTING_REALTIME_PRIORITY;
	else if (config->cpu < -1 || config->cpu >= cpus ||
	    config->cpu >= CPU_SETSIZE)
		bad = MTR_SETTING_CPU;
	else if (config->spin_ns < 0 || config->spin_ns > MTR_SPIN_MAX_NS)
		bad = MTR_SETTING_SPIN;
	else if (config->late_threshold_ns <= 0)
		bad = MTR_SETTING_LATE_THRESHOLD;
	else if (config->shards > MTR_SHARDS_MAX)
		bad = MTR_SETTING_SHARDS;
	*out_setting = bad;
	return bad == MTR_SETTING_NONE ? 0 : EINVAL;
}

int
mtr_engine_create(const mtr_engine_config *config, mtr_engine **out_engine)
{
	mtr_engine_setting bad;
	if (mtr_engine_config_check(config, &bad) != 0)
		return EINVAL;
	mtr_engine *engine = calloc(1, sizeof(*engine));
	if (engine == NULL)
		return ENOMEM;
	uint32_t count = config->shards > 1 ? config->shards : 1;
	engine->shards = aligned_alloc(_Alignof(struct mtr_shard),
	    count * sizeof(*engine->shards));
	if (engine->shards == NULL) {
		free(engine);
		return ENOMEM;
	}
	engine->shard_count = count;
	engine->config = *config;
	engine->holds = 2; /* the owner's and the firing thread's */
	engine->alarm.fd = -1;
	engine->alarm_ns = INT64_MAX;
	engine->pass_since_ns = INT64_MAX;
	pthread_mutex_init(&engine->lock, NULL);
	pthread_cond_init(&engine->thread_done, NULL);
	for (uint32_t s = 0; s < count; s++)
		mtr_shard_init_(&engine->shards[s], engine, s, count);
	mtr_fork_register_(engine);

	int rc = mtr_engine_open_base_(engine);
	if (rc == 0) {
		/* The firing thread starts with every signal blocked, so the
		 * process's handlers run on its other threads, never inside the
		 * (perhaps real-time) firing loop; callbacks get the mask the
		 * process had (mtr_engine_on_timerfd_). The standby first, so
		 * that the firing thread, which joins it, finds it started;
		 * without one the engine still works, and a handler that
		 * blocks then holds up the others. */
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &engine->callback_mask);
		if (!engine->config.no_standby)
			(void)mtr_standby_start_(engine);
		rc = pthread_create(&engine->thread, NULL, mtr_engine_thread_,
		    engine);
		pthread_sigmask(SIG_SETMASK, &engine->callback_mask, NULL);
	}
	if (rc != 0) {
		atomic_store(&engine->stopping, true);
		mtr_standby_join_(engine);
		mtr_engine_free_(engine);
		return rc;
	}
	mtr_engine_name_thread_(engine);
	mtr_engine_apply_thread_settings_(engine);
	*out_engine = engine;
	return 0;
}

/*
 * Has every shard refuse what would arm, then asks the firing thread to
 * leave its loop. In that order: the firing thread reads the stop without
 * the engine lock, and once it sees it, it drops every shard's timers, which
 * no timer created later may escape. Idempotent.
 */
static void
mtr_engine_request_stop_locked_(mtr_engine *engine)
{
	atomic_store(&engine->stop_requested, true);
	if (atomic_load_explicit(&engine->stopping, memory_order_relaxed))
		return;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		struct mtr_shard *shard = &engine->shards[s];
		mtr_lock_take_(&shard->lock);
		shard->stopping = true;
		mtr_lock_give_(&shard->lock);
	}
	atomic_store_explicit(&engine->stopping, true, memory_order_release);
	/* An expired timerfd stays readable, so this wake-up is never lost
	 * whatever the loop is doing; moving it ends a spin. Should the
	 * timerfd be gone, that is a fault, which the watch brings the
	 * thread to. */
	struct mtr_shard *first = &engine->shards[0];
	mtr_lock_take_(&first->lock);
	mtr_queue_set_fd_locked_(&first->clocks[MTR_CLOCK_MONOTONIC], 1);
	mtr_lock_give_(&first->lock);
	mtr_queue_ring_alarm_(engine);
}

/* Waits, holding the engine, until the firing thread has finished: joins
 * it once, however many threads stop concurrently. */
static void
mtr_engine_join_locked_(mtr_engine *engine)
{
	if (engine->join_claimed) {
		while (!engine->joined)
			pthread_cond_wait(&engine->thread_done, &engine->lock);
		return;
	}
	engine->join_claimed = true;
	pthread_mutex_unlock(&engine->lock);
	pthread_join(engine->thread, NULL);
	pthread_mutex_lock(&engine->lock);
	engine->joined = true;
	pthread_cond_broadcast(&engine->thread_done);
}

/*
 * Stops the engine, waits for its firing thread to finish, drops what that
 * left, and with @destroy lets go of the owner's reference. Returns 0, or
 * EINPROGRESS when it could not wait.
 *
 * A firing thread waits for no other: this engine's, in a callback, would
 * wait for itself, and another engine's could close a cycle of engines
 * waiting on each other's callbacks. There the call only asks for the stop,
 * and the engine's firing thread finishes it when its callback returns. In
 * a forked child no firing thread is left to wait for (but a copy of one
 * inside the callback that forked, which finishes the stop itself), so the
 * caller drops the timers. Its hold is on mtr_holds_ meanwhile: a release
 * it runs may fork.
 *
 * Not a cancellation point: a thread cancelled while it waits here for the
 * join would die holding the engine's lock, or its hold, and leave the
 * firing thread unjoined. The cancellation acts at the caller's next
 * cancellation point after the call.
 */
static int
mtr_engine_shut_(mtr_engine *engine, bool destroy)
{
	struct mtr_hold hold = {
		.engine = engine, .count = destroy ? 2 : 1, .next = mtr_holds_ };
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	mtr_engine_hold_(engine);
	mtr_holds_ = &hold;
	pthread_mutex_lock(&engine->lock);
	engine->destroyed |= destroy;
	mtr_engine_request_stop_locked_(engine);
	if (!engine->joined && mtr_firing_engine_ == NULL)
		mtr_engine_join_locked_(engine);
	bool gone = engine->joined;
	pthread_mutex_unlock(&engine->lock);
	if (gone)
		mtr_engine_drop_timers_(engine);
	mtr_holds_ = hold.next;
	mtr_engine_let_go_(engine, hold.count);
	pthread_setcancelstate(cancel_state, NULL);
	return gone ? 0 : EINPROGRESS;
}

int
mtr_engine_stop(mtr_engine *engine)
{
	return mtr_engine_shut_(engine, false);
}

int
mtr_engine_destroy(mtr_engine *engine)
{
	return engine != NULL ? mtr_engine_shut_(engine, true) : 0;
}

int
mtr_engine_was_stopped(const mtr_engine *engine)
{
	return atomic_load(&engine->stop_requested);
}

/* Sums every shard's counters, each a snapshot under its lock. */
int
mtr_engine_get_counters(mtr_engine *engine, mtr_counters *out_counters)
{
	memset(out_counters, 0, sizeof(*out_counters));
	for (uint32_t s = 0; s < engine->shard_count; s++)
		mtr_shard_add_counters_(&engine->shards[s], out_counters);
	out_counters->takeovers = atomic_load(&engine->takeovers);
	return 0;
}

int
mtr_engine_get_info(mtr_engine *engine, mtr_engine_info *out_info)
{
	*out_info = engine->info;
	out_info->fault = atomic_load(&engine->fault);
	return 0;
}

int
mtr_engine_clock_changed(mtr_engine *engine, mtr_clock_id clock)
{
	if (!mtr_clock_valid_(clock))
		return EINVAL;
	int rc = 0;
	for (uint32_t s = 0; s < engine->shard_count && rc == 0; s++) {
		struct mtr_shard *shard = &engine->shards[s];
		mtr_lock_take_(&shard->lock);
		/* Stopped, the timerfd is nobody's to move; in a forked
		 * child it is the parent's. */
		if (shard->stopping) {
			rc = ESHUTDOWN;
		} else {
			if (s == 0)
				shard->counters.clock_steps++;
			/* Expire the timerfd now: the firing thread fires
			 * what is due and re-arms for the rest. */
			mtr_queue_set_fd_locked_(&shard->clocks[clock], 1);
		}
		mtr_lock_give_(&shard->lock);
	}
	return rc;
}
