/*
 * A pass's run list: the firing thread takes the due entries of one
 * clock's heap into it under the shard's lock, in key order, and fires
 * them from it (mtr_fire.c). The heap changes only as the list is taken;
 * an entry whose timer was cancelled, moved or destroyed since is skipped.
 *
 * A few due entries are popped off the heap one by one. When a burst makes
 * a large part of the heap due at once, they are taken in one linear pass
 * and sorted instead. Why: one pop from a heap of a million entries walks
 * ten levels of a 16 MB array, a cache miss per level, while the take
 * reads the heap in sequence and the sort works in cache. Why not always:
 * the take costs O(n) in the whole heap (the rest is rebuilt), so it pays
 * only when the due part is a sizeable share. The count that decides costs
 * O(due) itself, so after a count that says no the loop pops half that
 * many timers before counting again: O(1) per firing, amortized.
 *
 * Either way the list holds every entry of the pass that was due when it
 * was taken, and the heap none of them: whatever the pass fires from the
 * heap afterwards comes after the whole list in key order.
 */
#include "mtr_run.h"

#include <stdlib.h>
#include <string.h>

/* Take in bulk when at least 1/MTR_RUN_SHARE of the heap, and
 * MTR_RUN_BULK_MIN entries, are due. */
#define MTR_RUN_SHARE 16
#define MTR_RUN_BULK_MIN 256
/* How far ahead, in entries, the take and the firing fetch timers. */
#define MTR_RUN_PREFETCH 16
/* Radix digits of 8 bits: 256 counters and 256 write streams per pass. */
#define MTR_RADIX_BITS 8
#define MTR_RADIX_SIZE (1u << MTR_RADIX_BITS)
/* Ranges this short are insertion-sorted. */
#define MTR_SORT_SMALL 32

/*
 * The sort key: the due, then the arm order, as offsets from bases chosen so
 * that only bits that can vary are sorted on: every due entry lies between
 * the heap's smallest key and now, and between the smallest and the largest
 * order of the due entries.
 */
struct mtr_radix_key {
	int64_t due_base;
	uint64_t order_base;
	unsigned order_bits;
};

static unsigned
mtr_bits_(uint64_t range)
{
	return range == 0 ? 0 : 64 - (unsigned)__builtin_clzll(range);
}

/* The digit at @shift of the key (due << order_bits) | order, which may be
 * wider than 64 bits: a digit takes the due's bits only where they reach
 * it. */
static inline uint32_t
mtr_radix_digit_(const struct mtr_heap_entry *entry,
    const struct mtr_radix_key *key, unsigned shift)
{
	uint64_t due = (uint64_t)(entry->due_ns - key->due_base);
	uint64_t value;
	if (shift >= key->order_bits) {
		value = due >> (shift - key->order_bits);
	} else {
		value = (entry->order - key->order_base) >> shift;
		unsigned gap = key->order_bits - shift;
		if (gap < MTR_RADIX_BITS)
			value |= due << gap;
	}
	return (uint32_t)value & (MTR_RADIX_SIZE - 1);
}

static struct mtr_heap_entry *
mtr_sort_insertion_(struct mtr_heap_entry *e, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		struct mtr_heap_entry x = e[i];
		size_t j = i;
		for (; j > 0 && mtr_entry_before_(&x, &e[j - 1]); j--)
			e[j] = e[j - 1];
		e[j] = x;
	}
	return e;
}

/*
 * Sorts @a's @n entries on their key's low @bits, using @b (as long) for
 * scratch; returns whichever of the two holds the result. A most
 * significant digit radix sort: its first pass spreads a million entries
 * into 256 runs that fit in cache, where a comparison sort would pay a
 * mispredicted branch per comparison and a cache miss per level.
 */
static struct mtr_heap_entry *
mtr_sort_(struct mtr_heap_entry *a, struct mtr_heap_entry *b, size_t n,
    const struct mtr_radix_key *key, unsigned bits)
{
	if (n <= MTR_SORT_SMALL || bits == 0)
		return mtr_sort_insertion_(a, n);
	unsigned shift = bits > MTR_RADIX_BITS ? bits - MTR_RADIX_BITS : 0;
	size_t start[MTR_RADIX_SIZE + 1] = { 0 };
	for (size_t i = 0; i < n; i++)
		start[mtr_radix_digit_(&a[i], key, shift) + 1]++;
	for (uint32_t digit = 0; digit < MTR_RADIX_SIZE; digit++) {
		if (start[digit + 1] == n) /* one run: nothing to spread */
			return mtr_sort_(a, b, n, key, shift);
		start[digit + 1] += start[digit];
	}

	size_t next[MTR_RADIX_SIZE];
	memcpy(next, start, sizeof(next));
	for (size_t i = 0; i < n; i++)
		b[next[mtr_radix_digit_(&a[i], key, shift)]++] = a[i];
	for (uint32_t digit = 0; digit < MTR_RADIX_SIZE; digit++) {
		size_t first = start[digit], count = start[digit + 1] - first;
		struct mtr_heap_entry *run = mtr_sort_(b + first, a + first,
		    count, key, shift);
		if (run != b + first)
			memcpy(b + first, run, count * sizeof(*run));
	}
	return b;
}

/* Room for @count entries: the small list, or a block of the heap's. */
static bool
mtr_run_reserve_(struct mtr_run *run, uint32_t count)
{
	if (count <= run->capacity)
		return true;
	struct mtr_heap_entry *entries = malloc((size_t)count *
	    sizeof(*entries));
	if (entries == NULL)
		return false;
	mtr_run_free_(run);
	run->entries = entries;
	run->capacity = count;
	return true;
}

/*
 * Takes every entry of the pass whose key has passed (armed before
 * @pass_order, due by @now_ns) out of the heap, sorted, when they are
 * enough to pay for it; returns how many, or 0 when it did not.
 *
 * Pass one counts them by the heap's keys alone, which bounds the list.
 * Pass two takes them and closes the heap up behind them; the timers are
 * written in heap order, at random, so they are fetched ahead. An entry
 * whose key lags is re-keyed there and judged by its new key. Then the
 * list is sorted, with the heap's freed tail (as long as the list) for
 * scratch, and the rest of the heap rebuilt.
 */
static uint32_t
mtr_run_take_bulk_locked_(struct mtr_run *run, struct mtr_timerset *set,
    struct mtr_timer *timers, int64_t now_ns, uint64_t pass_order)
{
	uint32_t limit = set->count / MTR_RUN_SHARE;
	if (limit < MTR_RUN_BULK_MIN)
		limit = MTR_RUN_BULK_MIN;
	uint32_t due = mtr_timerset_count_due_locked_(set, now_ns, pass_order,
	    limit);
	if (due < limit) {
		run->pops_before_check = due / 2;
		return 0;
	}

	struct mtr_heap_entry *heap = set->entries;
	uint32_t bound = 0;
	for (uint32_t i = 0; i < set->count; i++)
		bound += heap[i].due_ns <= now_ns && heap[i].order < pass_order;
	/* Without memory, popping one by one still works. */
	if (!mtr_run_reserve_(run, bound)) {
		run->pops_before_check = due / 2;
		return 0;
	}

	struct mtr_radix_key key = { .due_base = INT64_MAX,
	    .order_base = UINT64_MAX };
	uint64_t order_max = 0;
	uint32_t kept = 0, taken = 0;
	for (uint32_t i = 0; i < set->count; i++) {
		if (i + MTR_RUN_PREFETCH < set->count)
			mtr_timer_prefetch_(&timers[heap[i + MTR_RUN_PREFETCH].timer]);
		struct mtr_heap_entry entry = heap[i];
		if (entry.due_ns <= now_ns && entry.order < pass_order) {
			(void)mtr_entry_rekey_(&entry, timers);
			if (entry.due_ns <= now_ns && entry.order < pass_order) {
				run->entries[taken++] = entry;
				timers[entry.timer].heap_slot = MTR_NOT_ARMED;
				if (entry.due_ns < key.due_base)
					key.due_base = entry.due_ns;
				if (entry.order < key.order_base)
					key.order_base = entry.order;
				if (entry.order > order_max)
					order_max = entry.order;
				continue;
			}
		}
		heap[kept] = entry;
		timers[entry.timer].heap_slot = mtr_slot_make_(set->clock, kept++);
	}
	set->count = kept;
	mtr_timerset_rebuild_locked_(set, timers);
	if (taken == 0)
		return 0;

	key.order_bits = mtr_bits_(order_max - key.order_base);
	unsigned bits = mtr_bits_((uint64_t)(now_ns - key.due_base)) +
	    key.order_bits;
	struct mtr_heap_entry *sorted = mtr_sort_(run->entries, heap + kept,
	    taken, &key, bits);
	if (sorted != run->entries)
		memcpy(run->entries, sorted, (size_t)taken * sizeof(*sorted));
	return taken;
}

uint32_t
mtr_run_take_locked_(struct mtr_run *run, struct mtr_timerset *set,
    struct mtr_timer *timers, int64_t now_ns, uint64_t pass_order)
{
	const struct mtr_heap_entry *top;

	run->next = 0;
	run->count = 0;
	run->clock = set->clock;
	run->bulk = false;
	if (run->pops_before_check == 0) {
		run->count = mtr_run_take_bulk_locked_(run, set, timers, now_ns,
		    pass_order);
		run->bulk = run->count > 0;
		if (run->bulk)
			return run->count;
	}
	/* A newcomer (armed since the pass began) at the top ends the take:
	 * the due entries behind it fire at the next wake-up, which follows
	 * at once, in key order with it. */
	while (run->count < MTR_RUN_POPS &&
	    (top = mtr_timerset_top_locked_(set, timers)) != NULL &&
	    top->order < pass_order &&
	    timers[top->timer].deadline_ns <= now_ns) {
		run->entries[run->count++] = *top;
		mtr_timerset_erase_locked_(set, timers, 0);
		if (run->pops_before_check > 0)
			run->pops_before_check--;
	}
	return run->count;
}

const struct mtr_heap_entry *
mtr_run_next_locked_(struct mtr_run *run, const struct mtr_timer *timers)
{
	while (run->next < run->count) {
		const struct mtr_heap_entry *entry = &run->entries[run->next++];
		/* Two stages: a timer's slot, then (once the slot has had time
		 * to arrive) the start of the context its callback is handed,
		 * which any callback reads first. */
		if (run->next + MTR_RUN_PREFETCH < run->count)
			mtr_timer_prefetch_(&timers[entry[MTR_RUN_PREFETCH].timer]);
		if (run->next + MTR_RUN_PREFETCH / 2 < run->count)
			__builtin_prefetch(
			    timers[entry[MTR_RUN_PREFETCH / 2].timer].context);
		if (mtr_run_current_(entry, timers))
			return entry;
	}
	return NULL;
}

void
mtr_run_init_(struct mtr_run *run)
{
	run->entries = run->small;
	run->capacity = MTR_RUN_POPS;
	run->next = 0;
	run->count = 0;
}

void
mtr_run_end_(struct mtr_run *run)
{
	run->next = 0;
	run->count = 0;
	if (run->entries != run->small)
		mtr_run_free_(run);
}

void
mtr_run_free_(struct mtr_run *run)
{
	if (run->entries != run->small)
		free(run->entries);
	mtr_run_init_(run);
}
