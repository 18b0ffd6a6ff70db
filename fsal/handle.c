/*
 * FSAL_CAIRN: object handle operations, each a thin wrapper over one libcairn call.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * Files are addressed by cairn id, so there are no file descriptors: an "open" is only
 * the open mode kept for share reservations (plus cairn_open/cairn_release for NFSv4
 * opens so an unlinked open file stays readable). Writes go through libcairn's
 * write-behind unless the client asks for FILE_SYNC (cairn_write_sync: the write and
 * its fsync in one round trip) or it is a new file's first WRITE (also cairn_write_sync,
 * answered FILE_SYNC); COMMIT is cairn_fsync, skipped when nothing is unstable.
 */

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <linux/falloc.h>
#include "fsal.h"
#include "fsal_convert.h"
#include "FSAL/fsal_commonlib.h"
#include "nfs_exports.h"
#include "sal_data.h"
#include "internal.h"

#define EXPORT_OF(op) container_of(op_ctx->fsal_export, struct cairn_export, export)
#define HANDLE_OF(h) container_of(h, struct cairn_handle, handle)
#define FS (EXPORT_OF(op_ctx)->fs)
#define ID(h) (HANDLE_OF(h)->key.wire.inode)

static void cairn_release_obj(struct fsal_obj_handle *obj_pub)
{
	struct cairn_handle *obj = HANDLE_OF(obj_pub);

	if (obj != obj->export->root)
		cairn_deconstruct_handle(obj);
}

static fsal_status_t new_object(const cairn_attr_t *ca,
				struct fsal_obj_handle **new_obj,
				struct fsal_attrlist *attrs_out)
{
	struct cairn_export *export = EXPORT_OF(op_ctx);

	*new_obj = &cairn_construct_handle(export, ca)->handle;
	if (attrs_out != NULL)
		cairn2fsal_attributes(export, ca, attrs_out);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_lookup(struct fsal_obj_handle *dir_pub,
				       const char *name,
				       struct fsal_obj_handle **obj_pub,
				       struct fsal_attrlist *attrs_out)
{
	cairn_creds_t cb;
	cairn_attr_t ca;
	int rc;

	if (strcmp(name, "..") == 0) {
		/* Ganesha asks for ".." only when mdcache does not know the parent: a
		 * directory reached by handle after a restart (NFSv3 READDIR(PLUS) lists
		 * "..", NFSv4 LOOKUPP). The bricks know every directory's parent; the
		 * export root is its own parent, so ".." never leaves the export. */
		struct cairn_id_t root = EXPORT_OF(op_ctx)->root->key.wire.inode;
		struct cairn_id_t dir = ID(dir_pub);

		if (memcmp(&dir, &root, sizeof(dir)) == 0)
			rc = cairn_getattr(FS, cairn_creds(&cb), root, &ca);
		else
			rc = cairn_lookup_parent(FS, cairn_creds(&cb), dir, &ca);
		if (rc < 0)
			return cairn_log_error("lookup(..)", rc);
		return new_object(&ca, obj_pub, attrs_out);
	}
	rc = cairn_lookup(FS, cairn_creds(&cb), ID(dir_pub), name, &ca);
	if (rc < 0)
		return cairn_log_error("lookup", rc);
	return new_object(&ca, obj_pub, attrs_out);
}

struct readdir_state {
	struct cairn_export *export;
	fsal_readdir_cb cb;
	void *dir_state;
	attrmask_t attrmask;
	int error;
	bool stopped;
};

static int readdir_entry(const cairn_dirent_t *de, void *arg)
{
	struct readdir_state *rs = arg;
	struct fsal_attrlist attrs;
	enum fsal_dir_result cb_rc;
	struct cairn_handle *obj;
	cairn_attr_t ca;
	cairn_creds_t cb;
	int rc;

	if (de->attr != NULL) {
		ca = *de->attr;
	} else {
		rc = cairn_getattr(rs->export->fs, cairn_creds(&cb), de->id,
				   &ca);
		if (rc == -ENOENT)
			return 0;	/* removed meanwhile: skip */
		if (rc < 0) {
			rs->error = rc;
			return 1;
		}
	}
	obj = cairn_construct_handle(rs->export, &ca);
	fsal_prepare_attrs(&attrs, rs->attrmask);
	cairn2fsal_attributes(rs->export, &ca, &attrs);
	cb_rc = rs->cb(de->name, &obj->handle, &attrs, rs->dir_state,
		       de->cookie);
	fsal_release_attrs(&attrs);
	if (cb_rc >= DIR_READAHEAD) {
		rs->stopped = true;
		return 1;
	}
	return 0;
}

static fsal_status_t cairn_fsal_readdir(struct fsal_obj_handle *dir_pub,
					fsal_cookie_t *whence, void *dir_state,
					fsal_readdir_cb cb, attrmask_t attrmask,
					bool *eof)
{
	struct readdir_state rs = {
		.export = EXPORT_OF(op_ctx), .cb = cb, .dir_state = dir_state,
		.attrmask = attrmask,
	};
	uint64_t start = whence != NULL ? *whence : 0;
	cairn_creds_t cr;
	bool end = false;
	int rc;

	rc = cairn_readdir(FS, cairn_creds(&cr), ID(dir_pub), start,
			   CAIRN_READDIR_PLUS, readdir_entry, &rs, &end);
	if (rc < 0)
		return cairn_log_error("readdir", rc);
	if (rs.error < 0)
		return cairn_log_error("readdir(getattr)", rs.error);
	*eof = end && !rs.stopped;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* Apply what create could not (owner, group, times, size) and fill attrs_out. */
static fsal_status_t finish_create(const cairn_attr_t *ca,
				   struct fsal_attrlist *attrib,
				   struct fsal_obj_handle **new_obj,
				   struct fsal_attrlist *attrs_out)
{
	fsal_status_t status;
	attrmask_t saved = attrib ? attrib->valid_mask : 0;

	status = new_object(ca, new_obj, NULL);
	if (attrib != NULL) {
		FSAL_UNSET_MASK(attrib->valid_mask, ATTR_MODE);
		if (attrib->valid_mask) {
			status = (*new_obj)->obj_ops->setattr2(*new_obj, false,
							       NULL, attrib);
			attrib->valid_mask = saved;
			if (FSAL_IS_ERROR(status)) {
				(*new_obj)->obj_ops->release(*new_obj);
				*new_obj = NULL;
				return status;
			}
			if (attrs_out != NULL)
				return (*new_obj)->obj_ops->getattrs(*new_obj,
								     attrs_out);
			return status;
		}
		attrib->valid_mask = saved;
	}
	if (attrs_out != NULL)
		cairn2fsal_attributes(EXPORT_OF(op_ctx), ca, attrs_out);
	return status;
}

static uint32_t create_mode(struct fsal_attrlist *attrib)
{
	uint32_t mode = attrib && FSAL_TEST_MASK(attrib->valid_mask, ATTR_MODE)
		? fsal2unix_mode(attrib->mode) : 0644;

	return mode & ~op_ctx->fsal_export->exp_ops.fs_umask(
						op_ctx->fsal_export);
}

static fsal_status_t cairn_fsal_mkdir(struct fsal_obj_handle *dir_hdl,
				      const char *name,
				      struct fsal_attrlist *attrib,
				      struct fsal_obj_handle **new_obj,
				      struct fsal_attrlist *attrs_out)
{
	cairn_creds_t cb;
	cairn_attr_t ca;
	int rc;

	*new_obj = NULL;
	rc = cairn_mkdir(FS, cairn_creds(&cb), ID(dir_hdl), name,
			 create_mode(attrib), &ca);
	if (rc < 0)
		return cairn_log_error("mkdir", rc);
	return finish_create(&ca, attrib, new_obj, attrs_out);
}

static fsal_status_t cairn_fsal_mknode(struct fsal_obj_handle *dir_hdl,
				       const char *name,
				       object_file_type_t nodetype,
				       struct fsal_attrlist *attrib,
				       struct fsal_obj_handle **new_obj,
				       struct fsal_attrlist *attrs_out)
{
	cairn_creds_t cb;
	cairn_attr_t ca;
	uint32_t type;
	uint64_t rdev = 0;
	int rc;

	*new_obj = NULL;
	switch (nodetype) {
	case BLOCK_FILE:
		type = S_IFBLK;
		rdev = makedev(attrib->rawdev.major, attrib->rawdev.minor);
		break;
	case CHARACTER_FILE:
		type = S_IFCHR;
		rdev = makedev(attrib->rawdev.major, attrib->rawdev.minor);
		break;
	case FIFO_FILE:
		type = S_IFIFO;
		break;
	case SOCKET_FILE:
		type = S_IFSOCK;
		break;
	default:
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	}
	rc = cairn_mknod(FS, cairn_creds(&cb), ID(dir_hdl), name,
			 type | create_mode(attrib), rdev, &ca);
	if (rc < 0)
		return cairn_log_error("mknod", rc);
	FSAL_UNSET_MASK(attrib->valid_mask, ATTR_RAWDEV);
	return finish_create(&ca, attrib, new_obj, attrs_out);
}

static fsal_status_t cairn_fsal_symlink(struct fsal_obj_handle *dir_hdl,
					const char *name, const char *link_path,
					struct fsal_attrlist *attrib,
					struct fsal_obj_handle **new_obj,
					struct fsal_attrlist *attrs_out)
{
	cairn_creds_t cb;
	cairn_attr_t ca;
	int rc;

	*new_obj = NULL;
	rc = cairn_symlink(FS, cairn_creds(&cb), ID(dir_hdl), name, link_path,
			   &ca);
	if (rc < 0)
		return cairn_log_error("symlink", rc);
	/* symlink modes are meaningless: never chmod a symlink */
	return finish_create(&ca, attrib, new_obj, attrs_out);
}

static fsal_status_t cairn_fsal_readlink(struct fsal_obj_handle *obj_hdl,
					 struct gsh_buffdesc *content,
					 bool refresh)
{
	cairn_creds_t cb;
	ssize_t len, got;
	char *buf;

	len = cairn_readlink(FS, cairn_creds(&cb), ID(obj_hdl), NULL, 0);
	if (len < 0)
		return cairn_log_error("readlink", len);
	buf = gsh_malloc(len + 1);
	got = cairn_readlink(FS, cairn_creds(&cb), ID(obj_hdl), buf, len + 1);
	if (got < 0) {
		gsh_free(buf);
		return cairn_log_error("readlink", got);
	}
	buf[got < len ? got : len] = '\0';
	content->addr = buf;
	content->len = (got < len ? got : len) + 1;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_getattrs(struct fsal_obj_handle *obj_hdl,
					 struct fsal_attrlist *attrs)
{
	cairn_creds_t cb;
	cairn_attr_t ca;
	int rc;

	/* Attributes are metadata of the inode: read them as root, as a local
	 * filesystem's stat(2) does not need read permission on the file. */
	(void) cb;
	rc = cairn_getattr(FS, NULL, ID(obj_hdl), &ca);
	if (rc < 0) {
		if (rc == -ENOENT)
			rc = -ESTALE;
		if (attrs->request_mask & ATTR_RDATTR_ERR)
			attrs->valid_mask = ATTR_RDATTR_ERR;
		return cairn_log_error("getattr", rc);
	}
	if ((attrs->request_mask & ATTR_ACL) &&
	    (op_ctx->fsal_export->exp_ops.fs_supported_attrs(op_ctx->fsal_export)
	     & ATTR_ACL)) {
		/* only when asked: mdcache fetches ACLs for access checks and
		 * GETATTR(acl), not with every attribute refresh */
		fsal_status_t status = cairn_acl_get(FS, ID(obj_hdl),
						     obj_hdl->type, ca.mode,
						     attrs);

		if (FSAL_IS_ERROR(status)) {
			if (attrs->request_mask & ATTR_RDATTR_ERR)
				attrs->valid_mask = ATTR_RDATTR_ERR;
			return status;
		}
	}
	cairn2fsal_attributes(EXPORT_OF(op_ctx), &ca, attrs);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t io_share_check(struct fsal_obj_handle *obj_hdl,
				    bool bypass, struct state_t *state,
				    fsal_openflags_t access);

static fsal_status_t cairn_fsal_setattr2(struct fsal_obj_handle *obj_hdl,
					 bool bypass, struct state_t *state,
					 struct fsal_attrlist *attrib_set)
{
	cairn_attr_t in;
	cairn_creds_t cb;
	uint32_t mask = 0;
	attrmask_t vm = attrib_set->valid_mask;
	int rc;

	memset(&in, 0, sizeof(in));
	/* A symlink has no mode of its own on Linux (lchmod is EOPNOTSUPP): the mode is
	 * ignored and the SETATTR succeeds, as FSAL_VFS does, so that a client's chmod of
	 * a tree does not stop at its first symlink. */
	if (obj_hdl->type == SYMBOLIC_LINK)
		FSAL_UNSET_MASK(vm, ATTR_MODE);
	if (FSAL_TEST_MASK(vm, ATTR_MODE)) {
		in.mode = fsal2unix_mode(attrib_set->mode);
		mask |= CAIRN_SETATTR_MODE;
	}
	if (FSAL_TEST_MASK(vm, ATTR_OWNER)) {
		in.uid = attrib_set->owner;
		mask |= CAIRN_SETATTR_UID;
	}
	if (FSAL_TEST_MASK(vm, ATTR_GROUP)) {
		in.gid = attrib_set->group;
		mask |= CAIRN_SETATTR_GID;
	}
	if (FSAL_TEST_MASK(vm, ATTR_SIZE)) {
		fsal_status_t status;

		if (obj_hdl->type != REGULAR_FILE)
			return fsalstat(ERR_FSAL_INVAL, EINVAL);
		status = io_share_check(obj_hdl, bypass, state, FSAL_O_WRITE);
		if (FSAL_IS_ERROR(status))
			return status;
		in.size = attrib_set->filesize;
		mask |= CAIRN_SETATTR_SIZE;
	}
	if (FSAL_TEST_MASK(vm, ATTR_ATIME_SERVER)) {
		mask |= CAIRN_SETATTR_ATIME_NOW;
	} else if (FSAL_TEST_MASK(vm, ATTR_ATIME)) {
		in.atime = attrib_set->atime;
		mask |= CAIRN_SETATTR_ATIME;
	}
	if (FSAL_TEST_MASK(vm, ATTR_MTIME_SERVER)) {
		mask |= CAIRN_SETATTR_MTIME_NOW;
	} else if (FSAL_TEST_MASK(vm, ATTR_MTIME)) {
		in.mtime = attrib_set->mtime;
		mask |= CAIRN_SETATTR_MTIME;
	}
	if (mask != 0) {
		rc = cairn_setattr(FS, cairn_creds(&cb), ID(obj_hdl), &in, mask,
				   NULL);
		if (rc < 0)
			return cairn_log_error("setattr", rc);
	}
	/* the ACL last: it wins over mode bits set in the same SETATTR, as
	 * setting a POSIX access ACL rewrites the mode's group bits */
	if (FSAL_TEST_MASK(vm, ATTR_ACL) &&
	    !(op_ctx->fsal_export->exp_ops.fs_supported_attrs(op_ctx->fsal_export)
	      & ATTR_ACL))
		return fsalstat(ERR_FSAL_ATTRNOTSUPP, 0);
	if (FSAL_TEST_MASK(vm, ATTR_ACL))
		return cairn_acl_set(FS, ID(obj_hdl), obj_hdl->type,
				     attrib_set->acl);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_link(struct fsal_obj_handle *obj_hdl,
				     struct fsal_obj_handle *destdir_hdl,
				     const char *name)
{
	cairn_creds_t cb;
	int rc;

	rc = cairn_link(FS, cairn_creds(&cb), ID(obj_hdl), ID(destdir_hdl),
			name, NULL);
	if (rc < 0)
		return cairn_log_error("link", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_rename(struct fsal_obj_handle *obj_hdl,
				       struct fsal_obj_handle *olddir_hdl,
				       const char *old_name,
				       struct fsal_obj_handle *newdir_hdl,
				       const char *new_name)
{
	cairn_creds_t cb;
	int rc;

	rc = cairn_rename(FS, cairn_creds(&cb), ID(olddir_hdl), old_name,
			  ID(newdir_hdl), new_name, 0);
	if (rc < 0)
		return cairn_log_error("rename", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_unlink(struct fsal_obj_handle *dir_hdl,
				       struct fsal_obj_handle *obj_hdl,
				       const char *name)
{
	cairn_creds_t cb;
	int rc;

	if (obj_hdl->type == DIRECTORY)
		rc = cairn_rmdir(FS, cairn_creds(&cb), ID(dir_hdl), name);
	else
		rc = cairn_unlink(FS, cairn_creds(&cb), ID(dir_hdl), name);
	if (rc < 0)
		return cairn_log_error("unlink", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- state, open, close ---- */

struct state_t *cairn_alloc_state(struct fsal_export *exp_hdl,
				  enum state_type state_type,
				  struct state_t *related_state)
{
	struct state_t *state;

	state = init_state(gsh_calloc(1, sizeof(struct cairn_state_fd)),
			   exp_hdl, state_type, related_state);
	container_of(state, struct cairn_state_fd, state)->cfd.openflags =
		FSAL_O_CLOSED;
	return state;
}

void cairn_free_state(struct fsal_export *exp_hdl, struct state_t *state)
{
	gsh_free(container_of(state, struct cairn_state_fd, state));
}

static struct cairn_fd *state_fd(struct state_t *state)
{
	return &container_of(state, struct cairn_state_fd, state)->cfd;
}

static fsal_status_t truncate_to_zero(struct fsal_obj_handle *obj_hdl)
{
	cairn_attr_t in;
	cairn_creds_t cb;
	int rc;

	memset(&in, 0, sizeof(in));
	rc = cairn_setattr(FS, cairn_creds(&cb), ID(obj_hdl), &in,
			   CAIRN_SETATTR_SIZE, NULL);
	if (rc < 0)
		return cairn_log_error("open(truncate)", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- share reservations ----
 * Ganesha 4.x leaves share accounting to the FSAL. Each gateway keeps its own counters
 * (obj->share, as FSAL_VFS/CEPH do: they answer I/O through special stateids and NFSv3
 * without a round trip), and every open state also holds a reservation on the file's
 * chain head (cairn_share, owner = the state), so opens through other gateways, SMB
 * and other protocols conflict too. The backend answers a conflict with
 * -CAIRN_ESHAREDENIED (ETXTBSY), which cairn2fsal_error maps to ERR_FSAL_SHARE_DENIED.
 */

static uint32_t share_bits(fsal_openflags_t flags, bool deny)
{
	uint32_t bits = 0;

	if (deny) {
		if (flags & FSAL_O_DENY_READ)
			bits |= CAIRN_SHARE_READ;
		if (flags & (FSAL_O_DENY_WRITE | FSAL_O_DENY_WRITE_MAND))
			bits |= CAIRN_SHARE_WRITE;
	} else {
		if (flags & FSAL_O_READ)
			bits |= CAIRN_SHARE_READ;
		if (flags & FSAL_O_WRITE)
			bits |= CAIRN_SHARE_WRITE;
	}
	return bits;
}

/* Set the backend reservation of open `state` to `openflags` (FSAL_O_CLOSED
 * releases it). */
static fsal_status_t backend_share(struct fsal_obj_handle *obj_hdl,
				   struct state_t *state,
				   fsal_openflags_t openflags)
{
	cairn_creds_t cb;
	int rc;

	rc = cairn_share(FS, cairn_creds(&cb), ID(obj_hdl),
			 (uint64_t) (uintptr_t) state,
			 share_bits(openflags, false),
			 share_bits(openflags, true));
	if (rc == -CAIRN_ESHAREDENIED) {
		LogDebug(COMPONENT_FSAL, "share: %s",
			 cairn_last_error_message());
		return cairn2fsal_error(rc);
	}
	if (rc < 0)
		return cairn_log_error("share", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* Change the share reservation of open `state` from `old` to `new` (either may be
 * FSAL_O_CLOSED): this gateway's counters first, then the backend's. On a conflict
 * (ERR_FSAL_SHARE_DENIED) or an error both keep `old`. */
static fsal_status_t change_share(struct fsal_obj_handle *obj_hdl,
				  struct state_t *state,
				  fsal_openflags_t old, fsal_openflags_t new)
{
	struct cairn_handle *obj = HANDLE_OF(obj_hdl);
	fsal_status_t status = { ERR_FSAL_NO_ERROR, 0 };

	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	update_share_counters(&obj->share, old, FSAL_O_CLOSED);
	if (new != FSAL_O_CLOSED)
		status = check_share_conflict(&obj->share, new, false);
	if (FSAL_IS_ERROR(status)) {
		update_share_counters(&obj->share, FSAL_O_CLOSED, old);
		PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
		return status;
	}
	update_share_counters(&obj->share, FSAL_O_CLOSED, new);
	state_fd(state)->openflags = FSAL_O_NFS_FLAGS(new);
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);

	status = backend_share(obj_hdl, state, new);
	if (FSAL_IS_ERROR(status) && new != FSAL_O_CLOSED) {
		PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
		update_share_counters(&obj->share, new, old);
		state_fd(state)->openflags = FSAL_O_NFS_FLAGS(old);
		PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	}
	return status;
}

/* fsal_find_fd wants these; with no fd asked for it never calls them. */
static fsal_status_t no_fd_open(struct fsal_obj_handle *obj_hdl,
				fsal_openflags_t openflags, struct fsal_fd *fd)
{
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t no_fd_close(struct fsal_obj_handle *obj_hdl,
				 struct fsal_fd *fd)
{
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* The share check of a READ, WRITE or truncate: Ganesha's fsal_find_fd without fds
 * (struct cairn_fd is a struct fsal_fd). An open that grants `access` (or the open of
 * a lock state) was checked when it was taken; anything else (a special stateid,
 * NFSv3, a READ through a write-only open) must not meet another open's deny mode.
 * `bypass` (the all-ones stateid) ignores deny modes except NFSv4's deny-write. Only
 * this gateway's opens are seen here: an I/O without an open through one gateway is
 * not checked against deny modes taken through another. */
static fsal_status_t io_share_check(struct fsal_obj_handle *obj_hdl,
				    bool bypass, struct state_t *state,
				    fsal_openflags_t access)
{
	struct cairn_handle *obj = HANDLE_OF(obj_hdl);
	bool has_lock = false, closefd = false, reusing = false;
	fsal_status_t status;

	status = fsal_find_fd(NULL, obj_hdl, (struct fsal_fd *) &obj->fd,
			      &obj->share, bypass, state, access, no_fd_open,
			      no_fd_close, &has_lock, &closefd, false,
			      &reusing);
	if (has_lock)
		PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	return status;
}

/* Take the share reservation and note the open on an existing handle. */
static fsal_status_t open_existing(struct fsal_obj_handle *obj_hdl,
				   struct state_t *state,
				   fsal_openflags_t openflags)
{
	struct cairn_handle *obj = HANDLE_OF(obj_hdl);
	fsal_status_t status;
	cairn_creds_t cb;
	int rc;

	if (state == NULL) {
		PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
		obj->fd.openflags = FSAL_O_NFS_FLAGS(openflags);
		PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}
	status = change_share(obj_hdl, state, FSAL_O_CLOSED, openflags);
	if (FSAL_IS_ERROR(status))
		return status;
	rc = cairn_open(FS, cairn_creds(&cb), ID(obj_hdl));
	if (rc < 0) {
		(void) change_share(obj_hdl, state, openflags, FSAL_O_CLOSED);
		return cairn_log_error("open", rc);
	}
	return status;
}

static void undo_open(struct fsal_obj_handle *obj_hdl, struct state_t *state,
		      fsal_openflags_t openflags)
{
	if (state == NULL)
		return;
	(void) change_share(obj_hdl, state, openflags, FSAL_O_CLOSED);
	(void) cairn_release(FS, ID(obj_hdl));
}

static fsal_status_t cairn_fsal_open2(struct fsal_obj_handle *obj_hdl,
				      struct state_t *state,
				      fsal_openflags_t openflags,
				      enum fsal_create_mode createmode,
				      const char *name,
				      struct fsal_attrlist *attrs_set,
				      fsal_verifier_t verifier,
				      struct fsal_obj_handle **new_obj,
				      struct fsal_attrlist *attrs_out,
				      bool *caller_perm_check)
{
	struct fsal_attrlist verifier_attr;
	struct fsal_obj_handle *target;
	fsal_status_t status;
	cairn_creds_t cb;
	cairn_attr_t ca;
	bool created = false;
	int rc;

	if (createmode >= FSAL_EXCLUSIVE) {
		if (attrs_set == NULL) {
			memset(&verifier_attr, 0, sizeof(verifier_attr));
			attrs_set = &verifier_attr;
		}
		set_common_verifier(attrs_set, verifier, false);
	}

	if (name == NULL) {
		/* open by handle */
		status = open_existing(obj_hdl, state, openflags);
		if (FSAL_IS_ERROR(status))
			return status;
		if (openflags & FSAL_O_TRUNC) {
			status = truncate_to_zero(obj_hdl);
			if (FSAL_IS_ERROR(status)) {
				undo_open(obj_hdl, state, openflags);
				return status;
			}
		}
		if (createmode >= FSAL_EXCLUSIVE &&
		    createmode != FSAL_EXCLUSIVE_9P) {
			struct fsal_attrlist cur;

			fsal_prepare_attrs(&cur, ATTR_ATIME | ATTR_MTIME);
			status = cairn_fsal_getattrs(obj_hdl, &cur);
			if (!FSAL_IS_ERROR(status) &&
			    !check_verifier_attrlist(&cur, verifier, false))
				status = fsalstat(ERR_FSAL_EXIST, EEXIST);
			fsal_release_attrs(&cur);
			if (FSAL_IS_ERROR(status)) {
				undo_open(obj_hdl, state, openflags);
				return status;
			}
		}
		if (attrs_out != NULL)
			return cairn_fsal_getattrs(obj_hdl, attrs_out);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}

	/* open (and maybe create) by name */
	if (createmode == FSAL_NO_CREATE) {
		rc = cairn_lookup(FS, cairn_creds(&cb), ID(obj_hdl), name, &ca);
		if (rc < 0)
			return cairn_log_error("open(lookup)", rc);
		if ((ca.mode & S_IFMT) != S_IFREG)
			return fsalstat((ca.mode & S_IFMT) == S_IFDIR ?
					ERR_FSAL_ISDIR : ERR_FSAL_SYMLINK, 0);
	} else {
		rc = cairn_create(FS, cairn_creds(&cb), ID(obj_hdl), name,
				  create_mode(attrs_set), CAIRN_CREATE_EXCL,
				  &ca);
		if (rc == -EEXIST && createmode == FSAL_UNCHECKED)
			rc = cairn_lookup(FS, cairn_creds(&cb), ID(obj_hdl),
					  name, &ca);
		else if (rc == 0)
			created = true;
		if (rc < 0)
			return cairn_log_error("open(create)", rc);
		if ((ca.mode & S_IFMT) != S_IFREG)
			return fsalstat(ERR_FSAL_EXIST, EEXIST);
	}

	*caller_perm_check = !created;
	target = &cairn_construct_handle(EXPORT_OF(op_ctx), &ca)->handle;
	if (created)
		__atomic_store_n(&HANDLE_OF(target)->fresh, true,
				 __ATOMIC_SEQ_CST);

	if (created && attrs_set != NULL) {
		attrmask_t saved = attrs_set->valid_mask;

		FSAL_UNSET_MASK(attrs_set->valid_mask, ATTR_MODE);
		if (attrs_set->valid_mask)
			status = cairn_fsal_setattr2(target, false, NULL,
						     attrs_set);
		else
			status = fsalstat(ERR_FSAL_NO_ERROR, 0);
		attrs_set->valid_mask = saved;
		if (FSAL_IS_ERROR(status))
			goto fail;
	}

	status = open_existing(target, state, openflags);
	if (FSAL_IS_ERROR(status))
		goto fail;
	if (!created && (openflags & FSAL_O_TRUNC)) {
		/* after the share reservation: a refused open truncates nothing.
		 * Access is checked by the caller after open2 returns; the
		 * truncation runs with the caller's credentials anyway */
		status = truncate_to_zero(target);
		if (FSAL_IS_ERROR(status)) {
			undo_open(target, state, openflags);
			goto fail;
		}
	}
	*new_obj = target;
	if (attrs_out != NULL) {
		status = cairn_fsal_getattrs(target, attrs_out);
		if (FSAL_IS_ERROR(status) &&
		    (attrs_out->request_mask & ATTR_RDATTR_ERR) == 0) {
			undo_open(target, state, openflags);
			*new_obj = NULL;
			goto fail;
		}
	}
	return fsalstat(ERR_FSAL_NO_ERROR, 0);

fail:
	target->obj_ops->release(target);
	return status;
}

static fsal_openflags_t cairn_fsal_status2(struct fsal_obj_handle *obj_hdl,
					   struct state_t *state)
{
	return state_fd(state)->openflags;
}

static fsal_status_t cairn_fsal_reopen2(struct fsal_obj_handle *obj_hdl,
					struct state_t *state,
					fsal_openflags_t openflags)
{
	fsal_openflags_t old = state_fd(state)->openflags;
	fsal_status_t status;
	cairn_creds_t cb;
	int rc;

	status = change_share(obj_hdl, state, old, openflags);
	if (FSAL_IS_ERROR(status))
		return status;
	if (old == FSAL_O_CLOSED) {
		rc = cairn_open(FS, cairn_creds(&cb), ID(obj_hdl));
		if (rc < 0) {
			(void) change_share(obj_hdl, state, openflags, old);
			return cairn_log_error("reopen", rc);
		}
	}
	if (openflags & FSAL_O_TRUNC)
		return truncate_to_zero(obj_hdl);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_close2(struct fsal_obj_handle *obj_hdl,
				       struct state_t *state)
{
	fsal_openflags_t old = state_fd(state)->openflags;
	int rc;

	if (old == FSAL_O_CLOSED)
		return fsalstat(ERR_FSAL_NOT_OPENED, 0);
	if (state->state_type != STATE_TYPE_SHARE &&
	    state->state_type != STATE_TYPE_NLM_SHARE &&
	    state->state_type != STATE_TYPE_9P_FID) {
		state_fd(state)->openflags = FSAL_O_CLOSED;
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}
	/* a failed release is only logged: the backend drops the reservation
	 * with the session anyway */
	(void) change_share(obj_hdl, state, old, FSAL_O_CLOSED);
	rc = cairn_release(FS, ID(obj_hdl));
	if (rc < 0)
		return cairn_log_error("close(release)", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* The global (stateless) open: flush buffered writes. */
static fsal_status_t cairn_fsal_close(struct fsal_obj_handle *obj_hdl)
{
	struct cairn_handle *obj = HANDLE_OF(obj_hdl);
	fsal_openflags_t old;
	int rc;

	PTHREAD_RWLOCK_wrlock(&obj_hdl->obj_lock);
	old = obj->fd.openflags;
	obj->fd.openflags = FSAL_O_CLOSED;
	PTHREAD_RWLOCK_unlock(&obj_hdl->obj_lock);
	if (old == FSAL_O_CLOSED)
		return fsalstat(ERR_FSAL_NOT_OPENED, 0);
	rc = cairn_flush(FS, ID(obj_hdl));
	if (rc < 0)
		return cairn_log_error("close(flush)", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- data ---- */

static void cairn_fsal_read2(struct fsal_obj_handle *obj_hdl, bool bypass,
			     fsal_async_cb done_cb,
			     struct fsal_io_arg *read_arg, void *caller_arg)
{
	uint64_t offset = read_arg->offset;
	fsal_status_t status;
	cairn_creds_t cb;
	ssize_t n = 0;
	int i;

	read_arg->io_amount = 0;
	read_arg->end_of_file = false;
	status = io_share_check(obj_hdl, bypass, read_arg->state, FSAL_O_READ);
	if (FSAL_IS_ERROR(status)) {
		done_cb(obj_hdl, status, read_arg, caller_arg);
		return;
	}
	for (i = 0; i < read_arg->iov_count; i++) {
		n = cairn_read(FS, cairn_creds(&cb), ID(obj_hdl), offset,
			       read_arg->iov[i].iov_base,
			       read_arg->iov[i].iov_len);
		if (n < 0) {
			done_cb(obj_hdl, cairn_log_error("read", n), read_arg,
				caller_arg);
			return;
		}
		read_arg->io_amount += n;
		offset += n;
		if ((size_t) n < read_arg->iov[i].iov_len) {
			read_arg->end_of_file = true;
			break;
		}
	}
	if (read_arg->info != NULL) {
		/* READ_PLUS: always report data (holes read as zeroes) */
		read_arg->info->io_content.what = NFS4_CONTENT_DATA;
		read_arg->info->io_content.data.d_offset = read_arg->offset;
		read_arg->info->io_content.data.d_data.data_len =
			read_arg->io_amount;
		read_arg->info->io_content.data.d_data.data_val =
			read_arg->iov[0].iov_base;
	}
	done_cb(obj_hdl, fsalstat(ERR_FSAL_NO_ERROR, 0), read_arg, caller_arg);
}

static void cairn_fsal_write2(struct fsal_obj_handle *obj_hdl, bool bypass,
			      fsal_async_cb done_cb,
			      struct fsal_io_arg *write_arg, void *caller_arg)
{
	uint64_t offset = write_arg->offset;
	bool stable = write_arg->fsal_stable;
	bool fresh;
	fsal_status_t status;
	cairn_creds_t cb;
	size_t total = 0;
	ssize_t n;
	int i;

	write_arg->io_amount = 0;
	status = io_share_check(obj_hdl, bypass, write_arg->state,
				FSAL_O_WRITE);
	if (FSAL_IS_ERROR(status)) {
		done_cb(obj_hdl, status, write_arg, caller_arg);
		return;
	}
	/* A new file's first WRITE from offset 0, small enough to be its whole
	 * content: made durable now, in the write's own round trip, instead of in
	 * a COMMIT's (the client commits an UNSTABLE small file at close anyway). */
	fresh = __atomic_exchange_n(&HANDLE_OF(obj_hdl)->fresh, false,
				    __ATOMIC_SEQ_CST);
	for (i = 0; i < write_arg->iov_count; i++)
		total += write_arg->iov[i].iov_len;
	if (fresh && offset == 0 && total <= CAIRN_SYNC_FIRST_WRITE)
		stable = true;
	if (!stable)
		__atomic_store_n(&HANDLE_OF(obj_hdl)->unstable, true,
				 __ATOMIC_SEQ_CST);
	for (i = 0; i < write_arg->iov_count; i++) {
		/* FILE_SYNC also covers the metadata (size, mtime): the last
		 * piece's write carries the fsync (cairn_write_sync) */
		if (stable && i == write_arg->iov_count - 1)
			n = cairn_write_sync(FS, cairn_creds(&cb),
					     ID(obj_hdl), offset,
					     write_arg->iov[i].iov_base,
					     write_arg->iov[i].iov_len);
		else if (stable)
			n = cairn_write_through(FS, cairn_creds(&cb),
						ID(obj_hdl), offset,
						write_arg->iov[i].iov_base,
						write_arg->iov[i].iov_len);
		else
			n = cairn_write(FS, cairn_creds(&cb), ID(obj_hdl),
					offset, write_arg->iov[i].iov_base,
					write_arg->iov[i].iov_len);
		if (n < 0) {
			done_cb(obj_hdl, cairn_log_error("write", n),
				write_arg, caller_arg);
			return;
		}
		write_arg->io_amount += n;
		offset += n;
	}
	if (stable && write_arg->iov_count == 0) {
		int rc = cairn_fsync(FS, cairn_creds(&cb), ID(obj_hdl), false);

		if (rc < 0) {
			done_cb(obj_hdl, cairn_log_error("write(fsync)", rc),
				write_arg, caller_arg);
			return;
		}
	}
	write_arg->fsal_stable = stable;
	done_cb(obj_hdl, fsalstat(ERR_FSAL_NO_ERROR, 0), write_arg, caller_arg);
}

static fsal_status_t cairn_fsal_commit2(struct fsal_obj_handle *obj_hdl,
					off_t offset, size_t len)
{
	struct cairn_handle *obj = HANDLE_OF(obj_hdl);
	cairn_creds_t cb;
	int rc;

	/* nothing written UNSTABLE since the last COMMIT: nothing to make durable */
	if (!__atomic_exchange_n(&obj->unstable, false, __ATOMIC_SEQ_CST))
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	rc = cairn_fsync(FS, cairn_creds(&cb), ID(obj_hdl), false);
	if (rc < 0) {
		__atomic_store_n(&obj->unstable, true, __ATOMIC_SEQ_CST);
		return cairn_log_error("commit", rc);
	}
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_seek2(struct fsal_obj_handle *obj_hdl,
				      struct state_t *state,
				      struct io_info *info)
{
	uint64_t offset = info->io_content.hole.di_offset, result = 0;
	cairn_creds_t cb;
	cairn_attr_t ca;
	int whence, rc;

	if (info->io_content.what == NFS4_CONTENT_DATA)
		whence = SEEK_DATA;
	else if (info->io_content.what == NFS4_CONTENT_HOLE)
		whence = SEEK_HOLE;
	else
		return fsalstat(ERR_FSAL_UNION_NOTSUPP, 0);

	rc = cairn_seek(FS, cairn_creds(&cb), ID(obj_hdl), offset, whence,
			&result);
	if (rc == -ENXIO) {
		info->io_eof = TRUE;
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}
	if (rc < 0)
		return cairn_log_error("seek", rc);
	rc = cairn_getattr(FS, NULL, ID(obj_hdl), &ca);
	if (rc < 0)
		return cairn_log_error("seek(getattr)", rc);
	info->io_eof = result >= ca.size;
	info->io_content.hole.di_offset = result;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_fallocate(struct fsal_obj_handle *obj_hdl,
					  struct state_t *state,
					  uint64_t offset, uint64_t length,
					  bool allocate)
{
	cairn_creds_t cb;
	uint32_t mode = allocate ? 0 :
		(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE);
	int rc;

	rc = cairn_fallocate(FS, cairn_creds(&cb), ID(obj_hdl), mode, offset,
			     length);
	if (rc < 0)
		return cairn_log_error(allocate ? "allocate" : "deallocate",
				       rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* ---- locks: byte ranges live on the bricks, so every gateway sees them ---- */

static fsal_status_t cairn_fsal_lock_op2(struct fsal_obj_handle *obj_hdl,
					 struct state_t *state, void *owner,
					 fsal_lock_op_t lock_op,
					 fsal_lock_param_t *request_lock,
					 fsal_lock_param_t *conflicting_lock)
{
	cairn_lock_t lk;
	cairn_creds_t cb;
	int rc;

	if (obj_hdl->type != REGULAR_FILE)
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	if (request_lock->lock_type == FSAL_LOCK_R)
		lk.type = F_RDLCK;
	else if (request_lock->lock_type == FSAL_LOCK_W)
		lk.type = F_WRLCK;
	else
		return fsalstat(ERR_FSAL_NOTSUPP, 0);
	if (lock_op != FSAL_OP_LOCKT && lock_op != FSAL_OP_LOCK &&
	    lock_op != FSAL_OP_UNLOCK)
		return fsalstat(ERR_FSAL_NOTSUPP, 0);
	if (lock_op == FSAL_OP_UNLOCK)
		lk.type = F_UNLCK;
	lk.pid = 0;
	lk.start = request_lock->lock_start;
	lk.len = request_lock->lock_length;
	lk.owner = (uint64_t) (uintptr_t) owner;

	if (lock_op == FSAL_OP_LOCKT)
		rc = cairn_getlock(FS, cairn_creds(&cb), ID(obj_hdl), &lk);
	else
		rc = cairn_setlock(FS, cairn_creds(&cb), ID(obj_hdl), &lk,
				   false);

	if (rc == -EAGAIN || rc == -EACCES) {
		/* conflict on LOCK: name the holder as far as the backend knows it */
		lk.type = request_lock->lock_type == FSAL_LOCK_R ? F_RDLCK : F_WRLCK;
		if (cairn_getlock(FS, cairn_creds(&cb), ID(obj_hdl), &lk) < 0 ||
		    lk.type == F_UNLCK) {
			lk.start = 0;
			lk.len = 0;
			lk.type = F_WRLCK;
		}
	} else if (rc < 0) {
		return cairn_log_error("lock", rc);
	} else if (lock_op != FSAL_OP_LOCKT || lk.type == F_UNLCK) {
		if (conflicting_lock != NULL) {
			conflicting_lock->lock_start = 0;
			conflicting_lock->lock_length = 0;
			conflicting_lock->lock_type = FSAL_NO_LOCK;
		}
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}
	/* A conflict, on LOCK or LOCKT. Ganesha turns ERR_FSAL_DELAY into
	 * STATE_LOCK_CONFLICT (NFS4ERR_DENIED / NLM4_DENIED with this holder);
	 * ERR_FSAL_LOCKED would become NFS4ERR_LOCKED, and success on LOCKT would hide
	 * locks held through other gateways or protocols. */
	if (conflicting_lock != NULL) {
		conflicting_lock->lock_start = lk.start;
		conflicting_lock->lock_length = lk.len;
		conflicting_lock->lock_type =
			lk.type == F_RDLCK ? FSAL_LOCK_R : FSAL_LOCK_W;
	}
	return fsalstat(ERR_FSAL_DELAY, EAGAIN);
}

/* ---- NFSv4.2 xattrs: the user. namespace of the backend ---- */

static int xattr_name(char *buf, size_t size, const xattrkey4 *key)
{
	int n = snprintf(buf, size, "user.%.*s", key->utf8string_len,
			 key->utf8string_val);

	return (n < 0 || (size_t) n >= size) ? -ENAMETOOLONG : 0;
}

static fsal_status_t xattr_error(const char *call, long rc)
{
	if (rc == -ERANGE)
		return fsalstat(ERR_FSAL_XATTR2BIG, 0);
	if (rc == -ENODATA)
		return fsalstat(ERR_FSAL_NOXATTR, 0);
	return cairn_log_error(call, rc);
}

static fsal_status_t cairn_fsal_getxattrs(struct fsal_obj_handle *obj_hdl,
					  xattrkey4 *xa_name,
					  xattrvalue4 *xa_value)
{
	char name[sizeof("user.") + NAME_MAX];
	cairn_creds_t cb;
	ssize_t n;

	if (xattr_name(name, sizeof(name), xa_name) < 0)
		return cairn2fsal_error(-ENAMETOOLONG);
	n = cairn_getxattr(FS, cairn_creds(&cb), ID(obj_hdl), name,
			   xa_value->utf8string_val, xa_value->utf8string_len);
	if (n < 0)
		return xattr_error("getxattr", n);
	xa_value->utf8string_len = n;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_setxattrs(struct fsal_obj_handle *obj_hdl,
					  setxattr_option4 option,
					  xattrkey4 *xa_name,
					  xattrvalue4 *xa_value)
{
	char name[sizeof("user.") + NAME_MAX];
	cairn_creds_t cb;
	uint32_t flags;
	int rc;

	if (xattr_name(name, sizeof(name), xa_name) < 0)
		return cairn2fsal_error(-ENAMETOOLONG);
	switch (option) {
	case SETXATTR4_EITHER:
		flags = 0;
		break;
	case SETXATTR4_CREATE:
		flags = CAIRN_XATTR_CREATE;
		break;
	case SETXATTR4_REPLACE:
		flags = CAIRN_XATTR_REPLACE;
		break;
	default:
		return cairn2fsal_error(-EINVAL);
	}
	rc = cairn_setxattr(FS, cairn_creds(&cb), ID(obj_hdl), name,
			    xa_value->utf8string_val, xa_value->utf8string_len,
			    flags);
	if (rc < 0)
		return xattr_error("setxattr", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_removexattrs(struct fsal_obj_handle *obj_hdl,
					     xattrkey4 *xa_name)
{
	char name[sizeof("user.") + NAME_MAX];
	cairn_creds_t cb;
	int rc;

	if (xattr_name(name, sizeof(name), xa_name) < 0)
		return cairn2fsal_error(-ENAMETOOLONG);
	rc = cairn_removexattr(FS, cairn_creds(&cb), ID(obj_hdl), name);
	if (rc < 0)
		return xattr_error("removexattr", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

static fsal_status_t cairn_fsal_listxattrs(struct fsal_obj_handle *obj_hdl,
					   count4 maxbytes,
					   nfs_cookie4 *cookie,
					   bool_t *eof,
					   xattrlist4 *names)
{
	cairn_creds_t cb;
	fsal_status_t status;
	ssize_t len, got;
	char *buf;

	len = cairn_listxattr(FS, cairn_creds(&cb), ID(obj_hdl), NULL, 0);
	if (len < 0)
		return cairn_log_error("listxattr", len);
	buf = gsh_malloc(len + 1);
	got = cairn_listxattr(FS, cairn_creds(&cb), ID(obj_hdl), buf, len + 1);
	if (got < 0) {
		gsh_free(buf);
		return cairn_log_error("listxattr", got);
	}
	status = fsal_listxattr_helper(buf, got, maxbytes, cookie, eof, names);
	gsh_free(buf);
	return status;
}

/* ---- handles ---- */

static fsal_status_t cairn_fsal_handle_to_wire(
				const struct fsal_obj_handle *obj_hdl,
				fsal_digesttype_t output_type,
				struct gsh_buffdesc *fh_desc)
{
	const struct cairn_handle *obj =
		container_of(obj_hdl, const struct cairn_handle, handle);

	switch (output_type) {
	case FSAL_DIGEST_NFSV3:
	case FSAL_DIGEST_NFSV4:
		if (fh_desc->len < sizeof(obj->key.wire)) {
			LogMajor(COMPONENT_FSAL,
				 "CAIRN: handle buffer too small: need %zu, have %zu",
				 sizeof(obj->key.wire), fh_desc->len);
			return fsalstat(ERR_FSAL_TOOSMALL, 0);
		}
		memcpy(fh_desc->addr, &obj->key.wire, sizeof(obj->key.wire));
		fh_desc->len = sizeof(obj->key.wire);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	default:
		return fsalstat(ERR_FSAL_SERVERFAULT, 0);
	}
}

static void cairn_fsal_handle_to_key(struct fsal_obj_handle *obj_hdl,
				     struct gsh_buffdesc *fh_desc)
{
	struct cairn_handle *obj = HANDLE_OF(obj_hdl);

	fh_desc->addr = &obj->key;
	fh_desc->len = sizeof(obj->key);
}

static fsal_status_t cairn_fsal_merge(struct fsal_obj_handle *orig_hdl,
				      struct fsal_obj_handle *dupe_hdl)
{
	if (orig_hdl == dupe_hdl || orig_hdl->type != REGULAR_FILE ||
	    dupe_hdl->type != REGULAR_FILE)
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	return merge_share(orig_hdl, &HANDLE_OF(orig_hdl)->share,
			   &HANDLE_OF(dupe_hdl)->share);
}

/* Delegations (docs/nfs.md "Delegations"): Ganesha grants an NFSv4 read or write
 * delegation only if the backend grants this export's mount a delegation of the file of
 * the same kind, so that an access by any other client of the volume (another gateway, a
 * FUSE mount, smbd) recalls it (up.c) before it runs. Ganesha calls this under the
 * object's st_lock. */
static fsal_status_t cairn_fsal_lease_op2(struct fsal_obj_handle *obj_hdl,
					  struct state_t *state, void *owner,
					  fsal_deleg_t deleg)
{
	struct cairn_handle *h = HANDLE_OF(obj_hdl);
	bool write = deleg == FSAL_DELEG_WR;
	int rc;

	switch (deleg) {
	case FSAL_DELEG_NONE:
		if (h->delegs == 0)
			return fsalstat(ERR_FSAL_NO_ERROR, 0);
		if (--h->delegs > 0)
			return fsalstat(ERR_FSAL_NO_ERROR, 0);
		rc = cairn_deleg_return(h->export->fs, ID(obj_hdl));
		if (rc < 0)
			(void) cairn_log_error("lease_op2(return)", rc);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	case FSAL_DELEG_RD:
	case FSAL_DELEG_WR:
		if (obj_hdl->type != REGULAR_FILE)
			return fsalstat(ERR_FSAL_NOTSUPP, 0);
		if (h->delegs > 0 && h->deleg_write == write) {
			h->delegs++;
			return fsalstat(ERR_FSAL_NO_ERROR, 0);
		}
		/* the handle's own export's mount: the one its recalls come back to */
		rc = cairn_delegate(h->export->fs, ID(obj_hdl), write);
		if (rc == -EAGAIN)
			return fsalstat(ERR_FSAL_DELAY, EAGAIN);
		if (rc < 0)
			return cairn_log_error("lease_op2(delegate)", rc);
		h->delegs++;
		h->deleg_write = write;
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	default:
		return fsalstat(ERR_FSAL_INVAL, 0);
	}
}

void cairn_handle_ops_init(struct fsal_obj_ops *ops)
{
	fsal_default_obj_ops_init(ops);

	ops->release = cairn_release_obj;
	ops->merge = cairn_fsal_merge;
	ops->lookup = cairn_fsal_lookup;
	ops->readdir = cairn_fsal_readdir;
	ops->mkdir = cairn_fsal_mkdir;
	ops->mknode = cairn_fsal_mknode;
	ops->symlink = cairn_fsal_symlink;
	ops->readlink = cairn_fsal_readlink;
	ops->getattrs = cairn_fsal_getattrs;
	ops->setattr2 = cairn_fsal_setattr2;
	ops->link = cairn_fsal_link;
	ops->rename = cairn_fsal_rename;
	ops->unlink = cairn_fsal_unlink;
	ops->open2 = cairn_fsal_open2;
	ops->status2 = cairn_fsal_status2;
	ops->reopen2 = cairn_fsal_reopen2;
	ops->read2 = cairn_fsal_read2;
	ops->write2 = cairn_fsal_write2;
	ops->commit2 = cairn_fsal_commit2;
	ops->seek2 = cairn_fsal_seek2;
	ops->fallocate = cairn_fsal_fallocate;
	ops->lock_op2 = cairn_fsal_lock_op2;
	ops->lease_op2 = cairn_fsal_lease_op2;
	ops->close = cairn_fsal_close;
	ops->close2 = cairn_fsal_close2;
	ops->handle_to_wire = cairn_fsal_handle_to_wire;
	ops->handle_to_key = cairn_fsal_handle_to_key;
	ops->getxattrs = cairn_fsal_getxattrs;
	ops->setxattrs = cairn_fsal_setxattrs;
	ops->removexattrs = cairn_fsal_removexattrs;
	ops->listxattrs = cairn_fsal_listxattrs;
}
