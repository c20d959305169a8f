/*
 * The firing batch, and the pass's choice of the next timer between it and
 * the heap (mtr_batch_pick_locked_). When a burst makes a large part of a
 * clock's heap due at once, the firing thread takes every due entry out of
 * the heap in two linear passes, sorts them, and fires them in order,
 * merged with the heap top, so that an entry the take re-keyed and left in
 * the heap still fires in key order with them.
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
 * MTR_IN_BATCH, so the cancel guarantee is decided under the shard's lock
 * exactly as for the heap.
 *
 * The heap keeps the room its taken entries left, for as long as their
 * timers are in the batch (mtr_batch_lent_): a repeating timer goes back
 * after each firing, and that must not need memory the firing thread has
 * no one to report the lack of to.
 */
#include "mtr_batch.h"

#include <stdlib.h>
#include <string.h>

/* Take when at least 1/MTR_BATCH_SHARE of the heap, and MTR_BATCH_MIN
 * entries, are due. */
#define MTR_BATCH_SHARE 16
#define MTR_BATCH_MIN 256
/* How far ahead, in entries, the take and the firing fetch timers. */
#define MTR_BATCH_PREFETCH 16
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

/* The digit of an entry's due at @shift: the top digit of the whole key
 * when @shift is the due's width less a digit, or the whole due when it is
 * narrower. */
static inline uint32_t
mtr_top_digit_(const struct mtr_heap_entry *entry, int64_t due_base,
    unsigned shift)
{
	return (uint32_t)((uint64_t)(entry->due_ns - due_base) >> shift) &
	    (MTR_RADIX_SIZE - 1);
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
 * significant digit radix sort; the take below does its first pass while
 * it takes, so a million entries leave the heap already spread into 256
 * runs that fit in cache, where a comparison sort would pay a mispredicted
 * branch per comparison and a cache miss per level.
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

/*
 * Takes the due entries of the pass (armed before @pass_order) out of the
 * heap into the batch, sorted, when they are enough to pay for it; returns
 * whether it did.
 */
static bool
mtr_batch_take_locked_(struct mtr_batch *batch, struct mtr_timerset *set,
    struct mtr_timer *timers, int64_t now_ns, uint64_t pass_order)
{
	if (batch->pops_before_check > 0) {
		batch->pops_before_check--;
		return false;
	}
	uint32_t limit = set->count / MTR_BATCH_SHARE;
	if (limit < MTR_BATCH_MIN)
		limit = MTR_BATCH_MIN;
	uint32_t due = mtr_timerset_count_due_locked_(set, now_ns, pass_order,
	    limit);
	if (due < limit) {
		batch->pops_before_check = due / 2;
		return false;
	}

	/* Pass one counts the due entries by the top digit of their due,
	 * and finds the span of their orders, which the key's lower digits
	 * sort on. An entry armed since the pass began is not the pass's: it
	 * stays in the heap, so that a timer re-armed due by its own callback
	 * fires once a pass, not once a take. */
	struct mtr_heap_entry *heap = set->entries;
	int64_t due_base = heap[0].due_ns;
	unsigned due_bits = mtr_bits_((uint64_t)(now_ns - due_base));
	unsigned due_shift = due_bits > MTR_RADIX_BITS ?
	    due_bits - MTR_RADIX_BITS : 0;
	uint64_t order_min = UINT64_MAX, order_max = 0;
	size_t start[MTR_RADIX_SIZE + 1] = { 0 };
	for (uint32_t i = 0; i < set->count; i++) {
		if (heap[i].due_ns <= now_ns && heap[i].order < pass_order) {
			start[mtr_top_digit_(&heap[i], due_base, due_shift) + 1]++;
			if (heap[i].order < order_min)
				order_min = heap[i].order;
			if (heap[i].order > order_max)
				order_max = heap[i].order;
		}
	}
	struct mtr_radix_key key = {
		.due_base = due_base,
		.order_base = order_min,
		.order_bits = mtr_bits_(order_max - order_min),
	};
	/* What is left to sort within a run of one top digit. */
	unsigned shift = due_shift + key.order_bits;
	for (uint32_t digit = 0; digit < MTR_RADIX_SIZE; digit++)
		start[digit + 1] += start[digit];
	uint32_t count = (uint32_t)start[MTR_RADIX_SIZE];
	/* Without memory, popping one by one still works. */
	struct mtr_heap_entry *block = malloc((size_t)count * sizeof(*block));
	if (block == NULL) {
		batch->pops_before_check = due / 2;
		return false;
	}

	/* Pass two spreads them into runs by that digit and closes the heap
	 * up behind them; the timers are written in heap order, at random,
	 * so they are fetched ahead. Pass one counted by the heap keys alone;
	 * here, where each timer is written anyway, an entry whose key lags
	 * is re-keyed and stays in the heap (due or not, it fires from there,
	 * in key order with the batch: batch->rekeyed), leaving a gap at the
	 * end of its run. */
	size_t next[MTR_RADIX_SIZE];
	memcpy(next, start, sizeof(next));
	uint32_t kept = 0;
	struct mtr_heap_entry rekeyed = { .due_ns = INT64_MAX,
	    .order = UINT64_MAX };
	for (uint32_t i = 0; i < set->count; i++) {
		if (i + MTR_BATCH_PREFETCH < set->count)
			mtr_timer_prefetch_(&timers[heap[i + MTR_BATCH_PREFETCH].timer]);
		struct mtr_heap_entry entry = heap[i];
		bool ours = entry.due_ns <= now_ns && entry.order < pass_order;
		if (ours && !mtr_entry_rekey_(&entry, timers)) {
			block[next[mtr_top_digit_(&entry, due_base, due_shift)]++] =
			    entry;
			timers[entry.timer].heap_slot = MTR_IN_BATCH;
			continue;
		}
		/* Moved before the pass began, it is still the pass's, and may
		 * be due among the batch's keys. */
		if (ours && entry.order < pass_order &&
		    mtr_entry_before_(&entry, &rekeyed))
			rekeyed = entry;
		heap[kept] = entry;
		timers[entry.timer].heap_slot =
		    mtr_slot_make_(set->clock, kept++);
	}
	set->count = kept;
	mtr_timerset_rebuild_locked_(set, timers);

	/* Each run sorts in cache, one after the other, with the heap's freed
	 * tail (as long as the batch) for scratch, and closes up the gaps. */
	uint32_t taken = 0;
	for (uint32_t digit = 0; digit < MTR_RADIX_SIZE; digit++) {
		struct mtr_heap_entry *run = block + start[digit];
		size_t length = next[digit] - start[digit];
		struct mtr_heap_entry *sorted = mtr_sort_(run, heap + kept,
		    length, &key, shift);
		memmove(block + taken, sorted, length * sizeof(*run));
		taken += (uint32_t)length;
	}
	batch->entries = block;
	batch->next = 0;
	batch->count = taken;
	batch->live = taken;
	batch->clock = set->clock;
	batch->rekeyed = rekeyed;
	return true;
}

/*
 * Ends the batch early: its entries not yet fired go back into the heap
 * they came from, whose room they kept, with their keys and arm orders,
 * and fire from there. Rebuilt rather than sifted up one by one: no more
 * than the take that made the batch cost, and it happens once a pass at
 * most, as the pass ends with it.
 */
static void
mtr_batch_put_back_locked_(struct mtr_batch *batch, struct mtr_timerset *set,
    struct mtr_timer *timers)
{
	for (uint32_t i = batch->next; i < batch->count; i++) {
		if (timers[batch->entries[i].timer].heap_slot == MTR_IN_BATCH)
			mtr_timerset_append_locked_(set, timers,
			    batch->entries[i]);
	}
	mtr_timerset_rebuild_locked_(set, timers);
	mtr_batch_free_(batch);
}

/* The batch's next entry whose timer is still in it, or NULL, the batch
 * freed, when none is left. */
static const struct mtr_heap_entry *
mtr_batch_next_locked_(struct mtr_batch *batch, const struct mtr_timer *timers)
{
	if (batch->entries == NULL)
		return NULL;
	while (batch->next < batch->count) {
		const struct mtr_heap_entry *entry = &batch->entries[batch->next];
		/* Two stages: a timer's slot, then (once the slot has had time
		 * to arrive) the start of the context its callback is handed,
		 * which any callback reads first. A prefetch of NULL is a no-op. */
		if (batch->next + MTR_BATCH_PREFETCH < batch->count)
			mtr_timer_prefetch_(&timers[entry[MTR_BATCH_PREFETCH].timer]);
		if (batch->next + MTR_BATCH_PREFETCH / 2 < batch->count)
			__builtin_prefetch(
			    timers[entry[MTR_BATCH_PREFETCH / 2].timer].context);
		if (timers[entry->timer].heap_slot == MTR_IN_BATCH)
			return entry;
		batch->next++;
	}
	mtr_batch_free_(batch);
	return NULL;
}

/*
 * The pass's next timer, in key order, from the heap's top or the batch,
 * whichever comes first; the batch's entries are all due, so one of them
 * also goes first when the top's window has not opened yet. A burst due at
 * the top is taken into the batch first.
 *
 * A pass fires only timers armed before it began (@pass_order): one armed
 * or re-armed since, like a repeating timer that outran its period or a
 * callback re-arming in the past, waits for the next wake-up, so that no
 * heap keeps the one firing thread from the others and no timer fires
 * twice in a pass; the take leaves it in the heap too. Such a newcomer at
 * the heap's top ends the pass there: due timers behind it fire at the
 * next wake-up, which follows at once, in key order with it; reaching past
 * it would cost a scan of the heap on every arm made from a callback. The
 * batch drains on past it only while its next entry comes before all that
 * the heap may hold of the pass behind it: the newcomer, and the entries
 * the take re-keyed (batch->rekeyed); the rest of the pass was not due at
 * the take, so comes after the whole batch. Else the batch goes back into
 * the heap and the pass ends, so that the timers nobody touched since the
 * wake-up still fire in key order.
 *
 * MTR_PICK_WAIT leaves the top in the heap and gives its deadline.
 */
enum mtr_pick
mtr_batch_pick_locked_(struct mtr_batch *batch, struct mtr_timerset *set,
    struct mtr_timer *timers, uint64_t pass_order, int64_t now_ns,
    struct mtr_heap_entry *out, int64_t *deadline_ns)
{
	for (;;) {
		const struct mtr_heap_entry *top =
		    mtr_timerset_top_locked_(set, timers);
		const struct mtr_heap_entry *newcomer = NULL;
		if (top != NULL && top->order >= pass_order) {
			newcomer = top;
			top = NULL;
		}
		const struct mtr_heap_entry *queued =
		    mtr_batch_next_locked_(batch, timers);

		if (top != NULL && (queued == NULL ||
		    mtr_entry_before_(top, queued))) {
			*deadline_ns = timers[top->timer].deadline_ns;
			if (*deadline_ns <= now_ns) {
				if (queued == NULL && mtr_batch_take_locked_(
				    batch, set, timers, now_ns, pass_order))
					continue;
				*out = *top;
				mtr_timerset_erase_locked_(set, timers, 0,
				    mtr_batch_lent_(batch, set->clock));
				return MTR_PICK_HEAP;
			}
			if (queued == NULL)
				return MTR_PICK_WAIT;
		}
		if (queued == NULL)
			return MTR_PICK_NONE;
		if (newcomer != NULL && !mtr_entry_before_(queued, newcomer) &&
		    !mtr_entry_before_(queued, &batch->rekeyed)) {
			mtr_batch_put_back_locked_(batch, set, timers);
			return MTR_PICK_NONE;
		}
		*out = *queued;
		timers[queued->timer].heap_slot = MTR_NOT_ARMED;
		batch->next++;
		batch->live--;
		return MTR_PICK_BATCH;
	}
}

void
mtr_batch_free_(struct mtr_batch *batch)
{
	free(batch->entries);
	batch->entries = NULL;
	batch->next = 0;
	batch->count = 0;
	batch->live = 0;
}
