/*
 * vfs_cairn - Samba VFS module serving a Cairn volume through libcairn.
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 * Shaped like Samba's vfs_ceph_new.c / vfs_glusterfs.c: every VFS operation is a thin,
 * one-call wrapper over libcairn (backend/libcairn/include/cairn.h); errors are converted
 * in exactly one place (cairn_ret); operations Cairn cannot serve are named in the ops
 * table with vfs_not_implemented_*.
 *
 *   [share]
 *     path = /                     ; path inside the volume
 *     vfs objects = acl_xattr streams_xattr cairn
 *     cairn:servers = 127.0.0.1:7420
 *     cairn:volume = vol0
 *     cairn:credentials = /etc/cairn/gateway.pem   (optional: a gateway-role credential)
 *     kernel share modes = no       ; yes: share modes seen by NFS and other gateways
 *     kernel oplocks = no
 *
 * One cairn_fs_t per (servers, volume) per smbd process, mounted in connect_fn (after
 * smbd forked; libcairn starts its runtime at the first mount) and shared by all tree
 * connects of that process; unmounted when the last one disconnects.
 *
 * Files carry no kernel fd: each fsp gets an extension holding its Cairn id and a
 * unique fake fd (never a real descriptor, so a stray syscall fails with EBADF).
 */

#include "includes.h"
#include "smbd/smbd.h"
#include "smbd/globals.h"
#include "system/filesys.h"
#include "lib/util/tevent_unix.h"
#include "lib/util/tevent_ntstatus.h"
#include "lib/pthreadpool/pthreadpool_tevent.h"
#include "modules/offload_token.h"
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/statvfs.h>
#include <cairn.h>

#undef DBGC_CLASS
#define DBGC_CLASS DBGC_VFS

/* ---- round-trip tracing (cairn:trace round trips = yes) -------------------------- */

/*
 * With tracing on, every libcairn call below logs (log level 0) the function of this
 * module that made it, the call, and how many backend round trips it cost (libcairn's
 * counters, read before and after): tests/bench/smb-rt.sh sums these per SMB operation.
 * Off by default (two counter reads per call).
 */
static bool cairn_trace_rt;

static ssize_t cairn_trace_begin(cairn_fs_t *fs)
{
	return cairn_trace_rt ? cairn_stats(fs, NULL, NULL) : 0;
}

static void cairn_trace_end(cairn_fs_t *fs, ssize_t before, const char *caller,
			    const char *call, long long ret)
{
	if (cairn_trace_rt) {
		DEBUG(0, ("cairn-rt: %s %s %zd ret=%lld\n", caller, call,
			  cairn_stats(fs, NULL, NULL) - before, ret));
	}
}

#define CAIRN_TRACED(fn, fs, ...) ({					\
	cairn_fs_t *fs_t_ = (fs);					\
	ssize_t before_t_ = cairn_trace_begin(fs_t_);			\
	__typeof__((fn)(fs_t_, __VA_ARGS__)) ret_t_ = (fn)(fs_t_, __VA_ARGS__); \
	cairn_trace_end(fs_t_, before_t_, __func__, #fn, (long long)ret_t_); \
	ret_t_;								\
})
#define cairn_lookup(fs, ...) CAIRN_TRACED(cairn_lookup, fs, __VA_ARGS__)
#define cairn_lookup_path(fs, ...) CAIRN_TRACED(cairn_lookup_path, fs, __VA_ARGS__)
#define cairn_getattr(fs, ...) CAIRN_TRACED(cairn_getattr, fs, __VA_ARGS__)
#define cairn_setattr(fs, ...) CAIRN_TRACED(cairn_setattr, fs, __VA_ARGS__)
#define cairn_create(fs, ...) CAIRN_TRACED(cairn_create, fs, __VA_ARGS__)
#define cairn_mknod(fs, ...) CAIRN_TRACED(cairn_mknod, fs, __VA_ARGS__)
#define cairn_mkdir(fs, ...) CAIRN_TRACED(cairn_mkdir, fs, __VA_ARGS__)
#define cairn_symlink(fs, ...) CAIRN_TRACED(cairn_symlink, fs, __VA_ARGS__)
#define cairn_readlink(fs, ...) CAIRN_TRACED(cairn_readlink, fs, __VA_ARGS__)
#define cairn_link(fs, ...) CAIRN_TRACED(cairn_link, fs, __VA_ARGS__)
#define cairn_unlink(fs, ...) CAIRN_TRACED(cairn_unlink, fs, __VA_ARGS__)
#define cairn_rmdir(fs, ...) CAIRN_TRACED(cairn_rmdir, fs, __VA_ARGS__)
#define cairn_rename(fs, ...) CAIRN_TRACED(cairn_rename, fs, __VA_ARGS__)
#define cairn_readdir(fs, ...) CAIRN_TRACED(cairn_readdir, fs, __VA_ARGS__)
#define cairn_getxattr(fs, ...) CAIRN_TRACED(cairn_getxattr, fs, __VA_ARGS__)
#define cairn_setxattr(fs, ...) CAIRN_TRACED(cairn_setxattr, fs, __VA_ARGS__)
#define cairn_listxattr(fs, ...) CAIRN_TRACED(cairn_listxattr, fs, __VA_ARGS__)
#define cairn_getxattrs(fs, ...) CAIRN_TRACED(cairn_getxattrs, fs, __VA_ARGS__)
#define cairn_removexattr(fs, ...) CAIRN_TRACED(cairn_removexattr, fs, __VA_ARGS__)
#define cairn_statfs(fs, ...) CAIRN_TRACED(cairn_statfs, fs, __VA_ARGS__)
#define cairn_setlock(fs, ...) CAIRN_TRACED(cairn_setlock, fs, __VA_ARGS__)
#define cairn_getlock(fs, ...) CAIRN_TRACED(cairn_getlock, fs, __VA_ARGS__)
#define cairn_open(fs, ...) CAIRN_TRACED(cairn_open, fs, __VA_ARGS__)
#define cairn_release(fs, ...) CAIRN_TRACED(cairn_release, fs, __VA_ARGS__)
#define cairn_read(fs, ...) CAIRN_TRACED(cairn_read, fs, __VA_ARGS__)
#define cairn_write(fs, ...) CAIRN_TRACED(cairn_write, fs, __VA_ARGS__)
#define cairn_write_through(fs, ...) CAIRN_TRACED(cairn_write_through, fs, __VA_ARGS__)
#define cairn_flush(fs, ...) CAIRN_TRACED(cairn_flush, fs, __VA_ARGS__)
#define cairn_fsync(fs, ...) CAIRN_TRACED(cairn_fsync, fs, __VA_ARGS__)
#define cairn_fallocate(fs, ...) CAIRN_TRACED(cairn_fallocate, fs, __VA_ARGS__)
#define cairn_copy_file_range(fs, ...) CAIRN_TRACED(cairn_copy_file_range, fs, __VA_ARGS__)
#define cairn_seek(fs, ...) CAIRN_TRACED(cairn_seek, fs, __VA_ARGS__)

#define CAIRN_MODULE "cairn"
#define CAIRN_MAX_SYMLINKS 40
/* Fake fds start far above any real descriptor limit. */
#define CAIRN_FAKE_FD_BASE 0x40000000

/* ---- errno conversion: the one place -------------------------------------------- */

static int cairn_ret(int ret)
{
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return ret;
}

static ssize_t cairn_sret(ssize_t ret)
{
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

/* ---- per-process mount cache ---------------------------------------------------- */

struct cairn_mount {
	struct cairn_mount *prev, *next;
	char *key;
	char *volume;
	int refs;
	cairn_fs_t *fs;
	uint64_t dev;
	struct cairn_nidx *nidx;	/* case-insensitive name indexes */
	int nidx_count;
	int nidx_ms;			/* how long an index is trusted */
};

static struct cairn_mount *cairn_mounts;
static int cairn_next_fd = CAIRN_FAKE_FD_BASE;

struct cairn_conn {
	struct cairn_mount *m;
	char *cwd;		/* absolute path inside the volume */
	bool write_through;
};

struct cairn_fh {
	cairn_id_t id;
	bool opened;		/* cairn_open done, cairn_release due at close */
	bool is_dir;
	/*
	 * Attributes this open just fetched (a create's, a lookup's, a listing's), handed
	 * to the fstat smbd issues right after it (one use only; not a cache: any other
	 * operation on the handle ends it), saving a call into libcairn per open (which
	 * caches a create's or a listing's attributes too, under the lease its brick
	 * granted, when they are the inode's head's copy).
	 */
	bool attr_fresh;
	cairn_attr_t attr;
	/* the listing open on this directory (fdopendir), see cairn_listed_attr */
	struct cairn_dir *listing;
};

static struct cairn_conn *cairn_cc(struct vfs_handle_struct *handle)
{
	struct cairn_conn *cc = NULL;
	SMB_VFS_HANDLE_GET_DATA(handle, cc, struct cairn_conn, return NULL);
	return cc;
}

#define CAIRN_FS(handle) (cairn_cc(handle)->m->fs)

static void cairn_creds(struct vfs_handle_struct *handle, cairn_creds_t *cr)
{
	const struct security_unix_token *ut = get_current_utok(handle->conn);

	cr->uid = ut->uid;
	cr->gid = ut->gid;
	cr->ngroups = ut->ngroups;
	cr->groups = ut->groups;
}

static struct cairn_fh *cairn_fetch_fh(struct vfs_handle_struct *handle,
				       const struct files_struct *fsp)
{
	struct cairn_fh *fh = NULL;

	if (fsp == NULL) {
		return NULL;
	}
	fh = (struct cairn_fh *)VFS_FETCH_FSP_EXTENSION(handle, fsp);
	if (fh == NULL) {
		DBG_DEBUG("no cairn handle for %s\n", fsp_str_dbg(fsp));
	}
	return fh;
}

/* ---- attributes ----------------------------------------------------------------- */

static void cairn_attr_to_stat(struct vfs_handle_struct *handle,
			       const cairn_attr_t *a,
			       SMB_STRUCT_STAT *st)
{
	struct cairn_conn *cc = cairn_cc(handle);

	ZERO_STRUCTP(st);
	st->st_ex_dev = (dev_t)cc->m->dev;
	st->st_ex_ino = (ino_t)a->ino;
	st->st_ex_mode = a->mode;
	st->st_ex_nlink = a->nlink;
	st->st_ex_uid = a->uid;
	st->st_ex_gid = a->gid;
	st->st_ex_rdev = (dev_t)a->rdev;
	/*
	 * A directory's size in Cairn is a constant, not a byte count: SMB clients
	 * expect a directory's end of file to be 0 (as NTFS reports it).
	 */
	st->st_ex_size = S_ISDIR(a->mode) ? 0 : (off_t)a->size;
	st->st_ex_atime = a->atime;
	st->st_ex_mtime = a->mtime;
	st->st_ex_ctime = a->ctime;
	/* No birth time in Cairn: the oldest of the others, as Samba does. */
	st->st_ex_btime = a->mtime;
	if (timespec_compare(&a->ctime, &st->st_ex_btime) < 0) {
		st->st_ex_btime = a->ctime;
	}
	if (timespec_compare(&a->atime, &st->st_ex_btime) < 0) {
		st->st_ex_btime = a->atime;
	}
	st->st_ex_iflags = ST_EX_IFLAG_CALCULATED_BTIME;
	st->st_ex_blksize = 4096;
	st->st_ex_blocks = (blkcnt_t)a->blocks;
}

/* ---- case-insensitive name index ------------------------------------------------ */

/*
 * smbd asks get_real_filename_at whenever a name is not found as spelled: on every
 * create of a new file. Answering from a listing each time costs a whole directory per
 * create. Instead each smbd process keeps, for a few directories, an index of the names
 * by upper-cased form, built from one listing, and kept exact without re-listing:
 *  - this process's own creates, removes and renames in the directory update it;
 *  - any other client's change to the directory's entries recalls the read lease the
 *    listing took on it, and libcairn's invalidation upcall (cairn_upcall) drops the
 *    index before that change completes.
 * The bricks recall leases for 10 s after a read, so an index is trusted for at most
 * cairn:name cache ms (default 5000, capped at 8000) and then listed again.
 */
#define CAIRN_NIDX_DIRS 8
#define CAIRN_NIDX_MAX_NAMES 500000
#define CAIRN_NIDX_MAX_MS 8000

struct cairn_nidx_ent {
	struct cairn_nidx_ent *next;
	char *key;		/* upper-cased name */
	char *name;
};

struct cairn_nidx {
	struct cairn_nidx *prev, *next;
	cairn_id_t dir;
	struct timespec built;
	size_t nbuckets, count;
	struct cairn_nidx_ent **buckets;
	bool too_big;
};

/*
 * Filled by the upcall (a libcairn thread; registered with cairn_register_invalidate_sync,
 * so it has run before the recall is acknowledged, i.e. before the other client's change
 * completes), drained by smbd's main thread before any cache is read.
 */
static pthread_mutex_t cairn_inval_mu = PTHREAD_MUTEX_INITIALIZER;
#define CAIRN_INVAL_SLOTS 64
static cairn_id_t cairn_inval_ids[CAIRN_INVAL_SLOTS];
static uint32_t cairn_inval_flags[CAIRN_INVAL_SLOTS];
static int cairn_inval_n;
static bool cairn_inval_all;
static uint64_t cairn_inval_gen;	/* bumped on every recall */

static void cairn_upcall(cairn_id_t id, uint32_t flags, void *arg)
{
	pthread_mutex_lock(&cairn_inval_mu);
	if (cairn_inval_n < CAIRN_INVAL_SLOTS) {
		cairn_inval_ids[cairn_inval_n] = id;
		cairn_inval_flags[cairn_inval_n] = flags;
		cairn_inval_n++;
	} else {
		cairn_inval_all = true;
	}
	cairn_inval_gen++;
	pthread_mutex_unlock(&cairn_inval_mu);
}

static uint64_t cairn_inval_generation(void)
{
	uint64_t g;

	pthread_mutex_lock(&cairn_inval_mu);
	g = cairn_inval_gen;
	pthread_mutex_unlock(&cairn_inval_mu);
	return g;
}

static bool cairn_id_eq(const cairn_id_t *a, const cairn_id_t *b)
{
	return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

static void cairn_nidx_drop(struct cairn_mount *m, struct cairn_nidx *x)
{
	DLIST_REMOVE(m->nidx, x);
	m->nidx_count--;
	TALLOC_FREE(x);
}

/* Apply the recalls queued by the upcall to every mount's caches. */
static void cairn_nidx_drain(void)
{
	cairn_id_t ids[CAIRN_INVAL_SLOTS];
	uint32_t flags[CAIRN_INVAL_SLOTS];
	struct cairn_mount *m = NULL;
	bool all, entries = false;
	int n, i;

	pthread_mutex_lock(&cairn_inval_mu);
	n = cairn_inval_n;
	all = cairn_inval_all;
	memcpy(ids, cairn_inval_ids, n * sizeof(ids[0]));
	memcpy(flags, cairn_inval_flags, n * sizeof(flags[0]));
	cairn_inval_n = 0;
	cairn_inval_all = false;
	pthread_mutex_unlock(&cairn_inval_mu);
	if (n == 0 && !all) {
		return;
	}
	for (i = 0; i < n; i++) {
		entries |= (flags[i] & CAIRN_INVALIDATE_ENTRIES) != 0;
	}
	for (m = cairn_mounts; m != NULL; m = m->next) {
		struct cairn_nidx *x = NULL, *next = NULL;

		if (!all && !entries) {
			continue;
		}
		for (x = m->nidx; x != NULL; x = next) {
			bool hit = all;

			next = x->next;
			for (i = 0; i < n && !hit; i++) {
				hit = (flags[i] & CAIRN_INVALIDATE_ENTRIES) &&
				      cairn_id_eq(&x->dir, &ids[i]);
			}
			if (hit) {
				cairn_nidx_drop(m, x);
			}
		}
	}
}

static uint32_t cairn_nidx_hash(const char *key)
{
	uint32_t h = 2166136261u;

	for (; *key != '\0'; key++) {
		h = (h ^ (uint8_t)*key) * 16777619u;
	}
	return h;
}

static void cairn_nidx_insert(struct cairn_nidx *x, const char *name)
{
	struct cairn_nidx_ent *e = NULL;
	char *key = NULL;
	size_t b;

	if (x->too_big) {
		return;
	}
	key = strupper_talloc(x, name);
	if (key == NULL) {
		x->too_big = true;	/* cannot fold: never trust this index */
		return;
	}
	b = cairn_nidx_hash(key) % x->nbuckets;
	for (e = x->buckets[b]; e != NULL; e = e->next) {
		if (strcmp(e->name, name) == 0) {
			TALLOC_FREE(key);
			return;
		}
	}
	e = talloc(x, struct cairn_nidx_ent);
	if (e == NULL || (e->name = talloc_strdup(e, name)) == NULL) {
		x->too_big = true;
		TALLOC_FREE(key);
		return;
	}
	e->key = talloc_move(e, &key);
	e->next = x->buckets[b];
	x->buckets[b] = e;
	if (++x->count > CAIRN_NIDX_MAX_NAMES) {
		x->too_big = true;
	}
}

static void cairn_nidx_remove(struct cairn_nidx *x, const char *name)
{
	struct cairn_nidx_ent **pe = NULL;
	char *key = strupper_talloc(talloc_tos(), name);

	if (key == NULL) {
		x->too_big = true;
		return;
	}
	pe = &x->buckets[cairn_nidx_hash(key) % x->nbuckets];
	for (; *pe != NULL; pe = &(*pe)->next) {
		if (strcmp((*pe)->name, name) == 0) {
			struct cairn_nidx_ent *e = *pe;
			*pe = e->next;
			TALLOC_FREE(e);
			x->count--;
			break;
		}
	}
	TALLOC_FREE(key);
}

static struct cairn_nidx *cairn_nidx_find(struct cairn_mount *m,
					  const cairn_id_t *dir)
{
	struct cairn_nidx *x = NULL;
	struct timespec now;

	cairn_nidx_drain();
	clock_gettime(CLOCK_MONOTONIC, &now);
	for (x = m->nidx; x != NULL; x = x->next) {
		if (!cairn_id_eq(&x->dir, dir)) {
			continue;
		}
		if (x->too_big ||
		    nsec_time_diff(&now, &x->built) / 1000000 >= m->nidx_ms) {
			cairn_nidx_drop(m, x);
			return NULL;
		}
		return x;
	}
	return NULL;
}

/* Own mutations: keep a loaded index exact (no round trip). */
static void cairn_nidx_added(struct vfs_handle_struct *handle,
			     const cairn_id_t *dir, const char *name)
{
	struct cairn_nidx *x = cairn_nidx_find(cairn_cc(handle)->m, dir);

	if (x != NULL) {
		cairn_nidx_insert(x, name);
	}
}

static void cairn_nidx_removed(struct vfs_handle_struct *handle,
			       const cairn_id_t *dir, const char *name)
{
	struct cairn_nidx *x = cairn_nidx_find(cairn_cc(handle)->m, dir);

	if (x != NULL) {
		cairn_nidx_remove(x, name);
	}
}

static int cairn_nidx_fill_cb(const cairn_dirent_t *e, void *arg)
{
	struct cairn_nidx *x = arg;

	cairn_nidx_insert(x, e->name);
	return x->too_big ? 1 : 0;
}

/* Build the index of dir with one listing; NULL (and *ret set) on failure. */
static struct cairn_nidx *cairn_nidx_build(struct vfs_handle_struct *handle,
					   const cairn_creds_t *cr,
					   const cairn_id_t *dir, int *ret)
{
	struct cairn_mount *m = cairn_cc(handle)->m;
	struct cairn_nidx *x = talloc_zero(m, struct cairn_nidx);
	uint64_t gen = cairn_inval_generation();
	bool eof = false;

	if (x == NULL) {
		*ret = -ENOMEM;
		return NULL;
	}
	x->dir = *dir;
	x->nbuckets = 1024;
	x->buckets = talloc_zero_array(x, struct cairn_nidx_ent *, x->nbuckets);
	if (x->buckets == NULL) {
		TALLOC_FREE(x);
		*ret = -ENOMEM;
		return NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &x->built);
	*ret = cairn_readdir(m->fs, cr, *dir, 0, 0, cairn_nidx_fill_cb, x,
			     &eof);
	if (*ret < 0) {
		TALLOC_FREE(x);
		return NULL;
	}
	*ret = 0;
	if (x->too_big || !eof) {
		x->too_big = true;	/* used once by the caller, never kept */
		return x;
	}
	if (cairn_inval_generation() != gen) {
		/* a recall raced with the listing: use it once, do not keep it */
		x->too_big = true;
		return x;
	}
	while (m->nidx_count >= CAIRN_NIDX_DIRS) {
		struct cairn_nidx *last = DLIST_TAIL(m->nidx);
		cairn_nidx_drop(m, last);
	}
	DLIST_ADD(m->nidx, x);
	m->nidx_count++;
	return x;
}

static const char *cairn_nidx_lookup(struct cairn_nidx *x, const char *name)
{
	struct cairn_nidx_ent *e = NULL;
	char *key = strupper_talloc(talloc_tos(), name);
	const char *found = NULL;

	if (key == NULL) {
		return NULL;
	}
	for (e = x->buckets[cairn_nidx_hash(key) % x->nbuckets]; e != NULL;
	     e = e->next) {
		if (strcmp(e->key, key) == 0) {
			found = e->name;
			break;
		}
	}
	TALLOC_FREE(key);
	return found;
}

/*
 * Path walks and lookups: smbd names most files by path from the share root. Which
 * inode a (directory, name) led to is libcairn's entry cache (docs/libcairn.md), exact
 * under the lease of the directory's entries and answered only to a caller the cached
 * directory attributes let search it; the module kept its own per-uid table (about 130
 * lines) until 2026-11-28.
 */
/*
 * Attributes of files and directories come from libcairn's cache (cairn_getattr): it
 * keeps only the copy the inode's own chain head holds (a new file is headed by its
 * directory's head, so a create's or lookup's reply is that copy), under a lease that
 * another client's change recalls before it completes, and it merges a directory's
 * times over every replica set. This process's own changes update it (each renews the
 * lease); a read that moved the atime (relatime) drops it. smbd's durable reconnects compare the stat taken at disconnect
 * with one another process reads, so the cache must never hold another copy.
 */
static int cairn_attr(struct cairn_mount *m, const cairn_creds_t *cr,
		      cairn_id_t id, cairn_attr_t *a)
{
	return cairn_getattr(m->fs, cr, id, a);
}

/*
 * Extended attributes (user.DOSATTRIB, security.NTACL, streams_xattr's user.DosStream.*,
 * listxattr): read through libcairn's xattr cache (docs/libcairn.md), which fetches an
 * inode's every xattr with its value in one round trip under the lease of its
 * attributes, keeps it per caller until a recall or the cache timeout, applies this
 * process's own changes, and knows a file it just created has none. The module keeps
 * none of its own.
 */

/* ---- path resolution ------------------------------------------------------------ */

/* Absolute, normalised volume path for name relative to dirfsp (or the cwd). */
static char *cairn_abs_path(TALLOC_CTX *mem_ctx,
			    struct vfs_handle_struct *handle,
			    const struct files_struct *dirfsp,
			    const char *name)
{
	struct cairn_conn *cc = cairn_cc(handle);
	char *joined = NULL;
	char *out = NULL;
	const char *p = NULL;
	size_t len = 0;

	if (name[0] == '/') {
		joined = talloc_strdup(mem_ctx, name);
	} else if (dirfsp == NULL || dirfsp == handle->conn->cwd_fsp ||
		   fsp_get_pathref_fd(dirfsp) == AT_FDCWD ||
		   ISDOT(dirfsp->fsp_name->base_name)) {
		joined = talloc_asprintf(mem_ctx, "%s/%s", cc->cwd, name);
	} else if (dirfsp->fsp_name->base_name[0] == '/') {
		joined = talloc_asprintf(mem_ctx, "%s/%s",
					 dirfsp->fsp_name->base_name, name);
	} else {
		joined = talloc_asprintf(mem_ctx, "%s/%s/%s", cc->cwd,
					 dirfsp->fsp_name->base_name, name);
	}
	if (joined == NULL) {
		errno = ENOMEM;
		return NULL;
	}

	/* Normalise: drop "", "." and resolve ".." textually. */
	out = talloc_array(mem_ctx, char, strlen(joined) + 2);
	if (out == NULL) {
		TALLOC_FREE(joined);
		errno = ENOMEM;
		return NULL;
	}
	out[0] = '\0';
	p = joined;
	while (*p != '\0') {
		const char *e = NULL;
		size_t n;

		while (*p == '/') {
			p++;
		}
		if (*p == '\0') {
			break;
		}
		e = strchrnul(p, '/');
		n = e - p;
		if (n == 1 && p[0] == '.') {
			/* skip */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (len > 0 && out[len - 1] != '/') {
				len--;
			}
			if (len > 0) {
				len--;
			}
			out[len] = '\0';
		} else {
			out[len++] = '/';
			memcpy(out + len, p, n);
			len += n;
			out[len] = '\0';
		}
		p = e;
	}
	if (len == 0) {
		out[0] = '/';
		out[1] = '\0';
	}
	TALLOC_FREE(joined);
	return out;
}

/* Whether cr may search (look names up in) a directory with attributes a. */
static bool cairn_may_search(const cairn_attr_t *a, const cairn_creds_t *cr)
{
	uint32_t i;

	if (cr->uid == 0) {
		return true;
	}
	if (cr->uid == a->uid) {
		return (a->mode & S_IXUSR) != 0;
	}
	if (cr->gid == a->gid) {
		return (a->mode & S_IXGRP) != 0;
	}
	for (i = 0; i < cr->ngroups; i++) {
		if (cr->groups[i] == a->gid) {
			return (a->mode & S_IXGRP) != 0;
		}
	}
	return (a->mode & S_IXOTH) != 0;
}

/*
 * cairn_lookup, except that a name the directory's name index (exact under the lease of
 * its listing, see above) does not hold is answered ENOENT without a round trip, when
 * the directory's cached attributes let the caller search it (else the server's answer,
 * EACCES, is the right one). smbd looks every new name up before creating it.
 */
static int cairn_lookup_cached(struct vfs_handle_struct *handle,
			       const cairn_creds_t *cr, cairn_id_t dir,
			       const char *name, cairn_attr_t *a)
{
	struct cairn_mount *m = cairn_cc(handle)->m;
	struct cairn_nidx *x = cairn_nidx_find(m, &dir);
	cairn_attr_t d;

	if (x != NULL && cairn_nidx_lookup(x, name) == NULL) {
		if (cairn_attr(m, cr, dir, &d) == 0 &&
		    cairn_may_search(&d, cr)) {
			return -ENOENT;
		}
	}
	/* A name looked up before: libcairn's entry and attribute caches answer. */
	return cairn_lookup(m->fs, cr, dir, name, a);
}

/*
 * A lookup answers with the attributes of a directory's copy on one replica set; its
 * times (an entry created on another set moves that set's copy) are only right when
 * merged over every set, which cairn_getattr does.
 */
static int cairn_dir_attr(struct cairn_mount *m, const cairn_creds_t *cr,
			  cairn_attr_t *a)
{
	if (a->type != DT_DIR) {
		return 0;
	}
	return cairn_attr(m, cr, a->id, a);
}

/*
 * Walk an absolute normalised path from the volume root, following symlinks in the
 * intermediate components (and in the last one when follow is set).
 */
static int cairn_walk(struct vfs_handle_struct *handle,
		      const cairn_creds_t *cr,
		      const char *path,
		      bool follow,
		      cairn_attr_t *out)
{
	cairn_fs_t *fs = CAIRN_FS(handle);
	TALLOC_CTX *frame = talloc_stackframe();
	char *cur = talloc_strdup(frame, path);
	int nlinks = 0;
	int ret = 0;

again:
	{
		cairn_attr_t a;
		char *done = talloc_strdup(frame, "");
		char *p = cur;

		/* Only a bare "/" needs the root's attributes from the server. */
		ZERO_STRUCT(a);
		a.id = cairn_id_root();
		a.type = DT_DIR;
		if (strspn(p, "/") == strlen(p)) {
			ret = cairn_attr(cairn_cc(handle)->m, cr,
						cairn_id_root(), &a);
			if (ret < 0) {
				goto out;
			}
		}
		while (*p != '\0') {
			char *e = NULL;
			char save;
			bool last;

			while (*p == '/') {
				p++;
			}
			if (*p == '\0') {
				break;
			}
			e = strchrnul(p, '/');
			save = *e;
			*e = '\0';
			last = (save == '\0') || (e[1] == '\0');
			if (a.type != DT_DIR) {
				ret = -ENOTDIR;
				goto out;
			}
			ret = cairn_lookup_cached(handle, cr, a.id, p, &a);
			if (ret < 0) {
				goto out;
			}
			if (a.type == DT_LNK && (!last || follow)) {
				char target[PATH_MAX];
				ssize_t tl;
				char *rest = NULL;

				if (++nlinks > CAIRN_MAX_SYMLINKS) {
					ret = -ELOOP;
					goto out;
				}
				tl = cairn_readlink(fs, cr, a.id, target,
						    sizeof(target) - 1);
				if (tl < 0) {
					ret = (int)tl;
					goto out;
				}
				target[tl] = '\0';
				rest = (save == '\0') ? "" : e + 1;
				if (target[0] == '/') {
					cur = talloc_asprintf(frame, "%s/%s",
							      target, rest);
				} else {
					cur = talloc_asprintf(frame, "%s/%s/%s",
							      done, target,
							      rest);
				}
				cur = cairn_abs_path(frame, handle, NULL, cur);
				if (cur == NULL) {
					ret = -ENOMEM;
					goto out;
				}
				goto again;
			}
			done = talloc_asprintf(frame, "%s/%s", done, p);
			*e = save;
			p = e;
		}
		ret = cairn_dir_attr(cairn_cc(handle)->m, cr, &a);
		if (ret < 0) {
			goto out;
		}
		*out = a;
	}
out:
	TALLOC_FREE(frame);
	return ret;
}

/* Resolve the parent of an absolute path; *leaf points into path. */
static int cairn_walk_parent(struct vfs_handle_struct *handle,
			     const cairn_creds_t *cr,
			     char *path,
			     cairn_attr_t *parent,
			     const char **leaf)
{
	char *slash = strrchr(path, '/');
	int ret;

	if (slash == NULL || slash[1] == '\0') {
		return -EINVAL;	/* the root has no parent entry */
	}
	*slash = '\0';
	ret = cairn_walk(handle, cr, path[0] == '\0' ? "/" : path, true,
			 parent);
	*slash = '/';
	*leaf = slash + 1;
	if (ret == 0 && parent->type != DT_DIR) {
		ret = -ENOTDIR;
	}
	return ret;
}

/* Resolve name relative to dirfsp: fast path for a plain name under an open dir. */
static int cairn_resolve_at(struct vfs_handle_struct *handle,
			    const cairn_creds_t *cr,
			    const struct files_struct *dirfsp,
			    const char *name,
			    bool follow,
			    cairn_attr_t *out)
{
	struct cairn_fh *dfh = NULL;
	char *path = NULL;
	int ret;

	if (dirfsp != NULL && dirfsp != handle->conn->cwd_fsp &&
	    strchr(name, '/') == NULL && !ISDOT(name) && !ISDOTDOT(name)) {
		dfh = cairn_fetch_fh(handle, dirfsp);
	}
	if (dfh != NULL) {
		ret = cairn_lookup_cached(handle, cr, dfh->id, name, out);
		if (ret == 0 && out->type == DT_DIR) {
			return cairn_dir_attr(cairn_cc(handle)->m, cr, out);
		}
		if (ret < 0 || out->type != DT_LNK || !follow) {
			return ret;
		}
	}
	path = cairn_abs_path(talloc_tos(), handle, dirfsp, name);
	if (path == NULL) {
		return -ENOMEM;
	}
	ret = cairn_walk(handle, cr, path, follow, out);
	TALLOC_FREE(path);
	return ret;
}

/* Parent id and leaf name for a create/remove/rename of name under dirfsp. */
static int cairn_parent_at(struct vfs_handle_struct *handle,
			   TALLOC_CTX *mem_ctx,
			   const cairn_creds_t *cr,
			   const struct files_struct *dirfsp,
			   const char *name,
			   cairn_id_t *parent,
			   const char **leaf)
{
	struct cairn_fh *dfh = NULL;
	cairn_attr_t pa;
	char *path = NULL;
	int ret;

	if (dirfsp != NULL && dirfsp != handle->conn->cwd_fsp &&
	    strchr(name, '/') == NULL && !ISDOT(name) && !ISDOTDOT(name)) {
		dfh = cairn_fetch_fh(handle, dirfsp);
	}
	if (dfh != NULL) {
		*parent = dfh->id;
		*leaf = name;
		return 0;
	}
	path = cairn_abs_path(mem_ctx, handle, dirfsp, name);
	if (path == NULL) {
		return -ENOMEM;
	}
	ret = cairn_walk_parent(handle, cr, path, &pa, leaf);
	if (ret == 0) {
		*parent = pa.id;
	}
	return ret;
}


/* ---- connect / disconnect ------------------------------------------------------- */

static int cairn_mount_destructor(struct cairn_mount *m)
{
	int ret;

	DLIST_REMOVE(cairn_mounts, m);
	cairn_register_invalidate(m->fs, NULL, NULL);
	ret = cairn_unmount(m->fs);
	if (ret < 0) {
		DBG_ERR("cairn: unmount of volume %s: %s\n", m->volume,
			cairn_last_error_message());
	}
	return 0;
}

static int cairn_connect(struct vfs_handle_struct *handle,
			 const char *service,
			 const char *user)
{
	int snum = SNUM(handle->conn);
	const char *servers = NULL;
	const char *volume = NULL;
	struct cairn_mount *m = NULL;
	struct cairn_conn *cc = NULL;
	char *key = NULL;
	cairn_options_t opts;
	uint8_t vid[16];
	int ret;

	/* Settings that would break SMB semantics over Cairn: refuse to attach.
	 * 'kernel share modes = yes' is served by cairn_filesystem_sharemode. */
	if (lp_kernel_oplocks(snum)) {
		DBG_ERR("cairn: refusing share [%s]: 'kernel oplocks = yes' "
			"needs kernel leases on a kernel fd; Cairn files have "
			"none. Set 'kernel oplocks = no'.\n", service);
		errno = EINVAL;
		return -1;
	}
	if (cairn_abi_version() != CAIRN_ABI_VERSION) {
		DBG_ERR("cairn: libcairn ABI %u, module built for %u\n",
			cairn_abi_version(), CAIRN_ABI_VERSION);
		errno = ELIBBAD;
		return -1;
	}

	servers = lp_parm_const_string(snum, CAIRN_MODULE, "servers",
				       "127.0.0.1:7420");
	volume = lp_parm_const_string(snum, CAIRN_MODULE, "volume", service);
	key = talloc_asprintf(talloc_tos(), "%s|%s", servers, volume);
	if (key == NULL) {
		errno = ENOMEM;
		return -1;
	}

	for (m = cairn_mounts; m != NULL; m = m->next) {
		if (strcmp(m->key, key) == 0) {
			break;
		}
	}
	if (m == NULL) {
		cairn_fs_t *fs = NULL;

		cairn_options_init(&opts);
		/* Other smbd processes must see our writes at once. */
		opts.write_behind = lp_parm_bool(snum, CAIRN_MODULE,
						 "write behind", false);
		/*
		 * libcairn's attribute and entry cache, kept exact by lease recalls
		 * (another smbd process's or gateway's change recalls before it
		 * completes) and holding only the copy of an inode its chain head
		 * keeps, the one every other process reads (durable reconnects
		 * compare stat data): the module has no attribute cache of its own.
		 */
		opts.cache_timeout_ms = (uint32_t)lp_parm_int(
			snum, CAIRN_MODULE, "cache timeout ms", 1000);
		opts.client_name = talloc_asprintf(talloc_tos(), "smbd@%d",
						   (int)getpid());
		/* cairn:credentials = /etc/cairn/gateway.pem (NULL: defaults) */
		opts.credentials = lp_parm_const_string(snum, CAIRN_MODULE,
							 "credentials", NULL);
		ret = cairn_mount(servers, volume, &opts, &fs);
		if (ret < 0) {
			DBG_ERR("cairn: share [%s]: cannot mount volume '%s' "
				"from %s: %s (%s)\n", service, volume, servers,
				strerror(-ret), cairn_last_error_message());
			TALLOC_FREE(key);
			errno = -ret;
			return -1;
		}
		m = talloc_zero(NULL, struct cairn_mount);
		if (m == NULL) {
			cairn_unmount(fs);
			errno = ENOMEM;
			return -1;
		}
		m->fs = fs;
		m->key = talloc_move(m, &key);
		m->volume = talloc_strdup(m, volume);
		if (cairn_volume_id(fs, vid) == 0) {
			uint64_t a, b;
			memcpy(&a, vid, 8);
			memcpy(&b, vid + 8, 8);
			m->dev = a ^ b;
		}
		m->nidx_ms = MIN(lp_parm_int(snum, CAIRN_MODULE,
					     "name cache ms", 5000),
				 CAIRN_NIDX_MAX_MS);
		if (cairn_register_invalidate_sync(fs, cairn_upcall, NULL) < 0) {
			m->nidx_ms = 0;	/* no recalls: never trust an index */
		}
		DLIST_ADD(cairn_mounts, m);
		talloc_set_destructor(m, cairn_mount_destructor);
		DBG_NOTICE("cairn: mounted volume %s from %s\n", volume,
			   servers);
	}
	TALLOC_FREE(key);

	cc = talloc_zero(handle->conn, struct cairn_conn);
	if (cc == NULL) {
		if (m->refs == 0) {
			TALLOC_FREE(m);
		}
		errno = ENOMEM;
		return -1;
	}
	cc->m = m;
	cc->cwd = talloc_strdup(cc, "/");
	m->refs++;
	SMB_VFS_HANDLE_SET_DATA(handle, cc, NULL, struct cairn_conn,
				return -1);

	cairn_trace_rt = lp_parm_bool(snum, CAIRN_MODULE, "trace round trips",
				      false);

	/* No async getxattrat: keep dosmode synchronous (as vfs_glusterfs). */
	lp_do_parameter(snum, "smbd async dosmode", "false");
	return 0;
}

static void cairn_disconnect(struct vfs_handle_struct *handle)
{
	struct cairn_conn *cc = cairn_cc(handle);
	struct cairn_mount *m = NULL;

	if (cc == NULL) {
		return;
	}
	m = cc->m;
	SMB_VFS_HANDLE_FREE_DATA(handle);
	if (--m->refs == 0) {
		TALLOC_FREE(m);	/* destructor unmounts */
	}
}

/* ---- volume-wide ---------------------------------------------------------------- */

static int cairn_do_statvfs(struct vfs_handle_struct *handle,
			    cairn_statfs_t *sf)
{
	cairn_creds_t cr;

	cairn_creds(handle, &cr);
	return cairn_statfs(CAIRN_FS(handle), &cr, sf);
}

static uint64_t cairn_disk_free(struct vfs_handle_struct *handle,
				const struct smb_filename *smb_fname,
				uint64_t *bsize, uint64_t *dfree,
				uint64_t *dsize)
{
	cairn_statfs_t sf;
	int ret = cairn_do_statvfs(handle, &sf);

	if (ret < 0) {
		return (uint64_t)cairn_ret(ret);
	}
	*bsize = sf.bsize;
	*dfree = sf.bavail;
	*dsize = sf.blocks;
	return *dfree;
}

static int cairn_statvfs(struct vfs_handle_struct *handle,
			 const struct smb_filename *smb_fname,
			 struct vfs_statvfs_struct *st)
{
	cairn_statfs_t sf;
	int ret = cairn_do_statvfs(handle, &sf);

	if (ret < 0) {
		return cairn_ret(ret);
	}
	ZERO_STRUCTP(st);
	st->OptimalTransferSize = sf.bsize;
	st->BlockSize = sf.bsize;
	st->TotalBlocks = sf.blocks;
	st->BlocksAvail = sf.bfree;
	st->UserBlocksAvail = sf.bavail;
	st->TotalFileNodes = sf.files;
	st->FreeFileNodes = sf.ffree;
	st->FsIdentifier = cairn_cc(handle)->m->dev;
	st->FsCapabilities = FILE_CASE_SENSITIVE_SEARCH |
			     FILE_CASE_PRESERVED_NAMES |
			     FILE_SUPPORTS_SPARSE_FILES;
	return 0;
}

static uint32_t cairn_fs_capabilities(struct vfs_handle_struct *handle,
				      enum timestamp_set_resolution *p_ts_res)
{
	*p_ts_res = TIMESTAMP_SET_NT_OR_BETTER;
	return FILE_CASE_SENSITIVE_SEARCH | FILE_CASE_PRESERVED_NAMES |
	       FILE_SUPPORTS_SPARSE_FILES;
}

/* ---- directories ---------------------------------------------------------------- */

#define CAIRN_DIR_BATCH 256

struct cairn_dir {
	cairn_id_t id;
	struct dirent de;
	/* entries of the current batch */
	struct cairn_dir_ent {
		char *name;
		uint32_t type;
		uint64_t cookie;
		bool have_attr;
		cairn_attr_t attr;
	} *ents;
	size_t nents, next;
	bool eof;
	/* position: 0 ".", 1 "..", then n-th Cairn entry at pos n + 2 */
	long pos;
	/* cookies[i] = cookie after the i-th Cairn entry (for seekdir) */
	uint64_t *cookies;
	size_t ncookies;
	uint64_t cookie;	/* resume point for the next batch */
	files_struct *fsp;	/* the directory handle listed */
};

struct cairn_fill {
	struct cairn_dir *d;
	TALLOC_CTX *mem;
};

static int cairn_dir_fill_cb(const cairn_dirent_t *e, void *arg)
{
	struct cairn_fill *f = arg;
	struct cairn_dir *d = f->d;
	struct cairn_dir_ent *de = &d->ents[d->nents];

	de->name = talloc_strndup(d->ents, e->name, e->namelen);
	de->type = e->type;
	de->cookie = e->cookie;
	de->have_attr = (e->attr != NULL);
	if (e->attr != NULL) {
		de->attr = *e->attr;
	}
	d->nents++;
	return d->nents >= CAIRN_DIR_BATCH ? 1 : 0;
}

static int cairn_dir_batch(struct vfs_handle_struct *handle,
			   struct cairn_dir *d, bool plus)
{
	struct cairn_fill f = { .d = d };
	cairn_creds_t cr;
	bool eof = false;
	int ret;

	TALLOC_FREE(d->ents);
	d->nents = d->next = 0;
	d->ents = talloc_zero_array(d, struct cairn_dir_ent, CAIRN_DIR_BATCH);
	if (d->ents == NULL) {
		return -ENOMEM;
	}
	cairn_creds(handle, &cr);
	ret = cairn_readdir(CAIRN_FS(handle), &cr, d->id, d->cookie,
			    plus ? CAIRN_READDIR_PLUS : 0, cairn_dir_fill_cb,
			    &f, &eof);
	if (ret < 0) {
		return ret;
	}
	d->eof = eof && d->nents < CAIRN_DIR_BATCH;
	return 0;
}

static DIR *cairn_fdopendir(struct vfs_handle_struct *handle,
			    files_struct *fsp, const char *mask,
			    uint32_t attributes)
{
	struct cairn_fh *fh = cairn_fetch_fh(handle, fsp);
	struct cairn_dir *d = NULL;

	if (fh == NULL) {
		errno = EBADF;
		return NULL;
	}
	if (!fh->is_dir) {
		errno = ENOTDIR;
		return NULL;
	}
	d = talloc_zero(fsp, struct cairn_dir);
	if (d == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	d->id = fh->id;
	d->fsp = fsp;
	fh->listing = d;
	return (DIR *)d;
}

static struct dirent *cairn_readdir_fn(struct vfs_handle_struct *handle,
				       struct files_struct *dirfsp,
				       DIR *dirp,
				       SMB_STRUCT_STAT *sbuf)
{
	struct cairn_dir *d = (struct cairn_dir *)dirp;
	struct cairn_dir_ent *e = NULL;
	int ret;

	if (sbuf != NULL) {
		SET_STAT_INVALID(*sbuf);
	}
	if (d->pos < 2) {
		strlcpy(d->de.d_name, d->pos == 0 ? "." : "..",
			sizeof(d->de.d_name));
		d->de.d_type = DT_DIR;
		d->de.d_ino = 0;
		d->pos++;
		return &d->de;
	}
	if (d->next >= d->nents) {
		if (d->eof) {
			return NULL;
		}
		ret = cairn_dir_batch(handle, d, sbuf != NULL);
		if (ret < 0) {
			cairn_ret(ret);
			return NULL;
		}
		if (d->nents == 0) {
			d->eof = true;
			return NULL;
		}
	}
	e = &d->ents[d->next++];
	d->cookie = e->cookie;
	if ((size_t)(d->pos - 2) >= d->ncookies) {
		uint64_t *nc = talloc_realloc(d, d->cookies, uint64_t,
					      d->ncookies + 1);
		if (nc != NULL) {
			d->cookies = nc;
			d->cookies[d->ncookies++] = e->cookie;
		}
	}
	d->pos++;
	strlcpy(d->de.d_name, e->name, sizeof(d->de.d_name));
	d->de.d_type = e->type;
	d->de.d_ino = e->have_attr ? e->attr.ino : 0;
	if (sbuf != NULL && e->have_attr && e->type != DT_LNK) {
		cairn_attr_to_stat(handle, &e->attr, sbuf);
	}
	return &d->de;
}

static void cairn_seekdir(struct vfs_handle_struct *handle, DIR *dirp,
			  long offset)
{
	struct cairn_dir *d = (struct cairn_dir *)dirp;

	TALLOC_FREE(d->ents);
	d->nents = d->next = 0;
	d->eof = false;
	if (offset <= 2) {
		d->pos = offset < 0 ? 0 : offset;
		d->cookie = 0;
		return;
	}
	if ((size_t)(offset - 2) > d->ncookies) {
		offset = d->ncookies + 2;
	}
	d->pos = offset;
	d->cookie = d->cookies[offset - 3];
}

static long cairn_telldir(struct vfs_handle_struct *handle, DIR *dirp)
{
	return ((struct cairn_dir *)dirp)->pos;
}

static void cairn_rewinddir(struct vfs_handle_struct *handle, DIR *dirp)
{
	cairn_seekdir(handle, dirp, 0);
}

static int cairn_closedir(struct vfs_handle_struct *handle, DIR *dirp)
{
	struct cairn_dir *d = (struct cairn_dir *)dirp;
	struct cairn_fh *fh = cairn_fetch_fh(handle, d->fsp);

	if (fh != NULL && fh->listing == d) {
		fh->listing = NULL;
	}
	TALLOC_FREE(d);
	return 0;
}

static int cairn_mkdirat(struct vfs_handle_struct *handle,
			 struct files_struct *dirfsp,
			 const struct smb_filename *smb_fname,
			 mode_t mode)
{
	cairn_creds_t cr;
	cairn_id_t parent;
	const char *leaf = NULL;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_parent_at(handle, talloc_tos(), &cr, dirfsp,
			      smb_fname->base_name, &parent, &leaf);
	if (ret == 0) {
		ret = cairn_mkdir(CAIRN_FS(handle), &cr, parent, leaf, mode,
				  NULL);
	}
	if (ret == 0) {
		cairn_nidx_added(handle, &parent, leaf);
	}
	return cairn_ret(ret);
}

/* ---- open / close --------------------------------------------------------------- */

/*
 * smbd lists a directory by reading an entry and then opening it by name (a pathref
 * open, for its attributes) under the directory being listed. The listing already
 * brought a regular file's attributes (readdirplus): use them instead of a lookup, as an
 * NFS client uses readdirplus. Only for the entry just returned, and not for symlinks.
 * A directory's times there are those of one replica set's copy (stat by name or handle
 * merges every set's): a listing may show a directory's mtime late by the changes made
 * on other sets, as a FUSE or NFS listing of Cairn does.
 */
static bool cairn_listed_attr(struct vfs_handle_struct *handle,
			      const struct files_struct *dirfsp,
			      const char *name, cairn_attr_t *out)
{
	struct cairn_fh *dfh = NULL;
	struct cairn_dir *d = NULL;
	struct cairn_dir_ent *e = NULL;

	if (dirfsp == NULL || dirfsp == handle->conn->cwd_fsp) {
		return false;
	}
	dfh = cairn_fetch_fh(handle, dirfsp);
	if (dfh == NULL || dfh->listing == NULL) {
		return false;
	}
	d = dfh->listing;
	if (d->ents == NULL || d->next == 0 || d->next > d->nents) {
		return false;
	}
	e = &d->ents[d->next - 1];
	if (!e->have_attr || (e->type != DT_REG && e->type != DT_DIR) ||
	    e->attr.type != e->type || strcmp(e->name, name) != 0) {
		return false;
	}
	*out = e->attr;
	return true;
}

static int cairn_openat(struct vfs_handle_struct *handle,
			const struct files_struct *dirfsp,
			const struct smb_filename *smb_fname,
			files_struct *fsp,
			const struct vfs_open_how *how)
{
	cairn_fs_t *fs = CAIRN_FS(handle);
	int flags = how->flags;
	bool follow = (flags & O_NOFOLLOW) == 0;
	struct cairn_fh *fh = NULL;
	cairn_creds_t cr;
	cairn_attr_t a;
	int ret;

	if (how->resolve & ~VFS_OPEN_HOW_RESOLVE_NO_SYMLINKS) {
		errno = ENOSYS;
		return -1;
	}
	if (how->resolve & VFS_OPEN_HOW_RESOLVE_NO_SYMLINKS) {
		follow = false;
	}
	if (is_named_stream(smb_fname)) {
		errno = ENOENT;	/* streams come from streams_xattr */
		return -1;
	}
	cairn_creds(handle, &cr);

	if (flags & O_CREAT) {
		cairn_id_t parent;
		const char *leaf = NULL;

		ret = cairn_parent_at(handle, talloc_tos(), &cr, dirfsp,
				      smb_fname->base_name, &parent, &leaf);
		if (ret == 0) {
			ret = cairn_create(fs, &cr, parent, leaf,
					   how->mode & 07777,
					   (flags & O_EXCL) ?
					   CAIRN_CREATE_EXCL : 0, &a);
			if (ret == 0) {
				cairn_nidx_added(handle, &parent, leaf);
			}
		}
		if (ret == -EISDIR || ret == -EEXIST) {
			/* O_CREAT on an existing non-regular name */
			if (!(flags & O_EXCL)) {
				ret = cairn_resolve_at(handle, &cr, dirfsp,
						       smb_fname->base_name,
						       follow, &a);
				if (ret == 0 && a.type == DT_DIR &&
				    (flags & O_ACCMODE) != O_RDONLY) {
					ret = -EISDIR;
				}
			}
		}
	} else if (fsp->fsp_flags.is_pathref &&
		   cairn_listed_attr(handle, dirfsp, smb_fname->base_name,
				     &a)) {
		ret = 0;
	} else {
		ret = cairn_resolve_at(handle, &cr, dirfsp,
				       smb_fname->base_name, follow, &a);
	}
	if (ret < 0) {
		return cairn_ret(ret);
	}
	if (a.type == DT_LNK) {
		return cairn_ret(-ELOOP);
	}
	if ((flags & O_DIRECTORY) && a.type != DT_DIR) {
		return cairn_ret(-ENOTDIR);
	}
	if (a.type == DT_DIR && (flags & O_ACCMODE) != O_RDONLY) {
		return cairn_ret(-EISDIR);
	}
	if ((flags & O_TRUNC) && a.type == DT_REG &&
	    (flags & O_ACCMODE) != O_RDONLY && a.size != 0) {
		cairn_attr_t in = { .size = 0 };
		ret = cairn_setattr(fs, &cr, a.id, &in, CAIRN_SETATTR_SIZE,
				    &a);
		if (ret < 0) {
			return cairn_ret(ret);
		}
	}

	fh = VFS_ADD_FSP_EXTENSION(handle, fsp, struct cairn_fh, NULL);
	if (fh == NULL) {
		errno = ENOMEM;
		return -1;
	}
	fh->id = a.id;
	fh->is_dir = (a.type == DT_DIR);
	fh->attr = a;
	fh->attr_fresh = true;
	if (!fsp->fsp_flags.is_pathref && a.type == DT_REG) {
		ret = cairn_open(fs, &cr, a.id);
		if (ret < 0) {
			VFS_REMOVE_FSP_EXTENSION(handle, fsp);
			return cairn_ret(ret);
		}
		fh->opened = true;
	}
	fsp->fsp_flags.have_proc_fds = false;
	cairn_attr_to_stat(handle, &a, &fsp->fsp_name->st);

	if (++cairn_next_fd < CAIRN_FAKE_FD_BASE) {
		cairn_next_fd = CAIRN_FAKE_FD_BASE;
	}
	return cairn_next_fd;
}

static int cairn_close(struct vfs_handle_struct *handle, files_struct *fsp)
{
	struct cairn_fh *fh = cairn_fetch_fh(handle, fsp);
	int ret = 0;

	if (fh == NULL) {
		errno = EBADF;
		return -1;
	}
	if (fh->opened) {
		ret = cairn_release(CAIRN_FS(handle), fh->id);
		if (ret < 0) {
			DBG_WARNING("cairn: release of %s: %s\n",
				    fsp_str_dbg(fsp),
				    cairn_last_error_message());
		}
	}
	VFS_REMOVE_FSP_EXTENSION(handle, fsp);
	return cairn_ret(ret);
}

/* ---- data ----------------------------------------------------------------------- */

/* Fetch the handle; any operation but fstat ends the open-time attr reuse. */
#define CAIRN_FH_OR_EBADF(fh, handle, fsp, failret)                   \
	struct cairn_fh *fh = cairn_fetch_fh(handle, fsp);            \
	if (fh == NULL) {                                             \
		errno = EBADF;                                        \
		return failret;                                       \
	}                                                             \
	fh->attr_fresh = false

static ssize_t cairn_pread(struct vfs_handle_struct *handle,
			   files_struct *fsp, void *data, size_t n,
			   off_t offset)
{
	cairn_creds_t cr;
	ssize_t ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	ret = cairn_read(CAIRN_FS(handle), &cr, fh->id, offset, data, n);
	return cairn_sret(ret);
}

static ssize_t cairn_pwrite(struct vfs_handle_struct *handle,
			    files_struct *fsp, const void *data, size_t n,
			    off_t offset)
{
	cairn_creds_t cr;
	ssize_t ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	ret = cairn_write(CAIRN_FS(handle), &cr, fh->id, offset, data, n);
	return cairn_sret(ret);
}

/*
 * Async I/O on Samba's thread pool (as vfs_default): the job calls the synchronous
 * libcairn function with credentials captured on the main thread.
 */
enum cairn_job_op { CAIRN_JOB_READ, CAIRN_JOB_WRITE, CAIRN_JOB_FSYNC };

struct cairn_job_state {
	enum cairn_job_op op;
	cairn_fs_t *fs;
	cairn_id_t id;
	uint32_t uid, gid, ngroups;
	gid_t *groups;
	void *buf;
	size_t count;
	off_t offset;
	ssize_t ret;
	struct vfs_aio_state aio;
	struct cairn_mount *m;
};

static void cairn_job_do(void *private_data)
{
	struct cairn_job_state *s = talloc_get_type_abort(
		private_data, struct cairn_job_state);
	cairn_creds_t cr = {
		.uid = s->uid, .gid = s->gid,
		.ngroups = s->ngroups, .groups = s->groups,
	};
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	switch (s->op) {
	case CAIRN_JOB_READ:
		s->ret = cairn_read(s->fs, &cr, s->id, s->offset, s->buf,
				    s->count);
		break;
	case CAIRN_JOB_WRITE:
		s->ret = cairn_write(s->fs, &cr, s->id, s->offset, s->buf,
				     s->count);
		break;
	case CAIRN_JOB_FSYNC:
		s->ret = cairn_fsync(s->fs, &cr, s->id, false);
		break;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s->aio.error = s->ret < 0 ? (int)-s->ret : 0;
	s->aio.duration = nsec_time_diff(&t1, &t0);
}

static int cairn_job_destructor(struct cairn_job_state *s)
{
	return -1;	/* the job still runs: keep the state alive */
}

static void cairn_job_done(struct tevent_req *subreq);

static struct tevent_req *cairn_job_send(struct vfs_handle_struct *handle,
					 TALLOC_CTX *mem_ctx,
					 struct tevent_context *ev,
					 files_struct *fsp,
					 enum cairn_job_op op,
					 void *buf, size_t n, off_t offset)
{
	const struct security_unix_token *ut = get_current_utok(handle->conn);
	struct tevent_req *req = NULL, *subreq = NULL;
	struct cairn_job_state *s = NULL;
	struct cairn_fh *fh = cairn_fetch_fh(handle, fsp);

	req = tevent_req_create(mem_ctx, &s, struct cairn_job_state);
	if (req == NULL) {
		return NULL;
	}
	if (fh == NULL) {
		tevent_req_error(req, EBADF);
		return tevent_req_post(req, ev);
	}
	fh->attr_fresh = false;
	s->m = cairn_cc(handle)->m;
	s->op = op;
	s->fs = CAIRN_FS(handle);
	s->id = fh->id;
	s->uid = ut->uid;
	s->gid = ut->gid;
	s->ngroups = ut->ngroups;
	if (ut->ngroups > 0) {
		s->groups = talloc_memdup(s, ut->groups,
					  ut->ngroups * sizeof(gid_t));
		if (tevent_req_nomem(s->groups, req)) {
			return tevent_req_post(req, ev);
		}
	}
	s->buf = buf;
	s->count = n;
	s->offset = offset;

	subreq = pthreadpool_tevent_job_send(s, ev, handle->conn->sconn->pool,
					     cairn_job_do, s);
	if (tevent_req_nomem(subreq, req)) {
		return tevent_req_post(req, ev);
	}
	tevent_req_set_callback(subreq, cairn_job_done, req);
	talloc_set_destructor(s, cairn_job_destructor);
	return req;
}

static void cairn_job_done(struct tevent_req *subreq)
{
	struct tevent_req *req = tevent_req_callback_data(subreq,
							  struct tevent_req);
	struct cairn_job_state *s = tevent_req_data(req,
						    struct cairn_job_state);
	int ret = pthreadpool_tevent_job_recv(subreq);

	TALLOC_FREE(subreq);
	talloc_set_destructor(s, NULL);
	if (ret != 0) {
		if (ret != EAGAIN) {
			tevent_req_error(req, ret);
			return;
		}
		cairn_job_do(s);	/* no thread available: run inline */
	}
	tevent_req_done(req);
}

static ssize_t cairn_job_recv(struct tevent_req *req,
			      struct vfs_aio_state *aio)
{
	struct cairn_job_state *s = tevent_req_data(req,
						    struct cairn_job_state);
	ssize_t ret;

	if (tevent_req_is_unix_error(req, &aio->error)) {
		tevent_req_received(req);
		return -1;
	}
	*aio = s->aio;
	ret = s->ret < 0 ? -1 : s->ret;
	tevent_req_received(req);
	return ret;
}

static struct tevent_req *cairn_pread_send(struct vfs_handle_struct *handle,
					   TALLOC_CTX *mem_ctx,
					   struct tevent_context *ev,
					   files_struct *fsp, void *data,
					   size_t n, off_t offset)
{
	return cairn_job_send(handle, mem_ctx, ev, fsp, CAIRN_JOB_READ, data,
			      n, offset);
}

static struct tevent_req *cairn_pwrite_send(struct vfs_handle_struct *handle,
					    TALLOC_CTX *mem_ctx,
					    struct tevent_context *ev,
					    files_struct *fsp,
					    const void *data, size_t n,
					    off_t offset)
{
	return cairn_job_send(handle, mem_ctx, ev, fsp, CAIRN_JOB_WRITE,
			      discard_const_p(void, data), n, offset);
}

static struct tevent_req *cairn_fsync_send(struct vfs_handle_struct *handle,
					   TALLOC_CTX *mem_ctx,
					   struct tevent_context *ev,
					   files_struct *fsp)
{
	return cairn_job_send(handle, mem_ctx, ev, fsp, CAIRN_JOB_FSYNC, NULL,
			      0, 0);
}

static int cairn_fsync_recv(struct tevent_req *req,
			    struct vfs_aio_state *aio)
{
	return (int)cairn_job_recv(req, aio);
}

static off_t cairn_lseek(struct vfs_handle_struct *handle, files_struct *fsp,
			 off_t offset, int whence)
{
	cairn_creds_t cr;
	cairn_attr_t a;
	uint64_t res = 0;
	int ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	switch (whence) {
	case SEEK_SET:
		return offset;
	case SEEK_END:
		ret = cairn_getattr(CAIRN_FS(handle), &cr, fh->id, &a);
		if (ret < 0) {
			return cairn_ret(ret);
		}
		return (off_t)a.size + offset;
#ifdef SEEK_DATA
	case SEEK_DATA:
	case SEEK_HOLE:
		ret = cairn_seek(CAIRN_FS(handle), &cr, fh->id, offset, whence,
				 &res);
		if (ret < 0) {
			return cairn_ret(ret);
		}
		return (off_t)res;
#endif
	default:
		errno = EINVAL;
		return -1;
	}
}

/* ---- server-side copy ------------------------------------------------------------ */

/*
 * FSCTL_SRV_REQUEST_RESUME_KEY and FSCTL_SRV_COPYCHUNK(_WRITE) (Explorer and robocopy
 * copy inside a share with them), as vfs_default does them: the same resume key, the
 * same handle, range and lock checks with the same NTSTATUS answers; but the copy itself
 * is cairn_copy_file_range, so the bricks copy and the data never comes through smbd.
 * Not inherited from vfs_default: its copy_file_range(2) and its pread/pwrite fallback
 * act on the fsp's fd, which is a fake one here. A copy vfs_cairn cannot hand to the
 * library (an alternate data stream of streams_xattr, a source on another volume) goes
 * through SMB_VFS_PREAD/SMB_VFS_PWRITE of the whole stack, as vfs_default's fallback.
 */
static struct vfs_offload_ctx *cairn_offload_ctx;

struct cairn_offload_read_state {
	DATA_BLOB token;
};

static struct tevent_req *cairn_offload_read_send(TALLOC_CTX *mem_ctx,
						  struct tevent_context *ev,
						  struct vfs_handle_struct *handle,
						  struct files_struct *fsp,
						  uint32_t fsctl, uint32_t ttl,
						  off_t offset, size_t to_copy)
{
	struct tevent_req *req = NULL;
	struct cairn_offload_read_state *s = NULL;
	NTSTATUS status;

	req = tevent_req_create(mem_ctx, &s, struct cairn_offload_read_state);
	if (req == NULL) {
		return NULL;
	}
	status = vfs_offload_token_ctx_init(fsp->conn->sconn->client,
					    &cairn_offload_ctx);
	if (tevent_req_nterror(req, status)) {
		return tevent_req_post(req, ev);
	}
	if (fsctl != FSCTL_SRV_REQUEST_RESUME_KEY) {
		tevent_req_nterror(req, NT_STATUS_INVALID_DEVICE_REQUEST);
		return tevent_req_post(req, ev);
	}
	status = vfs_offload_token_create_blob(s, fsp, fsctl, &s->token);
	if (tevent_req_nterror(req, status)) {
		return tevent_req_post(req, ev);
	}
	status = vfs_offload_token_db_store_fsp(cairn_offload_ctx, fsp,
						&s->token);
	if (tevent_req_nterror(req, status)) {
		return tevent_req_post(req, ev);
	}
	tevent_req_done(req);
	return tevent_req_post(req, ev);
}

static NTSTATUS cairn_offload_read_recv(struct tevent_req *req,
					struct vfs_handle_struct *handle,
					TALLOC_CTX *mem_ctx, uint32_t *flags,
					uint64_t *xferlen, DATA_BLOB *token)
{
	struct cairn_offload_read_state *s = tevent_req_data(
		req, struct cairn_offload_read_state);
	NTSTATUS status;

	if (tevent_req_is_nterror(req, &status)) {
		tevent_req_received(req);
		return status;
	}
	*flags = 0;
	*xferlen = 0;
	token->length = s->token.length;
	token->data = talloc_move(mem_ctx, &s->token.data);
	tevent_req_received(req);
	return NT_STATUS_OK;
}

struct cairn_offload_write_state {
	struct files_struct *dst_fsp;	/* whose user to return to (cleanup) */
	cairn_fs_t *fs;
	struct cairn_mount *m;
	cairn_id_t src, dst;
	uint32_t uid, gid, ngroups;
	gid_t *groups;
	uint64_t src_off, dst_off, len;
	ssize_t ret;
	char err[256];	/* the library's message, taken on the job's thread */
	off_t copied;
};

static void cairn_offload_write_cleanup(struct tevent_req *req,
					enum tevent_req_state req_state)
{
	struct cairn_offload_write_state *s = tevent_req_data(
		req, struct cairn_offload_write_state);
	bool ok;

	if (s->dst_fsp == NULL) {
		return;
	}
	ok = change_to_user_and_service_by_fsp(s->dst_fsp);
	SMB_ASSERT(ok);
	s->dst_fsp = NULL;
}

/* A strict-lock check of len bytes at off of fsp, as vfs_default's copy does. */
static bool cairn_offload_lock_ok(files_struct *fsp, off_t off, off_t len,
				  enum brl_type type)
{
	struct lock_struct lck;

	init_strict_lock_struct(fsp, fsp->op->global->open_persistent_id, off,
				len, type, lp_posix_cifsu_locktype(fsp), &lck);
	return SMB_VFS_STRICT_LOCK_CHECK(fsp->conn, fsp, &lck);
}

static struct vfs_fn_pointers cairn_fns;

/*
 * The vfs_cairn handle of fsp's tree connect, if it serves the same mounted volume as
 * `handle` (a copy between two tree connects of one share, or of two shares on one
 * volume, is still one cairn_copy_file_range).
 */
static struct vfs_handle_struct *cairn_peer_handle(struct vfs_handle_struct *handle,
						   files_struct *fsp)
{
	struct vfs_handle_struct *h = NULL;

	if (fsp->conn == handle->conn) {
		return handle;
	}
	for (h = fsp->conn->vfs_handles; h != NULL; h = h->next) {
		if (h->fns == &cairn_fns && h->data != NULL &&
		    cairn_cc(h)->m == cairn_cc(handle)->m) {
			return h;
		}
	}
	return NULL;
}

/* The copy through the whole VFS stack, for what the library cannot copy itself. */
static NTSTATUS cairn_offload_by_stack(struct cairn_offload_write_state *s,
				       files_struct *src_fsp,
				       files_struct *dst_fsp, off_t src_off,
				       off_t dst_off, off_t len)
{
	size_t bufsize = MIN(len, 1024 * 1024);
	uint8_t *buf = talloc_array(s, uint8_t, bufsize);
	ssize_t n, w;

	if (buf == NULL) {
		return NT_STATUS_NO_MEMORY;
	}
	while (s->copied < len) {
		size_t want = MIN((off_t)bufsize, len - s->copied);

		n = SMB_VFS_PREAD(src_fsp, buf, want, src_off + s->copied);
		if (n == -1) {
			TALLOC_FREE(buf);
			return map_nt_error_from_unix(errno);
		}
		if ((size_t)n != want) {
			DBG_ERR("short read of %s: %zd of %zu\n",
				fsp_str_dbg(src_fsp), n, want);
			TALLOC_FREE(buf);
			return NT_STATUS_IO_DEVICE_ERROR;
		}
		w = SMB_VFS_PWRITE(dst_fsp, buf, n, dst_off + s->copied);
		if (w == -1) {
			TALLOC_FREE(buf);
			return map_nt_error_from_unix(errno);
		}
		if (w != n) {
			TALLOC_FREE(buf);
			return NT_STATUS_IO_DEVICE_ERROR;
		}
		s->copied += w;
	}
	TALLOC_FREE(buf);
	return NT_STATUS_OK;
}

static void cairn_offload_job(void *private_data)
{
	struct cairn_offload_write_state *s = talloc_get_type_abort(
		private_data, struct cairn_offload_write_state);
	cairn_creds_t cr = {
		.uid = s->uid, .gid = s->gid,
		.ngroups = s->ngroups, .groups = s->groups,
	};

	s->ret = cairn_copy_file_range(s->fs, &cr, s->src, s->src_off, s->dst,
				       s->dst_off, s->len);
	if (s->ret < 0) {
		strlcpy(s->err, cairn_last_error_message(), sizeof(s->err));
	}
}

static int cairn_offload_job_destructor(struct cairn_offload_write_state *s)
{
	return -1;	/* the job still runs: keep the state alive */
}

static void cairn_offload_job_done(struct tevent_req *subreq);

static struct tevent_req *cairn_offload_write_send(
	struct vfs_handle_struct *handle, TALLOC_CTX *mem_ctx,
	struct tevent_context *ev, uint32_t fsctl, DATA_BLOB *token,
	off_t transfer_offset, struct files_struct *dest_fsp, off_t dest_off,
	off_t to_copy)
{
	struct tevent_req *req = NULL, *subreq = NULL;
	struct cairn_offload_write_state *s = NULL;
	const struct security_unix_token *ut = NULL;
	struct cairn_fh *sfh = NULL, *dfh = NULL;
	files_struct *src_fsp = NULL;
	/* off_t is signed */
	off_t max_offset = INT64_MAX - to_copy;
	NTSTATUS status;

	req = tevent_req_create(mem_ctx, &s, struct cairn_offload_write_state);
	if (req == NULL) {
		return NULL;
	}
	s->dst_fsp = dest_fsp;
	tevent_req_set_cleanup_fn(req, cairn_offload_write_cleanup);

	switch (fsctl) {
	case FSCTL_SRV_COPYCHUNK:
	case FSCTL_SRV_COPYCHUNK_WRITE:
		break;
	case FSCTL_OFFLOAD_WRITE:
		tevent_req_nterror(req, NT_STATUS_NOT_IMPLEMENTED);
		return tevent_req_post(req, ev);
	case FSCTL_DUP_EXTENTS_TO_FILE:
		/* block cloning: not offered (fs_capabilities), as on a stock share */
		tevent_req_nterror(req, NT_STATUS_INVALID_PARAMETER);
		return tevent_req_post(req, ev);
	default:
		tevent_req_nterror(req, NT_STATUS_INTERNAL_ERROR);
		return tevent_req_post(req, ev);
	}
	if (to_copy == 0) {
		tevent_req_done(req);
		return tevent_req_post(req, ev);
	}
	if (transfer_offset < 0 || transfer_offset > max_offset ||
	    dest_off < 0 || dest_off > max_offset) {
		tevent_req_nterror(req, NT_STATUS_INVALID_PARAMETER);
		return tevent_req_post(req, ev);
	}
	status = vfs_offload_token_db_fetch_fsp(cairn_offload_ctx, token,
						&src_fsp);
	if (tevent_req_nterror(req, status)) {
		return tevent_req_post(req, ev);
	}
	status = vfs_offload_token_check_handles(fsctl, src_fsp, dest_fsp);
	if (tevent_req_nterror(req, status)) {
		return tevent_req_post(req, ev);
	}
	if (!change_to_user_and_service_by_fsp(src_fsp)) {
		tevent_req_nterror(req, NT_STATUS_ACCESS_DENIED);
		return tevent_req_post(req, ev);
	}
	status = vfs_stat_fsp(src_fsp);
	if (tevent_req_nterror(req, status)) {
		return tevent_req_post(req, ev);
	}
	if (src_fsp->fsp_name->st.st_ex_size < transfer_offset + to_copy) {
		/* MS-SMB2 3.3.5.15.6: Windows answers STATUS_INVALID_VIEW_SIZE */
		tevent_req_nterror(req, NT_STATUS_INVALID_VIEW_SIZE);
		return tevent_req_post(req, ev);
	}
	if (!cairn_offload_lock_ok(src_fsp, transfer_offset, to_copy,
				   READ_LOCK)) {
		tevent_req_nterror(req, NT_STATUS_FILE_LOCK_CONFLICT);
		return tevent_req_post(req, ev);
	}
	if (!change_to_user_and_service_by_fsp(dest_fsp)) {
		tevent_req_nterror(req, NT_STATUS_INTERNAL_ERROR);
		return tevent_req_post(req, ev);
	}
	if (!cairn_offload_lock_ok(dest_fsp, dest_off, to_copy, WRITE_LOCK)) {
		tevent_req_nterror(req, NT_STATUS_FILE_LOCK_CONFLICT);
		return tevent_req_post(req, ev);
	}

	if (!fsp_is_alternate_stream(src_fsp) &&
	    !fsp_is_alternate_stream(dest_fsp)) {
		struct vfs_handle_struct *sh = cairn_peer_handle(handle, src_fsp);

		sfh = sh != NULL ? cairn_fetch_fh(sh, src_fsp) : NULL;
		dfh = cairn_fetch_fh(handle, dest_fsp);
	}
	if (sfh == NULL || dfh == NULL) {
		status = cairn_offload_by_stack(s, src_fsp, dest_fsp,
						transfer_offset, dest_off,
						to_copy);
		if (tevent_req_nterror(req, status)) {
			return tevent_req_post(req, ev);
		}
		tevent_req_done(req);
		return tevent_req_post(req, ev);
	}

	sfh->attr_fresh = false;
	dfh->attr_fresh = false;
	ut = get_current_utok(dest_fsp->conn);
	s->fs = CAIRN_FS(handle);
	s->m = cairn_cc(handle)->m;
	s->src = sfh->id;
	s->dst = dfh->id;
	s->src_off = transfer_offset;
	s->dst_off = dest_off;
	s->len = to_copy;
	s->uid = ut->uid;
	s->gid = ut->gid;
	s->ngroups = ut->ngroups;
	if (ut->ngroups > 0) {
		s->groups = talloc_memdup(s, ut->groups,
					  ut->ngroups * sizeof(gid_t));
		if (tevent_req_nomem(s->groups, req)) {
			return tevent_req_post(req, ev);
		}
	}
	subreq = pthreadpool_tevent_job_send(s, ev, handle->conn->sconn->pool,
					     cairn_offload_job, s);
	if (subreq == NULL) {
		tevent_req_oom(req);
		return tevent_req_post(req, ev);
	}
	tevent_req_set_callback(subreq, cairn_offload_job_done, req);
	talloc_set_destructor(s, cairn_offload_job_destructor);
	return req;
}

static void cairn_offload_job_done(struct tevent_req *subreq)
{
	struct tevent_req *req = tevent_req_callback_data(subreq,
							  struct tevent_req);
	struct cairn_offload_write_state *s = tevent_req_data(
		req, struct cairn_offload_write_state);
	int ret = pthreadpool_tevent_job_recv(subreq);

	TALLOC_FREE(subreq);
	talloc_set_destructor(s, NULL);
	if (ret != 0) {
		if (ret != EAGAIN) {
			tevent_req_nterror(req, map_nt_error_from_unix(ret));
			return;
		}
		cairn_offload_job(s);	/* no thread available: run inline */
	}
	if (s->ret < 0) {
		DBG_NOTICE("copy of %" PRIu64 " bytes failed: %s (%s)\n",
			   s->len, strerror((int)-s->ret), s->err);
		tevent_req_nterror(req, map_nt_error_from_unix((int)-s->ret));
		return;
	}
	s->copied = s->ret;
	if ((uint64_t)s->ret != s->len) {
		/* the source shrank meanwhile: vfs_default's "short read" */
		DBG_ERR("short copy: %zd of %" PRIu64 " bytes\n", s->ret,
			s->len);
		tevent_req_nterror(req, NT_STATUS_IO_DEVICE_ERROR);
		return;
	}
	tevent_req_done(req);
}

static NTSTATUS cairn_offload_write_recv(struct vfs_handle_struct *handle,
					 struct tevent_req *req, off_t *copied)
{
	struct cairn_offload_write_state *s = tevent_req_data(
		req, struct cairn_offload_write_state);
	NTSTATUS status;

	if (tevent_req_is_nterror(req, &status)) {
		*copied = 0;
		tevent_req_received(req);
		return status;
	}
	*copied = s->copied;
	tevent_req_received(req);
	return NT_STATUS_OK;
}

/* ---- names ---------------------------------------------------------------------- */

static int cairn_renameat(struct vfs_handle_struct *handle,
			  files_struct *srcfsp,
			  const struct smb_filename *src,
			  files_struct *dstfsp,
			  const struct smb_filename *dst)
{
	cairn_creds_t cr;
	cairn_id_t sdir, ddir;
	const char *sleaf = NULL, *dleaf = NULL;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_parent_at(handle, talloc_tos(), &cr, srcfsp,
			      src->base_name, &sdir, &sleaf);
	if (ret == 0) {
		ret = cairn_parent_at(handle, talloc_tos(), &cr, dstfsp,
				      dst->base_name, &ddir, &dleaf);
	}
	if (ret == 0) {
		ret = cairn_rename(CAIRN_FS(handle), &cr, sdir, sleaf, ddir,
				   dleaf, 0);
	}
	if (ret == 0) {
		cairn_nidx_removed(handle, &sdir, sleaf);
		cairn_nidx_added(handle, &ddir, dleaf);
	}
	return cairn_ret(ret);
}

static int cairn_stat_common(struct vfs_handle_struct *handle,
			     struct smb_filename *smb_fname, bool follow)
{
	cairn_creds_t cr;
	cairn_attr_t a;
	int ret;

	if (is_named_stream(smb_fname)) {
		errno = ENOENT;
		return -1;
	}
	cairn_creds(handle, &cr);
	ret = cairn_resolve_at(handle, &cr, NULL, smb_fname->base_name,
			       follow, &a);
	if (ret < 0) {
		return cairn_ret(ret);
	}
	cairn_attr_to_stat(handle, &a, &smb_fname->st);
	return 0;
}

static int cairn_stat(struct vfs_handle_struct *handle,
		      struct smb_filename *smb_fname)
{
	return cairn_stat_common(handle, smb_fname, true);
}

static int cairn_lstat(struct vfs_handle_struct *handle,
		       struct smb_filename *smb_fname)
{
	return cairn_stat_common(handle, smb_fname, false);
}

static int cairn_fstat(struct vfs_handle_struct *handle, files_struct *fsp,
		       SMB_STRUCT_STAT *sbuf)
{
	struct cairn_fh *fh = cairn_fetch_fh(handle, fsp);
	cairn_creds_t cr;
	cairn_attr_t a;
	int ret;

	if (fh == NULL) {
		errno = EBADF;
		return -1;
	}
	if (fh->attr_fresh) {
		fh->attr_fresh = false;
		cairn_attr_to_stat(handle, &fh->attr, sbuf);
		return 0;
	}
	cairn_creds(handle, &cr);
	ret = cairn_attr(cairn_cc(handle)->m, &cr, fh->id, &a);
	if (ret < 0) {
		return cairn_ret(ret);
	}
	cairn_attr_to_stat(handle, &a, sbuf);
	return 0;
}

static int cairn_fstatat(struct vfs_handle_struct *handle,
			 const struct files_struct *dirfsp,
			 const struct smb_filename *smb_fname,
			 SMB_STRUCT_STAT *sbuf, int flags)
{
	cairn_creds_t cr;
	cairn_attr_t a;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_resolve_at(handle, &cr, dirfsp, smb_fname->base_name,
			       (flags & AT_SYMLINK_NOFOLLOW) == 0, &a);
	if (ret < 0) {
		return cairn_ret(ret);
	}
	cairn_attr_to_stat(handle, &a, sbuf);
	return 0;
}

static uint64_t cairn_get_alloc_size(struct vfs_handle_struct *handle,
				     files_struct *fsp,
				     const SMB_STRUCT_STAT *sbuf)
{
	uint64_t blocks, rounded;

	if (S_ISDIR(sbuf->st_ex_mode)) {
		return 0;
	}
	/*
	 * A brick keeps Cairn's own metadata in xattrs of the file it stores, so
	 * st_blocks includes the brick file system's xattr block (an empty file shows
	 * 4 KiB): report what the data occupies (its size in 4 KiB units), or less
	 * for a sparse file. A reservation beyond the end (fallocate KEEP_SIZE) does
	 * not show.
	 */
	blocks = (uint64_t)sbuf->st_ex_blocks * 512;
	rounded = ((uint64_t)sbuf->st_ex_size + 4095) & ~(uint64_t)4095;
	return MIN(blocks, rounded);
}

static int cairn_unlinkat(struct vfs_handle_struct *handle,
			  struct files_struct *dirfsp,
			  const struct smb_filename *smb_fname, int flags)
{
	cairn_creds_t cr;
	cairn_id_t parent;
	const char *leaf = NULL;
	int ret;

	if (is_named_stream(smb_fname)) {
		errno = ENOENT;
		return -1;
	}
	cairn_creds(handle, &cr);
	ret = cairn_parent_at(handle, talloc_tos(), &cr, dirfsp,
			      smb_fname->base_name, &parent, &leaf);
	if (ret == 0) {
		if (flags & AT_REMOVEDIR) {
			ret = cairn_rmdir(CAIRN_FS(handle), &cr, parent, leaf);
		} else {
			ret = cairn_unlink(CAIRN_FS(handle), &cr, parent,
					   leaf);
		}
	}
	if (ret == 0) {
		cairn_nidx_removed(handle, &parent, leaf);
	}
	return cairn_ret(ret);
}

static int cairn_setattr_fsp(struct vfs_handle_struct *handle,
			     files_struct *fsp, const cairn_attr_t *in,
			     uint32_t mask)
{
	cairn_creds_t cr;
	int ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	if (fh->is_dir) {
	}
	ret = cairn_setattr(CAIRN_FS(handle), &cr, fh->id, in, mask, NULL);
	return cairn_ret(ret);
}

static int cairn_fchmod(struct vfs_handle_struct *handle, files_struct *fsp,
			mode_t mode)
{
	cairn_attr_t in = { .mode = mode & 07777 };

	return cairn_setattr_fsp(handle, fsp, &in, CAIRN_SETATTR_MODE);
}

static uint32_t cairn_owner_mask(uid_t uid, gid_t gid)
{
	return (uid != (uid_t)-1 ? CAIRN_SETATTR_UID : 0) |
	       (gid != (gid_t)-1 ? CAIRN_SETATTR_GID : 0);
}

static int cairn_fchown(struct vfs_handle_struct *handle, files_struct *fsp,
			uid_t uid, gid_t gid)
{
	cairn_attr_t in = { .uid = uid, .gid = gid };

	return cairn_setattr_fsp(handle, fsp, &in,
				 cairn_owner_mask(uid, gid));
}

static int cairn_lchown(struct vfs_handle_struct *handle,
			const struct smb_filename *smb_fname, uid_t uid,
			gid_t gid)
{
	cairn_attr_t in = { .uid = uid, .gid = gid };
	cairn_creds_t cr;
	cairn_attr_t a;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_resolve_at(handle, &cr, NULL, smb_fname->base_name, false,
			       &a);
	if (ret == 0) {
		ret = cairn_setattr(CAIRN_FS(handle), &cr, a.id, &in,
				    cairn_owner_mask(uid, gid), NULL);
	}
	return cairn_ret(ret);
}

static int cairn_chdir(struct vfs_handle_struct *handle,
		       const struct smb_filename *smb_fname)
{
	struct cairn_conn *cc = cairn_cc(handle);
	cairn_creds_t cr;
	cairn_attr_t a;
	char *path = NULL;
	int ret;

	path = cairn_abs_path(cc, handle, NULL, smb_fname->base_name);
	if (path == NULL) {
		return -1;
	}
	if (strcmp(path, cc->cwd) == 0) {
		/*
		 * smbd changes into the share's directory before most requests: already
		 * there, nothing to check (if it was removed meanwhile, the calls made
		 * relative to it fail as they would on a kernel cwd).
		 */
		TALLOC_FREE(path);
		return 0;
	}
	cairn_creds(handle, &cr);
	ret = cairn_walk(handle, &cr, path, true, &a);
	if (ret == 0 && a.type != DT_DIR) {
		ret = -ENOTDIR;
	}
	if (ret < 0) {
		TALLOC_FREE(path);
		return cairn_ret(ret);
	}
	TALLOC_FREE(cc->cwd);
	cc->cwd = path;
	return 0;
}

static struct smb_filename *cairn_getwd(struct vfs_handle_struct *handle,
					TALLOC_CTX *ctx)
{
	return synthetic_smb_fname(ctx, cairn_cc(handle)->cwd, NULL, NULL, 0,
				   0);
}

static int cairn_fntimes(struct vfs_handle_struct *handle, files_struct *fsp,
			 struct smb_file_time *ft)
{
	cairn_attr_t in;
	uint32_t mask = 0;

	if (fsp_is_alternate_stream(fsp)) {
		errno = ENOENT;
		return -1;
	}
	/* Cairn has no birth time: Samba keeps it in user.DOSATTRIB (as vfs_default). */
	if (!is_omit_timespec(&ft->create_time)) {
		set_create_timespec_ea(fsp, ft->create_time);
	}
	ZERO_STRUCT(in);
	if (!is_omit_timespec(&ft->atime)) {
		in.atime = ft->atime;
		mask |= CAIRN_SETATTR_ATIME;
	}
	if (!is_omit_timespec(&ft->mtime)) {
		in.mtime = ft->mtime;
		mask |= CAIRN_SETATTR_MTIME;
	}
	if (mask == 0) {
		return 0;
	}
	return cairn_setattr_fsp(handle, fsp, &in, mask);
}

static int cairn_ftruncate(struct vfs_handle_struct *handle,
			   files_struct *fsp, off_t len)
{
	cairn_attr_t in = { .size = (uint64_t)len };

	return cairn_setattr_fsp(handle, fsp, &in, CAIRN_SETATTR_SIZE);
}

static int cairn_fallocate_fn(struct vfs_handle_struct *handle,
			      files_struct *fsp, uint32_t mode, off_t offset,
			      off_t len)
{
	cairn_creds_t cr;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	return cairn_ret(cairn_fallocate(CAIRN_FS(handle), &cr, fh->id, mode,
					 offset, len));
}

/* ---- byte-range locks (shared with the other gateways through the backend) ------ */

static uint64_t cairn_lock_owner(void)
{
	/* POSIX locks belong to the process, as smbd's posix locking expects. */
	return (uint64_t)getpid();
}

static bool cairn_lock_fn(struct vfs_handle_struct *handle, files_struct *fsp,
			  int op, off_t offset, off_t count, int type)
{
	cairn_creds_t cr;
	cairn_lock_t lk = {
		.type = type,
		.pid = (uint32_t)getpid(),
		.start = (uint64_t)offset,
		.len = (uint64_t)count,
		.owner = cairn_lock_owner(),
	};
	int ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, false);

	cairn_creds(handle, &cr);
	if (op == F_GETLK) {
		ret = cairn_getlock(CAIRN_FS(handle), &cr, fh->id, &lk);
		if (ret < 0) {
			cairn_ret(ret);
			return false;
		}
		/* true when someone else holds a conflicting lock */
		return lk.type != F_UNLCK && lk.owner != cairn_lock_owner();
	}
	ret = cairn_setlock(CAIRN_FS(handle), &cr, fh->id, &lk,
			    op == F_SETLKW);
	if (ret < 0) {
		cairn_ret(ret);
		return false;
	}
	return true;
}

static bool cairn_getlock_fn(struct vfs_handle_struct *handle,
			     files_struct *fsp, off_t *poffset,
			     off_t *pcount, int *ptype, pid_t *ppid)
{
	cairn_creds_t cr;
	cairn_lock_t lk = {
		.type = *ptype,
		.pid = (uint32_t)getpid(),
		.start = (uint64_t)*poffset,
		.len = (uint64_t)*pcount,
		.owner = cairn_lock_owner(),
	};
	int ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, false);

	cairn_creds(handle, &cr);
	ret = cairn_getlock(CAIRN_FS(handle), &cr, fh->id, &lk);
	if (ret < 0) {
		cairn_ret(ret);
		return false;
	}
	*ptype = lk.type;
	*poffset = (off_t)lk.start;
	*pcount = (off_t)lk.len;
	*ppid = (pid_t)lk.pid;
	return true;
}

/*
 * Share modes for the other gateways and protocols ('kernel share modes = yes'): smbd
 * asks after its own share mode check (open.c) and with 0, 0 before close. The
 * reservation lives on the file's chain head (cairn_share), owned by this fsp within
 * this process's session, so an NFSv4 OPEN's deny mode through any gateway refuses a
 * conflicting SMB open (NT_STATUS_SHARING_VIOLATION) and the other way round. An open
 * without data access (attributes, DELETE only) takes none, as Windows checks share
 * modes only against data access. Like vfs_gpfs, a named stream (its fsp is the base
 * file's) takes none.
 */
static int cairn_filesystem_sharemode(struct vfs_handle_struct *handle,
				      files_struct *fsp,
				      uint32_t share_access,
				      uint32_t access_mask)
{
	uint32_t access = 0, deny = 0;
	cairn_creds_t cr;
	int ret;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	if (fsp_is_alternate_stream(fsp) || fh->is_dir) {
		return 0;
	}
	if (access_mask & (SEC_FILE_READ_DATA | SEC_FILE_EXECUTE)) {
		access |= CAIRN_SHARE_READ;
	}
	if (access_mask & (SEC_FILE_WRITE_DATA | SEC_FILE_APPEND_DATA)) {
		access |= CAIRN_SHARE_WRITE;
	}
	if (access != 0 && !(share_access & FILE_SHARE_READ)) {
		deny |= CAIRN_SHARE_READ;
	}
	if (access != 0 && !(share_access & FILE_SHARE_WRITE)) {
		deny |= CAIRN_SHARE_WRITE;
	}
	cairn_creds(handle, &cr);
	ret = cairn_share(CAIRN_FS(handle), &cr, fh->id,
			  (uint64_t)(uintptr_t)fsp, access, deny);
	if (ret == -CAIRN_ESHAREDENIED) {
		DBG_INFO("cairn: share mode of %s refused: %s\n",
			 fsp_str_dbg(fsp), cairn_last_error_message());
	} else if (ret < 0) {
		DBG_WARNING("cairn: share mode of %s: %s\n", fsp_str_dbg(fsp),
			    cairn_last_error_message());
	}
	return cairn_ret(ret);
}

static int cairn_fcntl(struct vfs_handle_struct *handle, files_struct *fsp,
		       int cmd, va_list cmd_arg)
{
	/* smbd only toggles O_NONBLOCK, which means nothing here. */
	switch (cmd) {
	case F_GETFL:
		return 0;
	case F_SETFL:
		return 0;
	default:
		errno = EINVAL;
		return -1;
	}
}

/* ---- links ---------------------------------------------------------------------- */

static int cairn_symlinkat(struct vfs_handle_struct *handle,
			   const struct smb_filename *link_contents,
			   struct files_struct *dirfsp,
			   const struct smb_filename *new_smb_fname)
{
	cairn_creds_t cr;
	cairn_id_t parent;
	const char *leaf = NULL;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_parent_at(handle, talloc_tos(), &cr, dirfsp,
			      new_smb_fname->base_name, &parent, &leaf);
	if (ret == 0) {
		ret = cairn_symlink(CAIRN_FS(handle), &cr, parent, leaf,
				    link_contents->base_name, NULL);
	}
	if (ret == 0) {
		cairn_nidx_added(handle, &parent, leaf);
	}
	return cairn_ret(ret);
}

static int cairn_readlinkat(struct vfs_handle_struct *handle,
			    const struct files_struct *dirfsp,
			    const struct smb_filename *smb_fname,
			    char *buf, size_t bufsiz)
{
	cairn_creds_t cr;
	cairn_attr_t a;
	ssize_t n;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_resolve_at(handle, &cr, dirfsp, smb_fname->base_name,
			       false, &a);
	if (ret < 0) {
		return cairn_ret(ret);
	}
	if (a.type != DT_LNK) {
		return cairn_ret(-EINVAL);
	}
	n = cairn_readlink(CAIRN_FS(handle), &cr, a.id, buf, bufsiz);
	if (n == -ERANGE) {
		/* readlink(2) truncates silently */
		char *tmp = talloc_array(talloc_tos(), char, PATH_MAX);
		n = cairn_readlink(CAIRN_FS(handle), &cr, a.id, tmp, PATH_MAX);
		if (n >= 0) {
			n = MIN((size_t)n, bufsiz);
			memcpy(buf, tmp, n);
		}
		TALLOC_FREE(tmp);
	}
	return (int)cairn_sret(n);
}

static int cairn_linkat(struct vfs_handle_struct *handle,
			files_struct *srcfsp,
			const struct smb_filename *old_smb_fname,
			files_struct *dstfsp,
			const struct smb_filename *new_smb_fname, int flags)
{
	cairn_creds_t cr;
	cairn_attr_t a;
	cairn_id_t parent;
	const char *leaf = NULL;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_resolve_at(handle, &cr, srcfsp, old_smb_fname->base_name,
			       (flags & AT_SYMLINK_FOLLOW) != 0, &a);
	if (ret == 0) {
		ret = cairn_parent_at(handle, talloc_tos(), &cr, dstfsp,
				      new_smb_fname->base_name, &parent,
				      &leaf);
	}
	if (ret == 0) {
		ret = cairn_link(CAIRN_FS(handle), &cr, a.id, parent, leaf,
				 NULL);
	}
	if (ret == 0) {
		cairn_nidx_added(handle, &parent, leaf);
	}
	return cairn_ret(ret);
}

static int cairn_mknodat(struct vfs_handle_struct *handle,
			 files_struct *dirfsp,
			 const struct smb_filename *smb_fname, mode_t mode,
			 SMB_DEV_T dev)
{
	cairn_creds_t cr;
	cairn_id_t parent;
	const char *leaf = NULL;
	int ret;

	cairn_creds(handle, &cr);
	ret = cairn_parent_at(handle, talloc_tos(), &cr, dirfsp,
			      smb_fname->base_name, &parent, &leaf);
	if (ret == 0) {
		ret = cairn_mknod(CAIRN_FS(handle), &cr, parent, leaf, mode,
				  dev, NULL);
	}
	if (ret == 0) {
		cairn_nidx_added(handle, &parent, leaf);
	}
	return cairn_ret(ret);
}

static struct smb_filename *cairn_realpath(struct vfs_handle_struct *handle,
					   TALLOC_CTX *ctx,
					   const struct smb_filename *smb_fname)
{
	struct smb_filename *result = NULL;
	cairn_creds_t cr;
	cairn_attr_t a;
	char *path = NULL;
	int ret;

	path = cairn_abs_path(talloc_tos(), handle, NULL,
			      smb_fname->base_name);
	if (path == NULL) {
		return NULL;
	}
	cairn_creds(handle, &cr);
	/* Existence check; Cairn paths are canonical once normalised. */
	ret = cairn_walk(handle, &cr, path, true, &a);
	if (ret < 0) {
		TALLOC_FREE(path);
		cairn_ret(ret);
		return NULL;
	}
	result = synthetic_smb_fname(ctx, path, NULL, NULL, 0, 0);
	TALLOC_FREE(path);
	return result;
}

/*
 * Case-insensitive lookup, answered from the directory's name index (see "case-insensitive
 * name index" above): one listing per directory, not one per call.
 */
static NTSTATUS cairn_get_real_filename_at(struct vfs_handle_struct *handle,
					   struct files_struct *dirfsp,
					   const char *name,
					   TALLOC_CTX *mem_ctx,
					   char **found_name)
{
	struct cairn_mount *m = cairn_cc(handle)->m;
	struct cairn_fh *fh = cairn_fetch_fh(handle, dirfsp);
	struct cairn_nidx *x = NULL;
	const char *found = NULL;
	cairn_creds_t cr;
	cairn_attr_t da;
	int ret = 0;

	cairn_creds(handle, &cr);
	if (fh != NULL) {
		da.id = fh->id;
	} else {
		/* the cwd fsp (AT_FDCWD) carries no Cairn handle: resolve it */
		ret = cairn_resolve_at(handle, &cr, NULL,
				       dirfsp->fsp_name->base_name, true, &da);
		if (ret < 0) {
			return map_nt_error_from_unix(-ret);
		}
	}
	x = cairn_nidx_find(m, &da.id);
	if (x == NULL) {
		x = cairn_nidx_build(handle, &cr, &da.id, &ret);
		if (x == NULL) {
			return map_nt_error_from_unix(-ret);
		}
	}
	found = cairn_nidx_lookup(x, name);
	if (found != NULL) {
		*found_name = talloc_strdup(mem_ctx, found);
	}
	if (x->too_big) {
		/* not kept (see cairn_nidx_build) */
		TALLOC_FREE(x);
	}
	if (found == NULL) {
		return NT_STATUS_OBJECT_NAME_NOT_FOUND;
	}
	return *found_name == NULL ? NT_STATUS_NO_MEMORY : NT_STATUS_OK;
}

static const char *cairn_connectpath(struct vfs_handle_struct *handle,
				     const struct smb_filename *smb_fname)
{
	return handle->conn->connectpath;
}

/* ---- xattrs --------------------------------------------------------------------- */

static ssize_t cairn_fgetxattr(struct vfs_handle_struct *handle,
			       files_struct *fsp, const char *name,
			       void *value, size_t size)
{
	cairn_creds_t cr;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	return cairn_sret(cairn_getxattr(CAIRN_FS(handle), &cr, fh->id, name,
					 value, size));
}

static ssize_t cairn_flistxattr(struct vfs_handle_struct *handle,
				files_struct *fsp, char *list, size_t size)
{
	cairn_creds_t cr;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	return cairn_sret(cairn_listxattr(CAIRN_FS(handle), &cr, fh->id, list,
					  size));
}

static int cairn_fremovexattr(struct vfs_handle_struct *handle,
			      files_struct *fsp, const char *name)
{
	cairn_creds_t cr;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	cairn_creds(handle, &cr);
	return cairn_ret(cairn_removexattr(CAIRN_FS(handle), &cr, fh->id, name));
}

static int cairn_fsetxattr(struct vfs_handle_struct *handle,
			   files_struct *fsp, const char *name,
			   const void *value, size_t size, int flags)
{
	cairn_creds_t cr;
	uint32_t cf = 0;
	CAIRN_FH_OR_EBADF(fh, handle, fsp, -1);

	if (flags & XATTR_CREATE) {
		cf |= CAIRN_XATTR_CREATE;
	}
	if (flags & XATTR_REPLACE) {
		cf |= CAIRN_XATTR_REPLACE;
	}
	cairn_creds(handle, &cr);
	return cairn_ret(cairn_setxattr(CAIRN_FS(handle), &cr, fh->id, name,
					value, size, cf));
}

static bool cairn_aio_force(struct vfs_handle_struct *handle,
			    files_struct *fsp)
{
	return false;
}

/* ---- POSIX ACLs: not in Cairn; Windows ACLs come from stacked acl_xattr --------- */

static SMB_ACL_T cairn_sys_acl_get_fd(struct vfs_handle_struct *handle,
				      files_struct *fsp, SMB_ACL_TYPE_T type,
				      TALLOC_CTX *mem_ctx)
{
	errno = ENOTSUP;
	return NULL;
}

static int cairn_sys_acl_blob_get_fd(struct vfs_handle_struct *handle,
				     files_struct *fsp, TALLOC_CTX *mem_ctx,
				     char **blob_description, DATA_BLOB *blob)
{
	errno = ENOTSUP;
	return -1;
}

static int cairn_sys_acl_set_fd(struct vfs_handle_struct *handle,
				files_struct *fsp, SMB_ACL_TYPE_T type,
				SMB_ACL_T theacl)
{
	errno = ENOTSUP;
	return -1;
}

static int cairn_sys_acl_delete_def_fd(struct vfs_handle_struct *handle,
				       files_struct *fsp)
{
	errno = ENOTSUP;
	return -1;
}

static struct vfs_fn_pointers cairn_fns = {
	/* Disk operations */
	.connect_fn = cairn_connect,
	.disconnect_fn = cairn_disconnect,
	.disk_free_fn = cairn_disk_free,
	.get_quota_fn = vfs_not_implemented_get_quota,
	.set_quota_fn = vfs_not_implemented_set_quota,
	.statvfs_fn = cairn_statvfs,
	.fs_capabilities_fn = cairn_fs_capabilities,
	.get_shadow_copy_data_fn = vfs_not_implemented_get_shadow_copy_data,
	.get_dfs_referrals_fn = vfs_not_implemented_get_dfs_referrals,
	.create_dfs_pathat_fn = vfs_not_implemented_create_dfs_pathat,
	.read_dfs_pathat_fn = vfs_not_implemented_read_dfs_pathat,

	/* Directory operations */
	.fdopendir_fn = cairn_fdopendir,
	.readdir_fn = cairn_readdir_fn,
	.seekdir_fn = cairn_seekdir,
	.telldir_fn = cairn_telldir,
	.rewind_dir_fn = cairn_rewinddir,
	.mkdirat_fn = cairn_mkdirat,
	.closedir_fn = cairn_closedir,

	/* File operations */
	.openat_fn = cairn_openat,
	.close_fn = cairn_close,
	.pread_fn = cairn_pread,
	.pread_send_fn = cairn_pread_send,
	.pread_recv_fn = cairn_job_recv,
	.pwrite_fn = cairn_pwrite,
	.pwrite_send_fn = cairn_pwrite_send,
	.pwrite_recv_fn = cairn_job_recv,
	.lseek_fn = cairn_lseek,
	.sendfile_fn = vfs_not_implemented_sendfile,
	.recvfile_fn = vfs_not_implemented_recvfile,
	.renameat_fn = cairn_renameat,
	.fsync_send_fn = cairn_fsync_send,
	.fsync_recv_fn = cairn_fsync_recv,
	.stat_fn = cairn_stat,
	.fstat_fn = cairn_fstat,
	.fstatat_fn = cairn_fstatat,
	.lstat_fn = cairn_lstat,
	.get_alloc_size_fn = cairn_get_alloc_size,
	.unlinkat_fn = cairn_unlinkat,
	.fchmod_fn = cairn_fchmod,
	.fchown_fn = cairn_fchown,
	.lchown_fn = cairn_lchown,
	.chdir_fn = cairn_chdir,
	.getwd_fn = cairn_getwd,
	.fntimes_fn = cairn_fntimes,
	.ftruncate_fn = cairn_ftruncate,
	.fallocate_fn = cairn_fallocate_fn,
	.lock_fn = cairn_lock_fn,
	.filesystem_sharemode_fn = cairn_filesystem_sharemode,
	.fcntl_fn = cairn_fcntl,
	.linux_setlease_fn = vfs_not_implemented_linux_setlease,
	.getlock_fn = cairn_getlock_fn,
	.symlinkat_fn = cairn_symlinkat,
	.readlinkat_fn = cairn_readlinkat,
	.linkat_fn = cairn_linkat,
	.mknodat_fn = cairn_mknodat,
	.realpath_fn = cairn_realpath,
	.fchflags_fn = vfs_not_implemented_fchflags,
	.get_real_filename_at_fn = cairn_get_real_filename_at,
	.connectpath_fn = cairn_connectpath,
	.offload_read_send_fn = cairn_offload_read_send,
	.offload_read_recv_fn = cairn_offload_read_recv,
	.offload_write_send_fn = cairn_offload_write_send,
	.offload_write_recv_fn = cairn_offload_write_recv,
	.fget_compression_fn = vfs_not_implemented_fget_compression,
	.set_compression_fn = vfs_not_implemented_set_compression,
	.snap_check_path_fn = vfs_not_implemented_snap_check_path,
	.snap_create_fn = vfs_not_implemented_snap_create,
	.snap_delete_fn = vfs_not_implemented_snap_delete,

	/* POSIX ACLs (none in Cairn) */
	.sys_acl_get_fd_fn = cairn_sys_acl_get_fd,
	.sys_acl_blob_get_fd_fn = cairn_sys_acl_blob_get_fd,
	.sys_acl_set_fd_fn = cairn_sys_acl_set_fd,
	.sys_acl_delete_def_fd_fn = cairn_sys_acl_delete_def_fd,

	/* EA operations */
	.getxattrat_send_fn = vfs_not_implemented_getxattrat_send,
	.getxattrat_recv_fn = vfs_not_implemented_getxattrat_recv,
	.fgetxattr_fn = cairn_fgetxattr,
	.flistxattr_fn = cairn_flistxattr,
	.fremovexattr_fn = cairn_fremovexattr,
	.fsetxattr_fn = cairn_fsetxattr,

	.aio_force_fn = cairn_aio_force,
};

/*
 * Built out of tree: smbd's module loader calls samba_init_module. The module registers as
 * "cairn" and, when loaded under another file name (vfs/cairn_<tag>.so, a link the test
 * suites make so that several source trees on one machine each load their own build),
 * under that name too: smbd looks the backend up by the name in 'vfs objects'. Options
 * stay "cairn:..." either way.
 */
NTSTATUS samba_init_module(TALLOC_CTX *ctx);
NTSTATUS samba_init_module(TALLOC_CTX *ctx)
{
	NTSTATUS status;
	Dl_info info;

	status = smb_register_vfs(SMB_VFS_INTERFACE_VERSION, CAIRN_MODULE,
				  &cairn_fns);
	if (!NT_STATUS_IS_OK(status)) {
		return status;
	}
	if (dladdr((void *)samba_init_module, &info) != 0 &&
	    info.dli_fname != NULL) {
		const char *base = strrchr(info.dli_fname, '/');
		char *name = NULL;

		base = (base != NULL) ? base + 1 : info.dli_fname;
		name = talloc_strndup(ctx, base, strcspn(base, "."));
		if (name != NULL && name[0] != '\0' &&
		    strcmp(name, CAIRN_MODULE) != 0) {
			status = smb_register_vfs(SMB_VFS_INTERFACE_VERSION,
						  name, &cairn_fns);
		}
	}
	return status;
}
