/*
 * The firing batch. When a burst makes a large part of a clock's heap due
 * at once, the firing thread takes every due entry out in one linear pass
 * (mtr_timerset_take_due_locked_), sorts them here, and fires them in
 * order, merged with the heap top, so that a timer armed meanwhile with an
 * earlier key still fires first.
 *
 * Why: one pop from a heap of a million entries walks ten levels of a
 * 16 MB array, a cache miss per level, while a sorted batch is read in
 * sequence. Why not always: taking costs O(n) in the whole heap (the rest
 * is rebuilt), so it pays only when the due part is a sizeable share. The
 * count that decides costs O(due) itself, so after a count that says no
 * the loop pops half that many timers before counting again: O(1) per
 * firing, amortized.
 *
 * A taken timer's heap_slot reads MTR_IN_BATCH. Cancel, re-arm and destroy
 * change it, and the batch skips every entry whose timer no longer reads
 * MTR_IN_BATCH, so the cancel guarantee is decided under the engine lock
 * exactly as for the heap.
 */
#include "mtr_internal.h"

#include <stdlib.h>
#include <string.h>

/* Take when at least 1/MTR_BATCH_SHARE of the heap, and MTR_BATCH_MIN
 * entries, are due. */
#define MTR_BATCH_SHARE 16
#define MTR_BATCH_MIN 256
/* Timers whose slots are fetched ahead of the firing. */
#define MTR_BATCH_PREFETCH 16
/* Radix digits of 8 bits: 256 counters and 256 write streams per pass. */
#define MTR_RADIX_BITS 8
#define MTR_RADIX_SIZE (1u << MTR_RADIX_BITS)
/* Ranges this short are insertion-sorted. */
#define MTR_SORT_SMALL 32

/*
 * The sort key: the due, then the arm order, each relative to the batch's
 * smallest so that only bits that vary are sorted on. Arm order compares by
 * wrapping (mtr_entry_before_), so its smallest is found from wrapping
 * differences to the first entry.
 */
struct mtr_radix_key {
	int64_t due_base;
	uint32_t order_base;
	unsigned order_bits;
	unsigned bits; /* due's bits above order's */
};

static unsigned
mtr_bits_(uint64_t range)
{
	return range == 0 ? 0 : 64 - (unsigned)__builtin_clzll(range);
}

static struct mtr_radix_key
mtr_radix_key_(const struct mtr_heap_entry *e, size_t n)
{
	int64_t due_min = e[0].due_ns, due_max = e[0].due_ns;
	int32_t order_min = 0, order_max = 0;
	for (size_t i = 1; i < n; i++) {
		int32_t order = (int32_t)(e[i].order - e[0].order);
		if (e[i].due_ns < due_min)
			due_min = e[i].due_ns;
		if (e[i].due_ns > due_max)
			due_max = e[i].due_ns;
		if (order < order_min)
			order_min = order;
		if (order > order_max)
			order_max = order;
	}
	unsigned order_bits = mtr_bits_((uint32_t)(order_max - order_min));
	return (struct mtr_radix_key){
		.due_base = due_min,
		.order_base = e[0].order + (uint32_t)order_min,
		.order_bits = order_bits,
		.bits = mtr_bits_((uint64_t)(due_max - due_min)) + order_bits,
	};
}

/* The digit at @shift of the key (due << order_bits) | order. */
static inline uint32_t
mtr_radix_digit_(const struct mtr_heap_entry *entry,
    const struct mtr_radix_key *key, unsigned shift)
{
	uint64_t due = (uint64_t)(entry->due_ns - key->due_base);
	uint64_t value;
	if (shift >= key->order_bits) {
		value = due >> (shift - key->order_bits);
	} else {
		uint32_t order = entry->order - key->order_base;
		value = (order >> shift) | due << (key->order_bits - shift);
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
 * significant digit radix sort: one pass spreads a million entries into
 * 256 runs that fit in cache, and the runs sort there. A comparison sort
 * spent 150 ns an entry on a million (a mispredicted branch per
 * comparison, a cache miss per level).
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

bool
mtr_batch_take_locked_(struct mtr_batch *batch, struct mtr_timerset *set,
    struct mtr_timer *timers, int64_t now_ns)
{
	if (batch->pops_before_check > 0) {
		batch->pops_before_check--;
		return false;
	}
	uint32_t limit = set->count / MTR_BATCH_SHARE;
	if (limit < MTR_BATCH_MIN)
		limit = MTR_BATCH_MIN;
	uint32_t due = mtr_timerset_count_due_locked_(set, now_ns, limit);
	/* Room for every entry and the sort's scratch; pages never touched
	 * cost nothing. Without memory, popping one by one still works. */
	struct mtr_heap_entry *entries = due < limit ? NULL :
	    malloc(2 * (size_t)set->count * sizeof(*entries));
	if (entries == NULL) {
		batch->pops_before_check = due / 2;
		return false;
	}
	uint32_t count = mtr_timerset_take_due_locked_(set, timers, now_ns,
	    entries);
	struct mtr_radix_key key = mtr_radix_key_(entries, count);
	batch->block = entries;
	batch->entries = mtr_sort_(entries, entries + count, count, &key,
	    key.bits);
	batch->next = 0;
	batch->count = count;
	batch->live = count;
	return true;
}

const struct mtr_heap_entry *
mtr_batch_next_locked_(struct mtr_batch *batch, const struct mtr_timer *timers)
{
	if (batch->entries == NULL)
		return NULL;
	while (batch->next < batch->count) {
		const struct mtr_heap_entry *entry = &batch->entries[batch->next];
		/* Two stages: a timer's slot, then (once the slot has had time
		 * to arrive) the context its callback will touch first. */
		if (batch->next + MTR_BATCH_PREFETCH < batch->count)
			mtr_timer_prefetch_(&timers[entry[MTR_BATCH_PREFETCH].timer]);
		if (batch->next + MTR_BATCH_PREFETCH / 2 < batch->count)
			__builtin_prefetch(timers[
			    entry[MTR_BATCH_PREFETCH / 2].timer].context);
		if (timers[entry->timer].heap_slot == MTR_IN_BATCH)
			return entry;
		batch->next++;
	}
	mtr_batch_free_(batch);
	return NULL;
}

void
mtr_batch_free_(struct mtr_batch *batch)
{
	free(batch->block);
	batch->block = NULL;
	batch->entries = NULL;
	batch->next = 0;
	batch->count = 0;
	batch->live = 0;
}
