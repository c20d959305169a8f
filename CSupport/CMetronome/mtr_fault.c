/*
 * A fault: one of the engine's descriptors closed or replaced under it (a
 * closefrom() sweep, say), which stops the engine. Whoever meets it
 * records it here, and that is all: the firing thread reads the record
 * before every callback and between passes, and stops the engine on its
 * way out of its loop (mtr_engine.c says what brings it there).
 *
 * Which engine's firing thread the calling thread is lives here too: the
 * fault is the lowest of the files that ask.
 */
#include "mtr_engine_state.h"

_Thread_local mtr_engine *mtr_firing_engine_;
_Thread_local enum mtr_firer mtr_firer_;

void
mtr_engine_fault_(mtr_engine *engine, int error)
{
	int none = 0;
	(void)atomic_compare_exchange_strong(&engine->fault, &none, error);
}
