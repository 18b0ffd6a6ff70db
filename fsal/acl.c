/*
 * FSAL_CAIRN: NFSv4 ACLs stored as POSIX ACLs.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * The backend stores POSIX ACLs (the system.posix_acl_access / _default xattrs, kept as
 * is on each brick's filesystem) and enforces them: a brick runs every call with the
 * caller's fsuid/fsgid/groups, so its kernel checks the ACL, and setting the access ACL
 * updates the mode's group bits (the ACL mask) as on a local filesystem. So an NFSv4
 * ACL is mapped the way FSAL_CEPH and FSAL_GLUSTER map it: Ganesha's own converters
 * (posix_acls.c) turn it into a POSIX access ACL (+ a default ACL from the inheritable
 * ACEs of a directory) and back. An ACL POSIX cannot express is refused with INVAL
 * rather than stored as something else. A file without an ACL xattr reports the ACL
 * its mode bits imply, so ACL and mode always agree.
 */

#include <sys/acl.h>
#include <acl/libacl.h>
#include "nfs4_acls.h"
#include "posix_acls.h"
#include "internal.h"

/* The POSIX ACL `name` of `id`; -ENODATA when it has none. Read as root like getattr. */
static int get_posix_acl(cairn_fs_t *fs, cairn_id_t id, const char *name,
			 acl_t *out)
{
	char stackbuf[512], *buf = stackbuf;
	ssize_t n;

	*out = NULL;
	n = cairn_getxattr(fs, NULL, id, name, buf, sizeof(stackbuf));
	if (n == -ERANGE) {
		n = cairn_getxattr(fs, NULL, id, name, NULL, 0);
		if (n < 0)
			return n;
		buf = gsh_malloc(n);
		n = cairn_getxattr(fs, NULL, id, name, buf, n);
	}
	if (n >= 0) {
		*out = xattr_2_posix_acl((struct acl_ea_header *)buf, n);
		if (*out == NULL)
			n = -EIO;	/* not a POSIX ACL xattr */
	}
	if (buf != stackbuf)
		gsh_free(buf);
	return n < 0 ? (int)n : 0;
}

fsal_status_t cairn_acl_get(cairn_fs_t *fs, cairn_id_t id,
			    object_file_type_t kind, uint32_t mode,
			    struct fsal_attrlist *attrs)
{
	bool is_dir = kind == DIRECTORY;
	acl_t e_acl = NULL, i_acl = NULL;
	fsal_acl_data_t acldata;
	fsal_acl_status_t aclstatus;
	fsal_ace_t *pace;
	int e_count, i_count = 0, n;
	int rc;

	if (attrs->acl != NULL) {
		nfs4_acl_release_entry(attrs->acl);
		attrs->acl = NULL;
		FSAL_UNSET_MASK(attrs->valid_mask, ATTR_ACL);
	}
	/* POSIX ACLs live on regular files and directories only (Linux keeps none on
	 * symlinks; special files are not read through the bricks' fds) */
	rc = kind == REGULAR_FILE || kind == DIRECTORY ?
		get_posix_acl(fs, id, ACL_EA_ACCESS, &e_acl) : -ENODATA;
	if (rc == -ENODATA || rc == -EOPNOTSUPP) {
		/* no ACL: the one the mode bits imply */
		e_acl = acl_from_mode(mode & 0777);
		rc = e_acl == NULL ? -errno : 0;
	}
	if (rc < 0)
		return cairn_log_error("getattr(acl)", rc);
	if (is_dir) {
		rc = get_posix_acl(fs, id, ACL_EA_DEFAULT, &i_acl);
		if (rc < 0 && rc != -ENODATA && rc != -EOPNOTSUPP) {
			acl_free(e_acl);
			return cairn_log_error("getattr(default acl)", rc);
		}
		if (i_acl != NULL)
			i_count = ace_count(i_acl);
	}
	e_count = ace_count(e_acl);

	acldata.naces = 2 * (e_count + i_count);
	acldata.aces = nfs4_ace_alloc(acldata.naces);
	pace = acldata.aces;
	n = posix_acl_2_fsal_acl(e_acl, is_dir, false, &pace);
	if (i_count > 0)
		n += posix_acl_2_fsal_acl(i_acl, true, true, &pace);
	acldata.naces = n;
	acl_free(e_acl);
	if (i_acl != NULL)
		acl_free(i_acl);

	attrs->acl = nfs4_acl_new_entry(&acldata, &aclstatus);
	if (attrs->acl == NULL) {
		LogCrit(COMPONENT_FSAL, "CAIRN: cannot make an ACL entry (%d)",
			aclstatus);
		return fsalstat(ERR_FSAL_SERVERFAULT, 0);
	}
	attrs->valid_mask |= ATTR_ACL;
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* Store `acl` (NULL: remove) as the POSIX ACL xattr `name`, with the caller's creds (the
 * brick lets only the owner or root set an ACL). */
static fsal_status_t set_posix_acl(cairn_fs_t *fs, cairn_id_t id,
				   const char *name, acl_t acl)
{
	cairn_creds_t cb;
	size_t size;
	void *value;
	int count, rc;

	if (acl == NULL) {
		rc = cairn_removexattr(fs, cairn_creds(&cb), id, name);
		if (rc < 0 && rc != -ENODATA)
			return cairn_log_error("setattr(remove acl)", rc);
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	}
	count = acl_entries(acl);
	size = posix_acl_xattr_size(count);
	value = gsh_malloc(size);
	rc = posix_acl_2_xattr(acl, value, size);
	if (rc < 0) {
		gsh_free(value);
		LogMajor(COMPONENT_FSAL, "CAIRN: cannot encode a POSIX ACL of %d entries",
			 count);
		return fsalstat(ERR_FSAL_SERVERFAULT, 0);
	}
	rc = cairn_setxattr(fs, cairn_creds(&cb), id, name, value, size, 0);
	gsh_free(value);
	if (rc < 0)
		return cairn_log_error("setattr(acl)", rc);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

fsal_status_t cairn_acl_set(cairn_fs_t *fs, cairn_id_t id,
			    object_file_type_t kind, fsal_acl_t *fsacl)
{
	bool is_dir = kind == DIRECTORY;
	acl_t e_acl, i_acl = NULL;
	fsal_status_t status;
	fsal_ace_t *ace;

	if (fsacl == NULL || fsacl->naces == 0 ||
	    (kind != REGULAR_FILE && kind != DIRECTORY))
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	/* As knfsd: only ALLOW and DENY ACEs, inheritance only on directories. */
	for (ace = fsacl->aces; ace < fsacl->aces + fsacl->naces; ace++) {
		if ((!IS_FSAL_ACE_ALLOW(*ace) && !IS_FSAL_ACE_DENY(*ace)) ||
		    (!is_dir && IS_FSAL_ACE_HAS_INHERITANCE_FLAGS(*ace))) {
			LogDebug(COMPONENT_FSAL,
				 "CAIRN: ACE type %u flags %#x has no POSIX ACL equivalent",
				 ace->type, ace->flag);
			return fsalstat(ERR_FSAL_INVAL, EINVAL);
		}
	}
	e_acl = fsal_acl_2_posix_acl(fsacl, ACL_TYPE_ACCESS);
	if (e_acl == NULL || acl_valid(e_acl) != 0) {
		LogDebug(COMPONENT_FSAL,
			 "CAIRN: NFSv4 ACL of %u ACEs has no POSIX ACL equivalent",
			 fsacl->naces);
		if (e_acl != NULL)
			acl_free(e_acl);
		return fsalstat(ERR_FSAL_INVAL, EINVAL);
	}
	if (is_dir) {
		i_acl = fsal_acl_2_posix_acl(fsacl, ACL_TYPE_DEFAULT);
		if (i_acl != NULL && acl_valid(i_acl) != 0) {
			acl_free(e_acl);
			acl_free(i_acl);
			return fsalstat(ERR_FSAL_INVAL, EINVAL);
		}
	}
	status = set_posix_acl(fs, id, ACL_EA_ACCESS, e_acl);
	if (!FSAL_IS_ERROR(status) && is_dir)
		status = set_posix_acl(fs, id, ACL_EA_DEFAULT, i_acl);
	acl_free(e_acl);
	if (i_acl != NULL)
		acl_free(i_acl);
	return status;
}
