/*
 * nfsbench: NFS workloads for tests/bench/nfs.sh, through libnfs (userspace, NFSv3).
 *
 *   nfsbench small URL FILES SESSIONS   4 KiB files at sf/t<t>/a<i%4>/b<i/4%4>/f<i>
 *                                       (4 levels; the layout of cairn-bench): create
 *                                       (create + write 4 KiB + close), stat, read (open +
 *                                       read + close), delete; one thread and one libnfs
 *                                       context (one TCP session) per SESSION
 *   nfsbench write URL MIB SESSIONS     MIB MiB to seq.dat in 1 MiB writes, each session a
 *                                       contiguous share, then COMMIT (fsync) and close
 *   nfsbench read URL MIB SESSIONS      read seq.dat back in 1 MiB reads, same shares; the
 *                                       content is checked (a pattern per offset)
 *
 * URL: nfs://127.0.0.1/EXPORT?nfsport=P&mountport=M&version=3. Prints one JSON line per
 * phase: {"op": ..., "value": rate, "unit": "files/s" | "MiB/s", "seconds": ...}; a small
 * phase also gives its start and end on CLOCK_MONOTONIC ("t0", "t1": tests/bench/nfs-rt.sh
 * matches libcairn's round-trip trace to phases with them).
 * Exit 1 on any I/O error (with the path and libnfs' message).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <nfsc/libnfs.h>

#define REC (1 << 20)

static const char *url_s;
static int files, sessions;
static uint64_t mib;
static pthread_barrier_t barrier;
static double t_phase[8];

struct sess {
	int t;
	struct nfs_context *nfs;
	char *buf;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(struct sess *s, const char *what, const char *path, int rc)
{
	fprintf(stderr, "nfsbench: session %d: %s %s: %s (%d)\n", s->t, what,
		path, nfs_get_error(s->nfs), rc);
	exit(1);
}

static struct nfs_context *connect_url(void)
{
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url;

	if (nfs == NULL) {
		fprintf(stderr, "nfsbench: nfs_init_context failed\n");
		exit(1);
	}
	url = nfs_parse_url_dir(nfs, url_s);
	if (url == NULL || nfs_mount(nfs, url->server, url->path) < 0) {
		fprintf(stderr, "nfsbench: mount %s: %s\n", url_s,
			nfs_get_error(nfs));
		exit(1);
	}
	nfs_destroy_url(url);
	return nfs;
}

static void path_of(char *p, size_t n, int t, int i)
{
	snprintf(p, n, "/sf/t%d/a%d/b%d/f%d", t, i % 4, (i / 4) % 4, i);
}

/* All sessions start a phase together; session 0 takes the time. */
static void sync_point(struct sess *s, int phase)
{
	pthread_barrier_wait(&barrier);
	if (s->t == 0)
		t_phase[phase] = now();
}

static void *small_thread(void *arg)
{
	struct sess *s = arg;
	int per = files / sessions, i, rc;
	char p[256];
	struct nfsfh *fh;
	struct nfs_stat_64 st;

	/* directories (not timed) */
	snprintf(p, sizeof(p), "/sf/t%d", s->t);
	nfs_mkdir(s->nfs, "/sf");
	if ((rc = nfs_mkdir(s->nfs, p)) < 0 && rc != -EEXIST)
		die(s, "mkdir", p, rc);
	for (i = 0; i < 16; i++) {
		snprintf(p, sizeof(p), "/sf/t%d/a%d", s->t, i / 4);
		nfs_mkdir(s->nfs, p);
		snprintf(p, sizeof(p), "/sf/t%d/a%d/b%d", s->t, i / 4, i % 4);
		if ((rc = nfs_mkdir(s->nfs, p)) < 0 && rc != -EEXIST)
			die(s, "mkdir", p, rc);
	}
	sync_point(s, 0);
	for (i = 0; i < per; i++) {
		path_of(p, sizeof(p), s->t, i);
		if ((rc = nfs_creat(s->nfs, p, 0644, &fh)) < 0)
			die(s, "create", p, rc);
		if ((rc = nfs_write(s->nfs, fh, 4096, s->buf)) != 4096)
			die(s, "write", p, rc);
		if ((rc = nfs_close(s->nfs, fh)) < 0)
			die(s, "close", p, rc);
	}
	sync_point(s, 1);
	for (i = 0; i < per; i++) {
		path_of(p, sizeof(p), s->t, i);
		if ((rc = nfs_stat64(s->nfs, p, &st)) < 0)
			die(s, "stat", p, rc);
		if (st.nfs_size != 4096) {
			fprintf(stderr, "nfsbench: %s: size %llu, not 4096\n", p,
				(unsigned long long)st.nfs_size);
			exit(1);
		}
	}
	sync_point(s, 2);
	for (i = 0; i < per; i++) {
		path_of(p, sizeof(p), s->t, i);
		if ((rc = nfs_open(s->nfs, p, O_RDONLY, &fh)) < 0)
			die(s, "open", p, rc);
		if ((rc = nfs_read(s->nfs, fh, 4096, s->buf)) != 4096)
			die(s, "read", p, rc);
		nfs_close(s->nfs, fh);
	}
	sync_point(s, 3);
	for (i = 0; i < per; i++) {
		path_of(p, sizeof(p), s->t, i);
		if ((rc = nfs_unlink(s->nfs, p)) < 0)
			die(s, "unlink", p, rc);
	}
	sync_point(s, 4);
	return NULL;
}

static void fill(char *buf, uint64_t rec)
{
	uint64_t k;

	for (k = 0; k < REC / 8; k++)
		((uint64_t *)buf)[k] = rec * (REC / 8) + k;
}

static void *seq_thread(void *arg)
{
	struct sess *s = arg;
	uint64_t recs = mib, per = (recs + sessions - 1) / sessions, r, first,
		 last;
	int writing = s->buf[0] == 'w', rc;
	struct nfsfh *fh;
	char *want = malloc(REC);

	first = s->t * per;
	last = first + per < recs ? first + per : recs;
	if (writing) {
		if ((rc = nfs_open(s->nfs, "/seq.dat", O_WRONLY, &fh)) < 0)
			die(s, "open for writing", "/seq.dat", rc);
	} else if ((rc = nfs_open(s->nfs, "/seq.dat", O_RDONLY, &fh)) < 0) {
		die(s, "open for reading", "/seq.dat", rc);
	}
	sync_point(s, 0);
	for (r = first; r < last; r++) {
		if (writing) {
			fill(s->buf, r);
			rc = nfs_pwrite(s->nfs, fh, r * REC, REC, s->buf);
			if (rc != REC)
				die(s, "pwrite", "/seq.dat", rc);
		} else {
			rc = nfs_pread(s->nfs, fh, r * REC, REC, s->buf);
			if (rc != REC)
				die(s, "pread", "/seq.dat", rc);
			fill(want, r);
			if (memcmp(want, s->buf, REC) != 0) {
				fprintf(stderr, "nfsbench: seq.dat: MiB %llu "
					"reads back wrong\n",
					(unsigned long long)r);
				exit(1);
			}
		}
	}
	if (writing && (rc = nfs_fsync(s->nfs, fh)) < 0)
		die(s, "fsync (COMMIT)", "/seq.dat", rc);
	if ((rc = nfs_close(s->nfs, fh)) < 0)
		die(s, "close", "/seq.dat", rc);
	sync_point(s, 1);
	free(want);
	return NULL;
}

int main(int argc, char **argv)
{
	static const char *small_ops[] = { "create", "stat", "read", "delete" };
	struct sess *ss;
	pthread_t *th;
	int i, small;

	if (argc != 5) {
		fprintf(stderr, "usage: nfsbench small|write|read URL N SESSIONS\n");
		return 2;
	}
	small = strcmp(argv[1], "small") == 0;
	url_s = argv[2];
	files = atoi(argv[3]);
	mib = strtoull(argv[3], NULL, 10);
	sessions = atoi(argv[4]);
	if (sessions < 1)
		sessions = 1;
	if (!small) {
		/* the file exists before the timed part (write: created empty here) */
		struct sess s0 = { .t = -1, .nfs = connect_url() };
		struct nfsfh *fh;
		int rc;

		if (strcmp(argv[1], "write") == 0) {
			rc = nfs_creat(s0.nfs, "/seq.dat", 0644, &fh);
			if (rc < 0)
				die(&s0, "create", "/seq.dat", rc);
			nfs_close(s0.nfs, fh);
		}
		nfs_destroy_context(s0.nfs);
	}
	pthread_barrier_init(&barrier, NULL, sessions);
	ss = calloc(sessions, sizeof(*ss));
	th = calloc(sessions, sizeof(*th));
	for (i = 0; i < sessions; i++) {
		ss[i].t = i;
		ss[i].nfs = connect_url();
		ss[i].buf = malloc(REC);
		memset(ss[i].buf, 'x', REC);
		ss[i].buf[0] = argv[1][0];
	}
	for (i = 0; i < sessions; i++)
		pthread_create(&th[i], NULL, small ? small_thread : seq_thread,
			       &ss[i]);
	for (i = 0; i < sessions; i++)
		pthread_join(th[i], NULL);
	if (small) {
		int per = files / sessions;

		for (i = 0; i < 4; i++) {
			double sec = t_phase[i + 1] - t_phase[i];

			printf("{\"op\": \"%s\", \"value\": %.1f, \"unit\": "
			       "\"files/s\", \"seconds\": %.3f, \"files\": %d, "
			       "\"t0\": %.6f, \"t1\": %.6f}\n",
			       small_ops[i], per * sessions / sec, sec,
			       per * sessions, t_phase[i], t_phase[i + 1]);
		}
	} else {
		double sec = t_phase[1] - t_phase[0];

		printf("{\"op\": \"%s\", \"value\": %.1f, \"unit\": \"MiB/s\", "
		       "\"seconds\": %.3f, \"mib\": %llu}\n", argv[1],
		       mib / sec, sec, (unsigned long long)mib);
	}
	for (i = 0; i < sessions; i++)
		nfs_destroy_context(ss[i].nfs);
	return 0;
}
