/*
 * The queues of one shard (mtr_queue.c): each clock's timer set and
 * timerfd, and the arm order; for timer operations and the firing loop
 * alike, with the shard's lock held.
 */
#ifndef MTR_QUEUE_H
#define MTR_QUEUE_H

#include "mtr_shard.h"

/* A timer with leeway wakes the engine a quarter of its leeway, at most
 * this much, before its latest acceptable time: room for a slow wake-up
 * (hundreds of microseconds on a busy VM) while three quarters of every
 * window still serve coalescing. */
#define MTR_WAKE_MARGIN_MAX_NS 1000000
/* How long the firing thread may run a callback before its standby fires
 * the engine's other timers (mtr_standby.c). */
#define MTR_OVERRUN_NS ((int64_t)MTR_OVERRUN_MS * 1000000)

int mtr_queue_make_room_locked_(struct mtr_shard *shard, mtr_clock_id clock);
void mtr_queue_add_locked_(struct mtr_shard *shard, uint32_t index,
    mtr_clock_id clock, int64_t due_ns);
void mtr_queue_move_locked_(struct mtr_shard *shard, struct mtr_timer *timer,
    mtr_clock_id clock, int64_t due_ns);
void mtr_queue_remove_locked_(struct mtr_shard *shard,
    struct mtr_timer *timer);
void mtr_queue_rearm_locked_(struct mtr_shard *shard, mtr_clock_id clock);
void mtr_queue_set_fd_locked_(struct mtr_clock_state *state,
    int64_t target_ns);
/* The standby's alarm (mtr_queue.c): set for the engine's next expiry, or
 * for a time; ringing it now wakes the standby. */
void mtr_queue_set_alarm_(mtr_engine *engine);
void mtr_queue_alarm_at_(mtr_engine *engine, int64_t target_ns);
void mtr_queue_ring_alarm_(mtr_engine *engine);

#endif /* MTR_QUEUE_H */
