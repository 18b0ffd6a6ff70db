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

int cairn_up_register(struct cairn_export *export)
{
	return cairn_register_invalidate(export->fs, cairn_invalidate_upcall,
					 export);
}

void cairn_up_unregister(struct cairn_export *export)
{
	(void) cairn_register_invalidate(export->fs, NULL, NULL);
}
