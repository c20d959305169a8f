/* libevent for the C firing core only: Swift never sees these headers' macros. */
#ifndef CLIBEVENT_SHIM_H
#define CLIBEVENT_SHIM_H
#include <event2/event.h>
#endif
