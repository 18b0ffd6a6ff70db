/*
 * FSAL_CAIRN as a pNFS data server (DS) on a brick node.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 *   EXPORT { Export_Id = ID; ...; FSAL { Name = CAIRN; Volume = vol0;
 *                                        Servers = "127.0.0.1:7420"; DS = true; } }
 *
 * As in Ganesha's other pNFS FSALs, a DS is an export of the DS's Ganesha whose id is the
 * MDS export's (the MDS puts its export id in the DS file handles of its layouts, mds.c):
 * Ganesha's DS I/O path needs that export (MaxWrite, MaxRead, ...). Servers is the node's
 * own cairnd. A DS file handle carries the MDS's wire handle (volume id + inode id,
 * internal.h), so it is the same on every DS and survives restarts of the DS, the MDS and
 * cairnd. READ, WRITE and COMMIT become cairn_read, cairn_write (UNSTABLE) /
 * cairn_write_through + cairn_fsync (DATA_SYNC, FILE_SYNC; answered DATA_SYNC4, so that the
 * client sends LAYOUTCOMMIT: see dsh_write) and cairn_fsync, run as root:
 * the MDS checked the client's access when it handed out the layout (the DS checks no
 * stateid; see docs/nfs.md "pNFS").
 */

#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fsal.h"
#include "fsal_api.h"
#include "FSAL/fsal_commonlib.h"
#include "pnfs_utils.h"
#include "internal.h"

struct cairn_ds_handle {
	struct fsal_ds_handle ds;
	struct cairn_export *export;
	cairn_id_t id;
};

/* Ganesha's default DS ops (declared in its private src/FSAL/fsal_private.h) */
extern struct fsal_pnfs_ds_ops def_pnfs_ds_ops;

/* WRITE/COMMIT verifier: changes when the DS restarts (its write-behind is then gone). */
static verifier4 ds_verifier;

static fsal_status_t create_fsal_pnfs_ds(struct fsal_module *const fsal_hdl,
					 void *parse_node,
					 struct fsal_pnfs_ds **const handle)
{
	/* A DS block of its own has no export for Ganesha's DS I/O path: refuse it. */
	if (parse_node != NULL) {
		LogCrit(COMPONENT_PNFS,
			"CAIRN: a DS block is not supported: give the EXPORT of the MDS's export id DS = true in its FSAL block");
		return fsalstat(ERR_FSAL_INVAL, 0);
	}
	/* pnfs_ds_alloc and fsal_pnfs_ds_init are not exported by Debian's
	 * libganesha_nfsd: done here as they do. */
	if (*handle == NULL)
		*handle = gsh_calloc(1, sizeof(struct fsal_pnfs_ds));
	(*handle)->ds_refcount = 1;
	fsal_hdl->m_ops.fsal_pnfs_ds_ops(&(*handle)->s_ops);
	(*handle)->fsal = fsal_hdl;
	fsal_get(fsal_hdl);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

int cairn_ds_export_init(struct cairn_export *export)
{
	struct fsal_module *fsal = export->export.fsal;
	struct fsal_pnfs_ds *pds = NULL;
	fsal_status_t st;

	if (ds_verifier[0] == 0 && ds_verifier[7] == 0) {
		uint64_t boot = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();

		memcpy(ds_verifier, &boot, sizeof(ds_verifier));
	}
	st = fsal->m_ops.create_fsal_pnfs_ds(fsal, NULL, &pds);
	if (FSAL_IS_ERROR(st))
		return -EINVAL;
	/* the DS id is the export id (Ganesha's convention, as FSAL_GLUSTER's) */
	pds->id_servers = op_ctx->ctx_export->export_id;
	pds->mds_export = op_ctx->ctx_export;
	pds->mds_fsal_export = &export->export;
	if (!pnfs_ds_insert(pds)) {
		LogCrit(COMPONENT_PNFS,
			"CAIRN: volume %s: pNFS DS id %u already in use",
			export->volume, (unsigned int)pds->id_servers);
		pnfs_ds_put(pds);
		return -EEXIST;
	}
	LogEvent(COMPONENT_PNFS, "CAIRN: DS %u serves volume %s (servers %s)",
		 (unsigned int)pds->id_servers, export->volume,
		 export->servers);
	return 0;
}

static void ds_release(struct fsal_pnfs_ds *const pds)
{
	fsal_pnfs_ds_fini(pds);
	gsh_free(pds);
}

static nfsstat4 make_ds_handle(struct fsal_pnfs_ds *const pds,
			       const struct gsh_buffdesc *const hdl_desc,
			       struct fsal_ds_handle **const handle, int flags)
{
	const struct cairn_wire_handle *wire = hdl_desc->addr;
	struct cairn_export *export;
	struct cairn_ds_handle *h;

	/* Ganesha 4.3 drops the request's reference on the DS twice when a compound ends
	 * with a DS handle current (nfs4_Compound's clear_op_context_export() puts
	 * op_ctx->ctx_pnfs_ds without clearing it, then release_op_context() puts it
	 * again): after two such compounds the DS would be freed and its ops poisoned (a
	 * NULL call in the next PUTFH). One more reference per DS PUTFH (this is called
	 * once for each, whatever it answers) keeps the count from ever reaching zero; the
	 * surplus of a compound with two DS PUTFHs only keeps the DS alive, which it is
	 * for the life of its export anyway. */
	pnfs_ds_get_ref(pds);
	*handle = NULL;
	if (pds->mds_fsal_export == NULL)
		return NFS4ERR_SERVERFAULT;
	export = container_of(pds->mds_fsal_export, struct cairn_export,
			      export);
	if (hdl_desc->len != sizeof(*wire))
		return NFS4ERR_BADHANDLE;
	if (memcmp(wire->volume, export->volume_id,
		   sizeof(export->volume_id)) != 0)
		return NFS4ERR_STALE;	/* another volume's handle */
	h = gsh_calloc(1, sizeof(*h));
	h->export = export;
	h->id = wire->inode;
	*handle = &h->ds;
	return NFS4_OK;
}

static void dsh_release(struct fsal_ds_handle *const ds_pub)
{
	gsh_free(container_of(ds_pub, struct cairn_ds_handle, ds));
}

static nfsstat4 ds_error(const char *op, const struct cairn_ds_handle *h,
			 long rc)
{
	char hex[33];

	(void) cairn_id_to_hex(h->id, hex, sizeof(hex));
	LogInfo(COMPONENT_PNFS, "CAIRN: DS %s of %s in volume %s: %s (errno %ld)",
		op, hex, h->export->volume, cairn_last_error_message(), -rc);
	return posix2nfs4_error((int)-rc);
}

static nfsstat4 dsh_read(struct fsal_ds_handle *const ds_pub,
			 const stateid4 *stateid, const offset4 offset,
			 const count4 requested_length, void *const buffer,
			 count4 *const supplied_length, bool *const end_of_file)
{
	struct cairn_ds_handle *h =
		container_of(ds_pub, struct cairn_ds_handle, ds);
	ssize_t n;

	n = cairn_read(h->export->fs, NULL, h->id, offset, buffer,
		       requested_length);
	if (n < 0)
		return ds_error("read", h, n);
	*supplied_length = n;
	/* cairn_read is short only at end of file */
	*end_of_file = (count4)n < requested_length;
	return NFS4_OK;
}

static nfsstat4 dsh_write(struct fsal_ds_handle *const ds_pub,
			  const stateid4 *stateid, const offset4 offset,
			  const count4 write_length, const void *buffer,
			  const stable_how4 stability_wanted,
			  count4 *const written_length,
			  verifier4 *const writeverf,
			  stable_how4 *const stability_got)
{
	struct cairn_ds_handle *h =
		container_of(ds_pub, struct cairn_ds_handle, ds);
	ssize_t n;
	int rc;

	memcpy(*writeverf, ds_verifier, sizeof(verifier4));
	if (stability_wanted == UNSTABLE4) {
		n = cairn_write(h->export->fs, NULL, h->id, offset, buffer,
				write_length);
		if (n < 0)
			return ds_error("write", h, n);
		*stability_got = UNSTABLE4;
	} else {
		n = cairn_write_through(h->export->fs, NULL, h->id, offset,
					buffer, write_length);
		if (n < 0)
			return ds_error("write", h, n);
		rc = cairn_fsync(h->export->fs, NULL, h->id, false);
		if (rc < 0)
			return ds_error("write(fsync)", h, rc);
		/* The data and the file's size are on the bricks now, but not in the MDS's
		 * view: its mdcache (and libcairn's cache there) still holds the size from
		 * before. A FILE_SYNC4 answer would tell the client that the metadata is
		 * committed too (RFC 5661 erratum 2751), and Linux then sends no LAYOUTCOMMIT:
		 * the file reads back at its old size. DATA_SYNC4 makes the client send
		 * LAYOUTCOMMIT with the last byte written, which the MDS applies
		 * (mds.c layoutcommit) and which drops its cached attributes. */
		*stability_got = DATA_SYNC4;
	}
	*written_length = n;
	return NFS4_OK;
}

static nfsstat4 dsh_commit(struct fsal_ds_handle *const ds_pub,
			   const offset4 offset, const count4 count,
			   verifier4 *const writeverf)
{
	struct cairn_ds_handle *h =
		container_of(ds_pub, struct cairn_ds_handle, ds);
	int rc;

	memcpy(*writeverf, ds_verifier, sizeof(verifier4));
	rc = cairn_fsync(h->export->fs, NULL, h->id, false);
	if (rc < 0)
		return ds_error("commit", h, rc);
	return NFS4_OK;
}

static void pnfs_ds_ops_init(struct fsal_pnfs_ds_ops *ops)
{
	memcpy(ops, &def_pnfs_ds_ops, sizeof(*ops));
	ops->ds_release = ds_release;
	ops->make_ds_handle = make_ds_handle;
	ops->dsh_release = dsh_release;
	ops->dsh_read = dsh_read;
	ops->dsh_write = dsh_write;
	ops->dsh_commit = dsh_commit;
}

void cairn_ds_module_ops_init(struct fsal_ops *ops)
{
	ops->create_fsal_pnfs_ds = create_fsal_pnfs_ds;
	ops->fsal_pnfs_ds_ops = pnfs_ds_ops_init;
}
