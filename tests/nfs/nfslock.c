/*
 * nfslock: byte-range lock driver for the NFS suites, on Debian's libnfs (libnfs-dev).
 *
 *   nfslock v4|nlm PATH a=URL[,NLM_PORT] b=URL[,NLM_PORT] ... -- STEP...
 *
 * Clients "a".."z", each in its own process with its own libnfs context (own NFSv4
 * client id / NLM owner), started at their first step, open PATH (relative to the
 * export) through their URL; URLs may name the same gateway or two gateways over one
 * volume. Each STEP runs on one client and prints one line "STEP RESULT":
 *
 *   a:lock:w:START:LEN     write (or r: read) lock, never blocking -> granted | denied
 *   a:test:w:START:LEN     would it conflict?  v4 LOCKT / NLM TEST -> free | locked
 *                          (NLM also names the holder's range: locked START LEN)
 *   a:unlock:START:LEN     release                                  -> unlocked
 *
 * v4 uses libnfs' NFSv4 client (OPEN, LOCK, LOCKT, LOCKU); nlm opens the file over NFSv3
 * and sends NLM4 LOCK / TEST / UNLOCK itself to the gateway's NLM port (libnfs' raw NLM
 * calls; its high-level locking is NFSv4 only). LEN 0 means "to the end of the file".
 * Exit status 0 when every step ran (whatever its result), 1 on an error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nlm.h>

/* libnfs-private.h: what nfs_get_fh() points to */
struct nfs_fh {
	int len;
	char *val;
};

struct client {
	char name;
	int nlm;
	struct nfs_context *nfs;
	struct nfsfh *fh;
	struct rpc_context *rpc;	/* NLM */
	char owner[32];
};

static void die(const char *what, const char *err)
{
	fprintf(stderr, "nfslock: %s: %s\n", what, err ? err : strerror(errno));
	exit(1);
}

/* ---- NLM over a raw RPC context: synchronous calls through a poll loop ---- */

struct nlm_wait {
	int done;
	int status;
	int stat;
	nlm4_holder holder;
};

static void nlm_cb(struct rpc_context *rpc, int status, void *data, void *pd)
{
	struct nlm_wait *w = pd;

	w->done = 1;
	w->status = status;
	if (status != RPC_STATUS_SUCCESS) {
		fprintf(stderr, "nfslock: NLM call: %s\n",
			data ? (char *)data : "failed");
		return;
	}
	if (data == NULL)	/* connect callback */
		return;
	/* LOCK, UNLOCK and TEST results all start with the cookie, then the status */
	w->stat = *(int *)((char *)data + sizeof(nlm_cookie));
}

static void nlm_test_cb(struct rpc_context *rpc, int status, void *data,
			void *pd)
{
	struct nlm_wait *w = pd;
	NLM4_TESTres *res = data;

	nlm_cb(rpc, status, data, pd);
	if (status == RPC_STATUS_SUCCESS && res->reply.status == NLM4_DENIED)
		w->holder = res->reply.nlm4_testreply_u.lock.holder;
}

static void rpc_wait(struct rpc_context *rpc, struct nlm_wait *w)
{
	struct pollfd pfd;

	while (!w->done) {
		pfd.fd = rpc_get_fd(rpc);
		pfd.events = rpc_which_events(rpc);
		if (poll(&pfd, 1, 1000) < 0)
			die("poll", NULL);
		if (rpc_service(rpc, pfd.revents) < 0)
			die("rpc_service", rpc_get_error(rpc));
	}
	if (w->status != RPC_STATUS_SUCCESS)
		exit(1);
}

static void nlm_fill(struct client *c, nlm4_lock *lk, uint64_t start,
		     uint64_t len)
{
	struct nfs_fh *fh = nfs_get_fh(c->fh);

	lk->caller_name = "nfslock";
	lk->fh.data.data_len = fh->len;
	lk->fh.data.data_val = fh->val;
	lk->oh = c->owner;
	lk->svid = getpid();
	lk->l_offset = start;
	lk->l_len = len;
}

static const char *nlm_stat(int stat)
{
	switch (stat) {
	case NLM4_GRANTED: return "granted";
	case NLM4_DENIED: return "denied";
	case NLM4_DENIED_NOLOCKS: return "denied-nolocks";
	case NLM4_DENIED_GRACE_PERIOD: return "denied-grace";
	case NLM4_STALE_FH: return "stale";
	default: return "failed";
	}
}

static void nlm_step(struct client *c, char op, int excl, uint64_t start,
		     uint64_t len, char *out, size_t outlen)
{
	struct nlm_wait w = { 0 };
	char cookie[8] = "cairn";

	if (op == 'l') {
		NLM4_LOCKargs a = { 0 };

		a.cookie.data.data_len = sizeof(cookie);
		a.cookie.data.data_val = cookie;
		a.exclusive = excl;
		nlm_fill(c, &a.lock, start, len);
		if (rpc_nlm4_lock_async(c->rpc, nlm_cb, &a, &w))
			die("NLM4 LOCK", rpc_get_error(c->rpc));
		rpc_wait(c->rpc, &w);
		snprintf(out, outlen, "%s", nlm_stat(w.stat));
	} else if (op == 't') {
		NLM4_TESTargs a = { 0 };

		a.cookie.data.data_len = sizeof(cookie);
		a.cookie.data.data_val = cookie;
		a.exclusive = excl;
		nlm_fill(c, &a.lock, start, len);
		if (rpc_nlm4_test_async(c->rpc, nlm_test_cb, &a, &w))
			die("NLM4 TEST", rpc_get_error(c->rpc));
		rpc_wait(c->rpc, &w);
		if (w.stat == NLM4_GRANTED)
			snprintf(out, outlen, "free");
		else if (w.stat == NLM4_DENIED)
			snprintf(out, outlen, "locked %" PRIu64 " %" PRIu64,
				 w.holder.l_offset, w.holder.l_len);
		else
			snprintf(out, outlen, "%s", nlm_stat(w.stat));
	} else {
		NLM4_UNLOCKargs a = { 0 };

		a.cookie.data.data_len = sizeof(cookie);
		a.cookie.data.data_val = cookie;
		nlm_fill(c, &a.lock, start, len);
		if (rpc_nlm4_unlock_async(c->rpc, nlm_cb, &a, &w))
			die("NLM4 UNLOCK", rpc_get_error(c->rpc));
		rpc_wait(c->rpc, &w);
		snprintf(out, outlen, "%s", w.stat == NLM4_GRANTED ? "unlocked"
				       : nlm_stat(w.stat));
	}
}

/* ---- NFSv4 through libnfs' own lock calls ---- */

/* libnfs 4.0 maps NFS4ERR_DENIED to -ERANGE (it runs v4 statuses through its v3 table):
 * recognise the status by name. */
static int v4_denied(struct client *c, int rc)
{
	const char *err = nfs_get_error(c->nfs);

	return rc == -EAGAIN || rc == -EACCES ||
	       (err != NULL && strstr(err, "NFS4ERR_DENIED") != NULL);
}

static void v4_step(struct client *c, char op, int excl, uint64_t start,
		    uint64_t len, char *out, size_t outlen)
{
	struct nfs4_flock fl = {
		.l_type = op == 'u' ? F_UNLCK : excl ? F_WRLCK : F_RDLCK,
		.l_whence = SEEK_SET, .l_pid = getpid(),
		.l_start = start, .l_len = len ? len : UINT64_MAX,
	};
	uint64_t pos;
	int rc;

	if (op == 't') {
		/* libnfs' LOCKT is lockf(F_TEST): from the current offset, COUNT bytes */
		if (nfs_lseek(c->nfs, c->fh, start, SEEK_SET, &pos) < 0)
			die("lseek", nfs_get_error(c->nfs));
		rc = nfs_lockf(c->nfs, c->fh, NFS4_F_TEST, len ? len : UINT64_MAX);
		if (rc == 0)
			snprintf(out, outlen, "free");
		else if (v4_denied(c, rc))
			snprintf(out, outlen, "locked");
		else
			snprintf(out, outlen, "error %d %s", rc,
				 nfs_get_error(c->nfs));
		return;
	}
	rc = nfs_fcntl(c->nfs, c->fh, NFS4_F_SETLK, &fl);
	if (rc < 0 && getenv("NFSLOCK_DEBUG"))
		fprintf(stderr, "nfslock %c: %s\n", c->name, nfs_get_error(c->nfs));
	if (rc == 0)
		snprintf(out, outlen, "%s", op == 'u' ? "unlocked" : "granted");
	else if (v4_denied(c, rc))
		snprintf(out, outlen, "denied");
	else
		snprintf(out, outlen, "error %d %s", rc, nfs_get_error(c->nfs));
}

static void client_open(struct client *c, const char *url_s, int nlm_port,
			const char *path)
{
	struct nfs_url *url;
	struct nlm_wait w = { 0 };

	c->nfs = nfs_init_context();
	if (c->nfs == NULL)
		die("nfs_init_context", NULL);
	url = nfs_parse_url_dir(c->nfs, url_s);
	if (url == NULL)
		die(url_s, nfs_get_error(c->nfs));
	if (nfs_mount(c->nfs, url->server, url->path) < 0)
		die(url_s, nfs_get_error(c->nfs));
	nfs_destroy_url(url);
	if (nfs_open(c->nfs, path, O_RDWR, &c->fh) < 0)
		die(path, nfs_get_error(c->nfs));
	snprintf(c->owner, sizeof(c->owner), "nfslock-%c-%d", c->name,
		 (int)getpid());
	if (!c->nlm)
		return;
	c->rpc = rpc_init_context();
	rpc_set_auth(c->rpc, libnfs_authunix_create_default());
	if (rpc_connect_port_async(c->rpc, "127.0.0.1", nlm_port, NLM_PROGRAM,
				   NLM_V4, nlm_cb, &w) < 0)
		die("NLM connect", rpc_get_error(c->rpc));
	rpc_wait(c->rpc, &w);
}

/* A client process: read "OP TYPE START LEN" lines, answer one line each. */
static void serve(struct client *c, int in, int outfd)
{
	FILE *fin = fdopen(in, "r"), *fout = fdopen(outfd, "w");
	char op, type, res[200];
	uint64_t start, len;

	while (fscanf(fin, " %c %c %" SCNu64 " %" SCNu64, &op, &type, &start,
		      &len) == 4) {
		if (c->nlm)
			nlm_step(c, op, type == 'w', start, len, res,
				 sizeof(res));
		else
			v4_step(c, op, type == 'w', start, len, res,
				sizeof(res));
		fprintf(fout, "%s\n", res);
		fflush(fout);
	}
	/* drop whatever this client still holds, so nothing outlives the run */
	if (c->nlm)
		nlm_step(c, 'u', 1, 0, 0, res, sizeof(res));
	else
		v4_step(c, 'u', 1, 0, 0, res, sizeof(res));
	nfs_close(c->nfs, c->fh);
	nfs_destroy_context(c->nfs);
	exit(0);
}

#define MAX_CLIENTS 26

struct proc {
	pid_t pid;
	FILE *req, *rep;
};

/* Start client NAME (its own process, its own libnfs context) on URL. */
static void spawn(struct proc *procs, int k, int nlm, const char *url,
		  int nlm_port, const char *path)
{
	int to[2], from[2], j;

	if (pipe(to) || pipe(from))
		die("pipe", NULL);
	procs[k].pid = fork();
	if (procs[k].pid < 0)
		die("fork", NULL);
	if (procs[k].pid == 0) {
		struct client c = { .name = 'a' + k, .nlm = nlm };

		/* not the other clients' pipe ends: they would never see EOF */
		for (j = 0; j < MAX_CLIENTS; j++) {
			if (procs[j].req != NULL) {
				fclose(procs[j].req);
				fclose(procs[j].rep);
			}
		}
		close(to[1]);
		close(from[0]);
		client_open(&c, url, nlm_port, path);
		serve(&c, to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	procs[k].req = fdopen(to[1], "w");
	procs[k].rep = fdopen(from[0], "r");
}

int main(int argc, char **argv)
{
	struct proc procs[MAX_CLIENTS] = { 0 };
	const char *url[MAX_CLIENTS] = { 0 };
	int nlm_port[MAX_CLIENTS] = { 0 };
	int nlm, i, argi;

	if (argc < 5) {
		fprintf(stderr, "usage: nfslock v4|nlm PATH NAME=URL[,NLM_PORT]... "
			"-- STEP...\n");
		return 2;
	}
	nlm = strcmp(argv[1], "nlm") == 0;
	for (argi = 3; argi < argc && strcmp(argv[argi], "--") != 0; argi++) {
		char *eq = strchr(argv[argi], '='), *comma;
		int k = argv[argi][0] - 'a';

		if (eq == NULL || eq != argv[argi] + 1 || k < 0 || k >= MAX_CLIENTS) {
			fprintf(stderr, "nfslock: bad client %s\n", argv[argi]);
			return 2;
		}
		url[k] = eq + 1;
		comma = strrchr(eq, ',');
		if (comma != NULL) {
			*comma = 0;
			nlm_port[k] = atoi(comma + 1);
		}
	}
	if (argi >= argc) {
		fprintf(stderr, "nfslock: expected -- before the steps\n");
		return 2;
	}
	argi++;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (; argi < argc; argi++) {
		char who, op[16], type = 'w', line[256];
		uint64_t start, len;
		int k;

		if (sscanf(argv[argi], "%c:%15[a-z]:%c:%" SCNu64 ":%" SCNu64,
			   &who, op, &type, &start, &len) != 5 &&
		    sscanf(argv[argi], "%c:%15[a-z]:%" SCNu64 ":%" SCNu64,
			   &who, op, &start, &len) != 4) {
			fprintf(stderr, "nfslock: bad step %s\n", argv[argi]);
			return 2;
		}
		k = who - 'a';
		if (k < 0 || k >= MAX_CLIENTS || url[k] == NULL) {
			fprintf(stderr, "nfslock: no URL for client %c\n", who);
			return 2;
		}
		if (procs[k].req == NULL)
			spawn(procs, k, nlm, url[k], nlm_port[k], argv[2]);
		fprintf(procs[k].req, "%c %c %" PRIu64 " %" PRIu64 "\n", op[0],
			type, start, len);
		fflush(procs[k].req);
		if (fgets(line, sizeof(line), procs[k].rep) == NULL) {
			fprintf(stderr, "nfslock: client %c died at %s\n", who,
				argv[argi]);
			return 1;
		}
		printf("%s %s", argv[argi], line);
	}
	for (i = 0; i < MAX_CLIENTS; i++) {
		int st;

		if (procs[i].req == NULL)
			continue;
		fclose(procs[i].req);
		waitpid(procs[i].pid, &st, 0);
	}
	return 0;
}
