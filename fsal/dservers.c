/*
 * FSAL_CAIRN as a pNFS MDS: the data servers (DS) it names in layouts, where they
 * listen (DS_Addrs) and whether they answer.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * FSAL { DS_Addrs = "n1=ADDR:PORT,..."; } maps a brick node's name to its DS's IPv4
 * address; an unlisted node's DS is taken to listen on the host of its cairnd address,
 * port 20490 (CAIRN_DS_DEFAULT_PORT: the DS port of the appliance and `make up`).
 *
 * A DS is a Ganesha on a brick node. It can die while that node's cairnd and bricks
 * stay up: the volume map does not change, so recall.c's map check alone would leave
 * clients holding layouts that name a dead DS (Ganesha 4.3's LAYOUTERROR, by which a
 * client would report it, breaks the connection: docs/nfs.md "Layout state"). So each
 * PNFS export probes the DSs it names in layouts: every CAIRN_DS_PROBE_INTERVAL_MS, an
 * NFSv4 NULL call on a new TCP connection to each (what a client would do first); one
 * that fails DS_Probe_Fails (3) times in a row is down, one that answers is up again.
 * Each change bumps the export's DS generation and runs recall.c's check: a layout's
 * digest covers the liveness of its set's DSs, so the layouts of the files of every set
 * with a brick on that node are recalled, and new layouts leave a dead DS out (mds.c:
 * the next up brick's DS that answers; none: NFS4ERR_LAYOUTUNAVAILABLE, the client does
 * its I/O through the MDS). When it answers again, the layouts handed out meanwhile are
 * recalled and name it again.
 *
 * The probed DSs: those of DS_Addrs, and any other the MDS names (a node not listed
 * there: its cairnd host, port 20490), added when first named. See docs/nfs.md "Recalls".
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "fsal.h"
#include "internal.h"

/* A refused connection fails at once: a dead Ganesha on a live host is down within
 * about 3 s; a host that is gone, within about 9 s (FSAL { DS_Probe_Fails }, 3 by
 * default, failures in a row). The timeout and the count leave room for a loaded DS (a
 * false "down" recalls layouts and sends I/O elsewhere). A client's error report of a DS
 * (cairn_ds_suspect) has it probed at once, and one failure is then enough. */
#define CAIRN_DS_PROBE_INTERVAL_MS 1000
#define CAIRN_DS_PROBE_TIMEOUT_MS 2000

#define CAIRN_DS_DEFAULT_PORT 20490
#define NFS_PROGRAM 100003
#define NULL_CALL_WORDS 10	/* xid .. verifier: RFC 5531 call, AUTH_NONE */

/* ---- DS_Addrs ------------------------------------------------------------------ */

/* Parse "HOST:PORT" (HOST an IPv4 address or a name resolving to one). */
static int parse_ipv4_port(const char *s, size_t len, uint32_t *addr,
			   uint16_t *port)
{
	char host[256];
	const char *colon = memrchr(s, ':', len);
	struct in_addr in;
	char *end;
	unsigned long p;
	size_t hl;

	if (colon == NULL)
		return -EINVAL;
	hl = colon - s;
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (end != s + len || end == colon + 1 || p == 0 || p > 65535 ||
	    errno != 0)
		return -EINVAL;
	if (inet_pton(AF_INET, host, &in) != 1) {
		struct addrinfo hints = { .ai_family = AF_INET,
					  .ai_socktype = SOCK_STREAM };
		struct addrinfo *res = NULL;

		if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
			return -ENOENT;
		in = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
		freeaddrinfo(res);
	}
	*addr = ntohl(in.s_addr);
	*port = (uint16_t)p;
	return 0;
}

int cairn_pnfs_parse_ds_addrs(struct cairn_export *export)
{
	const char *s = export->ds_addrs;
	size_t n = 0;

	export->nds = 0;
	if (s == NULL)
		return 0;
	while (*s != '\0') {
		const char *comma = strchrnul(s, ',');
		const char *eq = memchr(s, '=', comma - s);
		struct cairn_ds_addr *d;
		size_t nl;

		while (*s == ' ')
			s++;
		if (eq == NULL || eq == s || n >= CAIRN_MAX_DS_ADDRS) {
			LogCrit(COMPONENT_FSAL,
				"CAIRN: volume %s: DS_Addrs entry '%.*s' is not NODE=ADDR:PORT (at most %d entries)",
				export->volume, (int)(comma - s), s,
				CAIRN_MAX_DS_ADDRS);
			return -EINVAL;
		}
		d = &export->ds[n];
		nl = eq - s;
		if (nl >= sizeof(d->node)) {
			LogCrit(COMPONENT_FSAL,
				"CAIRN: volume %s: DS_Addrs node name '%.*s' too long",
				export->volume, (int)nl, s);
			return -EINVAL;
		}
		memcpy(d->node, s, nl);
		d->node[nl] = '\0';
		if (parse_ipv4_port(eq + 1, comma - eq - 1, &d->addr,
				    &d->port) < 0) {
			LogCrit(COMPONENT_FSAL,
				"CAIRN: volume %s: DS_Addrs address '%.*s' of node %s is not IPV4:PORT",
				export->volume, (int)(comma - eq - 1), eq + 1,
				d->node);
			return -EINVAL;
		}
		n++;
		s = *comma ? comma + 1 : comma;
	}
	export->nds = n;
	return 0;
}

/* The DS address of a brick's node: DS_Addrs, else its cairnd host at port 20490. */
int cairn_ds_addr_of(const struct cairn_export *export,
		     const cairn_layout_brick_t *b, fsal_multipath_member_t *out)
{
	size_t i;
	uint16_t port;

	for (i = 0; i < export->nds; i++) {
		if (strcmp(export->ds[i].node, b->node) == 0) {
			out->proto = IPPROTO_TCP;
			out->addr = export->ds[i].addr;
			out->port = export->ds[i].port;
			return 0;
		}
	}
	if (parse_ipv4_port(b->addr, strlen(b->addr), &out->addr, &port) < 0)
		return -EINVAL;
	out->proto = IPPROTO_TCP;
	out->port = CAIRN_DS_DEFAULT_PORT;
	return 0;
}

/* ---- liveness ------------------------------------------------------------------ */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for EVENTS on FD until DEADLINE (now_ms): 0, or -ETIMEDOUT / -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int64_t left;
	int rc;

	for (;;) {
		left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		rc = poll(&p, 1, (int)left);
		if (rc > 0)
			return 0;
		if (rc == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* One NFSv4 NULL call (RFC 5531 record-marked, AUTH_NONE) on a new connection:
 * 0 when the DS accepted it, else -errno (ECONNREFUSED, ETIMEDOUT, EPROTO...). */
static int probe_null(uint32_t addr, uint16_t port, uint32_t xid)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(addr) };
	uint32_t call[1 + NULL_CALL_WORDS] = {
		htonl(0x80000000u | (NULL_CALL_WORDS * 4)), htonl(xid),
		htonl(0) /* CALL */, htonl(2) /* RPC version */,
		htonl(NFS_PROGRAM), htonl(4), htonl(0) /* NULL */,
		0, 0 /* AUTH_NONE credential */, 0, 0 /* verifier */ };
	/* mark, xid, REPLY, MSG_ACCEPTED, verifier flavor + length 0, SUCCESS */
	uint32_t reply[7];
	int64_t deadline = now_ms() + CAIRN_DS_PROBE_TIMEOUT_MS;
	size_t got = 0;
	socklen_t len = sizeof(int);
	int fd, rc, soerr = 0;
	ssize_t n;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (rc < 0 && errno != EINPROGRESS) {
		rc = -errno;
		goto out;
	}
	if (rc < 0) {
		rc = wait_fd(fd, POLLOUT, deadline);
		if (rc < 0)
			goto out;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
			soerr = errno;
		if (soerr != 0) {
			rc = -soerr;
			goto out;
		}
	}
	n = send(fd, call, sizeof(call), MSG_NOSIGNAL);
	if (n != (ssize_t)sizeof(call)) {
		rc = n < 0 ? -errno : -EIO;
		goto out;
	}
	while (got < sizeof(reply)) {
		rc = wait_fd(fd, POLLIN, deadline);
		if (rc < 0)
			goto out;
		n = recv(fd, (char *)reply + got, sizeof(reply) - got, 0);
		if (n == 0) {
			rc = -ECONNRESET;
			goto out;
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			rc = -errno;
			goto out;
		}
		got += n;
	}
	rc = ntohl(reply[1]) == xid && ntohl(reply[2]) == 1 &&
	     ntohl(reply[3]) == 0 && ntohl(reply[5]) == 0 &&
	     ntohl(reply[6]) == 0 ? 0 : -EPROTO;
out:
	close(fd);
	return rc;
}

static const char *ipv4_str(uint32_t addr, char *buf, size_t len)
{
	struct in_addr in = { .s_addr = htonl(addr) };

	return inet_ntop(AF_INET, &in, buf, len) ? buf : "?";
}

/* A probe's result: down after FAILS failures in a row (one, when a client reported an
 * error of it: SUSPECT), up on an answer. True when the DS changed state. Under the
 * watch's mutex. */
static bool probe_result(struct cairn_ds_state *d, int rc, uint32_t fails,
			 bool suspect)
{
	if (rc == 0) {
		d->fails = 0;
		if (!d->down)
			return false;
		d->down = false;
		return true;
	}
	d->err = -rc;
	if ((++d->fails < fails && !suspect) || d->down)
		return false;
	d->down = true;
	return true;
}

static void *watch_thread(void *arg)
{
	struct cairn_export *export = arg;
	struct cairn_ds_watch *w = &export->ds_watch;
	struct cairn_ds_state probe[CAIRN_MAX_DS_ADDRS];
	int rc[CAIRN_MAX_DS_ADDRS];
	uint32_t xid = (uint32_t)now_ms();
	char ip[INET_ADDRSTRLEN];
	struct timespec until;
	size_t n, i;

	/* it calls Ganesha's layoutrecall (recall.c); Ganesha's RCU flavour (urcu-bp)
	 * registers a thread at its first read-side lock */
	SetNameFunction("cairn_ds_probe");
	PTHREAD_MUTEX_lock(&w->mutex);
	while (!w->stop) {
		n = w->nds;
		memcpy(probe, w->ds, n * sizeof(probe[0]));
		PTHREAD_MUTEX_unlock(&w->mutex);
		for (i = 0; i < n; i++)
			rc[i] = probe_null(probe[i].addr, probe[i].port, ++xid);
		PTHREAD_MUTEX_lock(&w->mutex);
		/* entries are only appended: index i is still probe[i] */
		for (i = 0; i < n; i++) {
			struct cairn_ds_state *d = &w->ds[i];

			/* a report that came during this probe is one it answered */
			if (probe[i].suspect)
				d->suspect = false;
			if (!probe_result(d, rc[i], export->ds_probe_fails,
					  probe[i].suspect))
				continue;
			w->gen++;
			if (d->down)
				LogEvent(COMPONENT_PNFS,
					 "CAIRN: volume %s: the data server of node %s (%s:%u) does not answer (%s, %u probes%s): recalling its layouts; new layouts leave it out",
					 export->volume, d->node,
					 ipv4_str(d->addr, ip, sizeof(ip)),
					 d->port, strerror(d->err), d->fails,
					 probe[i].suspect ?
					 ", after a client's error report" : "");
			else
				LogEvent(COMPONENT_PNFS,
					 "CAIRN: volume %s: the data server of node %s (%s:%u) answers again: layouts name it again",
					 export->volume, d->node,
					 ipv4_str(d->addr, ip, sizeof(ip)),
					 d->port);
			/* the check takes the layout lock, then this one: not
			 * while holding this one */
			PTHREAD_MUTEX_unlock(&w->mutex);
			cairn_layouts_recheck(export);
			PTHREAD_MUTEX_lock(&w->mutex);
		}
		if (w->stop)
			break;
		/* a report while this pass probed: no wait (its signal came before it) */
		for (i = 0; i < w->nds && !w->ds[i].suspect; i++)
			;
		if (i < w->nds)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += CAIRN_DS_PROBE_INTERVAL_MS / 1000;
		until.tv_nsec += (CAIRN_DS_PROBE_INTERVAL_MS % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		(void) pthread_cond_timedwait(&w->cond, &w->mutex, &until);
	}
	PTHREAD_MUTEX_unlock(&w->mutex);
	return NULL;
}

/* Under the watch's mutex: the entry of H, added (up) if new; NULL when the table is
 * full (such a DS is taken to be up). */
static struct cairn_ds_state *find_or_add(struct cairn_ds_watch *w,
					  const char *node,
					  const fsal_multipath_member_t *h)
{
	struct cairn_ds_state *d;
	size_t i;

	for (i = 0; i < w->nds; i++)
		if (w->ds[i].addr == h->addr && w->ds[i].port == h->port)
			return &w->ds[i];
	if (w->nds == CAIRN_MAX_DS_ADDRS)
		return NULL;
	d = &w->ds[w->nds++];
	memset(d, 0, sizeof(*d));
	(void) snprintf(d->node, sizeof(d->node), "%s", node);
	d->addr = h->addr;
	d->port = h->port;
	return d;
}

bool cairn_ds_up(struct cairn_export *export, const char *node,
		 const fsal_multipath_member_t *h)
{
	struct cairn_ds_watch *w = &export->ds_watch;
	struct cairn_ds_state *d;
	bool up;

	if (!w->running)
		return true;
	PTHREAD_MUTEX_lock(&w->mutex);
	d = find_or_add(w, node, h);
	up = d == NULL || !d->down;
	PTHREAD_MUTEX_unlock(&w->mutex);
	return up;
}

bool cairn_ds_brick_up(struct cairn_export *export,
		       const cairn_layout_brick_t *b)
{
	fsal_multipath_member_t h;

	if (cairn_ds_addr_of(export, b, &h) < 0)
		return true;	/* named in no layout */
	return cairn_ds_up(export, b->node, &h);
}

uint32_t cairn_ds_gen(struct cairn_export *export)
{
	struct cairn_ds_watch *w = &export->ds_watch;
	uint32_t gen;

	if (!w->running)
		return 0;
	PTHREAD_MUTEX_lock(&w->mutex);
	gen = w->gen;
	PTHREAD_MUTEX_unlock(&w->mutex);
	return gen;
}

/* A client reported an I/O error of brick B's DS (a Flexible Files LAYOUTRETURN's
 * ff_ioerr4; Ganesha 4.3 passes no LAYOUTERROR to the FSAL): wake the probe, which
 * probes it now and takes one failure as down. One that answers stays up. */
void cairn_ds_suspect(struct cairn_export *export, const cairn_layout_brick_t *b)
{
	struct cairn_ds_watch *w = &export->ds_watch;
	fsal_multipath_member_t h;
	struct cairn_ds_state *d;

	if (!w->running || cairn_ds_addr_of(export, b, &h) < 0)
		return;
	PTHREAD_MUTEX_lock(&w->mutex);
	d = find_or_add(w, b->node, &h);
	if (d != NULL && !d->down && !d->suspect) {
		d->suspect = true;
		(void) pthread_cond_signal(&w->cond);
	}
	PTHREAD_MUTEX_unlock(&w->mutex);
}

int cairn_ds_watch_start(struct cairn_export *export)
{
	struct cairn_ds_watch *w = &export->ds_watch;
	fsal_multipath_member_t h = { .proto = IPPROTO_TCP };
	pthread_condattr_t ca;
	size_t i;
	int rc;

	PTHREAD_MUTEX_init(&w->mutex, NULL);
	(void) pthread_condattr_init(&ca);
	(void) pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&w->cond, &ca);
	(void) pthread_condattr_destroy(&ca);
	if (rc != 0) {
		PTHREAD_MUTEX_destroy(&w->mutex);
		return -rc;
	}
	for (i = 0; i < export->nds; i++) {
		h.addr = export->ds[i].addr;
		h.port = export->ds[i].port;
		(void) find_or_add(w, export->ds[i].node, &h);
	}
	w->stop = false;
	rc = pthread_create(&w->thread, NULL, watch_thread, export);
	if (rc != 0) {
		LogWarn(COMPONENT_PNFS,
			"CAIRN: volume %s: cannot start the data server probe: %s; a data server that dies is not left out of layouts",
			export->volume, strerror(rc));
		(void) pthread_cond_destroy(&w->cond);
		PTHREAD_MUTEX_destroy(&w->mutex);
		return -rc;
	}
	w->running = true;
	return 0;
}

void cairn_ds_watch_stop(struct cairn_export *export)
{
	struct cairn_ds_watch *w = &export->ds_watch;

	if (!w->running)
		return;
	PTHREAD_MUTEX_lock(&w->mutex);
	w->stop = true;
	(void) pthread_cond_signal(&w->cond);
	PTHREAD_MUTEX_unlock(&w->mutex);
	(void) pthread_join(w->thread, NULL);
	w->running = false;
	(void) pthread_cond_destroy(&w->cond);
	PTHREAD_MUTEX_destroy(&w->mutex);
}
