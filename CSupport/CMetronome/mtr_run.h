/*
 * A pass's run list (mtr_run.c): the due entries of one clock's heap,
 * taken out under the shard's lock in key order, which the firing loop
 * then fires one by one. Nothing here takes a lock; the firing thread
 * holds its shard's.
 */
#ifndef MTR_RUN_H
#define MTR_RUN_H

#include "mtr_timerset.h"

/*
 * The entries are heap entries as they left the heap. An entry still
 * stands for its timer's schedule while the timer's order is the entry's:
 * an arm, a move, a cancel or a destroy since the take changed it, and the
 * entry is skipped (mtr_run_next_locked_).
 */

/* Pops a list takes at most: a pass lets go of its lock once per callback
 * anyway, so a longer list would only hold more room. */
#define MTR_RUN_POPS 32

struct mtr_run {
	/* small, or a bulk take's block: popping needs no memory, so a pass
	 * never fails to take what is due. */
	struct mtr_heap_entry *entries;
	uint32_t next;  /* the first entry not yet fired or skipped */
	uint32_t count;
	uint32_t capacity;
	mtr_clock_id clock; /* the clock whose heap the entries came from */
	bool bulk;          /* taken in one linear pass, not popped */
	uint32_t pops_before_check; /* pops left before a bulk take is weighed */
	struct mtr_heap_entry small[MTR_RUN_POPS];
};

/*
 * The entries @clock's heap keeps room for besides its own: those still in
 * the run list. Each may come back (a repeating timer does after every
 * firing), and with its room kept, putting it back never allocates, so it
 * cannot fail for want of memory.
 */
static inline uint32_t
mtr_run_kept_(const struct mtr_run *run, mtr_clock_id clock)
{
	return run->clock == clock ? run->count - run->next : 0;
}

/* Whether @entry still stands for its timer's schedule. */
static inline bool
mtr_run_current_(const struct mtr_heap_entry *entry,
    const struct mtr_timer *timers)
{
	return timers[entry->timer].order == entry->order;
}

/* Takes the pass's due entries: those armed before @pass_order whose
 * window had opened by @now_ns, in key order; returns how many. */
uint32_t mtr_run_take_locked_(struct mtr_run *run, struct mtr_timerset *set,
    struct mtr_timer *timers, int64_t now_ns, uint64_t pass_order);
/* The next entry whose timer it still stands for, taken off the list; or
 * NULL once the list is done. */
const struct mtr_heap_entry *mtr_run_next_locked_(struct mtr_run *run,
    const struct mtr_timer *timers);
/* Bytes of a bulk take's block still held (the small list is the shard's). */
static inline size_t
mtr_run_bytes_(const struct mtr_run *run)
{
	return run->entries != run->small ?
	    (size_t)run->capacity * sizeof(*run->entries) : 0;
}

void mtr_run_init_(struct mtr_run *run);
/* Ends the list, giving back a bulk take's memory. An entry left in it
 * (a pass that the engine's stop ended) is the stop's to drop. */
void mtr_run_end_(struct mtr_run *run);
/* The same, whatever is left in it. */
void mtr_run_free_(struct mtr_run *run);

#endif /* MTR_RUN_H */
