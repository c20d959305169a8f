#include "CMeasurements.h"

#include <errno.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>

int
cmeasurements_get_timer_slack(unsigned long *out_ns)
{
	int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (slack < 0)
		return errno;
	*out_ns = (unsigned long)slack;
	return 0;
}

int
cmeasurements_attr_pin(pthread_attr_t *attributes, int cpu)
{
	cpu_set_t set;

	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return EINVAL;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_attr_setaffinity_np(attributes, sizeof(set), &set);
}

int
cmeasurements_thread_voluntary_switches(long *out_count)
{
	struct rusage usage;

	if (getrusage(RUSAGE_THREAD, &usage) != 0)
		return errno;
	*out_count = usage.ru_nvcsw;
	return 0;
}
