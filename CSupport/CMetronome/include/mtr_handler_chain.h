/*
 * mtr_handler_chain - which timers' handlers the calling thread runs
 *
 * The Swift layer (CurrentHandler) keeps a chain of links on the stacks of
 * the handlers a thread runs, innermost first, so that a handler waiting for
 * its own timer returns at once instead of waiting for itself. This is the
 * chain's head: one thread-local word, read and written inline. A pthread
 * key made every firing call into libc three times, about a seventh of the
 * instructions of a SafeDispatchTimer's firing. A forked child's one thread
 * keeps the forking thread's head, as it keeps that thread's stack.
 */
#ifndef MTR_HANDLER_CHAIN_H
#define MTR_HANDLER_CHAIN_H

/* The innermost link, or NULL; reached through the functions below. */
extern _Thread_local void *mtr_handler_chain_;

/* The calling thread's innermost link, or NULL. */
static inline void *
mtr_handler_chain(void)
{
	return mtr_handler_chain_;
}

/* Makes @link (NULL for none) the calling thread's innermost link. */
static inline void
mtr_handler_chain_set(void *link)
{
	mtr_handler_chain_ = link;
}

#endif
