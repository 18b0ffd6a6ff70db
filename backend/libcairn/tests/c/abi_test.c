/*
 * abi_test - exercises libcairn through its C ABI, as the Ganesha FSAL, the Samba VFS
 * module and the tcmu-runner handler do.
 *
 *   abi_test --offline            checks that need no server (argument validation,
 *                                 ids, versions, unreachable cluster)
 *   abi_test SERVERS VOLUME       the full run against a live volume: create, write,
 *                                 read, readdir, rename, links, xattrs, locks, statfs,
 *                                 compare-and-write, aio, unlink, server-side copy
 *
 * Prints every failed check and "N passed, M failed"; exits 1 on any failure, 2 on usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "cairn.h"

static int passed, failed;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (cond) {                                                    \
			passed++;                                              \
		} else {                                                       \
			failed++;                                              \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " [last error: %s]\n",                 \
				cairn_last_error_message());                   \
		}                                                              \
	} while (0)

/* Expect `rc` == `want` (0 or a negative errno). */
#define CHECK_RC(rc, want) CHECK((rc) == (want), "got %d (%s), want %d", (int)(rc), \
				 (rc) < 0 ? strerror((int)-(rc)) : "ok", (int)(want))

/* ---- aio completion tracking ------------------------------------------------------- */

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int pending;
	int results[16];
	pthread_t threads[16];
};

struct aio_slot {
	struct waiter *w;
	int index;
};

static void aio_done(int result, void *arg)
{
	struct aio_slot *s = arg;
	pthread_mutex_lock(&s->w->lock);
	s->w->results[s->index] = result;
	s->w->threads[s->index] = pthread_self();
	s->w->pending--;
	pthread_cond_broadcast(&s->w->cond);
	pthread_mutex_unlock(&s->w->lock);
}

static void aio_wait(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	while (w->pending > 0)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

static void never_called(int result, void *arg)
{
	(void)result;
	*(int *)arg = 1;
}

/* A loopback TCP port where nothing listens (bound, then closed). */
static int closed_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) < 0) {
		perror("closed_port");
		exit(2);
	}
	close(s);
	return ntohs(a.sin_port);
}

/* ---- checks that need no server ---------------------------------------------------- */

static void offline(void)
{
	int major = -1, minor = -1, patch = -1, rc, called = 0;
	char hex[33], servers[64], small[8];
	const char *v = cairn_version(&major, &minor, &patch);
	cairn_id_t id, root = cairn_id_root();
	cairn_fs_t *fs = (cairn_fs_t *)0x1;
	cairn_options_t o;
	cairn_attr_t attr;

	CHECK(cairn_abi_version() == CAIRN_ABI_VERSION, "library ABI %u, header %u",
	      cairn_abi_version(), CAIRN_ABI_VERSION);
	CHECK(v != NULL && major >= 0 && minor >= 0 && patch >= 0, "version %s", v ? v : "(null)");

	CHECK_RC(cairn_id_to_hex(root, hex, sizeof(hex)), 0);
	CHECK(strcmp(hex, "00000000000000000000000000000001") == 0, "root id %s", hex);
	CHECK_RC(cairn_id_from_hex(hex, &id), 0);
	CHECK(memcmp(&id, &root, sizeof(id)) == 0, "hex round trip");
	CHECK(strcmp(cairn_last_error_message(), "") == 0, "message after success: %s",
	      cairn_last_error_message());
	CHECK_RC(cairn_id_to_hex(root, small, sizeof(small)), -EINVAL);
	CHECK_RC(cairn_id_from_hex("xyz", &id), -EINVAL);
	CHECK(strstr(cairn_last_error_message(), "xyz") != NULL, "message names the input");

	/* mount argument validation */
	rc = cairn_mount(NULL, "vol", NULL, &fs);
	CHECK_RC(rc, -EINVAL);
	CHECK(fs == NULL, "*out cleared on failure");
	CHECK_RC(cairn_mount("127.0.0.1:7420", "vol", NULL, NULL), -EINVAL);
	CHECK_RC(cairn_mount("127.0.0.1:7420", NULL, NULL, &fs), -EINVAL);
	CHECK_RC(cairn_mount("127.0.0.1:7420", "", NULL, &fs), -EINVAL);
	CHECK_RC(cairn_mount("", "vol", NULL, &fs), -EINVAL);
	rc = cairn_mount("h1:7420,,h2:7420", "vol", NULL, &fs);
	CHECK_RC(rc, -EINVAL);
	rc = cairn_mount("host:notaport", "vol", NULL, &fs);
	CHECK_RC(rc, -EINVAL);
	CHECK(strstr(cairn_last_error_message(), "notaport") != NULL, "message names the entry");
	cairn_options_init(&o);
	CHECK(o.version == CAIRN_OPTIONS_VERSION && o.connect_timeout_ms > 0, "defaults");
	o.version = 0;
	CHECK_RC(cairn_mount("127.0.0.1:7420", "vol", &o, &fs), -EINVAL);

	/* nothing listening: -ENOTCONN naming the address */
	cairn_options_init(&o);
	o.connect_timeout_ms = 2000;
	snprintf(servers, sizeof(servers), "127.0.0.1:%d", closed_port());
	rc = cairn_mount(servers, "vol", &o, &fs);
	CHECK_RC(rc, -ENOTCONN);
	CHECK(strstr(cairn_last_error_message(), servers) != NULL, "message names %s", servers);
	CHECK(fs == NULL, "no fs on failure");

	/* NULL handles */
	CHECK_RC(cairn_getattr(NULL, NULL, root, &attr), -EINVAL);
	CHECK_RC(cairn_layout(NULL, root, NULL), -EINVAL);
	CHECK_RC(cairn_lookup(NULL, NULL, root, "x", &attr), -EINVAL);
	CHECK_RC(cairn_read(NULL, NULL, root, 0, small, sizeof(small)), -EINVAL);
	CHECK_RC(cairn_aio_read(NULL, NULL, root, 0, small, sizeof(small), never_called, &called), -EINVAL);
	CHECK_RC(cairn_unmount(NULL), -EINVAL);
	usleep(100 * 1000);
	CHECK(called == 0, "callback of a refused aio never runs");
}

/* ---- the full run ------------------------------------------------------------------- */

struct listing {
	int count;
	int with_attr;
	int stop_after;
	uint64_t last_cookie;
	int saw_file;
};

static int list_cb(const cairn_dirent_t *e, void *arg)
{
	struct listing *l = arg;
	l->count++;
	l->last_cookie = e->cookie;
	if (e->attr != NULL)
		l->with_attr++;
	if (strcmp(e->name, "g") == 0)
		l->saw_file = 1;
	return l->stop_after > 0 && l->count >= l->stop_after;
}

#define NFILES 300

static void online(const char *servers, const char *volume)
{
	cairn_fs_t *fs = NULL;
	cairn_options_t o;
	cairn_attr_t root, dir, f, a, set;
	cairn_statfs_t st;
	cairn_lock_t lk;
	uint8_t volid[16], zero[16] = { 0 };
	char dname[64], name[32], buf[256];
	const gid_t groups[1] = { 0 };
	cairn_creds_t me = { .uid = 0, .gid = 0, .ngroups = 1, .groups = groups };
	size_t big = 1 << 20, i;
	unsigned char *wbuf = malloc(big), *rbuf = malloc(big);
	uint64_t pos;
	ssize_t n;
	int rc;
	bool eof = false;

	cairn_options_init(&o);
	o.client_name = "abi_test";
	rc = cairn_mount(servers, volume, &o, &fs);
	CHECK_RC(rc, 0);
	if (rc != 0)
		return;

	CHECK_RC(cairn_volume_id(fs, volid), 0);
	CHECK(memcmp(volid, zero, 16) != 0, "volume id is not zero");
	CHECK_RC(cairn_statfs(fs, NULL, &st), 0);
	CHECK(st.bsize > 0 && st.blocks >= st.bfree, "statfs bsize %u blocks %llu free %llu",
	      st.bsize, (unsigned long long)st.blocks, (unsigned long long)st.bfree);

	CHECK_RC(cairn_getattr(fs, &me, cairn_id_root(), &root), 0);
	CHECK(root.type == DT_DIR && S_ISDIR(root.mode) && root.ino == 1, "root type %u mode %o ino %llu",
	      root.type, root.mode, (unsigned long long)root.ino);

	snprintf(dname, sizeof(dname), "abi_test.%d", (int)getpid());
	CHECK_RC(cairn_mkdir(fs, &me, root.id, dname, 0755, &dir), 0);
	CHECK(S_ISDIR(dir.mode) && (dir.mode & 07777) == 0755, "mkdir mode %o", dir.mode);
	CHECK_RC(cairn_lookup_path(fs, &me, dname, &a), 0);
	CHECK(memcmp(&a.id, &dir.id, sizeof(a.id)) == 0, "lookup_path finds the new dir");
	CHECK_RC(cairn_mkdir(fs, &me, dir.id, "sub", 0755, &a), 0);
	CHECK_RC(cairn_lookup_parent(fs, &me, a.id, &a), 0);
	CHECK(memcmp(&a.id, &dir.id, sizeof(a.id)) == 0 && S_ISDIR(a.mode),
	      "lookup_parent of sub is its directory");
	CHECK_RC(cairn_lookup_parent(fs, &me, dir.id, &a), 0);
	CHECK(a.ino == 1, "lookup_parent of a top directory is the root (ino %llu)",
	      (unsigned long long)a.ino);
	CHECK_RC(cairn_lookup_parent(fs, &me, root.id, &a), 0);
	CHECK(a.ino == 1, "the root is its own parent (ino %llu)", (unsigned long long)a.ino);
	CHECK_RC(cairn_rmdir(fs, &me, dir.id, "sub"), 0);

	/* create, exclusive create, write, read */
	CHECK_RC(cairn_create(fs, &me, dir.id, "f", 0644, CAIRN_CREATE_EXCL, &f), 0);
	CHECK(S_ISREG(f.mode) && f.size == 0 && f.nlink == 1, "new file mode %o size %llu",
	      f.mode, (unsigned long long)f.size);
	CHECK_RC(cairn_create(fs, &me, dir.id, "f", 0644, CAIRN_CREATE_EXCL, &a), -EEXIST);
	{
		/* pNFS placement: the file's home set (the top 32 bits of its id), its
		 * bricks in chain order, the same order again by set and rotation. */
		cairn_layout_t lo, lo2;
		uint32_t home = (uint32_t)f.id.bytes[0] << 24 | (uint32_t)f.id.bytes[1] << 16 |
				(uint32_t)f.id.bytes[2] << 8 | f.id.bytes[3];
		uint32_t k;

		CHECK_RC(cairn_layout(fs, f.id, &lo), 0);
		CHECK(lo.set == home, "layout set %u, id's home set %u", lo.set, home);
		CHECK(lo.nbricks >= 1 && lo.nbricks <= CAIRN_LAYOUT_MAX_BRICKS &&
		      lo.rotation < lo.nbricks, "layout of %u bricks, rotation %u",
		      lo.nbricks, lo.rotation);
		CHECK(lo.epoch > 0, "layout epoch %llu", (unsigned long long)lo.epoch);
		for (k = 0; k < lo.nbricks; k++)
			CHECK(lo.bricks[k].state == CAIRN_BRICK_UP && lo.bricks[k].node[0] &&
			      strchr(lo.bricks[k].addr, ':') != NULL,
			      "brick %u: state %u node '%s' addr '%s'", k, lo.bricks[k].state,
			      lo.bricks[k].node, lo.bricks[k].addr);
		CHECK_RC(cairn_set_layout(fs, lo.set, lo.rotation, &lo2), 0);
		CHECK(lo2.nbricks == lo.nbricks && lo2.set == lo.set, "set layout size");
		for (k = 0; k < lo.nbricks && k < lo2.nbricks; k++)
			CHECK(lo2.bricks[k].index == lo.bricks[k].index,
			      "set layout order: brick %u is %u, not %u", k,
			      lo2.bricks[k].index, lo.bricks[k].index);
		if (lo.nbricks > 1) {
			CHECK_RC(cairn_set_layout(fs, lo.set, (lo.rotation + 1) % lo.nbricks, &lo2), 0);
			CHECK(lo2.bricks[0].index == lo.bricks[1].index, "rotated order");
		}
		CHECK_RC(cairn_set_layout(fs, lo.set, lo.nbricks, &lo2), -EINVAL);
		CHECK_RC(cairn_set_layout(fs, 0xfffffff0u, 0, &lo2), -ENOENT);
		CHECK(strstr(cairn_last_error_message(), "4294967280") != NULL,
		      "message names the set: %s", cairn_last_error_message());
		CHECK_RC(cairn_layout(fs, f.id, NULL), -EINVAL);
	}
	CHECK_RC(cairn_lookup(fs, &me, dir.id, "nosuchfile", &a), -ENOENT);
	CHECK(strstr(cairn_last_error_message(), "nosuchfile") != NULL, "message names the file: %s",
	      cairn_last_error_message());
	CHECK_RC(cairn_open(fs, &me, f.id), 0);
	for (i = 0; i < big; i++)
		wbuf[i] = (unsigned char)(i * 7 + i / 4096);
	CHECK(cairn_write(fs, &me, f.id, 0, wbuf, big) == (ssize_t)big, "1 MiB write");
	for (i = 0; i < 64; i++) /* small sequential writes (write-behind) */
		CHECK(cairn_write(fs, &me, f.id, big + i * 100, wbuf + i * 100, 100) == 100, "small write %zu", i);
	CHECK_RC(cairn_fsync(fs, &me, f.id, false), 0);
	n = cairn_read(fs, &me, f.id, 0, rbuf, big);
	CHECK(n == (ssize_t)big && memcmp(rbuf, wbuf, big) == 0, "read back 1 MiB: %zd", n);
	n = cairn_read(fs, &me, f.id, big, rbuf, big);
	CHECK(n == 6400 && memcmp(rbuf, wbuf, 6400) == 0, "short read at the tail: %zd", n);
	CHECK(cairn_read(fs, &me, f.id, big + 6400, rbuf, 10) == 0, "read at EOF returns 0");
	/* a read at or past the largest offset is end of file, not an error (NFSv4 READ
	 * near 2^64 - 1: RFC 7530 16.23); a write there is still EFBIG */
	{
		const uint64_t far[] = { INT64_MAX - 3, INT64_MAX, (uint64_t)INT64_MAX + 1,
					 UINT64_MAX - 4095, UINT64_MAX };

		for (i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
			n = cairn_read(fs, &me, f.id, far[i], rbuf, 4096);
			CHECK(n == 0, "read at %llu: %zd (%s)", (unsigned long long)far[i], n,
			      n < 0 ? cairn_last_error_message() : "data");
			CHECK(cairn_write(fs, &me, f.id, far[i], wbuf, 4096) == -EFBIG,
			      "write at %llu is EFBIG", (unsigned long long)far[i]);
		}
	}
	CHECK_RC(cairn_getattr(fs, &me, f.id, &a), 0);
	CHECK(a.size == big + 6400, "size %llu", (unsigned long long)a.size);
	CHECK(a.change != f.change, "change attribute moved");

	/* write-sync, write-through, compare-and-write, seek, fallocate, setattr */
	CHECK(cairn_write_sync(fs, &me, f.id, 0, "EFGH", 4) == 4, "write_sync");
	CHECK(cairn_read(fs, &me, f.id, 0, buf, 4) == 4 && memcmp(buf, "EFGH", 4) == 0,
	      "write_sync result");
	CHECK(cairn_write_sync(fs, &me, f.id, 0, NULL, 0) == 0, "write_sync of nothing (fsync)");
	CHECK(cairn_write_through(fs, &me, f.id, 0, "ABCD", 4) == 4, "write_through");
	CHECK_RC(cairn_compare_and_write(fs, &me, f.id, 0, "ABCD", "WXYZ", 4), 0);
	CHECK_RC(cairn_compare_and_write(fs, &me, f.id, 0, "ABCD", "QQQQ", 4), -CAIRN_EMISCOMPARE);
	CHECK(cairn_read(fs, &me, f.id, 0, buf, 4) == 4 && memcmp(buf, "WXYZ", 4) == 0, "CAW result");
	CHECK_RC(cairn_seek(fs, &me, f.id, 0, SEEK_DATA, &pos), 0);
	CHECK(pos == 0, "SEEK_DATA from 0: %llu", (unsigned long long)pos);
	CHECK_RC(cairn_seek(fs, &me, f.id, 0, SEEK_SET, &pos), -EINVAL);
	CHECK_RC(cairn_fallocate(fs, &me, f.id, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, 0, 4096), 0);
	CHECK(cairn_read(fs, &me, f.id, 0, buf, 4) == 4 && memcmp(buf, zero, 4) == 0, "punched hole reads zero");
	memset(&set, 0, sizeof(set));
	set.mode = 0600;
	set.size = 10;
	CHECK_RC(cairn_setattr(fs, &me, f.id, &set, CAIRN_SETATTR_MODE | CAIRN_SETATTR_SIZE, &a), 0);
	CHECK((a.mode & 07777) == 0600 && a.size == 10, "setattr mode %o size %llu", a.mode,
	      (unsigned long long)a.size);
	CHECK_RC(cairn_setattr(fs, &me, f.id, NULL, CAIRN_SETATTR_MTIME_NOW, NULL), 0);
	CHECK_RC(cairn_release(fs, f.id), 0);

	/* rename, links, symlinks */
	CHECK_RC(cairn_rename(fs, &me, dir.id, "f", dir.id, "g", 0), 0);
	CHECK_RC(cairn_lookup(fs, &me, dir.id, "f", &a), -ENOENT);
	CHECK_RC(cairn_lookup(fs, &me, dir.id, "g", &a), 0);
	CHECK(memcmp(&a.id, &f.id, sizeof(a.id)) == 0, "id survives rename");
	CHECK_RC(cairn_link(fs, &me, f.id, dir.id, "h", &a), 0);
	CHECK(a.nlink == 2, "nlink after link: %u", a.nlink);
	CHECK_RC(cairn_rename(fs, &me, dir.id, "g", dir.id, "h", CAIRN_RENAME_NOREPLACE), -EEXIST);
	CHECK_RC(cairn_symlink(fs, &me, dir.id, "s", "g", &a), 0);
	CHECK(S_ISLNK(a.mode), "symlink mode %o", a.mode);
	CHECK(cairn_readlink(fs, &me, a.id, NULL, 0) == 1, "readlink size probe");
	CHECK(cairn_readlink(fs, &me, a.id, buf, sizeof(buf)) == 1 && strcmp(buf, "g") == 0, "readlink");

	/* xattrs */
	CHECK_RC(cairn_setxattr(fs, &me, f.id, "user.k", "value", 5, 0), 0);
	CHECK_RC(cairn_setxattr(fs, &me, f.id, "user.k", "v", 1, CAIRN_XATTR_CREATE), -EEXIST);
	CHECK(cairn_getxattr(fs, &me, f.id, "user.k", NULL, 0) == 5, "getxattr size probe");
	CHECK(cairn_getxattr(fs, &me, f.id, "user.k", buf, 2) == -ERANGE, "getxattr short buffer");
	CHECK(cairn_getxattr(fs, &me, f.id, "user.k", buf, sizeof(buf)) == 5 && memcmp(buf, "value", 5) == 0,
	      "getxattr value");
	n = cairn_listxattr(fs, &me, f.id, buf, sizeof(buf));
	CHECK(n >= 7 && memmem(buf, n, "user.k\0", 7) != NULL, "listxattr: %zd", n);
	CHECK_RC(cairn_removexattr(fs, &me, f.id, "user.k"), 0);
	CHECK(cairn_getxattr(fs, &me, f.id, "user.k", NULL, 0) == -ENODATA, "removed xattr");

	/* locks */
	lk = (cairn_lock_t){ .type = F_WRLCK, .start = 0, .len = 100, .owner = 1, .pid = 11 };
	CHECK_RC(cairn_setlock(fs, &me, f.id, &lk, false), 0);
	lk = (cairn_lock_t){ .type = F_RDLCK, .start = 50, .len = 10, .owner = 2, .pid = 22 };
	CHECK_RC(cairn_getlock(fs, &me, f.id, &lk), 0);
	CHECK(lk.type == F_WRLCK && lk.owner == 1, "conflict reported: type %d owner %llu", lk.type,
	      (unsigned long long)lk.owner);
	lk = (cairn_lock_t){ .type = F_RDLCK, .start = 50, .len = 10, .owner = 2, .pid = 22 };
	CHECK_RC(cairn_setlock(fs, &me, f.id, &lk, false), -EAGAIN);
	lk = (cairn_lock_t){ .type = F_UNLCK, .start = 0, .len = 0, .owner = 1, .pid = 11 };
	CHECK_RC(cairn_setlock(fs, &me, f.id, &lk, false), 0);
	lk = (cairn_lock_t){ .type = F_WRLCK, .start = 0, .len = 0, .owner = 2, .pid = 22 };
	CHECK_RC(cairn_getlock(fs, &me, f.id, &lk), 0);
	CHECK(lk.type == F_UNLCK, "no conflict after unlock: %d", lk.type);

	/* aio: 4 writes, fsync, then 4 reads; callbacks on library threads */
	{
		struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, { 0 }, { 0 } };
		struct aio_slot slots[16];
		for (i = 0; i < 16; i++)
			slots[i] = (struct aio_slot){ &w, (int)i };
		w.pending = 4;
		for (i = 0; i < 4; i++)
			CHECK_RC(cairn_aio_write(fs, &me, f.id, i * 65536, wbuf + i * 65536, 65536, aio_done, &slots[i]), 0);
		aio_wait(&w);
		for (i = 0; i < 4; i++) {
			CHECK(w.results[i] == 65536, "aio write %zu: %d", i, w.results[i]);
			CHECK(!pthread_equal(w.threads[i], pthread_self()), "callback not inline");
		}
		w.pending = 1;
		CHECK_RC(cairn_aio_fsync(fs, &me, f.id, true, aio_done, &slots[4]), 0);
		aio_wait(&w);
		CHECK(w.results[4] == 0, "aio fsync: %d", w.results[4]);
		memset(rbuf, 0, big);
		w.pending = 4;
		for (i = 0; i < 4; i++)
			CHECK_RC(cairn_aio_read(fs, &me, f.id, i * 65536, rbuf + i * 65536, 65536, aio_done, &slots[5 + i]), 0);
		aio_wait(&w);
		for (i = 0; i < 4; i++)
			CHECK(w.results[5 + i] == 65536, "aio read %zu: %d", i, w.results[5 + i]);
		CHECK(memcmp(rbuf, wbuf, 4 * 65536) == 0, "aio data round trip");
		w.pending = 1;
		CHECK_RC(cairn_aio_compare_and_write(fs, &me, f.id, 0, "nope", "QQQQ", 4, aio_done, &slots[9]), 0);
		aio_wait(&w);
		CHECK(w.results[9] == -CAIRN_EMISCOMPARE, "aio miscompare: %d", w.results[9]);
	}

	/* readdir: more entries than one batch, resumed from a cookie */
	for (i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "e%04zu", i);
		CHECK_RC(cairn_create(fs, &me, dir.id, name, 0644, CAIRN_CREATE_EXCL, NULL), 0);
	}
	{
		struct listing all = { 0 }, part = { .stop_after = 10 }, rest = { 0 }, plus = { 0 };
		rc = cairn_readdir(fs, &me, dir.id, 0, 0, list_cb, &all, &eof);
		CHECK(rc == NFILES + 3 && eof && all.saw_file, "full listing: %d entries, eof %d", rc, eof);
		rc = cairn_readdir(fs, &me, dir.id, 0, 0, list_cb, &part, &eof);
		CHECK(rc == 10 && !eof, "stopped listing: %d eof %d", rc, eof);
		rc = cairn_readdir(fs, &me, dir.id, part.last_cookie, 0, list_cb, &rest, &eof);
		CHECK(rc == NFILES + 3 - 10 && eof, "resumed listing: %d", rc);
		rc = cairn_readdir(fs, &me, dir.id, 0, CAIRN_READDIR_PLUS, list_cb, &plus, &eof);
		CHECK(rc == NFILES + 3 && plus.with_attr == rc, "readdirplus: %d with attrs of %d",
		      plus.with_attr, rc);
	}

	/* cleanup */
	CHECK_RC(cairn_rmdir(fs, &me, root.id, dname), -ENOTEMPTY);
	for (i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "e%04zu", i);
		CHECK_RC(cairn_unlink(fs, &me, dir.id, name), 0);
	}
	CHECK_RC(cairn_unlink(fs, &me, dir.id, "g"), 0);
	CHECK_RC(cairn_getattr(fs, &me, f.id, &a), 0);
	CHECK(a.nlink == 1, "nlink after unlink: %u", a.nlink);
	CHECK_RC(cairn_unlink(fs, &me, dir.id, "h"), 0);
	CHECK_RC(cairn_unlink(fs, &me, dir.id, "s"), 0);
	CHECK_RC(cairn_rmdir(fs, &me, root.id, dname), 0);
	CHECK_RC(cairn_lookup(fs, &me, root.id, dname, &a), -ENOENT);
	CHECK_RC(cairn_unmount(fs), 0);
	free(wbuf);
	free(rbuf);
}

/* ---- lease recalls: two mounts (two client sessions) of one volume ---------------- */

struct recalled {
	pthread_mutex_t mu;
	cairn_id_t id;
	int hits;
};

static void count_recall(cairn_id_t id, uint32_t flags, void *arg)
{
	struct recalled *r = arg;

	(void)flags;
	pthread_mutex_lock(&r->mu);
	if (memcmp(&id, &r->id, sizeof(id)) == 0)
		r->hits++;
	pthread_mutex_unlock(&r->mu);
}

static int recall_hits(struct recalled *r)
{
	int n;

	pthread_mutex_lock(&r->mu);
	n = r->hits;
	r->hits = 0;
	pthread_mutex_unlock(&r->mu);
	return n;
}

/*
 * A getxattr (also one finding nothing) takes a lease; another session's setxattr
 * recalls it, and a synchronous upcall has run by the time that setxattr returns. The
 * session that changes the file keeps its own lease: a later change by the other
 * session still reaches it.
 */
static void recalls(const char *servers, const char *volume)
{
	cairn_fs_t *fs1 = NULL, *fs2 = NULL;
	cairn_options_t o;
	cairn_attr_t f;
	struct recalled r = { .mu = PTHREAD_MUTEX_INITIALIZER };
	char name[64], buf[16];
	ssize_t n;

	cairn_options_init(&o);
	o.client_name = "abi_test-1";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs1), 0);
	o.client_name = "abi_test-2";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs2), 0);
	if (fs1 == NULL || fs2 == NULL)
		return;
	snprintf(name, sizeof(name), "abi_test-recall.%d", (int)getpid());
	CHECK_RC(cairn_create(fs1, NULL, cairn_id_root(), name, 0644, CAIRN_CREATE_EXCL, &f), 0);
	r.id = f.id;
	CHECK_RC(cairn_register_invalidate_sync(fs1, count_recall, &r), 0);

	n = cairn_getxattr(fs1, NULL, f.id, "user.abi", buf, sizeof(buf));
	CHECK(n == -ENODATA, "getxattr of a missing name: %zd", n);
	CHECK_RC(cairn_setxattr(fs2, NULL, f.id, "user.abi", "1", 1, 0), 0);
	CHECK(recall_hits(&r) >= 1, "the other session's setxattr recalled the getxattr's lease "
	      "before it returned");

	n = cairn_getxattr(fs1, NULL, f.id, "user.abi", buf, sizeof(buf));
	CHECK(n == 1, "getxattr: %zd", n);
	CHECK_RC(cairn_setxattr(fs1, NULL, f.id, "user.abi", "2", 1, 0), 0);
	CHECK(recall_hits(&r) == 0, "no recall of a session's lease by its own change");
	CHECK_RC(cairn_setxattr(fs2, NULL, f.id, "user.abi", "3", 1, 0), 0);
	CHECK(recall_hits(&r) >= 1, "the lease survived the session's own change: the other "
	      "session's change recalled it");

	CHECK_RC(cairn_register_invalidate(fs1, NULL, NULL), 0);
	CHECK_RC(cairn_unlink(fs1, NULL, cairn_id_root(), name), 0);
	CHECK(cairn_stats(fs1, NULL, NULL) > 0, "cairn_stats counts round trips");
	CHECK_RC(cairn_unmount(fs2), 0);
	CHECK_RC(cairn_unmount(fs1), 0);
}

/*
 * Share reservations: two mounts (two sessions, like two gateways) conflict on one file's
 * deny modes; an owner changes its own freely; a refused change keeps the old one; the
 * reservations of a mount end with it.
 */
static void shares(const char *servers, const char *volume)
{
	const uint32_t R = CAIRN_SHARE_READ, W = CAIRN_SHARE_WRITE;
	cairn_fs_t *fs1 = NULL, *fs2 = NULL;
	cairn_options_t o;
	cairn_attr_t f;
	char name[64];
	int rc = 0;

	cairn_options_init(&o);
	o.client_name = "abi_test-share-1";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs1), 0);
	o.client_name = "abi_test-share-2";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs2), 0);
	if (fs1 == NULL || fs2 == NULL)
		return;
	snprintf(name, sizeof(name), "abi_test-share.%d", (int)getpid());
	CHECK_RC(cairn_create(fs1, NULL, cairn_id_root(), name, 0644, CAIRN_CREATE_EXCL, &f), 0);

	CHECK_RC(cairn_share(fs1, NULL, f.id, 1, R, W), 0);
	CHECK_RC(cairn_share(fs2, NULL, f.id, 1, W, 0), -CAIRN_ESHAREDENIED);
	CHECK_RC(cairn_share(fs1, NULL, f.id, 2, W, 0), -CAIRN_ESHAREDENIED);
	CHECK_RC(cairn_share(fs2, NULL, f.id, 1, R, 0), 0);
	CHECK_RC(cairn_share(fs2, NULL, f.id, 1, R, R), -CAIRN_ESHAREDENIED);
	CHECK_RC(cairn_share(fs1, NULL, f.id, 1, R | W, W), 0);
	CHECK_RC(cairn_share(fs2, NULL, f.id, 1, 0, 0), 0);
	CHECK_RC(cairn_share(fs1, NULL, f.id, 1, R | W, R | W), 0);
	CHECK_RC(cairn_share(fs2, NULL, f.id, 7, R, 0), -CAIRN_ESHAREDENIED);
	CHECK_RC(cairn_share(fs1, NULL, f.id, 1, 4, 0), -EINVAL);
	/* the end of fs1's session releases its deny both (once the server has seen the
	 * connection close: allow it a moment) */
	CHECK_RC(cairn_unmount(fs1), 0);
	for (int i = 0; i < 100; i++) {
		rc = cairn_share(fs2, NULL, f.id, 7, R | W, R | W);
		if (rc != -CAIRN_ESHAREDENIED)
			break;
		usleep(50 * 1000);
	}
	CHECK(rc == 0, "after fs1 unmounted, fs2 takes deny both: %d", rc);
	CHECK_RC(cairn_share(fs2, NULL, f.id, 7, 0, 0), 0);
	CHECK_RC(cairn_unlink(fs2, NULL, cairn_id_root(), name), 0);
	CHECK_RC(cairn_unmount(fs2), 0);
}

/* Read all of `id` (`len` bytes expected) through `fs` and compare it with `model`. */
static int same_as_model(cairn_fs_t *fs, cairn_id_t id, const unsigned char *model, size_t len,
			 unsigned char *buf)
{
	size_t at = 0;

	while (at < len) {
		ssize_t n = cairn_read(fs, NULL, id, at, buf + at, len - at);
		if (n <= 0)
			break;
		at += (size_t)n;
	}
	if (at != len) {
		fprintf(stderr, "read %zu of %zu bytes\n", at, len);
		return 0;
	}
	for (at = 0; at < len; at++)
		if (buf[at] != model[at]) {
			fprintf(stderr, "byte %zu is %u, the last write there put %u\n", at, buf[at],
				model[at]);
			return 0;
		}
	return 1;
}

/*
 * Write-behind keeps many writes of one file in flight (a write waits only for the earlier
 * ones it overlaps): one caller's writes, each acknowledged before the next, at random
 * overlapping offsets and sizes (4 KiB blocks, odd sizes, and 1 MiB writes that bypass the
 * buffer) must land in order. Checked against a model by reads between the writes, then
 * after fsync from a second mount (what the bricks hold, not this client).
 */
static void write_ordering(const char *servers, const char *volume)
{
	enum { REGION = 3 << 20, OPS = 3000 };
	cairn_fs_t *fs = NULL, *fs2 = NULL;
	cairn_options_t o;
	cairn_attr_t f, a;
	unsigned char *model = calloc(1, REGION), *wbuf = malloc(1 << 20), *rbuf = malloc(REGION);
	char name[64];
	size_t end = 0, i;
	int ok = 1;

	cairn_options_init(&o);
	o.client_name = "abi_test-order";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs), 0);
	if (fs == NULL)
		return;
	snprintf(name, sizeof(name), "abi_test-order.%d", (int)getpid());
	CHECK_RC(cairn_create(fs, NULL, cairn_id_root(), name, 0644, CAIRN_CREATE_EXCL, &f), 0);
	srandom(4242);
	for (i = 0; i < OPS && ok; i++) {
		long r = random();
		size_t len, off;
		ssize_t n;

		if (r % 100 == 0)
			len = 1 << 20;
		else if (r % 5 == 0)
			len = 1 + (size_t)random() % 9000;
		else
			len = 4096;
		off = len == 4096 ? ((size_t)random() % (REGION / 4096)) * 4096
				  : (size_t)random() % (REGION - len);
		memset(wbuf, (int)(i % 251) + 1, len);
		n = cairn_write(fs, NULL, f.id, off, wbuf, len);
		CHECK(n == (ssize_t)len, "write %zu at %zu: %zd", len, off, n);
		memcpy(model + off, wbuf, len);
		if (off + len > end)
			end = off + len;
		if (i % 500 == 499) {
			ok = same_as_model(fs, f.id, model, end, rbuf);
			CHECK(ok, "after %zu writes, a read sees every write in order", i + 1);
		}
	}
	CHECK_RC(cairn_fsync(fs, NULL, f.id, false), 0);
	CHECK_RC(cairn_getattr(fs, NULL, f.id, &a), 0);
	CHECK(a.size == end, "size %llu, want %zu", (unsigned long long)a.size, end);
	o.client_name = "abi_test-order-2";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs2), 0);
	if (fs2 != NULL) {
		CHECK(same_as_model(fs2, f.id, model, end, rbuf),
		      "another client reads every write in order after fsync");
		CHECK_RC(cairn_unmount(fs2), 0);
	}
	CHECK_RC(cairn_unlink(fs, NULL, cairn_id_root(), name), 0);
	CHECK_RC(cairn_unmount(fs), 0);
	free(model);
	free(wbuf);
	free(rbuf);
}

/* cairn_stats callback: the counts of "read", "write" and "copy_range" requests. */
struct op_counts {
	uint64_t read, write, copy_range;
};

static void count_ops(const char *op, uint64_t count, void *arg)
{
	struct op_counts *c = arg;

	if (strcmp(op, "read") == 0)
		c->read = count;
	else if (strcmp(op, "write") == 0)
		c->write = count;
	else if (strcmp(op, "copy_range") == 0)
		c->copy_range = count;
}

static struct op_counts op_counts(cairn_fs_t *fs)
{
	struct op_counts c = {0, 0, 0};

	cairn_stats(fs, count_ops, &c);
	return c;
}

/*
 * Server-side copy (what vfs_cairn's FSCTL_SRV_COPYCHUNK uses): the bytes of a copy must
 * not come through the client. Within one file and across files (on the same replica set
 * or not: six destinations on a 2 x 2 volume), the mount's request counters must show
 * copy_range requests and not one READ or WRITE, and another client must read the copy.
 */
static void server_copy(const char *servers, const char *volume)
{
	enum { LEN = 3 << 20, FILES = 6 };
	cairn_fs_t *fs = NULL, *fs2 = NULL;
	cairn_options_t o;
	cairn_attr_t f, d, a;
	struct op_counts before, after;
	unsigned char *wbuf = malloc(LEN), *rbuf = malloc(LEN);
	char name[64], dname[80];
	cairn_creds_t other = {.uid = 4242, .gid = 4242, .ngroups = 0, .groups = NULL};
	size_t i;
	int k, backend = 0;
	ssize_t n;

	cairn_options_init(&o);
	o.client_name = "abi_test-copy";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs), 0);
	o.client_name = "abi_test-copy-2";
	CHECK_RC(cairn_mount(servers, volume, &o, &fs2), 0);
	if (fs == NULL || fs2 == NULL)
		return;
	snprintf(name, sizeof(name), "abi_test-copy.%d", (int)getpid());
	CHECK_RC(cairn_create(fs, NULL, cairn_id_root(), name, 0644, CAIRN_CREATE_EXCL, &f), 0);
	for (i = 0; i < LEN; i++)
		wbuf[i] = (unsigned char)(i * 13 + i / 65536);
	/* buffered by write-behind: the copy must send it first */
	CHECK(cairn_write(fs, NULL, f.id, 0, wbuf, LEN) == LEN, "3 MiB write");

	/* within one file: 3 MiB at 0 to 3 MiB + 100, on the bricks only */
	before = op_counts(fs);
	n = cairn_copy_file_range(fs, NULL, f.id, 0, f.id, LEN + 100, LEN);
	after = op_counts(fs);
	CHECK(n == LEN, "copy within a file: %zd", n);
	CHECK(after.copy_range > before.copy_range && after.read == before.read,
	      "the bricks copied (copy_range %llu -> %llu) and no byte was read through the "
	      "client (read %llu -> %llu)", (unsigned long long)before.copy_range,
	      (unsigned long long)after.copy_range, (unsigned long long)before.read,
	      (unsigned long long)after.read);
	CHECK(cairn_read(fs2, NULL, f.id, LEN + 100, rbuf, LEN) == LEN &&
	      memcmp(rbuf, wbuf, LEN) == 0, "another client reads the copy");
	CHECK(cairn_read(fs2, NULL, f.id, 100, rbuf, 4) == 4 && rbuf[0] == wbuf[100],
	      "the source is unchanged");
	CHECK_RC(cairn_getattr(fs, NULL, f.id, &a), 0);
	CHECK(a.size == 2 * LEN + 100, "size after the copy %llu", (unsigned long long)a.size);

	/* short at the end of the source, 0 past it, and the caller's permissions */
	n = cairn_copy_file_range(fs, NULL, f.id, 2 * LEN, f.id, 0, LEN);
	CHECK(n == 100, "copy across the end of the source: %zd, want 100", n);
	CHECK(cairn_copy_file_range(fs, NULL, f.id, 3 * LEN, f.id, 0, 10) == 0,
	      "copy from past the end copies nothing");
	CHECK(cairn_read(fs2, NULL, f.id, 0, rbuf, 100) == 100 &&
	      memcmp(rbuf, wbuf + LEN - 100, 100) == 0, "the short copy landed");
	n = cairn_copy_file_range(fs, &other, f.id, 0, f.id, 0, 4096);
	CHECK(n == -EACCES, "another user may not write the file: %zd", n);
	CHECK(cairn_copy_file_range(fs, NULL, f.id, UINT64_MAX - 10, f.id, 0, 100) < 0,
	      "offsets past the largest file offset are refused");

	/* across files, in one replica set or two; the source's head again as it was */
	CHECK(cairn_write(fs, NULL, f.id, 0, wbuf, 100) == 100, "rewrite the head");
	CHECK_RC(cairn_flush(fs, f.id), 0);
	for (k = 0; k < FILES; k++) {
		snprintf(dname, sizeof(dname), "%s.dst%d", name, k);
		CHECK_RC(cairn_create(fs, NULL, cairn_id_root(), dname, 0644, CAIRN_CREATE_EXCL, &d),
			 0);
		before = op_counts(fs);
		n = cairn_copy_file_range(fs, NULL, f.id, 0, d.id, 0, LEN);
		after = op_counts(fs);
		CHECK(n == LEN, "copy to %s: %zd", dname, n);
		if (after.copy_range > before.copy_range && after.read == before.read &&
		    after.write == before.write)
			backend++;
		CHECK(cairn_read(fs2, NULL, d.id, 0, rbuf, LEN) == LEN &&
		      memcmp(rbuf, wbuf, LEN) == 0, "another client reads the copy in %s", dname);
		CHECK_RC(cairn_unlink(fs, NULL, cairn_id_root(), dname), 0);
	}
	CHECK(backend == FILES, "%d of %d copies across files made on the bricks alone", backend,
	      FILES);
	CHECK_RC(cairn_unlink(fs, NULL, cairn_id_root(), name), 0);
	CHECK_RC(cairn_unmount(fs2), 0);
	CHECK_RC(cairn_unmount(fs), 0);
	free(wbuf);
	free(rbuf);
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--offline") == 0) {
		offline();
	} else if (argc == 3) {
		offline();
		online(argv[1], argv[2]);
		recalls(argv[1], argv[2]);
		shares(argv[1], argv[2]);
		write_ordering(argv[1], argv[2]);
		server_copy(argv[1], argv[2]);
	} else {
		fprintf(stderr, "usage: %s --offline | %s SERVERS VOLUME\n", argv[0], argv[0]);
		return 2;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
