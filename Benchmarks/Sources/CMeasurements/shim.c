#include "CMeasurements.h"

#include <errno.h>
#include <sys/prctl.h>
#include <unistd.h>

pid_t
cmeasurements_gettid(void)
{
	return gettid();
}

int
cmeasurements_get_timer_slack(unsigned long *out_ns)
{
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (slack < 0)
		return errno;
	*out_ns = (unsigned long)slack;
	return 0;
}
