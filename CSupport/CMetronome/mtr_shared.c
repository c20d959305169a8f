/*
 * The process-wide slot of a binding's shared engine (the Swift layer's
 * TimerEngine.shared). Its engine is looked up, and made on first use,
 * under this slot's lock, which the fork handlers hold across fork()
 * (mtr_fork.c): a child never inherits it held or its engine half made,
 * so its first use there makes the child an engine of its own. The slot is
 * static storage: nothing is set up at run time that a fork could catch
 * half done.
 */
#include "mtr_engine.h"

static pthread_mutex_t mtr_shared_mutex = PTHREAD_MUTEX_INITIALIZER;
static void *mtr_shared_slot;

void *
mtr_shared_lock(void)
{
	/* The fork handlers go in before the lock is first taken, so a fork
	 * before then finds it free. */
	mtr_fork_watch();
	pthread_mutex_lock(&mtr_shared_mutex);
	return mtr_shared_slot;
}

void
mtr_shared_unlock(void *value)
{
	mtr_shared_slot = value;
	pthread_mutex_unlock(&mtr_shared_mutex);
}

void
mtr_shared_hold_for_fork_(void)
{
	pthread_mutex_lock(&mtr_shared_mutex);
}

void
mtr_shared_release_after_fork_(void)
{
	pthread_mutex_unlock(&mtr_shared_mutex);
}
