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
 * children per node halve the depth of a binary heap, and the array starts
 * MTR_HEAP_PAD entries into a 64-byte aligned block so that each node's four
 * 24-byte children fill exactly two adjacent cache lines, never three. The
 * key sits in the entry itself so sifting never touches the timers.
 *
 * Draining a big burst one pop at a time is bound by those misses (a pop
 * from a million-entry heap walks ten levels of a 16 MB array), so when
 * a large part of the heap is due, the run list (mtr_run.c) takes all of it
 * in linear passes and sorts it, and mtr_timerset_rebuild_locked_ rebuilds
 * the rest in O(n).
 *
 * Each timer stores its heap index (heap_slot), making cancel O(log n), as
 * libevent's min_heap_erase_ does with min_heap_idx. A reschedule to a
 * later key is O(1): the entry keeps its old key, which is no later than
 * the new one, so it still surfaces in time, and is re-keyed when it does
 * (mtr_timerset_top_locked_, mtr_run.c). Idle timeouts pushed later on
 * every request then cost one sift per timeout that surfaces, not one per
 * request.
 *
 * Coalescing (the rule lives here and in the firing loop, mtr_fire.c):
 * the timerfd is armed at the smallest key (less a wake-up margin, see
 * mtr_queue_wake_target_), and each wake-up pops in key order
 * while the top's window has opened. For a fixed set of windows, each
 * shortened at its end by the wake-up margin, this wakes at exactly the
 * points of the greedy minimum interval stabbing, the optimum for those
 * windows; a timer whose window opened but whose key is behind an unopened
 * one fires at a later wake-up, still inside its window.
 *
 * A heap halves when a quarter full and doubles when full, so memory taken
 * for a peak is given back once the peak has passed, and no steady load
 * resizes it back and forth. Entries out in a pass's run list keep the
 * room they left (the kept counts below, mtr_queue.c), so a timer put back
 * after its firing never makes the heap grow. Growth can fail for want of
 * memory; only an outside arm, which can report ENOMEM, ever needs it.
 */
#include "mtr_timerset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MTR_ARITY 4
/* Logical index 0 sits at offset 3 of the aligned block, so the children
 * of i (4i+1 .. 4i+4) sit at offsets 4(i+1) .. 4(i+1)+3: 96 bytes from a
 * multiple of 32, two cache lines. */
#define MTR_HEAP_PAD 3
/* Levels below the root of a heap of MTR_MAX_TIMERS (4^15 = 2^30). */
#define MTR_HEAP_DEPTH 15
#define MTR_CACHE_LINE 64
#define MTR_HEAP_MIN 64

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
		if (!mtr_entry_before_(&entry, &set->entries[parent]))
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
		/* The next level's four lines load while this one compares. */
		uint64_t grandchild = first * MTR_ARITY + 1;
		for (uint64_t g = grandchild; g < grandchild + MTR_ARITY * MTR_ARITY &&
		    g < set->count; g += MTR_ARITY)
			__builtin_prefetch(&set->entries[g]);
		uint32_t best = (uint32_t)first;
		for (uint32_t child = best + 1; child < last; child++) {
			if (mtr_entry_before_(&set->entries[child],
			    &set->entries[best]))
				best = child;
		}
		if (!mtr_entry_before_(&set->entries[best], &entry))
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
	free(set->entries != NULL ? set->entries - MTR_HEAP_PAD : NULL);
	mtr_timerset_init_(set, set->clock);
}

size_t
mtr_timerset_bytes_(const struct mtr_timerset *set)
{
	return set->capacity ?
	    ((size_t)set->capacity + MTR_ARITY) * sizeof(*set->entries) : 0;
}

static int
mtr_timerset_resize_locked_(struct mtr_timerset *set, uint32_t capacity)
{
	/* aligned_alloc wants a multiple of the alignment. */
	size_t bytes = ((size_t)capacity + MTR_ARITY) * sizeof(*set->entries);
	bytes = (bytes + MTR_CACHE_LINE - 1) & ~(size_t)(MTR_CACHE_LINE - 1);
	struct mtr_heap_entry *block = aligned_alloc(MTR_CACHE_LINE, bytes);
	if (block == NULL)
		return ENOMEM;
	mtr_advise_huge_(block, bytes);
	if (set->entries != NULL) {
		memcpy(block + MTR_HEAP_PAD, set->entries,
		    (size_t)set->count * sizeof(*set->entries));
		free(set->entries - MTR_HEAP_PAD);
	}
	set->entries = block + MTR_HEAP_PAD;
	set->capacity = capacity;
	return 0;
}

static int
mtr_timerset_grow_locked_(struct mtr_timerset *set)
{
	uint32_t capacity = set->capacity ? set->capacity * 2 : MTR_HEAP_MIN;
	if (capacity > MTR_MAX_TIMERS)
		capacity = MTR_MAX_TIMERS;
	if (capacity == set->capacity)
		return ENOMEM;
	return mtr_timerset_resize_locked_(set, capacity);
}

void
mtr_timerset_shrink_locked_(struct mtr_timerset *set, uint32_t kept)
{
	uint64_t used = (uint64_t)set->count + kept;
	uint32_t capacity = set->capacity;
	while (capacity > MTR_HEAP_MIN && used <= capacity / 4)
		capacity /= 2;
	/* Without memory for the smaller copy, the bigger one still works. */
	if (capacity < set->capacity)
		(void)mtr_timerset_resize_locked_(set, capacity);
}

int
mtr_timerset_reserve_locked_(struct mtr_timerset *set, uint32_t kept)
{
	if ((uint64_t)set->count + kept < set->capacity)
		return 0;
	return mtr_timerset_grow_locked_(set);
}

void
mtr_timerset_push_locked_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t timer, int64_t due_ns, uint64_t order)
{
	struct mtr_heap_entry entry = { .due_ns = due_ns, .order = order,
	    .timer = timer };
	mtr_heap_sift_up_(set, timers, set->count++, entry);
}

/* Puts @entry at @index, in a heap that is in order around it. @entry may
 * belong above @index or below it, never both, so one of the two sifts is a
 * no-op. */
static void
mtr_heap_settle_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index, struct mtr_heap_entry entry)
{
	if (index > 0 && mtr_entry_before_(&entry,
	    &set->entries[(index - 1) / MTR_ARITY]))
		mtr_heap_sift_up_(set, timers, index, entry);
	else
		mtr_heap_sift_down_(set, timers, index, entry);
}

void
mtr_timerset_erase_locked_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index)
{
	timers[set->entries[index].timer].heap_slot = MTR_NOT_ARMED;
	struct mtr_heap_entry last = set->entries[--set->count];
	/* The last entry moves into the hole; it came from another subtree. */
	if (index < set->count)
		mtr_heap_settle_(set, timers, index, last);
}

/* Gives the entry at @index a new key, earlier or later, in place. */
void
mtr_timerset_rekey_locked_(struct mtr_timerset *set, struct mtr_timer *timers,
    uint32_t index, int64_t due_ns, uint64_t order)
{
	struct mtr_heap_entry entry = { .due_ns = due_ns, .order = order,
	    .timer = set->entries[index].timer };
	mtr_heap_settle_(set, timers, index, entry);
}

/*
 * The entry that fires first. Entries whose key lags (their timer was
 * rescheduled later) are re-keyed as they reach the top, until the top's
 * key is current: every other entry's key is then no earlier than the
 * top's, and the key it lags is later still, so the top is the first of
 * the current keys. A lagging key is never armed for nor fired.
 */
const struct mtr_heap_entry *
mtr_timerset_top_locked_(struct mtr_timerset *set, struct mtr_timer *timers)
{
	while (set->count > 0) {
		struct mtr_heap_entry top = set->entries[0];
		if (!mtr_entry_rekey_(&top, timers))
			return &set->entries[0];
		mtr_heap_sift_down_(set, timers, 0, top);
	}
	return NULL;
}

uint32_t
mtr_timerset_count_due_locked_(const struct mtr_timerset *set, int64_t now_ns,
    uint64_t pass_order, uint32_t limit)
{
	/* Depth-first through the due subtree, which holds the root; each
	 * visit pushes at most four children, so 3 * depth + 4 slots do. */
	uint32_t stack[3 * MTR_HEAP_DEPTH + MTR_ARITY];
	uint32_t depth = 0, found = 0;

	if (set->count == 0 || set->entries[0].due_ns > now_ns)
		return 0;
	stack[depth++] = 0;
	while (depth > 0 && found < limit) {
		uint32_t index = stack[--depth];
		uint64_t first = (uint64_t)index * MTR_ARITY + 1;
		found += set->entries[index].order < pass_order;
		for (uint64_t child = first;
		    child < first + MTR_ARITY && child < set->count; child++) {
			if (set->entries[child].due_ns <= now_ns)
				stack[depth++] = (uint32_t)child;
		}
	}
	return found;
}

void
mtr_timerset_rebuild_locked_(struct mtr_timerset *set, struct mtr_timer *timers)
{
	/* Floyd's heap construction: sift every parent down, last first. */
	uint32_t parents = set->count > 1 ? (set->count - 2) / MTR_ARITY + 1 : 0;
	for (uint32_t parent = parents; parent-- > 0;)
		mtr_heap_sift_down_(set, timers, parent, set->entries[parent]);
}
