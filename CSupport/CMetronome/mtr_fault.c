/*
 * A fault: one of the engine's descriptors closed or replaced under it (a
 * closefrom() sweep, say), which stops the engine. Whoever meets the
 * failure records it here; the firing thread, woken for it, leaves its
 * loop and stops the engine on its way out (mtr_engine_thread_, which says
 * how a thread that no descriptor can wake is woken).
 *
 * Which engine's firing thread the calling thread is lives here too: the
 * fault is the lowest of the files that ask.
 */
#include "mtr_engine_state.h"

#include <sys/timerfd.h>

_Thread_local mtr_engine *mtr_firing_engine_;

void
mtr_engine_fault_(mtr_engine *engine, int error)
{
	int none = 0;
	if (!atomic_compare_exchange_strong(&engine->fault, &none, error))
		return;
	/* The firing thread itself sees the fault when its pass returns.
	 * Another thread wakes it through a timerfd that still works, and
	 * cancels it only when none does (every descriptor gone): a last
	 * resort, since a cancellation unwinds the thread out of epoll_wait,
	 * which some tools (ThreadSanitizer) cannot follow. */
	if (mtr_firing_engine_ == engine)
		return;
	for (uint32_t s = 0; s < engine->shard_count; s++) {
		for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
			struct itimerspec spec = { .it_value = { 0, 1 } };
			int fd = engine->shards[s].clocks[c].fd;
			if (fd >= 0 && timerfd_settime(fd, TFD_TIMER_ABSTIME,
			    &spec, NULL) == 0)
				return;
		}
	}
	pthread_cancel(engine->thread);
}
