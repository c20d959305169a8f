/*
 * A shard's life and its timer slots. Its life: set up, chosen by the
 * threads that create timers, counted, freed. Its slots: the array that
 * ids index, its free list, and the generations that keep a stale id from
 * reaching a reused slot. What a shard holds is in mtr_shard.h; its
 * timers' operations are mtr_timer.c's, its queues mtr_queue.c's.
 *
 * A slot's generation is odd while it is allocated and even while free,
 * and every id carries the generation it was made with. Nothing here wraps
 * within a process's life: a slot that has spent its 2^31 generations is
 * retired, never reused (48 bytes, after 2^31 reuses).
 *
 * Memory follows the load: the array gives back its free tail when no more
 * than a quarter of it is in use (mtr_slots_shrink_locked_).
 */
#include "mtr_shard.h"

#include <event2/event.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* Zeroed, its lock is free and its event has no waiter (mtr_lock.h). */
void
mtr_shard_init_(struct mtr_shard *shard, mtr_engine *engine, uint32_t index,
    uint32_t count)
{
	memset(shard, 0, sizeof(*shard));
	shard->engine = engine;
	bool sharded = count > 1;
	shard->id_base = sharded ? index << MTR_SHARD_SHIFT : 0;
	shard->max_timers = sharded ? UINT32_C(1) << MTR_SHARD_SHIFT :
	    MTR_MAX_TIMERS;
	shard->free_head = MTR_NOT_ARMED;
	mtr_run_init_(&shard->run);
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		shard->clocks[c].timerfd.fd = -1;
		shard->clocks[c].shard = shard;
		shard->clocks[c].armed_ns = INT64_MAX;
		mtr_timerset_init_(&shard->clocks[c].set, (mtr_clock_id)c);
	}
}

/*
 * The one of @count @shards that a thread creates its timers in: threads
 * take tickets in turn on their first create, so distinct threads spread
 * evenly over the shards whatever CPUs they run on (a CPU number would
 * send two threads that started on one CPU to one shard).
 */
struct mtr_shard *
mtr_shard_home_(struct mtr_shard *shards, uint32_t count)
{
	static _Atomic uint32_t tickets;
	static _Thread_local uint32_t ticket = UINT32_MAX;

	if (count == 1)
		return &shards[0];
	if (ticket == UINT32_MAX)
		ticket = atomic_fetch_add_explicit(&tickets, 1,
		    memory_order_relaxed) & (UINT32_MAX >> 1);
	return &shards[ticket % count];
}

#define MTR_TIMERS_MIN 64

static int
mtr_slots_resize_locked_(struct mtr_shard *shard, uint32_t capacity)
{
	struct mtr_timer *timers = realloc(shard->timers,
	    (size_t)capacity * sizeof(*timers));
	if (timers == NULL)
		return ENOMEM;
	mtr_advise_huge_(timers, (size_t)capacity * sizeof(*timers));
	shard->timers = timers;
	shard->timer_capacity = capacity;
	return 0;
}

static int
mtr_slots_grow_locked_(struct mtr_shard *shard)
{
	if (shard->timer_capacity == shard->max_timers)
		return ENOMEM;
	uint32_t capacity = shard->timer_capacity ?
	    shard->timer_capacity * 2 : MTR_TIMERS_MIN;
	if (capacity > shard->max_timers)
		capacity = shard->max_timers;
	return mtr_slots_resize_locked_(shard, capacity);
}

/*
 * Gives back the array's free tail once three quarters of it are unused.
 * The free list is rebuilt in ascending order on the way, so new timers
 * fill the low slots and the tail keeps draining: a check that could not
 * shrink (a live timer high up) is likely to succeed at the next one.
 * Dropped slots raise generation_floor above every id they ever had, so
 * when the array grows back over them no stale id matches. A check costs
 * O(capacity) and comes each time the live count halves (shrink_check_at),
 * so a peak that drains costs O(log peak) per give-back at worst.
 */
static void
mtr_slots_shrink_locked_(struct mtr_shard *shard)
{
	uint32_t capacity = shard->timer_capacity;
	/* A run list being fired still reads the slots of its entries. */
	if (shard->counters.timers > capacity / 4 ||
	    capacity <= MTR_TIMERS_MIN || shard->run.count > shard->run.next)
		return;
	/* Up to the last slot in use, or retired: a retired slot must keep
	 * its place, as every generation it could start again from is taken. */
	uint32_t keep = shard->timer_high_water;
	while (keep > 0 && (shard->timers[keep - 1].generation & 1) == 0 &&
	    shard->timers[keep - 1].generation != 0)
		keep--;
	/* The dropped slots are free, so their generation is past every id
	 * they handed out. */
	for (uint32_t i = keep; i < shard->timer_high_water; i++) {
		if (shard->timers[i].generation > shard->generation_floor)
			shard->generation_floor = shard->timers[i].generation;
	}
	shard->timer_high_water = keep;
	shard->free_head = MTR_NOT_ARMED;
	for (uint32_t i = keep; i-- > 0;) {
		struct mtr_timer *timer = &shard->timers[i];
		/* Retired slots (generation spent) stay out of the list. */
		if ((timer->generation & 1) == 0 && timer->generation != 0) {
			timer->heap_slot = shard->free_head;
			shard->free_head = i;
		}
	}
	uint32_t target = capacity;
	while (target / 2 >= keep && target / 2 >= MTR_TIMERS_MIN &&
	    target / 2 >= shard->counters.timers * 2)
		target /= 2;
	if (target < capacity)
		(void)mtr_slots_resize_locked_(shard, target);
}

int
mtr_slots_take_locked_(struct mtr_shard *shard, void *context,
    mtr_timer_id *out_id)
{
	uint32_t index;
	int rc = 0;

	if (shard->free_head != MTR_NOT_ARMED) {
		index = shard->free_head;
		shard->free_head = shard->timers[index].heap_slot;
	} else if (shard->timer_high_water < shard->timer_capacity ||
	    (rc = mtr_slots_grow_locked_(shard)) == 0) {
		index = shard->timer_high_water++;
		shard->timers[index].generation = shard->generation_floor;
	} else {
		return rc;
	}
	struct mtr_timer *timer = &shard->timers[index];
	timer->generation++; /* now odd: allocated */
	timer->context = context;
	timer->heap_slot = MTR_NOT_ARMED;
	timer->deadline_ns = 0;
	timer->period_ns = 0;
	timer->order = MTR_ORDER_NONE;
	timer->sequence = 0;
	timer->missed_policy = MTR_MISSED_SKIP;
	shard->counters.timers++;
	if (shard->counters.timers > 2 * (uint64_t)shard->shrink_check_at)
		shard->shrink_check_at = (uint32_t)(shard->counters.timers / 2);
	*out_id = mtr_timer_id_make_(shard, index, timer->generation);
	return 0;
}

void
mtr_slots_give_back_locked_(struct mtr_shard *shard, uint32_t index)
{
	struct mtr_timer *timer = &shard->timers[index];

	timer->context = NULL;
	/* Now even: free. At 0 the generations are spent and the slot is
	 * retired: reused, it would bring back the ids of its first life. */
	if (++timer->generation != 0) {
		timer->heap_slot = shard->free_head;
		shard->free_head = index;
	}
	shard->counters.timers--;
	if (shard->counters.timers <= shard->shrink_check_at &&
	    !shard->stopping) {
		mtr_slots_shrink_locked_(shard);
		shard->shrink_check_at = (uint32_t)(shard->counters.timers / 2);
	}
}

/*
 * Moves the live timer at slot @index, whose ids are spent, to a fresh
 * slot, which it takes with its schedule, heap entry and context; the old
 * slot retires. An entry of it in the run list is skipped from now on, as
 * after any move. 0, or ENOMEM with nothing changed.
 */
int
mtr_slots_relocate_locked_(struct mtr_shard *shard, uint32_t index,
    uint32_t *out_index)
{
	mtr_timer_id id;
	int rc = mtr_slots_take_locked_(shard, NULL, &id);
	if (rc != 0)
		return rc;
	uint32_t fresh = (uint32_t)id - shard->id_base;
	struct mtr_timer *from = &shard->timers[index];
	struct mtr_timer *to = &shard->timers[fresh];
	uint32_t generation = to->generation;

	*to = *from;
	to->generation = generation;
	if (to->heap_slot != MTR_NOT_ARMED) {
		struct mtr_timerset *set =
		    &shard->clocks[mtr_slot_clock_(to->heap_slot)].set;
		set->entries[mtr_slot_index_(to->heap_slot)].timer = fresh;
	}
	from->heap_slot = MTR_NOT_ARMED;
	from->order = MTR_ORDER_NONE;
	mtr_slots_give_back_locked_(shard, index);
	*out_index = fresh;
	return 0;
}

void
mtr_slots_age_locked_(struct mtr_shard *shard, uint32_t reuses)
{
	/* A free slot ages up to its last generation, never past it. */
	for (uint32_t i = 0; i < shard->timer_high_water; i++) {
		struct mtr_timer *timer = &shard->timers[i];
		if ((timer->generation & 1) != 0 || timer->generation == 0)
			continue;
		uint64_t aged = (uint64_t)timer->generation + 2 * (uint64_t)reuses;
		timer->generation = aged < UINT32_MAX ? (uint32_t)aged :
		    UINT32_MAX - 1;
	}
}

void
mtr_slots_free_(struct mtr_shard *shard)
{
	free(shard->timers);
	shard->timers = NULL;
	shard->timer_capacity = 0;
	shard->timer_high_water = 0;
	shard->free_head = MTR_NOT_ARMED;
}

static size_t
mtr_slots_bytes_(const struct mtr_shard *shard)
{
	return (size_t)shard->timer_capacity * sizeof(*shard->timers);
}

/* Adds the shard's counters to @out, as one snapshot under its lock. */
void
mtr_shard_add_counters_(struct mtr_shard *shard, mtr_counters *out)
{
	mtr_lock_take_(&shard->lock);
	const mtr_counters *c = &shard->counters;
	out->wakeups += c->wakeups;
	out->fired += c->fired;
	out->late += c->late;
	out->missed_periods += c->missed_periods;
	out->coalesced += c->coalesced;
	out->clock_steps += c->clock_steps;
	out->timers += c->timers;
	out->batched += c->batched;
	for (int k = 0; k < MTR_CLOCK_COUNT; k++) {
		out->armed += shard->clocks[k].set.count;
		out->memory_bytes += mtr_timerset_bytes_(&shard->clocks[k].set);
	}
	for (uint32_t i = shard->run.next; i < shard->run.count; i++)
		out->armed += mtr_run_current_(&shard->run.entries[i],
		    shard->timers);
	out->memory_bytes += mtr_slots_bytes_(shard) +
	    mtr_run_bytes_(&shard->run);
	mtr_lock_give_(&shard->lock);
}

/*
 * A descriptor number is not a descriptor: closed under the engine (a
 * closefrom() sweep), its number is the next open()'s, perhaps another
 * engine's timerfd. Every timerfd is anonymous, one inode for all, so the
 * engine signs each of its own with an interval no other timerfd has: it
 * never fires on the interval (each expiry is followed by a settime, and
 * the interval is a century), the signature carries the process id and a
 * count, and timerfd_gettime reads it back before every settime, read and
 * close. A number is taken for the engine's only while it is signed.
 */
#define MTR_SIGNATURE_BASE_S INT64_C(3155760000) /* a century */

int
mtr_timerfd_open_(struct mtr_timerfd *timerfd, mtr_clock_id clock, int flags)
{
	static _Atomic uint32_t signed_count;
	uint64_t mark = ((uint64_t)getpid() << 32) |
	    atomic_fetch_add_explicit(&signed_count, 1, memory_order_relaxed);
	struct itimerspec spec = { .it_interval = {
	    .tv_sec = MTR_SIGNATURE_BASE_S + (int64_t)(mark / MTR_NS_PER_S),
	    .tv_nsec = (long)(mark % MTR_NS_PER_S) } };

	timerfd->fd = timerfd_create(mtr_clock_posix_(clock), flags);
	if (timerfd->fd < 0)
		return errno;
	timerfd->signature = spec.it_interval;
	return timerfd_settime(timerfd->fd, 0, &spec, NULL) == 0 ? 0 : errno;
}

int
mtr_timerfd_ours_(const struct mtr_timerfd *timerfd)
{
	struct itimerspec current;

	if (timerfd->fd < 0)
		return EBADF;
	if (timerfd_gettime(timerfd->fd, &current) != 0)
		return errno;
	return current.it_interval.tv_sec == timerfd->signature.tv_sec &&
	    current.it_interval.tv_nsec == timerfd->signature.tv_nsec ?
	    0 : EBADF;
}

bool
mtr_timerfd_close_(struct mtr_timerfd *timerfd)
{
	if (timerfd->fd < 0)
		return true;
	bool ours = mtr_timerfd_ours_(timerfd) == 0;
	if (ours)
		close(timerfd->fd);
	timerfd->fd = -1;
	return ours;
}

bool
mtr_shard_close_fds_(struct mtr_shard *shard)
{
	bool all_ours = true;
	for (int c = 0; c < MTR_CLOCK_COUNT; c++)
		all_ours &= mtr_timerfd_close_(&shard->clocks[c].timerfd);
	return all_ours;
}

void
mtr_shard_free_events_(struct mtr_shard *shard)
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++) {
		if (shard->clocks[c].event != NULL)
			event_free(shard->clocks[c].event);
		shard->clocks[c].event = NULL;
	}
}

void
mtr_shard_free_(struct mtr_shard *shard)
{
	for (int c = 0; c < MTR_CLOCK_COUNT; c++)
		mtr_timerset_free_(&shard->clocks[c].set);
	mtr_slots_free_(shard);
	mtr_run_free_(&shard->run);
}
