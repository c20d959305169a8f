/*
 * fork(): what a child may do with the engines it inherits.
 *
 * A child gets a copy of every engine's memory but not its firing thread,
 * and it shares the engine's descriptors with the parent: the same timerfds
 * and the same epoll instance. Arming a timer there would move the parent's
 * wake-up; freeing the event base would remove the parent's timerfds from
 * their shared epoll set. So an engine is dead in the child from the
 * instant of the fork: it arms nothing (mtr_queue_set_fd_locked_ and the
 * firing path touch no descriptor of an inherited engine), cancel and
 * destroy only edit the child's memory, and destroying it closes the
 * child's copies of the timerfds before it frees the event base, so that
 * nothing reaches the parent's epoll set (mtr_teardown.c).
 *
 * A fork inside a callback makes a child whose one thread is a copy of the
 * firing thread, still in that callback. That engine keeps its firing
 * thread in the child: its running callback stays running, a stop or
 * destroy from it is finished by the copy when the callback returns, and
 * the copy then leaves its loop, drops the timers and exits.
 *
 * The handlers hold every live engine's locks across fork(), and the
 * shared slot's, so the child never inherits a lock taken by a thread that
 * does not exist there. Lock order: the shared slot, the registry, then
 * each engine, then its shards. The shared slot's lock is held while its
 * engine is made, which registers it, hence first.
 *
 * The shared slot is the process-wide slot of a binding's shared engine
 * (the Swift layer's TimerEngine.shared). Its engine is looked up, and
 * made on first use, under the slot's lock: a child never inherits it held
 * or its engine half made, so its first use there makes the child an
 * engine of its own. The slot is static storage: nothing is set up at run
 * time that a fork could catch half done.
 */
#include "mtr_engine_state.h"

static pthread_mutex_t mtr_shared_mutex = PTHREAD_MUTEX_INITIALIZER;
static void *mtr_shared_slot;
static pthread_mutex_t mtr_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mtr_engine *mtr_registry_head;
static pthread_once_t mtr_handlers_once = PTHREAD_ONCE_INIT;
uint32_t mtr_fork_count_;
_Thread_local struct mtr_hold *mtr_holds_;

static void
mtr_fork_prepare_(void)
{
	pthread_mutex_lock(&mtr_shared_mutex);
	pthread_mutex_lock(&mtr_registry_lock);
	for (mtr_engine *e = mtr_registry_head; e != NULL; e = e->fork_next) {
		pthread_mutex_lock(&e->lock);
		for (uint32_t s = 0; s < e->shard_count; s++)
			mtr_lock_take_unannounced_(&e->shards[s].lock);
	}
}

static void
mtr_fork_parent_(void)
{
	for (mtr_engine *e = mtr_registry_head; e != NULL; e = e->fork_next) {
		for (uint32_t s = 0; s < e->shard_count; s++)
			mtr_lock_give_unannounced_(&e->shards[s].lock);
		pthread_mutex_unlock(&e->lock);
	}
	pthread_mutex_unlock(&mtr_registry_lock);
	pthread_mutex_unlock(&mtr_shared_mutex);
}

static void
mtr_fork_child_(void)
{
	mtr_fork_count_++;
	for (mtr_engine *e = mtr_registry_head; e != NULL; e = e->fork_next) {
		/* Whether this thread copies e's firing thread, in a callback. */
		bool copy = mtr_firing_engine_ == e;
		e->inherited = true;
		atomic_store(&e->stopping, true);
		/* The owner's reference unless destroy was called, the copy's,
		 * and those this thread holds in a stop or destroy (a release
		 * it runs forked); the parent's other holders are threads the
		 * child lacks. Nobody joins: the copy is the child's own
		 * thread, and ends the stop itself. */
		uint32_t holds = (e->destroyed ? 0 : 1) + (copy ? 1 : 0);
		for (struct mtr_hold *h = mtr_holds_; h != NULL; h = h->next) {
			if (h->engine == e)
				holds += h->count;
		}
		atomic_store(&e->holds, holds);
		e->join_claimed = true;
		e->joined = !copy;
		atomic_store(&e->spinning, NULL);
		/* Waiters of the parent's threads may be recorded in a
		 * condition variable. */
		pthread_cond_init(&e->thread_done, NULL);
		for (uint32_t s = 0; s < e->shard_count; s++) {
			struct mtr_shard *shard = &e->shards[s];
			shard->stopping = true;
			for (int f = 0; f < MTR_FIRERS; f++) {
				if (!copy || f != (int)mtr_firer_)
					shard->callbacks[f].timer = 0;
				shard->callbacks[f].waiters = 0;
			}
			mtr_lock_give_unannounced_(&shard->lock);
		}
		pthread_mutex_unlock(&e->lock);
	}
	pthread_mutex_unlock(&mtr_registry_lock);
	pthread_mutex_unlock(&mtr_shared_mutex);
}

static void
mtr_fork_install_(void)
{
	(void)pthread_atfork(mtr_fork_prepare_, mtr_fork_parent_,
	    mtr_fork_child_);
}

void
mtr_fork_watch(void)
{
	pthread_once(&mtr_handlers_once, mtr_fork_install_);
}

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
mtr_fork_register_(mtr_engine *engine)
{
	pthread_once(&mtr_handlers_once, mtr_fork_install_);
	pthread_mutex_lock(&mtr_registry_lock);
	engine->fork_prev = NULL;
	engine->fork_next = mtr_registry_head;
	if (mtr_registry_head != NULL)
		mtr_registry_head->fork_prev = engine;
	mtr_registry_head = engine;
	pthread_mutex_unlock(&mtr_registry_lock);
}

void
mtr_fork_unregister_(mtr_engine *engine)
{
	pthread_mutex_lock(&mtr_registry_lock);
	if (engine->fork_prev != NULL)
		engine->fork_prev->fork_next = engine->fork_next;
	else if (mtr_registry_head == engine)
		mtr_registry_head = engine->fork_next;
	if (engine->fork_next != NULL)
		engine->fork_next->fork_prev = engine->fork_prev;
	engine->fork_prev = engine->fork_next = NULL;
	pthread_mutex_unlock(&mtr_registry_lock);
}

int
mtr_engine_is_inherited(const mtr_engine *engine)
{
	/* Written only by the child's handler, before the child has a
	 * second thread: no lock needed to read it. */
	return engine->inherited;
}
