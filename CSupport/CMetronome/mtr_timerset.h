/*
 * A clock's armed timers: the timer record, its heap entry and the heap
 * (mtr_timerset.c). Nothing here takes a lock; every caller holds its
 * shard's.
 */
#ifndef MTR_TIMERSET_H
#define MTR_TIMERSET_H

#include "mtr_clock.h"

#include <stddef.h>
#include <sys/mman.h>

#define MTR_PAGE 4096
#define MTR_HUGE_PAGE (UINT32_C(2) << 20)

/* heap_slot of a timer that is in no timer set. */
#define MTR_NOT_ARMED UINT32_MAX
/* heap_slot keeps the clock in its top two bits and the heap index below. */
#define MTR_SLOT_INDEX_BITS 30
#define MTR_MAX_TIMERS (UINT32_C(1) << MTR_SLOT_INDEX_BITS)

/*
 * One timer: 56 bytes. A free slot reuses heap_slot as the free-list link;
 * generation is odd while the slot is allocated and even while free, so a
 * stale id never matches. A slot whose generation would wrap is retired
 * instead of reused (mtr_shard.c).
 *
 * order is the arm order of the timer's current schedule (every arm and
 * move takes a new one), or MTR_ORDER_NONE once it is cancelled: a heap
 * entry or a run list entry whose order is no longer its timer's stands
 * for a schedule that has gone.
 *
 * due_ns is the timer's key. A reschedule to a later key records the key
 * and its order here and leaves the heap entry where it is (mtr_queue.c):
 * the entry then lags, and whoever meets it first at the heap top or in a
 * bulk take gives it the recorded key (mtr_entry_rekey_).
 */
struct mtr_timer {
	void *context;
	int64_t deadline_ns; /* the window opens: the current deadline */
	int64_t due_ns;      /* the window closes: deadline + leeway */
	int64_t period_ns;   /* 0 for a one-shot */
	uint64_t order;
	/* The index of deadline_ns on the schedule: 62 bits last 146 years at
	 * a tick a nanosecond, even counted from 1970 on the wall clock. */
	uint64_t sequence : 62;
	uint64_t missed_policy : 2; /* mtr_missed_policy */
	uint32_t heap_slot;  /* clock and heap index, or MTR_NOT_ARMED */
	uint32_t generation;
};

/* Fetches a timer for writing ahead of use: both of its cache lines, since
 * a 56-byte slot often straddles two. */
static inline void
mtr_timer_prefetch_(const struct mtr_timer *timer)
{
	__builtin_prefetch(timer, 1);
	__builtin_prefetch((const char *)(timer + 1) - 1, 1);
}

/*
 * A heap entry carries its key, so sifting touches only the heap array.
 * Arm order takes 64 bits so that it never wraps: at a billion arms a
 * second a shard would need centuries to spend it, so no renumbering ever
 * stalls an arm. It costs the entry 8 bytes over a 32-bit order.
 */
struct mtr_heap_entry {
	/* deadline + leeway: the latest acceptable firing; no later than its
	 * timer's due_ns, which a later reschedule moves on alone */
	int64_t due_ns;
	uint64_t order;  /* arm order: equal keys fire first-armed first */
	uint32_t timer;  /* slot index */
};

/* Arm order stays below this (mtr_engine_age_for_testing cannot pass it). */
#define MTR_ORDER_MAX (UINT64_MAX >> 1)
/* The order of a timer with no schedule. */
#define MTR_ORDER_NONE UINT64_MAX

/* Whether @a fires before @b: by key, then by arm order. */
static inline bool
mtr_entry_before_(const struct mtr_heap_entry *a,
    const struct mtr_heap_entry *b)
{
	if (a->due_ns != b->due_ns)
		return a->due_ns < b->due_ns;
	return a->order < b->order;
}

/*
 * Gives @entry the key its timer recorded when rescheduled later, if the
 * entry's key lags; returns whether it did. The new key is later than the
 * old one, so a heap entry can only need to move down.
 */
static inline bool
mtr_entry_rekey_(struct mtr_heap_entry *entry, const struct mtr_timer *timers)
{
	const struct mtr_timer *timer = &timers[entry->timer];
	if (timer->order == entry->order)
		return false;
	entry->due_ns = timer->due_ns;
	entry->order = timer->order;
	return true;
}

struct mtr_timerset {
	struct mtr_heap_entry *entries;
	uint32_t count;
	uint32_t capacity;
	mtr_clock_id clock;
};

static inline uint32_t
mtr_slot_make_(mtr_clock_id clock, uint32_t heap_index)
{
	return ((uint32_t)clock << MTR_SLOT_INDEX_BITS) | heap_index;
}

static inline mtr_clock_id
mtr_slot_clock_(uint32_t slot)
{
	return (mtr_clock_id)(slot >> MTR_SLOT_INDEX_BITS);
}

static inline uint32_t
mtr_slot_index_(uint32_t slot)
{
	return slot & (MTR_MAX_TIMERS - 1);
}

/*
 * Asks for transparent huge pages under a big array (a hint: ignored where
 * THP is off). The timers and the heap are read at random when a burst
 * fires; with 4 KiB pages every such read also misses the TLB, and in a VM
 * a page walk is two-dimensional.
 */
static inline void
mtr_advise_huge_(void *array, size_t bytes)
{
	const uintptr_t page = MTR_PAGE;
	uintptr_t start = ((uintptr_t)array + page - 1) & ~(page - 1);
	uintptr_t end = ((uintptr_t)array + bytes) & ~(page - 1);
	if (end > start && end - start >= MTR_HUGE_PAGE)
		(void)madvise((void *)start, end - start, MADV_HUGEPAGE);
}

/* mtr_timerset.c: all called with the shard's lock held. */
void mtr_timerset_init_(struct mtr_timerset *set, mtr_clock_id clock);
void mtr_timerset_free_(struct mtr_timerset *set);
size_t mtr_timerset_bytes_(const struct mtr_timerset *set);
/* Halves the heap while no more than a quarter of it, @kept entries
 * besides its own counted, is in use. */
void mtr_timerset_shrink_locked_(struct mtr_timerset *set, uint32_t kept);
/* Room for @kept entries besides the heap's own and one more: 0, or ENOMEM
 * when the heap could not grow. */
int mtr_timerset_reserve_locked_(struct mtr_timerset *set, uint32_t kept);
/* Needs the room (mtr_timerset_reserve_locked_). */
void mtr_timerset_push_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers, uint32_t timer, int64_t due_ns, uint64_t order);
void mtr_timerset_erase_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers, uint32_t heap_index);
void mtr_timerset_rekey_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers, uint32_t heap_index, int64_t due_ns,
    uint64_t order);
const struct mtr_heap_entry *mtr_timerset_top_locked_(
    struct mtr_timerset *set, struct mtr_timer *timers);
/* @pass_order: the pass's cut-off; entries armed since are not counted. */
uint32_t mtr_timerset_count_due_locked_(const struct mtr_timerset *set,
    int64_t now_ns, uint64_t pass_order, uint32_t limit);
void mtr_timerset_rebuild_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers);

#endif /* MTR_TIMERSET_H */
