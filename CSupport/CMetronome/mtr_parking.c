/*
 * The parking places of the Swift layer's one-word locks (mtr_parking.h).
 *
 * Why in C: a table built lazily (a Swift global) is built by the first
 * thread that ever waits, and that thread registers the fork handlers. A
 * fork() meanwhile blocks the registration until the child is made, so the
 * child inherits the table marked "being built" and its first waiter waits
 * on that for good. Here the places need no building, and the handlers are
 * installed with pthread_once, which glibc restarts in a child forked while
 * it ran.
 */
#include "mtr_parking.h"

#include <pthread.h>
#include <stddef.h>

struct mtr_parking_place {
	pthread_mutex_t mutex;
	pthread_cond_t condition;
};

static struct mtr_parking_place mtr_places[MTR_PARKING_PLACES] = {
	[0 ... MTR_PARKING_PLACES - 1] = {
		PTHREAD_MUTEX_INITIALIZER,
		PTHREAD_COND_INITIALIZER,
	},
};
static pthread_once_t mtr_parking_once = PTHREAD_ONCE_INIT;

/* The child must not inherit a place's mutex taken by a thread it lacks,
 * nor waiters recorded in a condition variable. */
static void
mtr_parking_prepare_(void)
{
	for (uint32_t i = 0; i < MTR_PARKING_PLACES; i++)
		pthread_mutex_lock(&mtr_places[i].mutex);
}

static void
mtr_parking_parent_(void)
{
	for (uint32_t i = 0; i < MTR_PARKING_PLACES; i++)
		pthread_mutex_unlock(&mtr_places[i].mutex);
}

static void
mtr_parking_child_(void)
{
	for (uint32_t i = 0; i < MTR_PARKING_PLACES; i++) {
		pthread_cond_init(&mtr_places[i].condition, NULL);
		pthread_mutex_unlock(&mtr_places[i].mutex);
	}
}

static void
mtr_parking_install_(void)
{
	(void)pthread_atfork(mtr_parking_prepare_, mtr_parking_parent_,
	    mtr_parking_child_);
}

void
mtr_parking_lock(uint32_t place)
{
	/* Installed before any place is first taken: a fork before then
	 * finds every place free. */
	pthread_once(&mtr_parking_once, mtr_parking_install_);
	pthread_mutex_lock(&mtr_places[place % MTR_PARKING_PLACES].mutex);
}

void
mtr_parking_unlock(uint32_t place)
{
	pthread_mutex_unlock(&mtr_places[place % MTR_PARKING_PLACES].mutex);
}

void
mtr_parking_wait(uint32_t place)
{
	struct mtr_parking_place *p = &mtr_places[place % MTR_PARKING_PLACES];
	pthread_cond_wait(&p->condition, &p->mutex);
}

void
mtr_parking_wake_all(uint32_t place)
{
	struct mtr_parking_place *p = &mtr_places[place % MTR_PARKING_PLACES];
	pthread_cond_broadcast(&p->condition);
}
