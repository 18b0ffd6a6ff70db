/*
 * FSAL_CAIRN as a pNFS MDS: recalling layouts when the volume map or a DS changes.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * A layout names the DS of a file's chain head (FILES; a Flexible Files RW layout too) or
 * the DSs of its set's up bricks in chain order (a Flexible Files READ layout), all read
 * from the volume map (cairn_layout). When a new map changes that (a brick down or back,
 * a heal that finished, a brick replaced, a rebalance), a client holding the layout
 * would go on sending its I/O to the old head's DS (one more hop through libcairn) or to
 * a dead DS. So the export keeps, for each file whose layout it handed out and that is
 * not returned yet, what the layout was built from (a digest of the set, its chain order
 * and which bricks were up, and their nodes), and libcairn's map-change upcall
 * (cairn_register_map_change) makes it compare each with the new map: a file whose
 * layout would differ has its layouts recalled (Ganesha's up-call layoutrecall, a
 * CB_LAYOUTRECALL of the whole file to each client that holds one, clora_changed set);
 * the client returns them and asks again, and gets the new layout.
 *
 * The digest also covers whether the DS of each brick answers (dservers.c): a DS that
 * dies or comes back while its node's map entry stays the same queues the same check.
 *
 * The comparison runs on a Ganesha fridge thread (libcairn threads are not Ganesha
 * threads, and layoutrecall must not run inside layoutget). See docs/nfs.md "Recalls".
 */

#include <string.h>
#include <unistd.h>
#include "fsal.h"
#include "fsal_up.h"
#include "fridgethr.h"
#include "internal.h"

struct cairn_granted {
	struct glist_head link;
	cairn_id_t inode;
	uint64_t digest;	/* layout_digest of the map the layout came from */
	uint32_t set;
	uint32_t segments;	/* segments granted and not returned (all clients) */
};

struct scan_job {
	struct cairn_export *export;
	uint64_t epoch;
};

/* What a layout of the file is built from: its set, the chain order, which bricks are
 * up and on which node, and which of their data servers answer (dservers.c). Two maps
 * and DS states with the same digest give the same layout. */
uint64_t cairn_layout_digest(struct cairn_export *export,
			     const cairn_layout_t *lo)
{
	uint64_t h = 1469598103934665603ULL;	/* FNV-1a */
	uint32_t i;
	const char *c;

#define MIX(v) do { h ^= (uint64_t)(v); h *= 1099511628211ULL; } while (0)
	MIX(lo->set);
	MIX(lo->rotation);
	MIX(lo->nbricks);
	for (i = 0; i < lo->nbricks && i < CAIRN_LAYOUT_MAX_BRICKS; i++) {
		MIX(lo->bricks[i].index);
		MIX(lo->bricks[i].state == CAIRN_BRICK_UP);
		MIX(cairn_ds_brick_up(export, &lo->bricks[i]));
		for (c = lo->bricks[i].node; *c != '\0'; c++)
			MIX((unsigned char)*c);
	}
#undef MIX
	return h;
}

static struct cairn_granted *find_locked(struct cairn_export *export,
					 cairn_id_t inode)
{
	struct glist_head *g;

	glist_for_each(g, &export->lo_granted) {
		struct cairn_granted *e =
			glist_entry(g, struct cairn_granted, link);

		if (memcmp(&e->inode, &inode, sizeof(inode)) == 0)
			return e;
	}
	return NULL;
}

static void recall_one(struct cairn_export *export, cairn_id_t inode,
		       uint32_t set, uint64_t epoch)
{
	struct cairn_handle_key key;
	struct gsh_buffdesc desc = { .addr = &key, .len = sizeof(key) };
	struct pnfs_segment all = { .io_mode = LAYOUTIOMODE4_ANY,
				    .offset = 0,
				    .length = NFS4_UINT64_MAX };
	state_status_t st;

	memset(&key, 0, sizeof(key));
	memcpy(key.wire.volume, export->volume_id, 16);
	key.wire.inode = inode;
	key.export_id = export->export.export_id;
	st = export->up_ops->layoutrecall(export->up_ops, &desc,
					  export->layout_type, true, &all,
					  NULL, NULL);
	if (st == STATE_SUCCESS) {
		LogEvent(COMPONENT_PNFS,
			"CAIRN: volume %s: recalling the layouts of a file of set %u (map epoch %" PRIu64
			": its chain or mirrors changed)",
			export->volume, set, epoch);
		return;
	}
	/* nobody holds a layout of it any more (returned, or its state expired) */
	LogDebug(COMPONENT_PNFS, "CAIRN: volume %s: layoutrecall: %s",
		 export->volume, state_err_str(st));
	if (st == STATE_NOT_FOUND) {
		struct cairn_granted *e;

		PTHREAD_MUTEX_lock(&export->lo_mutex);
		e = find_locked(export, inode);
		if (e != NULL) {
			glist_del(&e->link);
			gsh_free(e);
		}
		PTHREAD_MUTEX_unlock(&export->lo_mutex);
	}
}

/* Compare every granted layout with the map the mount holds now (and the DS states) and
 * recall those that changed. On a Ganesha thread (a fridge's or dservers.c's). */
static void scan(struct cairn_export *export, uint64_t epoch)
{
	struct glist_head *g;
	struct { cairn_id_t inode; uint32_t set; } *recall = NULL;
	size_t n = 0, cap = 0, i;

	PTHREAD_MUTEX_lock(&export->lo_mutex);
	if (epoch > export->lo_epoch)
		export->lo_epoch = epoch;
	glist_for_each(g, &export->lo_granted) {
		struct cairn_granted *e =
			glist_entry(g, struct cairn_granted, link);
		cairn_layout_t lo;
		uint64_t d;

		if (cairn_layout(export->fs, e->inode, &lo) < 0)
			continue;
		d = cairn_layout_digest(export, &lo);
		if (d == e->digest)
			continue;
		e->digest = d;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			recall = gsh_realloc(recall, cap * sizeof(*recall));
		}
		recall[n].inode = e->inode;
		recall[n].set = e->set;
		n++;
	}
	PTHREAD_MUTEX_unlock(&export->lo_mutex);

	for (i = 0; i < n; i++)
		recall_one(export, recall[i].inode, recall[i].set, epoch);
	gsh_free(recall);
}

static void scan_job_run(struct fridgethr_context *ctx)
{
	struct scan_job *job = ctx->arg;

	scan(job->export, job->epoch);
	(void) atomic_dec_uint32_t(&job->export->lo_jobs);
	gsh_free(job);
}

/* Queue a check of every granted layout against the map the mount holds now. The export
 * stays until the checks it counts in lo_jobs ran (cairn_layouts_unregister waits). */
static void queue_scan(struct cairn_export *export, uint64_t epoch)
{
	struct scan_job *job;
	int rc;

	(void) atomic_inc_uint32_t(&export->lo_jobs);
	if (atomic_fetch_uint32_t(&export->lo_closing) != 0) {
		(void) atomic_dec_uint32_t(&export->lo_jobs);
		return;
	}
	job = gsh_calloc(1, sizeof(*job));
	job->export = export;
	job->epoch = epoch;
	rc = fridgethr_submit(general_fridge, scan_job_run, job);
	if (rc != 0) {
		LogWarn(COMPONENT_PNFS,
			"CAIRN: volume %s: cannot queue the layout check of map epoch %" PRIu64
			": %d; layouts are not recalled",
			export->volume, epoch, rc);
		gsh_free(job);
		(void) atomic_dec_uint32_t(&export->lo_jobs);
	}
}

/* A data server went down or came back: check every granted layout, on the calling
 * thread (dservers.c's probe thread, named for Ganesha's log; the export waits for it
 * to end before it goes away, and it holds no lock here). */
void cairn_layouts_recheck(struct cairn_export *export)
{
	uint64_t epoch;

	PTHREAD_MUTEX_lock(&export->lo_mutex);
	epoch = export->lo_epoch;
	PTHREAD_MUTEX_unlock(&export->lo_mutex);
	scan(export, epoch);
}

/* libcairn's map-change upcall (a library thread; cairn_unmount waits for it). */
static void map_change_upcall(uint64_t epoch, void *arg)
{
	queue_scan(arg, epoch);
}

/* DS_GEN: cairn_ds_gen before the layout was built; a DS that changed state since
 * may be named wrongly in it, so it is recorded to be recalled at the next check. */
void cairn_layouts_granted(struct cairn_export *export, cairn_id_t inode,
			   const cairn_layout_t *lo, uint32_t ds_gen)
{
	struct cairn_granted *e;
	uint64_t digest = cairn_layout_digest(export, lo);
	bool stale, ds_changed = cairn_ds_gen(export) != ds_gen;

	PTHREAD_MUTEX_lock(&export->lo_mutex);
	e = find_locked(export, inode);
	if (e == NULL) {
		e = gsh_calloc(1, sizeof(*e));
		e->inode = inode;
		glist_add_tail(&export->lo_granted, &e->link);
	}
	e->digest = ds_changed ? 0 : digest;
	e->set = lo->set;
	e->segments++;
	/* a check of a newer map or DS state ran before this layout was recorded:
	 * check again */
	stale = lo->epoch < export->lo_epoch || ds_changed;
	PTHREAD_MUTEX_unlock(&export->lo_mutex);
	if (stale)
		queue_scan(export, export->lo_epoch);
}

void cairn_layouts_returned(struct cairn_export *export, cairn_id_t inode)
{
	struct cairn_granted *e;

	PTHREAD_MUTEX_lock(&export->lo_mutex);
	e = find_locked(export, inode);
	if (e != NULL && --e->segments == 0) {
		glist_del(&e->link);
		gsh_free(e);
	}
	PTHREAD_MUTEX_unlock(&export->lo_mutex);
}

int cairn_layouts_register(struct cairn_export *export)
{
	PTHREAD_MUTEX_init(&export->lo_mutex, NULL);
	glist_init(&export->lo_granted);
	export->lo_ready = true;
	if (!export->pnfs)
		return 0;
	(void) cairn_ds_watch_start(export);
	return cairn_register_map_change(export->fs, map_change_upcall, export);
}

void cairn_layouts_unregister(struct cairn_export *export)
{
	struct glist_head *g, *n;

	if (!export->lo_ready)
		return;
	cairn_ds_watch_stop(export);
	atomic_store_uint32_t(&export->lo_closing, 1);
	if (export->pnfs)
		(void) cairn_register_map_change(export->fs, NULL, NULL);
	/* checks already queued hold the export */
	while (atomic_fetch_uint32_t(&export->lo_jobs) != 0)
		usleep(10000);
	PTHREAD_MUTEX_lock(&export->lo_mutex);
	glist_for_each_safe(g, n, &export->lo_granted) {
		glist_del(g);
		gsh_free(glist_entry(g, struct cairn_granted, link));
	}
	PTHREAD_MUTEX_unlock(&export->lo_mutex);
	PTHREAD_MUTEX_destroy(&export->lo_mutex);
	export->lo_ready = false;
}
