/*
 * open-loop - HTTP/1.1 keep-alive load at a fixed request rate, timed from each
 * request's intended send time
 *
 * Usage: open-loop -p PORT -c CONNECTIONS -r REQUESTS_PER_S -w WARMUP_S -d SECONDS
 *
 * Closed-loop tools (wrk) send a connection's next request when its answer arrives, so a
 * server that stalls is sent less and its stall is counted once, not for every request it
 * held up (coordinated omission). Here request k is due at start + k / rate on connection
 * k mod CONNECTIONS, whatever the server does; its latency runs from that instant, so a
 * request that waits for a connection still busy with an earlier one counts the wait.
 * One request per connection is in flight at a time, as a browser or a keep-alive client
 * sends them (no pipelining). This is wrk2's method.
 *
 * First every connection is opened and answered once (the ramp, timed and reported:
 * the server's accept span bounds it); only then does the schedule start, and the first
 * WARMUP_S seconds of it are left out of the latencies. A line on stdout marks the
 * measured window's start ({"phase":"measure"}) and end ({"phase":"end"}), so that a
 * driver can read the server's CPU time over that window alone; the result is one JSON
 * line after them.
 * One thread on epoll: at the rates a two-core machine's server sustains, it is idle
 * most of the time.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL
/* Answers still missing this long after the last request was due count as timeouts. */
#define DRAIN_NS (10 * NS_PER_S)
/* A ramp that has not finished by then ends the run: the server cannot take the load. */
#define RAMP_NS (60 * NS_PER_S)

static const char request[] = "GET /work HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

struct connection {
	int fd;
	int ready;		/* connected and answered once */
	int dead;		/* closed by the server, or failed */
	int64_t in_flight;	/* the request awaiting its answer, or -1 */
	int64_t first_pending;	/* the earliest request due but not sent yet */
	int64_t pending;	/* how many, every CONNECTIONS-th from it */
	size_t used;
	char buffer[4096];
};

struct run {
	int epoll;
	long count;
	long rate;
	int64_t start_ns;
	int64_t warmup_ns;
	int64_t total;		/* requests in the schedule, warm-up included */
	int64_t *latencies;	/* of the measured requests, in ns */
	int64_t measured;
	int64_t answered;
	int64_t non_200;
	int64_t closed;		/* connections the server closed */
	int64_t lost;		/* requests due on a closed connection */
	int64_t outstanding;
	int64_t ramp_answered;
};

static int64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t
due_ns(const struct run *run, int64_t k)
{
	return run->start_ns + (int64_t)((__int128)k * NS_PER_S / run->rate);
}

static int
compare_ns(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void
die(const char *what)
{
	fprintf(stderr, "open-loop: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void
close_connection(struct run *run, struct connection *c)
{
	if (c->dead)
		return;
	c->dead = 1;
	run->closed++;
	if (c->in_flight >= 0) {
		run->outstanding--;
		run->lost++;
	}
	run->lost += c->pending;
	c->pending = 0;
	close(c->fd);
}

/* Sends request k (or the ramp's, k = -1: in_flight is then the ramp marker -2). */
static void
send_request(struct run *run, struct connection *c, int64_t k)
{
	ssize_t n = write(c->fd, request, sizeof request - 1);
	if (n != (ssize_t)(sizeof request - 1)) {
		/* A small write on an idle keep-alive connection only fails when it closed. */
		if (k >= 0)
			run->lost++;
		close_connection(run, c);
		return;
	}
	c->in_flight = k < 0 ? -2 : k;
	if (k >= 0)
		run->outstanding++;
}

/*
 * Takes a whole response off the buffer: 1 if there was one (its status in *status),
 * 0 if more bytes are needed.
 */
static int
take_response(struct connection *c, int *status)
{
	char *end = memmem(c->buffer, c->used, "\r\n\r\n", 4);
	if (end == NULL)
		return 0;
	size_t head = (size_t)(end - c->buffer) + 4;
	long length = 0;
	for (char *line = c->buffer; line < end;) {
		char *next = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
		if (strncasecmp(line, "content-length:", 15) == 0)
			length = strtol(line + 15, NULL, 10);
		line = next + 2;
	}
	if (c->used < head + (size_t)length)
		return 0;
	*status = (int)strtol(c->buffer + 9, NULL, 10);
	c->used -= head + (size_t)length;
	memmove(c->buffer, c->buffer + head + (size_t)length, c->used);
	return 1;
}

static void
answered(struct run *run, struct connection *c, int status, int64_t now)
{
	if (c->in_flight == -2) {
		c->ready = 1;
		run->ramp_answered++;
	} else {
		int64_t k = c->in_flight;
		run->outstanding--;
		run->answered++;
		if (status != 200)
			run->non_200++;
		int64_t due = due_ns(run, k);
		if (due >= run->start_ns + run->warmup_ns)
			run->latencies[run->measured++] = now - due;
	}
	c->in_flight = -1;
	if (c->pending > 0) {
		int64_t k = c->first_pending;
		c->first_pending += run->count;
		c->pending--;
		send_request(run, c, k);
	}
}

static void
readable(struct run *run, struct connection *c, int64_t now)
{
	ssize_t n = read(c->fd, c->buffer + c->used, sizeof c->buffer - c->used);
	if (n <= 0) {
		if (n < 0 && errno == EAGAIN)
			return;
		close_connection(run, c);
		return;
	}
	c->used += (size_t)n;
	int status;
	while (c->in_flight != -1 && take_response(c, &status))
		answered(run, c, status, now);
}

static void
connected(struct run *run, struct connection *c)
{
	int error = 0;
	socklen_t size = sizeof error;
	getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &size);
	struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
	if (error != 0 || epoll_ctl(run->epoll, EPOLL_CTL_MOD, c->fd, &event) != 0) {
		close_connection(run, c);
		return;
	}
	send_request(run, c, -1);
}

/* Waits for events until `until` (or a first event), and handles them. */
static void
poll_once(struct run *run, int64_t until)
{
	struct epoll_event events[256];
	int64_t wait = until - now_ns();
	struct timespec timeout = {
	    .tv_sec = wait > 0 ? wait / NS_PER_S : 0,
	    .tv_nsec = wait > 0 ? wait % NS_PER_S : 0,
	};
	int n = epoll_pwait2(run->epoll, events, 256, &timeout, NULL);
	if (n < 0 && errno != EINTR)
		die("epoll_pwait2");
	int64_t now = now_ns();
	for (int i = 0; i < n; i++) {
		struct connection *c = events[i].data.ptr;
		if (c->dead)
			continue;
		if (!c->ready && c->in_flight == -1)
			connected(run, c);
		else
			readable(run, c, now);
	}
}

static void
open_connections(struct run *run, struct connection *connections, int port)
{
	struct sockaddr_in address = {
	    .sin_family = AF_INET,
	    .sin_port = htons((uint16_t)port),
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
	for (long i = 0; i < run->count; i++) {
		struct connection *c = &connections[i];
		c->in_flight = -1;
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			die("socket");
		int one = 1;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (connect(c->fd, (struct sockaddr *)&address, sizeof address) != 0 &&
		    errno != EINPROGRESS)
			die("connect");
		struct epoll_event event = {.events = EPOLLOUT, .data.ptr = c};
		if (epoll_ctl(run->epoll, EPOLL_CTL_ADD, c->fd, &event) != 0)
			die("epoll_ctl");
	}
}

static int64_t
percentile(const struct run *run, double p)
{
	if (run->measured == 0)
		return 0;
	int64_t i = (int64_t)(p / 100 * (double)run->measured);
	return run->latencies[i < run->measured ? i : run->measured - 1];
}

int
main(int argc, char **argv)
{
	long port = 0, warmup_s = 2, duration_s = 10;
	struct run run = {.count = 100, .rate = 1000};
	int option;
	while ((option = getopt(argc, argv, "p:c:r:w:d:")) != -1) {
		long value = strtol(optarg, NULL, 10);
		switch (option) {
		case 'p': port = value; break;
		case 'c': run.count = value; break;
		case 'r': run.rate = value; break;
		case 'w': warmup_s = value; break;
		case 'd': duration_s = value; break;
		default:
			fprintf(stderr, "usage: open-loop -p PORT -c CONNECTIONS "
			    "-r REQUESTS_PER_S -w WARMUP_S -d SECONDS\n");
			return 64;
		}
	}
	if (port <= 0 || port > 65535 || run.count <= 0 || run.rate <= 0 ||
	    warmup_s < 0 || duration_s <= 0) {
		fprintf(stderr, "open-loop: a port, and positive counts, are needed\n");
		return 64;
	}
	/* epoll's timeout is subject to the thread's timer slack (50 us by default). */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	run.epoll = epoll_create1(EPOLL_CLOEXEC);
	if (run.epoll < 0)
		die("epoll_create1");
	struct connection *connections = calloc((size_t)run.count, sizeof *connections);
	run.total = run.rate * (warmup_s + duration_s);
	run.latencies = calloc((size_t)run.total, sizeof *run.latencies);
	if (connections == NULL || run.latencies == NULL)
		die("calloc");

	int64_t ramp_start = now_ns();
	open_connections(&run, connections, (int)port);
	while (run.ramp_answered + run.closed < run.count &&
	    now_ns() - ramp_start < RAMP_NS)
		poll_once(&run, ramp_start + RAMP_NS);
	int64_t ramp_ns = now_ns() - ramp_start;
	int64_t ramp_closed = run.closed;

	run.start_ns = now_ns();
	run.warmup_ns = warmup_s * NS_PER_S;
	int64_t next = 0;
	int64_t end = due_ns(&run, run.total) + DRAIN_NS;
	int phase = 0;
	while (next < run.total || run.outstanding > 0) {
		int64_t now = now_ns();
		if (now >= end)
			break;
		if (phase == 0 && now >= run.start_ns + run.warmup_ns) {
			phase = 1;
			printf("{\"phase\":\"measure\"}\n");
			fflush(stdout);
		}
		if (phase == 1 && next == run.total) {
			phase = 2;
			printf("{\"phase\":\"end\"}\n");
			fflush(stdout);
		}
		for (; next < run.total && due_ns(&run, next) <= now; next++) {
			struct connection *c = &connections[next % run.count];
			if (c->dead)
				run.lost++;
			else if (c->in_flight != -1) {
				if (c->pending++ == 0)
					c->first_pending = next;
			} else
				send_request(&run, c, next);
		}
		poll_once(&run, next < run.total ? due_ns(&run, next) : end);
	}
	int64_t pending = 0;
	for (long i = 0; i < run.count; i++)
		pending += connections[i].dead ? 0 : connections[i].pending;

	qsort(run.latencies, (size_t)run.measured, sizeof *run.latencies, compare_ns);
	printf("{\"open_loop\":1,\"connections\":%ld,\"rate\":%ld,\"warmup_s\":%ld,"
	    "\"duration_s\":%ld,\"ramp_ms\":%.1f,\"ramp_failed\":%lld,"
	    "\"scheduled\":%lld,\"answered\":%lld,\"measured\":%lld,\"non_200\":%lld,"
	    "\"closed\":%lld,\"lost\":%lld,\"timed_out\":%lld,"
	    "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f}\n",
	    run.count, run.rate, warmup_s, duration_s, (double)ramp_ns / 1e6,
	    (long long)ramp_closed, (long long)run.total, (long long)run.answered,
	    (long long)run.measured, (long long)run.non_200, (long long)run.closed,
	    (long long)run.lost, (long long)(run.outstanding + pending),
	    (double)percentile(&run, 50) / 1e3, (double)percentile(&run, 99) / 1e3,
	    (double)percentile(&run, 99.9) / 1e3,
	    run.measured ? (double)run.latencies[run.measured - 1] / 1e3 : 0.0);
	return 0;
}
