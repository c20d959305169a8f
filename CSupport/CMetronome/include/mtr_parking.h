/*
 * mtr_parking - where threads wait for Metronome's one-word locks
 *
 * The Swift layer keeps a lock word in every timer (ParkingLock). A thread
 * that finds one held waits at one of MTR_PARKING_PLACES places shared by
 * every lock, chosen by the lock owner's address; the lock's own logic stays
 * in Swift. The places are static storage, initialized before any thread
 * exists, and fork() hands a child every place unlocked, with no waiters.
 */
#ifndef MTR_PARKING_H
#define MTR_PARKING_H

#include <stdint.h>

/* A power of two. Locks that share a place only wake each other needlessly. */
#define MTR_PARKING_PLACES 64

/* Takes and releases a place's mutex; @place < MTR_PARKING_PLACES. */
void mtr_parking_lock(uint32_t place);
void mtr_parking_unlock(uint32_t place);

/* With the place's mutex held: waits until woken (or spuriously). */
void mtr_parking_wait(uint32_t place);

/* With the place's mutex held: wakes every thread waiting there. */
void mtr_parking_wake_all(uint32_t place);

#endif
