/*
 * FSAL_CAIRN: errno conversion, credentials, attribute conversion, handle construction.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 */

#include <string.h>
#include <sys/stat.h>
#include "internal.h"

/* The one place libcairn results become FSAL statuses with a log line: ENOENT and
 * friends are routine for NFS and logged only at full debug. */
fsal_status_t cairn_log_error(const char *call, long rc)
{
	int err = rc < 0 ? (int)-rc : (int)rc;

	if (err == ENOENT || err == EEXIST || err == ENOTEMPTY ||
	    err == EAGAIN || err == ENODATA || err == EACCES ||
	    err == EPERM)
		LogFullDebug(COMPONENT_FSAL, "%s: %s (errno %d)", call,
			     cairn_last_error_message(), err);
	else
		LogDebug(COMPONENT_FSAL, "%s: %s (errno %d)", call,
			 cairn_last_error_message(), err);
	return cairn2fsal_error(rc);
}

/* The NFS caller's credentials (already squashed by Ganesha per the export's rules). */
const cairn_creds_t *cairn_creds(cairn_creds_t *buf)
{
	buf->uid = op_ctx->creds.caller_uid;
	buf->gid = op_ctx->creds.caller_gid;
	buf->ngroups = op_ctx->creds.caller_glen;
	buf->groups = op_ctx->creds.caller_garray;
	return buf;
}

static void cairn_fsid(const struct cairn_export *export, fsal_fsid_t *fsid)
{
	uint64_t hi, lo;

	memcpy(&hi, export->volume_id, 8);
	memcpy(&lo, export->volume_id + 8, 8);
	fsid->major = hi;
	fsid->minor = lo;
}

/* How long mdcache may trust attributes (and cached entries) from us: the export's
 * Attr_Expiration_Time capped to CAIRN_ATTR_EXPIRE (0 = never trust, as configured). */
int32_t cairn_attr_expire(void)
{
	int32_t e = op_ctx != NULL ? op_ctx->export_perms.expire_time_attr
				   : CAIRN_ATTR_EXPIRE;

	if (e == 0 || (e > 0 && e < CAIRN_ATTR_EXPIRE))
		return e;
	return CAIRN_ATTR_EXPIRE;
}

void cairn2fsal_attributes(const struct cairn_export *export,
			   const cairn_attr_t *ca,
			   struct fsal_attrlist *attrs)
{
	attrs->valid_mask |= ATTRS_POSIX;
	attrs->supported = CAIRN_SUPPORTED_ATTRS;
	attrs->type = posix2fsal_type(ca->mode);
	attrs->rawdev = posix2fsal_devt(ca->rdev);
	cairn_fsid(export, &attrs->fsid);
	attrs->fileid = ca->ino;
	attrs->mode = unix2fsal_mode(ca->mode);
	attrs->owner = ca->uid;
	attrs->group = ca->gid;
	attrs->filesize = ca->size;
	attrs->numlinks = ca->nlink;
	attrs->spaceused = ca->blocks * 512;
	attrs->atime = ca->atime;
	attrs->mtime = ca->mtime;
	attrs->ctime = ca->ctime;
	attrs->change = ca->change;
	/* ATTRS_POSIX includes ATTR_CHANGE */
	attrs->expire_time_attr = cairn_attr_expire();
}

struct cairn_handle *cairn_construct_handle(struct cairn_export *export,
					    const cairn_attr_t *ca)
{
	struct cairn_handle *obj = gsh_calloc(1, sizeof(*obj));

	memcpy(obj->key.wire.volume, export->volume_id, 16);
	obj->key.wire.inode = ca->id;
	obj->key.export_id = export->export.export_id;
	obj->export = export;
	obj->fd.openflags = FSAL_O_CLOSED;

	fsal_obj_handle_init(&obj->handle, &export->export,
			     posix2fsal_type(ca->mode));
	obj->handle.obj_ops = &CairnFSM.handle_ops;
	cairn_fsid(export, &obj->handle.fsid);
	obj->handle.fileid = ca->ino;
	return obj;
}

void cairn_deconstruct_handle(struct cairn_handle *obj)
{
	fsal_obj_handle_fini(&obj->handle);
	gsh_free(obj);
}
