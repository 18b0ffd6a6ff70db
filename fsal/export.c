/*
 * FSAL_CAIRN: export operations (path and handle lookup, statfs, state allocation).
 * SPDX-License-Identifier: LGPL-3.0-or-later
 */

#include <string.h>
#include "fsal.h"
#include "FSAL/fsal_commonlib.h"
#include "FSAL/fsal_config.h"
#include "nfs_exports.h"
#include "export_mgr.h"
#include "internal.h"

static void release(struct fsal_export *export_pub)
{
	struct cairn_export *export =
		container_of(export_pub, struct cairn_export, export);
	int rc;

	cairn_up_unregister(export);
	cairn_layouts_unregister(export);
	cairn_deconstruct_handle(export->root);
	export->root = NULL;
	fsal_detach_export(export->export.fsal, &export->export.exports);
	free_export_ops(&export->export);
	rc = cairn_unmount(export->fs);
	if (rc < 0)
		LogWarn(COMPONENT_FSAL,
			"CAIRN: unmount of volume %s: deferred write error %d",
			export->volume, -rc);
	gsh_free(export->volume);
	gsh_free(export->servers);
	gsh_free(export->credentials);
	gsh_free(export->ds_addrs);
	gsh_free(export);
}

static fsal_status_t lookup_path(struct fsal_export *export_pub,
				 const char *path,
				 struct fsal_obj_handle **pub_handle,
				 struct fsal_attrlist *attrs_out)
{
	struct cairn_export *export =
		container_of(export_pub, struct cairn_export, export);
	const char *realpath = path;
	const char *fullpath = CTX_FULLPATH(op_ctx);
	cairn_creds_t cb;
	cairn_attr_t ca;
	int rc;

	*pub_handle = NULL;
	if (*path != '/') {
		realpath = strchr(path, ':');
		if (realpath == NULL || *(++realpath) != '/')
			return fsalstat(ERR_FSAL_INVAL, 0);
	}
	if (strstr(realpath, fullpath) != realpath)
		return fsalstat(ERR_FSAL_SERVERFAULT, 0);

	/* Ganesha's Path is a path inside the volume: look the whole of it up. */
	if (strcmp(realpath, fullpath) == 0 ||
	    (strcmp(fullpath, "/") == 0 && strcmp(realpath, "/") == 0)) {
		*pub_handle = &export->root->handle;
		if (attrs_out != NULL)
			return (*pub_handle)->obj_ops->getattrs(*pub_handle,
								attrs_out);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}

	rc = cairn_lookup_path(export->fs, cairn_creds(&cb), realpath, &ca);
	if (rc < 0)
		return cairn_log_error("lookup_path", rc);
	*pub_handle = &cairn_construct_handle(export, &ca)->handle;
	if (attrs_out != NULL)
		cairn2fsal_attributes(export, &ca, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* The wire handle is already host order (raw bytes); only its length is checked. */
static fsal_status_t wire_to_host(struct fsal_export *exp_hdl,
				  fsal_digesttype_t in_type,
				  struct gsh_buffdesc *fh_desc,
				  int flags)
{
	switch (in_type) {
	case FSAL_DIGEST_NFSV3:
	case FSAL_DIGEST_NFSV4:
		if (fh_desc->len < sizeof(struct cairn_wire_handle)) {
			LogMajor(COMPONENT_FSAL,
				 "CAIRN: handle too short: %zu, need %zu",
				 fh_desc->len,
				 sizeof(struct cairn_wire_handle));
			return fsalstat(ERR_FSAL_BADHANDLE, 0);
		}
		fh_desc->len = sizeof(struct cairn_wire_handle);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	default:
		return fsalstat(ERR_FSAL_SERVERFAULT, 0);
	}
}

/* Append the export id to a host handle to get the cache key (see internal.h). The
 * buffer Ganesha passes is a full NFSv4 handle buffer, large enough for the key. */
static fsal_status_t host_to_key(struct fsal_export *exp_hdl,
				 struct gsh_buffdesc *fh_desc)
{
	struct cairn_handle_key *key = fh_desc->addr;

	key->export_id = op_ctx->ctx_export->export_id;
	fh_desc->len = sizeof(*key);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t create_handle(struct fsal_export *export_pub,
				   struct gsh_buffdesc *desc,
				   struct fsal_obj_handle **pub_handle,
				   struct fsal_attrlist *attrs_out)
{
	struct cairn_export *export =
		container_of(export_pub, struct cairn_export, export);
	struct cairn_wire_handle *wire = desc->addr;
	cairn_creds_t cb;
	cairn_attr_t ca;
	int rc;

	*pub_handle = NULL;
	if (desc->len != sizeof(struct cairn_wire_handle) &&
	    desc->len != sizeof(struct cairn_handle_key))
		return fsalstat(ERR_FSAL_INVAL, 0);
	if (memcmp(wire->volume, export->volume_id, 16) != 0) {
		LogDebug(COMPONENT_FSAL,
			 "CAIRN: handle of another volume presented to export of %s",
			 export->volume);
		return fsalstat(ERR_FSAL_STALE, ESTALE);
	}
	rc = cairn_getattr(export->fs, cairn_creds(&cb), wire->inode, &ca);
	if (rc == -ENOENT)
		rc = -ESTALE;
	if (rc < 0)
		return cairn_log_error("create_handle", rc);
	*pub_handle = &cairn_construct_handle(export, &ca)->handle;
	if (attrs_out != NULL)
		cairn2fsal_attributes(export, &ca, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t get_fs_dynamic_info(struct fsal_export *export_pub,
					 struct fsal_obj_handle *obj_hdl,
					 fsal_dynamicfsinfo_t *info)
{
	struct cairn_export *export =
		container_of(export_pub, struct cairn_export, export);
	cairn_creds_t cb;
	cairn_statfs_t st;
	int rc;

	rc = cairn_statfs(export->fs, cairn_creds(&cb), &st);
	if (rc < 0)
		return cairn_log_error("statfs", rc);
	memset(info, 0, sizeof(*info));
	info->total_bytes = (uint64_t) st.bsize * st.blocks;
	info->free_bytes = (uint64_t) st.bsize * st.bfree;
	info->avail_bytes = (uint64_t) st.bsize * st.bavail;
	info->total_files = st.files;
	info->free_files = st.ffree;
	info->avail_files = st.ffree;
	info->time_delta.tv_sec = 0;
	info->time_delta.tv_nsec = FSAL_DEFAULT_TIME_DELTA_NSEC;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* NFSv4 ACLs are offered only by an export with FSAL { ACL = true; } and without
 * Ganesha's Disable_ACL: each object's ACL costs a getxattr round trip when mdcache
 * first needs it (access checks, and every entry of a READDIR asking for `acl`).
 * Without them access checks use the mode bits; the bricks enforce stored ACLs anyway. */
static bool acls_on(struct fsal_export *exp_hdl)
{
	struct cairn_export *export =
		container_of(exp_hdl, struct cairn_export, export);

	return export->acl &&
	       !op_ctx_export_has_option(EXPORT_OPTION_DISABLE_ACL);
}

static fsal_aclsupp_t fs_acl_support(struct fsal_export *exp_hdl)
{
	if (!acls_on(exp_hdl))
		return 0;
	return fsal_acl_support(&exp_hdl->fsal->fs_info);
}

static attrmask_t fs_supported_attrs(struct fsal_export *exp_hdl)
{
	attrmask_t mask = fsal_supported_attrs(&exp_hdl->fsal->fs_info);

	if (!acls_on(exp_hdl))
		mask &= ~ATTR_ACL;
	return mask;
}

void cairn_export_ops_init(struct export_ops *ops)
{
	ops->fs_acl_support = fs_acl_support;
	ops->fs_supported_attrs = fs_supported_attrs;
	ops->release = release;
	ops->lookup_path = lookup_path;
	ops->wire_to_host = wire_to_host;
	ops->host_to_key = host_to_key;
	ops->create_handle = create_handle;
	ops->get_fs_dynamic_info = get_fs_dynamic_info;
	ops->alloc_state = cairn_alloc_state;
	ops->free_state = cairn_free_state;
}
