/*
 * A shard's lock: one word, free, held, or held with sleepers (the
 * three-state futex mutex), and the event cancel_sync sleeps on until a
 * callback ends. A header only: the uncontended paths inline into every
 * operation, and the contended ones stay out of line, marked cold.
 *
 * Every timer operation takes its shard's lock once, for a few dozen
 * instructions; glibc's adaptive mutex added two calls into libc to each.
 * Among a million timers an operation's cost is its cache miss on the
 * timer, and the fewer instructions lie between one operation's miss and
 * the next one's, the more the processor overlaps them (the README's
 * "Scale" section has the measurements).
 *
 * A contended take spins with doubling pauses before it sleeps, as glibc's
 * adaptive mutex does: the holder is usually done within the spin, a
 * thread arming in the shard would otherwise pay a futex sleep and wake-up
 * per operation, and the growing pauses leave the lock's line with its
 * holder, which may take it again at once.
 *
 * Under ThreadSanitizer the take and give are announced as a mutex's, so
 * that it checks the order in which threads take shard locks and the
 * engine's lock, as it does for a pthread mutex; bare atomics would give it
 * the ordering but not the lock. The fork handlers, which hold every shard
 * of every engine at once, take them unannounced: its deadlock detector
 * tracks 128 locks held by one thread, and two 64-shard engines hung it.
 */
#ifndef MTR_LOCK_H
#define MTR_LOCK_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define MTR_LOCK_ANNOUNCED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MTR_LOCK_ANNOUNCED 1
#endif
#endif

#ifdef MTR_LOCK_ANNOUNCED
#include <sanitizer/tsan_interface.h>
#define mtr_lock_announce_take_(lock) __tsan_mutex_pre_lock((lock), 0)
#define mtr_lock_announce_taken_(lock) __tsan_mutex_post_lock((lock), 0, 0)
#define mtr_lock_announce_give_(lock) __tsan_mutex_pre_unlock((lock), 0)
#define mtr_lock_announce_given_(lock) __tsan_mutex_post_unlock((lock), 0)
#else
#define mtr_lock_announce_take_(lock) ((void)(lock))
#define mtr_lock_announce_taken_(lock) ((void)(lock))
#define mtr_lock_announce_give_(lock) ((void)(lock))
#define mtr_lock_announce_given_(lock) ((void)(lock))
#endif

/* A contended take pauses 1, 2, 4, ... 64 times (127 in all), looking at
 * the lock after each round, before it sleeps: longer than a shard's
 * critical section, far shorter than a futex sleep and wake-up. */
#define MTR_LOCK_PAUSES 127

/* Zeroed, a lock is free and an event has no waiter. */
enum { MTR_LOCK_FREE, MTR_LOCK_HELD, MTR_LOCK_SLEEPERS };

struct mtr_lock {
	_Atomic uint32_t word;
};

struct mtr_event {
	_Atomic uint32_t epoch;
};

/* Tells the core it is in a spin-wait loop: a cheaper, friendlier spin. */
static inline void
mtr_spin_hint_(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* Sleeps while @word holds @expected. A wake-up, a changed word, EINTR and
 * a spurious return all send the caller back to look again. Neither call
 * changes errno: taking a lock must not, as glibc's mutex never did. */
static inline __attribute__((cold, noinline)) void
mtr_futex_wait_(_Atomic uint32_t *word, uint32_t expected)
{
	int saved_errno = errno;
	(void)syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL,
	    NULL, 0);
	errno = saved_errno;
}

static inline __attribute__((cold, noinline)) void
mtr_futex_wake_(_Atomic uint32_t *word, int count)
{
	int saved_errno = errno;
	(void)syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL,
	    0);
	errno = saved_errno;
}

static inline __attribute__((cold, noinline)) void
mtr_lock_take_contended_(struct mtr_lock *lock)
{
	/* A spinner may take the lock past sleepers: the one its last giver
	 * woke finds it held, marks it again and sleeps on. */
	for (uint32_t wait = 1, spun = 0; spun < MTR_LOCK_PAUSES;
	    spun += wait, wait *= 2) {
		for (uint32_t i = 0; i < wait; i++)
			mtr_spin_hint_();
		uint32_t state = atomic_load_explicit(&lock->word,
		    memory_order_relaxed);
		if (state == MTR_LOCK_FREE &&
		    atomic_compare_exchange_weak_explicit(&lock->word, &state,
		    MTR_LOCK_HELD, memory_order_acquire, memory_order_relaxed))
			return;
	}
	/* Taken from here on, the lock stays marked as having sleepers, so
	 * that its giver wakes the next: others may sleep still. */
	while (atomic_exchange_explicit(&lock->word, MTR_LOCK_SLEEPERS,
	    memory_order_acquire) != MTR_LOCK_FREE)
		mtr_futex_wait_(&lock->word, MTR_LOCK_SLEEPERS);
}

static inline void
mtr_lock_take_unannounced_(struct mtr_lock *lock)
{
	uint32_t expected = MTR_LOCK_FREE;
	if (!atomic_compare_exchange_strong_explicit(&lock->word, &expected,
	    MTR_LOCK_HELD, memory_order_acquire, memory_order_relaxed))
		mtr_lock_take_contended_(lock);
}

static inline void
mtr_lock_give_unannounced_(struct mtr_lock *lock)
{
	if (atomic_exchange_explicit(&lock->word, MTR_LOCK_FREE,
	    memory_order_release) == MTR_LOCK_SLEEPERS)
		mtr_futex_wake_(&lock->word, 1);
}

static inline void
mtr_lock_take_(struct mtr_lock *lock)
{
	mtr_lock_announce_take_(lock);
	mtr_lock_take_unannounced_(lock);
	mtr_lock_announce_taken_(lock);
}

static inline void
mtr_lock_give_(struct mtr_lock *lock)
{
	mtr_lock_announce_give_(lock);
	mtr_lock_give_unannounced_(lock);
	mtr_lock_announce_given_(lock);
}

/*
 * With @lock held: gives it up until @event is next signalled, then takes
 * it back. The epoch is read under @lock and moved under it, so a signal
 * between giving the lock up and sleeping changes it, and the sleep
 * returns at once; a wake-up that left it unchanged (a signal handler, a
 * stray wake of a reused word) sleeps again.
 */
static inline void
mtr_event_wait_(struct mtr_event *event, struct mtr_lock *lock)
{
	uint32_t seen = atomic_load_explicit(&event->epoch,
	    memory_order_relaxed);
	do {
		mtr_lock_give_(lock);
		mtr_futex_wait_(&event->epoch, seen);
		mtr_lock_take_(lock);
	} while (atomic_load_explicit(&event->epoch, memory_order_relaxed) ==
	    seen);
}

/* With the waiters' lock held: wakes every waiter. */
static inline void
mtr_event_signal_(struct mtr_event *event)
{
	atomic_fetch_add_explicit(&event->epoch, 1, memory_order_relaxed);
	mtr_futex_wake_(&event->epoch, INT_MAX);
}

#endif /* MTR_LOCK_H */
