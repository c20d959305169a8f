/* The head of each thread's handler chain (mtr_handler_chain.h). */
#include "mtr_handler_chain.h"

#include <stddef.h>

_Thread_local void *mtr_handler_chain_ = NULL;
