/*
 * FSAL_CAIRN: upcalls. When a brick recalls a lease (another client changed an object),
 * libcairn calls cairn_invalidate_upcall on one of its threads; we queue an mdcache
 * invalidation on Ganesha's general fridge so the next access refetches the
 * attributes, data and (for directories) entries from the volume.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 */

#include <string.h>
#include "fsal.h"
#include "fsal_up.h"
#include "fridgethr.h"
#include "internal.h"

struct invalidate_job {
	const struct fsal_up_vector *up_ops;
	uint32_t flags;
	struct cairn_handle_key key;
};

/* Runs on a Ganesha fridge thread (Debian's libganesha_nfsd does not export
 * up_async_invalidate, so this is its equivalent). */
static void invalidate_job_run(struct fridgethr_context *ctx)
{
	struct invalidate_job *job = ctx->arg;
	struct gsh_buffdesc desc = { .addr = &job->key, .len = sizeof(job->key) };
	fsal_status_t status;

	status = job->up_ops->invalidate(job->up_ops, &desc, job->flags);
	if (FSAL_IS_ERROR(status) && status.major != ERR_FSAL_NOENT)
		LogDebug(COMPONENT_FSAL_UP, "CAIRN: invalidate failed: %s",
			 msg_fsal_err(status.major));
	gsh_free(job);
}

static void cairn_invalidate_upcall(cairn_id_t id, uint32_t flags, void *arg)
{
	struct cairn_export *export = arg;
	struct invalidate_job *job;
	uint32_t up_flags = FSAL_UP_INVALIDATE_ATTRS |
			    FSAL_UP_INVALIDATE_CONTENT;
	int rc;
	if (flags & CAIRN_INVALIDATE_ENTRIES)
		up_flags |= FSAL_UP_INVALIDATE_DIR_POPULATED |
			    FSAL_UP_INVALIDATE_DIR_CHUNKS;

	/* libcairn threads are not Ganesha threads: never run mdcache here. */
	job = gsh_calloc(1, sizeof(*job));
	job->up_ops = export->up_ops;
	job->flags = up_flags;
	memcpy(job->key.wire.volume, export->volume_id, 16);
	job->key.wire.inode = id;
	job->key.export_id = export->export.export_id;
	rc = fridgethr_submit(general_fridge, invalidate_job_run, job);
	if (rc != 0) {
		LogWarn(COMPONENT_FSAL_UP,
			"CAIRN: cannot queue invalidation for volume %s: %d",
			export->volume, rc);
		gsh_free(job);
	}
}

struct recall_job {
	const struct fsal_up_vector *up_ops;
	struct cairn_handle_key key;
};

/* Runs on a Ganesha fridge thread: Ganesha recalls every delegation of the file (a
 * CB_RECALL to each holder); the last DELEGRETURN, or Ganesha's revocation after its
 * lease time, gives the backend delegation back (lease_op2), which lets the access that
 * recalled it go on. */
static void recall_job_run(struct fridgethr_context *ctx)
{
	struct recall_job *job = ctx->arg;
	struct gsh_buffdesc desc = { .addr = &job->key, .len = sizeof(job->key) };
	state_status_t status;

	status = job->up_ops->delegrecall(job->up_ops, &desc);
	/* Not found: Ganesha holds no delegation of the file; the brick revokes the
	 * backend's 150 s after its recall (cairnd/src/delegs.rs REVOKE_AFTER). The
	 * export's mount may be gone by now, so it is not given back from here. */
	if (status != STATE_SUCCESS)
		LogWarn(COMPONENT_FSAL_UP, "CAIRN: delegrecall: %s",
			state_err_str(status));
	gsh_free(job);
}

/* The backend recalls this export's delegation of `id` (another client needs the file). */
static void cairn_recall_upcall(cairn_id_t id, void *arg)
{
	struct cairn_export *export = arg;
	struct recall_job *job;
	int rc;

	job = gsh_calloc(1, sizeof(*job));
	job->up_ops = export->up_ops;
	memcpy(job->key.wire.volume, export->volume_id, 16);
	job->key.wire.inode = id;
	job->key.export_id = export->export.export_id;
	rc = fridgethr_submit(general_fridge, recall_job_run, job);
	if (rc != 0) {
		LogWarn(COMPONENT_FSAL_UP,
			"CAIRN: cannot queue a delegation recall for volume %s: %d; giving it back",
			export->volume, rc);
		gsh_free(job);
		(void) cairn_deleg_return(export->fs, id);
	}
}

int cairn_up_register(struct cairn_export *export)
{
	int rc = cairn_register_invalidate(export->fs, cairn_invalidate_upcall,
					   export);

	if (rc == 0)
		rc = cairn_register_recall(export->fs, cairn_recall_upcall, export);
	return rc;
}

void cairn_up_unregister(struct cairn_export *export)
{
	(void) cairn_register_recall(export->fs, NULL, NULL);
	(void) cairn_register_invalidate(export->fs, NULL, NULL);
}
