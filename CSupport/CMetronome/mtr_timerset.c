/*
 * The timer set: one indexed 4-ary min-heap per clock, keyed on each timer's
 * latest acceptable firing time (deadline + leeway).
 *
 * Why a heap and not a timing wheel: a heap gives exact deadlines with no
 * granularity to tune and no cascading, and its cost stayed far inside the
 * targets when measured (`metronome scale`, README): with a million timers
 * armed, an add lands near the leaves (random keys sift up O(1) on average)
 * and a cancel of a random timer moves the last leaf into its place, so
 * add+cancel pairs run at several million a second on one thread. Four
 * children per node halve the depth of a binary heap and keep each node's
 * children in one 64-byte cache line (16-byte entries). The key sits in the
 * entry itself so sifting never touches the timers.
 *
 * Each timer stores its heap index (heap_slot), making cancel O(log n), as
 * libevent's min_heap_erase_ does with min_heap_idx.
 *
 * Coalescing (the rule lives here and in the firing loop, mtr_engine.c):
 * the timerfd is armed at the smallest key (less a wake-up margin, see
 * mtr_engine_wake_target_), and each wake-up pops in key order
 * while the top's window has opened. For a fixed set of windows this
 * wakes at exactly the points of the greedy minimum interval stabbing, so
 * wake-ups are optimal; a timer whose window opened but whose key is behind
 * an unopened one fires at a later wake-up, still inside its window.
 */
#include "mtr_internal.h"

#include <errno.h>
#include <stdlib.h>

#define MTR_ARITY 4

static inline bool
mtr_heap_before_(const struct mtr_heap_entry *a, const struct mtr_heap_entry *b)
{
	if (a->due_ns != b->due_ns)
		return a->due_ns < b->due_ns;
	/* Wrapping comparison: arm order stays right across 2^31 arms. */
	return (int32_t)(a->order - b->order) < 0;
}

static inline void
mtr_heap_place_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index, struct mtr_heap_entry entry)
{
	set->entries[index] = entry;
	timers[entry.timer].heap_slot = mtr_slot_make_(set->clock, index);
}

static void
mtr_heap_sift_up_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index, struct mtr_heap_entry entry)
{
	while (index > 0) {
		uint32_t parent = (index - 1) / MTR_ARITY;
		if (!mtr_heap_before_(&entry, &set->entries[parent]))
			break;
		mtr_heap_place_(set, timers, index, set->entries[parent]);
		index = parent;
	}
	mtr_heap_place_(set, timers, index, entry);
}

static void
mtr_heap_sift_down_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index, struct mtr_heap_entry entry)
{
	for (;;) {
		uint64_t first = (uint64_t)index * MTR_ARITY + 1;
		if (first >= set->count)
			break;
		uint32_t last = first + MTR_ARITY <= set->count
		    ? (uint32_t)first + MTR_ARITY : set->count;
		uint32_t best = (uint32_t)first;
		for (uint32_t child = best + 1; child < last; child++) {
			if (mtr_heap_before_(&set->entries[child],
			    &set->entries[best]))
				best = child;
		}
		if (!mtr_heap_before_(&set->entries[best], &entry))
			break;
		mtr_heap_place_(set, timers, index, set->entries[best]);
		index = best;
	}
	mtr_heap_place_(set, timers, index, entry);
}

void
mtr_timerset_init_(struct mtr_timerset *set, mtr_clock_id clock)
{
	set->entries = NULL;
	set->count = 0;
	set->capacity = 0;
	set->clock = clock;
}

void
mtr_timerset_free_(struct mtr_timerset *set)
{
	free(set->entries);
	mtr_timerset_init_(set, set->clock);
}

int
mtr_timerset_push_locked_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t timer, int64_t due_ns, uint32_t order)
{
	if (set->count == set->capacity) {
		uint32_t capacity = set->capacity ? set->capacity * 2 : 64;
		if (capacity > MTR_MAX_TIMERS)
			capacity = MTR_MAX_TIMERS;
		if (capacity == set->count)
			return ENOMEM;
		struct mtr_heap_entry *entries = realloc(set->entries,
		    (size_t)capacity * sizeof(*entries));
		if (entries == NULL)
			return ENOMEM;
		set->entries = entries;
		set->capacity = capacity;
	}
	struct mtr_heap_entry entry = { due_ns, timer, order };
	mtr_heap_sift_up_(set, timers, set->count++, entry);
	return 0;
}

void
mtr_timerset_erase_locked_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index)
{
	timers[set->entries[index].timer].heap_slot = MTR_NOT_ARMED;
	struct mtr_heap_entry last = set->entries[--set->count];
	if (index == set->count)
		return;
	/*
	 * The last entry moves into the hole. It can belong above the hole
	 * (it came from another subtree) or below it, never both, so one of
	 * the two sifts is a no-op.
	 */
	if (index > 0 && mtr_heap_before_(&last,
	    &set->entries[(index - 1) / MTR_ARITY]))
		mtr_heap_sift_up_(set, timers, index, last);
	else
		mtr_heap_sift_down_(set, timers, index, last);
}

const struct mtr_heap_entry *
mtr_timerset_top_locked_(const struct mtr_timerset *set)
{
	return set->count ? &set->entries[0] : NULL;
}
