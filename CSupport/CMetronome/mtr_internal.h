/*
 * Struct layouts and helpers shared by the core's .c files; never in include/.
 */
#ifndef MTR_INTERNAL_H
#define MTR_INTERNAL_H

#include "CMetronome.h"
#include "mtr_lock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>

struct event;
struct event_base;

#define MTR_CLOCK_COUNT 3
#define MTR_PAGE 4096
#define MTR_HUGE_PAGE (UINT32_C(2) << 20)
#define MTR_NS_PER_S INT64_C(1000000000)

/* heap_slot of a timer that is in no timer set. */
#define MTR_NOT_ARMED UINT32_MAX
/* heap_slot keeps the clock in its top two bits and the heap index below. */
#define MTR_SLOT_INDEX_BITS 30
#define MTR_MAX_TIMERS (UINT32_C(1) << MTR_SLOT_INDEX_BITS)
/* heap_slot of a timer taken into its shard's batch (clock bits 3, which
 * no clock uses): cancelling it sets MTR_NOT_ARMED, and the batch then
 * skips its entry. */
#define MTR_IN_BATCH (UINT32_C(3) << MTR_SLOT_INDEX_BITS)

/*
 * One timer: 48 bytes. A free slot reuses heap_slot as the free-list link;
 * generation is odd while the slot is allocated and even while free, so a
 * stale id never matches. A slot whose generation would wrap is retired
 * instead of reused (mtr_slots.c).
 *
 * due_ns is the timer's key. A reschedule to a later key records it here
 * and leaves the heap entry where it is (mtr_queue.c): the entry's key then
 * lags, due_ns differs from it, and whoever meets the entry first at the
 * heap top or in a batch take gives it the recorded key (mtr_entry_rekey_).
 * Every arm sets sequence to 0, so while the key lags its room holds the
 * arm order that the new key carries.
 */
struct mtr_timer {
	void *context;
	int64_t deadline_ns; /* the window opens: the current deadline */
	int64_t due_ns;      /* the window closes: deadline + leeway */
	int64_t period_ns;   /* 0 for a one-shot */
	union {
		uint64_t sequence;    /* index of deadline_ns on the schedule */
		uint64_t rekey_order; /* while the heap key lags */
	};
	uint32_t heap_slot;  /* clock and heap index, or MTR_NOT_ARMED */
	uint32_t generation;
};

/* Fetches a timer for writing ahead of use: both of its cache lines, since
 * a 48-byte slot often straddles two. */
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
mtr_entry_rekey_(struct mtr_heap_entry *entry, struct mtr_timer *timers)
{
	struct mtr_timer *timer = &timers[entry->timer];
	if (timer->due_ns == entry->due_ns)
		return false;
	entry->due_ns = timer->due_ns;
	entry->order = timer->rekey_order;
	timer->sequence = 0;
	return true;
}

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

struct mtr_timerset {
	struct mtr_heap_entry *entries;
	uint32_t count;
	uint32_t capacity;
	mtr_clock_id clock;
};

struct mtr_clock_state {
	struct mtr_timerset set;
	struct event *event;
	struct mtr_shard *shard;
	int fd;
	bool firing;      /* the firing thread is in a batch of this clock */
	/* When the timerfd expires; INT64_MAX if disarmed, which is also how
	 * a key of INT64_MAX (292 years) arms it: never, as it would be.
	 * Written under the shard's lock, read by a spin without it. */
	_Atomic int64_t armed_ns;
};

/*
 * A shard: timers, their heaps and timerfds, under a lock of their own.
 * An engine has one, or MTR_SHARDS_MAX at most (mtr_engine_config.shards);
 * each timer lives in one, named by its id, and every timer operation
 * takes only that shard's lock. The one firing thread serves every shard,
 * each wake-up all of them (mtr_fire.c).
 * Aligned so that two shards' locks never share a cache line.
 */
struct mtr_shard {
	_Alignas(64) struct mtr_lock lock;
	struct mtr_event callback_done; /* a callback ended; its waiters wake */
	mtr_engine *engine;
	/* Ored into the slot index of this shard's ids (mtr_shard_of_). */
	uint32_t id_base;
	/* Slots this shard may hand out: its share of the id space. */
	uint32_t max_timers;

	struct mtr_timer *timers;
	uint32_t timer_capacity;
	uint32_t timer_high_water; /* slots ever handed out */
	uint32_t free_head;        /* MTR_NOT_ARMED when empty */
	/* The generation a slot starts from when the array grows back over
	 * slots it gave up: above every id those slots ever had. */
	uint32_t generation_floor;
	/* The live timer count at which a destroy next checks whether the
	 * timer array can shrink: halved at each check, raised with load. */
	uint32_t shrink_check_at;
	uint64_t next_order;

	struct mtr_clock_state clocks[MTR_CLOCK_COUNT];
	struct mtr_batch batch; /* of the clock being fired; one at a time */
	mtr_counters counters;  /* this shard's; the engine's are their sum */

	mtr_timer_id running;   /* the timer whose callback runs, or 0 */
	bool release_running;   /* it was destroyed while running */
	void *released_context; /* then: its context, for a forked child */
	/* cancel_sync callers waiting for the running callback: it leaves
	 * its timer disarmed when it returns (mtr_fire.c). */
	uint32_t running_waiters;
	/* A copy of the engine's, set under this lock, so that timer
	 * operations need no other. */
	bool stopping;
};

/*
 * The engine: its shards, its firing thread and its life. The engine lock
 * guards the life (stopping, joining); timer operations take a shard's lock
 * only. Lock order: the engine, then a shard.
 *
 * One count says who may still touch the engine (holds), and whoever takes
 * it to 0 frees the engine, as the last thing it does with it: the owner's
 * reference (dropped by destroy), the firing thread's until it exits, and
 * one for each caller blocked in stop, destroy or cancel_sync.
 */
struct mtr_engine {
	pthread_mutex_t lock;
	pthread_cond_t thread_done;

	struct mtr_shard *shards;
	uint32_t shard_count;
	struct event_base *base;
	pthread_t thread;

	mtr_engine_config config;
	mtr_engine_info info;

	/* Set under the lock; the firing loop reads it without. */
	_Atomic bool stopping;
	bool join_claimed;           /* a thread joins (or detached) the thread */
	bool joined;                 /* the firing thread touches nothing more */
	/* Created before a fork, seen from the child: its descriptors and
	 * thread belong to the parent (mtr_fork.c). */
	bool inherited;
	/* stopped or destroyed, for mtr_engine_was_stopped(), which reads it
	 * without the lock: in an on_release callback the stop makes, the
	 * engine lock may be held by the stopping thread. */
	_Atomic bool stop_requested;
	/* Atomic, so that cancel_sync can take a hold under its shard's lock
	 * alone. */
	_Atomic uint32_t holds;
	/* 0, or the errno of a descriptor error that stopped the engine. */
	_Atomic int fault;

	/* The clock state the firing thread spins on, or NULL. Whatever may
	 * make another wake-up due first (a change at that state's top, any
	 * timerfd moved, a stop) bumps spin_epoch to end the spin. */
	struct mtr_clock_state *_Atomic spinning;
	_Atomic uint32_t spin_epoch;

	mtr_engine *fork_prev; /* the registry of live engines */
	mtr_engine *fork_next;
};

/*
 * An id's low 32 bits: the slot index, and on a sharded engine the shard
 * above MTR_SHARD_SHIFT. One shard keeps the whole MTR_MAX_TIMERS.
 */
#define MTR_SHARD_SHIFT 26

static inline mtr_timer_id
mtr_timer_id_make_(const struct mtr_shard *shard, uint32_t slot,
    uint32_t generation)
{
	return ((uint64_t)generation << 32) | shard->id_base | slot;
}

/* The shard an id names and its slot there, or NULL for no shard. */
static inline struct mtr_shard *
mtr_shard_of_(mtr_engine *engine, mtr_timer_id id, uint32_t *slot)
{
	uint32_t low = (uint32_t)id;
	if (engine->shard_count == 1) {
		*slot = low;
		return &engine->shards[0];
	}
	uint32_t shard = low >> MTR_SHARD_SHIFT;
	*slot = low & ((UINT32_C(1) << MTR_SHARD_SHIFT) - 1);
	return shard < engine->shard_count ? &engine->shards[shard] : NULL;
}

/* The timer @id names at @slot of its shard (mtr_slots.c), or NULL when the
 * id is stale or never existed. Inline: every timer operation starts here. */
static inline struct mtr_timer *
mtr_slots_lookup_locked_(struct mtr_shard *shard, uint32_t slot,
    mtr_timer_id id)
{
	uint32_t generation = (uint32_t)(id >> 32);

	if (slot >= shard->timer_high_water || (generation & 1) == 0)
		return NULL;
	struct mtr_timer *timer = &shard->timers[slot];
	return timer->generation == generation ? timer : NULL;
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

/* mtr_clock.c */
static inline bool
mtr_clock_valid_(mtr_clock_id clock)
{
	return (unsigned)clock < MTR_CLOCK_COUNT;
}

int64_t mtr_clock_read_(mtr_clock_id clock);
int mtr_clock_posix_(mtr_clock_id clock);

/* mtr_timerset.c: all called with the shard's lock held. */
void mtr_timerset_init_(struct mtr_timerset *set, mtr_clock_id clock);
void mtr_timerset_free_(struct mtr_timerset *set);
size_t mtr_timerset_bytes_(const struct mtr_timerset *set);
/* @lent: entries out in the batch that the heap keeps room for. */
void mtr_timerset_shrink_locked_(struct mtr_timerset *set, uint32_t lent);
/* Room for one more entry: 0, or ENOMEM when the heap could not grow. */
int mtr_timerset_reserve_locked_(struct mtr_timerset *set, uint32_t lent);
int mtr_timerset_push_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers, uint32_t timer, int64_t due_ns, uint64_t order,
    uint32_t lent);
void mtr_timerset_erase_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers, uint32_t heap_index, uint32_t lent);
void mtr_timerset_rekey_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers, uint32_t heap_index, int64_t due_ns,
    uint64_t order);
const struct mtr_heap_entry *mtr_timerset_top_locked_(
    struct mtr_timerset *set, struct mtr_timer *timers);
uint32_t mtr_timerset_count_due_locked_(const struct mtr_timerset *set,
    int64_t now_ns, uint32_t limit);
void mtr_timerset_rebuild_locked_(struct mtr_timerset *set,
    struct mtr_timer *timers);

/* mtr_batch.c: called by the firing thread with the shard's lock held. */
bool mtr_batch_take_locked_(struct mtr_batch *batch, struct mtr_timerset *set,
    struct mtr_timer *timers, int64_t now_ns);
const struct mtr_heap_entry *mtr_batch_next_locked_(struct mtr_batch *batch,
    const struct mtr_timer *timers);
void mtr_batch_free_(struct mtr_batch *batch);

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

/* A timer with leeway wakes the engine a quarter of its leeway, at most
 * this much, before its latest acceptable time: room for a slow wake-up
 * (hundreds of microseconds on a busy VM) while three quarters of every
 * window still serve coalescing. */
#define MTR_WAKE_MARGIN_MAX_NS 1000000

/* mtr_fire.c: the firing thread's callback for a clock's timerfd. */
void mtr_fire_on_timerfd_(int fd, short what, void *arg);

/* mtr_teardown.c */
void mtr_engine_drop_timers_(mtr_engine *engine);
void mtr_engine_hold_(mtr_engine *engine);
void mtr_engine_free_(mtr_engine *engine);

/* Releases a context with the shard's lock dropped: a release may call the
 * engine. */
static inline void
mtr_shard_release_locked_(struct mtr_shard *shard, void *context)
{
	if (shard->engine->config.on_release == NULL)
		return;
	mtr_lock_give_(&shard->lock);
	shard->engine->config.on_release(context);
	mtr_lock_take_(&shard->lock);
}

/* Ends a spin on @state, or any spin when @state is NULL: the spun-for
 * timer may be gone, or an earlier wake-up may have come. */
static inline void
mtr_engine_interrupt_spin_(mtr_engine *engine,
    const struct mtr_clock_state *state)
{
	const struct mtr_clock_state *spinning = atomic_load(&engine->spinning);
	if (spinning != NULL && (state == NULL || spinning == state))
		atomic_fetch_add(&engine->spin_epoch, 1);
}

static inline void
mtr_shard_interrupt_spin_locked_(struct mtr_shard *shard, mtr_clock_id clock)
{
	mtr_engine_interrupt_spin_(shard->engine, &shard->clocks[clock]);
}

/*
 * The engine whose firing thread the calling thread is, or NULL; set by the
 * firing thread as it starts. A forked child's copy of a firing thread
 * keeps it. Thread-local rather than a pthread_t compared: glibc hands a
 * dead thread's pthread_t to the next thread it creates.
 */
extern _Thread_local mtr_engine *mtr_firing_engine_;

/* A holder lets go of @count holds; the last one frees the engine. */
void mtr_engine_let_go_(mtr_engine *engine, uint32_t count);

/* Records @error, a descriptor failing under the engine, and has the
 * firing thread stop it; the first error is the one kept. */
void mtr_engine_fault_(mtr_engine *engine, int error);

/* mtr_queue.c: each clock's timer set and timerfd, and the arm order, of
 * one shard; for timer operations and the firing loop alike, with the
 * shard's lock held. */
int mtr_queue_make_room_locked_(struct mtr_shard *shard,
    const struct mtr_timer *timer, mtr_clock_id clock);
int mtr_queue_add_locked_(struct mtr_shard *shard, uint32_t index,
    mtr_clock_id clock, int64_t due_ns);
void mtr_queue_move_locked_(struct mtr_shard *shard, struct mtr_timer *timer,
    mtr_clock_id clock, int64_t due_ns);
void mtr_queue_remove_locked_(struct mtr_shard *shard,
    struct mtr_timer *timer);
void mtr_queue_rearm_locked_(struct mtr_shard *shard, mtr_clock_id clock);
void mtr_queue_set_fd_locked_(struct mtr_clock_state *state,
    int64_t target_ns);

/* mtr_slots.c: a shard's timer array, with its lock held (but free). */
int mtr_slots_take_locked_(struct mtr_shard *shard, void *context,
    mtr_timer_id *out_id);
void mtr_slots_give_back_locked_(struct mtr_shard *shard, uint32_t index);
void mtr_slots_age_locked_(struct mtr_shard *shard, uint32_t reuses);
void mtr_slots_free_(struct mtr_shard *shard);
size_t mtr_slots_bytes_(const struct mtr_shard *shard);

/* mtr_fork.c: the registry that fork() handlers walk. */
void mtr_fork_register_(mtr_engine *engine);
void mtr_fork_unregister_(mtr_engine *engine);

#endif /* MTR_INTERNAL_H */
