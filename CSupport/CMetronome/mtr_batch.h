/*
 * The firing batch (mtr_batch.c): the due part of a burst, taken out of a
 * clock's heap and sorted, and the pass's choice between it and the heap.
 * Nothing here takes a lock; the firing thread holds its shard's.
 */
#ifndef MTR_BATCH_H
#define MTR_BATCH_H

#include "mtr_timerset.h"

/*
 * Due entries taken out of one clock's heap in a single pass and sorted
 * (mtr_batch.c): the firing loop drains it in order, merged with the heap.
 */
struct mtr_batch {
	struct mtr_heap_entry *entries; /* sorted by key */
	uint32_t next;  /* the first entry not yet fired or skipped */
	uint32_t count;
	uint32_t live;  /* entries whose timer is still MTR_IN_BATCH */
	uint32_t pops_before_check; /* single pops left before counting again */
	mtr_clock_id clock; /* the clock whose heap the entries came from */
	/* The first of the due entries whose key the take found lagging: it
	 * re-keyed them and left them in the heap, where they may fall among
	 * the batch's keys. Every other entry of the pass left in the heap
	 * comes after the whole batch. */
	struct mtr_heap_entry rekeyed;
};

/*
 * The entries @clock's heap keeps room for besides its own: those still out
 * in the batch. Each may come back (a repeating timer does after every
 * firing), and with its room kept, putting it back never allocates, so it
 * cannot fail for want of memory.
 */
static inline uint32_t
mtr_batch_lent_(const struct mtr_batch *batch, mtr_clock_id clock)
{
	return batch->clock == clock ? batch->live : 0;
}

/* What the pass does next (mtr_batch_pick_locked_). */
enum mtr_pick {
	MTR_PICK_NONE,  /* nothing more is due in this pass: it ends */
	MTR_PICK_HEAP,  /* fire *out, taken off the heap's top */
	MTR_PICK_BATCH, /* fire *out, the batch's next */
	MTR_PICK_WAIT,  /* the heap's top is next, its window not open yet */
};

enum mtr_pick mtr_batch_pick_locked_(struct mtr_batch *batch,
    struct mtr_timerset *set, struct mtr_timer *timers, uint64_t pass_order,
    int64_t now_ns, struct mtr_heap_entry *out, int64_t *deadline_ns);
void mtr_batch_free_(struct mtr_batch *batch);

#endif /* MTR_BATCH_H */
