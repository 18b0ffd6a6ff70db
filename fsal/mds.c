/*
 * FSAL_CAIRN as a pNFS metadata server (MDS): NFSv4.1 FILES layouts (RFC 8881 §13) and
 * Flexible Files layouts (RFC 8435), one type per export.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * A file's layout is one stripe: the whole file on its replica set. The device of a layout
 * names (export, replica set, chain rotation); GETDEVICEINFO answers it with the DS address
 * of the chain head's node (a multipath list is one server's addresses, RFC 8881 §13.5),
 * so a client sends its I/O to the head's node, where the DS (a Ganesha
 * with FSAL_CAIRN in DS mode, ds.c) hands it to libcairn. Where a file lives comes from
 * libcairn's cairn_layout (docs/libcairn.md), without a round trip.
 *
 * A Flexible Files layout makes the replica set the mirror set: a READ layout lists one
 * mirror per brick's DS in chain order rotated by the client ID (ffds_efficiency falling
 * from the first: clients of one file spread over its replicas' DSs), an RW
 * layout the chain head's only (RFC 8435 §8.2: a client writes every mirror, and chain
 * replication already copies the head's writes). A FF device is one brick's DS:
 * ff_device_addr4 with its address, NFSv4.1, tightly coupled (the DS checks no stateid;
 * ffds_stateid is the anonymous one). Encoders: ff.c.
 *
 * Enabled per export: FSAL { Name = CAIRN; ...; PNFS = true; [Layout = flexfiles;]
 *                            DS_Addrs = "n1=ADDR:PORT,..."; }
 * Where each DS listens (DS_Addrs) and whether it answers: dservers.c; a DS that does
 * not is left out of layouts (the next up brick's DS, or no layout). See docs/nfs.md
 * "pNFS".
 */

#include <stdlib.h>
#include <string.h>
#include "fsal.h"
#include "fsal_api.h"
#include "FSAL/fsal_commonlib.h"
#include "pnfs_utils.h"
#include "nfs_convert.h"
#include "nfs_exports.h"
#include "nfs_fh.h"
#include "sal_functions.h"
#include "internal.h"
#include "ff.h"

_Static_assert(CAIRN_GANESHA_FH_VERSION == GANESHA_FH_VERSION &&
	       CAIRN_GANESHA_FH_FLAG_DS == FILE_HANDLE_V4_FLAG_DS &&
	       CAIRN_GANESHA_FH_HEADER == offsetof(struct file_handle_v4, fsopaque),
	       "ff.c's DS handle is Ganesha's file_handle_v4");
_Static_assert(sizeof(struct pnfs_deviceid) == CAIRN_FF_DEVICEID_SIZE,
	       "a pnfs_deviceid is a deviceid4");

/* The stripe unit of a one-stripe layout only bounds the client's request sizes. */
#define CAIRN_STRIPE_UNIT (1 << 20)
/* RFC 8881 §3.3.13 netaddr4 of an IPv4 DS: "tcp" and "a.b.c.d.p1.p2". */
#define CAIRN_DA_ADDR_SIZE 0x1000
#define CAIRN_LOC_BODY_SIZE 0x400
/* A Flexible Files device's rsize and wsize: Ganesha's default MaxRead/MaxWrite. */
#define CAIRN_FF_IO_SIZE (1 << 20)
/* A device id names one brick's DS: devid = brick index + 1 (FILES and Flexible
 * Files). A FILES devid 0 (handed out before) names the DS of the set's chain head. */
#define CAIRN_DEVID_BASE 1

/* ---- export operations ------------------------------------------------------------ */

static void fs_layouttypes(struct fsal_export *export_pub, int32_t *count,
			   const layouttype4 **types)
{
	static const layouttype4 files = LAYOUT4_NFSV4_1_FILES;
	static const layouttype4 flex = LAYOUT4_FLEX_FILES;
	struct cairn_export *export =
		container_of(export_pub, struct cairn_export, export);

	*types = export->layout_type == LAYOUT4_FLEX_FILES ? &flex : &files;
	*count = export->pnfs ? 1 : 0;
}

static uint32_t fs_layout_blocksize(struct fsal_export *export_pub)
{
	return CAIRN_STRIPE_UNIT;
}

/* 0 tells Ganesha the export hands out no layouts (LAYOUTGET: LAYOUTUNAVAILABLE). */
static uint32_t fs_maximum_segments(struct fsal_export *export_pub)
{
	struct cairn_export *export =
		container_of(export_pub, struct cairn_export, export);

	return export->pnfs ? 1 : 0;
}

static size_t fs_loc_body_size(struct fsal_export *export_pub)
{
	return CAIRN_LOC_BODY_SIZE;
}

/* Devices are per (set, rotation) and found from layouts; none are listed. */
static nfsstat4 getdevicelist(struct fsal_export *export_pub, layouttype4 type,
			      void *opaque,
			      bool (*cb)(void *opaque, const uint64_t id),
			      struct fsal_getdevicelist_res *res)
{
	res->eof = true;
	return NFS4_OK;
}

void cairn_mds_export_ops_init(struct export_ops *ops)
{
	ops->fs_layouttypes = fs_layouttypes;
	ops->fs_layout_blocksize = fs_layout_blocksize;
	ops->fs_maximum_segments = fs_maximum_segments;
	ops->fs_loc_body_size = fs_loc_body_size;
	ops->getdevicelist = getdevicelist;
}

/* ---- object operations ----------------------------------------------------------- */

static bool has_up_brick(const cairn_layout_t *lo)
{
	uint32_t i;

	for (i = 0; i < lo->nbricks; i++)
		if (lo->bricks[i].state == CAIRN_BRICK_UP)
			return true;
	return false;
}

nfsstat4 cairn_layoutget_check(object_file_type_t type, layouttype4 served,
			       layouttype4 ltype,
			       layoutiomode4 iomode, uint64_t offset,
			       uint64_t length, uint64_t minlength)
{
	if (ltype != served)
		return NFS4ERR_UNKNOWN_LAYOUTTYPE;
	if (type == DIRECTORY)
		return NFS4ERR_ISDIR;
	if (type != REGULAR_FILE)
		return NFS4ERR_WRONG_TYPE;
	if (iomode != LAYOUTIOMODE4_READ && iomode != LAYOUTIOMODE4_RW)
		return NFS4ERR_BADIOMODE;
	/* RFC 8881 §18.43.3: a zero length, a range past 2^64 - 1 or a minlength beyond
	 * length is INVAL (NFS4_UINT64_MAX means "to the end of file"). */
	if (length == 0)
		return NFS4ERR_INVAL;
	if (length != NFS4_UINT64_MAX && offset > NFS4_UINT64_MAX - length)
		return NFS4ERR_INVAL;
	if (length != NFS4_UINT64_MAX && minlength > length)
		return NFS4ERR_INVAL;
	if (minlength != NFS4_UINT64_MAX && minlength != 0 &&
	    offset > NFS4_UINT64_MAX - minlength)
		return NFS4ERR_INVAL;
	return NFS4_OK;
}

/* The whole file, in the mode asked for; returned on close. */
static void whole_file_segment(struct fsal_layoutget_res *res)
{
	res->segment.offset = 0;
	res->segment.length = NFS4_UINT64_MAX;
	res->return_on_close = true;
	res->last_segment = true;
}

/* READ layouts spread the clients of a file over its mirrors: each client gets them in
 * chain order rotated by its client ID, the first with the highest efficiency (Linux
 * reads at the most efficient mirror and moves down the list when one fails). Every DS
 * reads through libcairn, so any mirror serves any byte; what spreads is the DSs' NFS
 * work and links. */
static void spread_mirrors(struct cairn_ff_mirror *m, uint32_t n, uint32_t rot)
{
	struct cairn_ff_mirror in[CAIRN_LAYOUT_MAX_BRICKS];
	uint32_t k;

	memcpy(in, m, n * sizeof(*m));
	for (k = 0; k < n; k++) {
		m[k] = in[(k + rot) % n];
		m[k].efficiency = n - k;
	}
}

/* A Flexible Files layout: a mirror per DS of the set's bricks that are up, in chain
 * order (the head first, with the highest efficiency; READ: rotated per client,
 * spread_mirrors), the chain head's only for RW. */
static nfsstat4 layoutget_ff(struct cairn_handle *obj, XDR *loc_body,
			     layoutiomode4 iomode, const cairn_layout_t *lo,
			     uint32_t ds_gen, struct fsal_layoutget_res *res)
{
	struct cairn_export *export = obj->export;
	const cairn_layout_t *lo_used = lo;
	struct cairn_ff_mirror m[CAIRN_LAYOUT_MAX_BRICKS];
	fsal_multipath_member_t addr[CAIRN_LAYOUT_MAX_BRICKS];
	uint8_t fh[NFS4_FHSIZE];
	size_t fhlen;
	uint32_t n = 0, ds_down = 0, i, j;
	cairn_attr_t ca;
	int rc;

	for (i = 0; i < lo->nbricks && (n == 0 || iomode != LAYOUTIOMODE4_RW);
	     i++) {
		const cairn_layout_brick_t *b = &lo->bricks[i];
		struct pnfs_deviceid d =
				DEVICE_ID_INIT_ZERO(FSAL_ID_EXPERIMENTAL);
		bool dup = false;

		if (b->state != CAIRN_BRICK_UP)
			continue;
		if (cairn_ds_addr_of(export, b, &addr[n]) < 0) {
			LogMajor(COMPONENT_PNFS,
				 "CAIRN: volume %s: no DS address for node %s (cairnd %s): add it to DS_Addrs",
				 export->volume, b->node, b->addr);
			continue;
		}
		/* two bricks of the set on one node: one DS, one mirror */
		for (j = 0; j < n; j++)
			dup |= addr[j].addr == addr[n].addr &&
			       addr[j].port == addr[n].port;
		if (dup)
			continue;
		/* a DS that does not answer: the next replica's (dservers.c) */
		if (!cairn_ds_up(export, b->node, &addr[n])) {
			ds_down++;
			continue;
		}
		d.device_id2 = export->export.export_id;
		d.device_id4 = lo->set;
		d.devid = (uint64_t)b->index + CAIRN_DEVID_BASE;
		memcpy(m[n].deviceid, &d, sizeof(d));
		m[n].efficiency = lo->nbricks - i;
		n++;
	}
	/* no DS answers: the client does its I/O through the MDS */
	if (n == 0)
		return ds_down != 0 ? NFS4ERR_LAYOUTUNAVAILABLE :
				      NFS4ERR_LAYOUTTRYLATER;
	if (iomode == LAYOUTIOMODE4_READ && n > 1 && op_ctx != NULL &&
	    op_ctx->clientid != NULL)
		spread_mirrors(m, n, (uint32_t)(*op_ctx->clientid % n));
	/* ffds_user/ffds_group: the file's owner (a loosely coupled client's AUTH_SYS
	 * identity at the DS; a tightly coupled one uses its own) */
	rc = cairn_getattr(export->fs, NULL, obj->key.wire.inode, &ca);
	if (rc < 0) {
		LogMajor(COMPONENT_PNFS, "CAIRN: volume %s: LAYOUTGET getattr: %s",
			 export->volume, cairn_last_error_message());
		return posix2nfs4_error(-rc);
	}
	fhlen = cairn_ff_ds_handle(fh, sizeof(fh), export->export.export_id,
				   &obj->key.wire, sizeof(obj->key.wire));
	/* FF_FLAGS_NO_IO_THRU_MDS off: a client that cannot reach a DS goes through the
	 * MDS; LAYOUTCOMMIT on: the MDS's caches learn the size from it */
	if (fhlen == 0 ||
	    !cairn_ff_encode_layout(loc_body, CAIRN_STRIPE_UNIT, m, n, fh,
				    (uint32_t)fhlen, ca.uid, ca.gid, 0, 0)) {
		LogMajor(COMPONENT_PNFS,
			 "CAIRN: volume %s: cannot encode a Flexible Files layout of %u mirrors",
			 export->volume, n);
		return NFS4ERR_SERVERFAULT;
	}
	whole_file_segment(res);
	cairn_layouts_granted(export, obj->key.wire.inode, lo_used, ds_gen);
	return NFS4_OK;
}

/* Ganesha 4.3's LAYOUTGET drops one reference too many on a layout state the client
 * names by its layout stateid: acquire_layout_state (nfs4_op_layoutget.c) hands back the
 * state nfs4_Check_Stateid referenced but drops that reference on its way out, and
 * nfs4_op_layoutget drops it again at its end. Every second LAYOUTGET on a file (the
 * Linux client sends them with the layout stateid, and its Flexible Files driver does so
 * after a data server failed) so freed the layout state while the file, the client and
 * the export still listed it; the next walk of those lists (the reaper expiring the
 * client, a CLOSE, a LAYOUTRETURN) locked its destroyed mutex and aborted Ganesha
 * ("get_state_obj_export_owner_refs: Error 22 ... state_mutex", nfs4_state.c:577).
 * The FSAL gives that reference back. It is called once per LAYOUTGET that got a layout
 * state (one segment per layout), while that state counts the LAYOUTGET as granting; a
 * state with a stateid handed out before (seqid > 0) is one the client named (a new
 * state has seqid 0). The client's states are found through its session, the one
 * SEQUENCE put into op_ctx->clientid. tests/nfs/pnfs-state.sh. */
#if GANESHA_VERSION_MAJOR != 4
/* Written against Ganesha 4.3's nfs4_op_layoutget.c: on another Ganesha, check whether
 * LAYOUTGET still drops that reference twice (keep this) or not (remove it: it would leak
 * a reference per LAYOUTGET with a layout stateid). */
#error "layoutget_state_ref_fixup was written for Ganesha 4.3's LAYOUTGET: review it"
#endif
static void layoutget_state_ref_fixup(struct fsal_obj_handle *obj)
{
	nfs41_session_t *session;
	state_owner_t *owner;
	struct glist_head *g;

	if (op_ctx == NULL || op_ctx->clientid == NULL ||
	    op_ctx->nfs_vers != 4 || op_ctx->nfs_minorvers == 0)
		return;
	session = container_of(op_ctx->clientid, nfs41_session_t, clientid);
	if (session->clientid_record == NULL)
		return;
	owner = &session->clientid_record->cid_owner;
	PTHREAD_MUTEX_lock(&owner->so_mutex);
	glist_for_each(g, &owner->so_owner.so_nfs4_owner.so_state_list) {
		state_t *s = glist_entry(g, state_t, state_owner_list);
		bool same;

		if (s->state_type != STATE_TYPE_LAYOUT || s->state_seqid == 0 ||
		    s->state_data.layout.granting == 0)
			continue;
		PTHREAD_MUTEX_lock(&s->state_mutex);
		same = s->state_obj != NULL && s->state_obj->fileid == obj->fileid &&
		       s->state_obj->fsid.major == obj->fsid.major &&
		       s->state_obj->fsid.minor == obj->fsid.minor;
		PTHREAD_MUTEX_unlock(&s->state_mutex);
		if (same) {
			inc_state_t_ref(s);
			break;
		}
	}
	PTHREAD_MUTEX_unlock(&owner->so_mutex);
}

static nfsstat4 layoutget(struct fsal_obj_handle *obj_pub, XDR *loc_body,
			  const struct fsal_layoutget_arg *arg,
			  struct fsal_layoutget_res *res)
{
	struct cairn_handle *obj =
		container_of(obj_pub, struct cairn_handle, handle);
	struct cairn_export *export = obj->export;
	struct pnfs_deviceid deviceid =
				DEVICE_ID_INIT_ZERO(FSAL_ID_EXPERIMENTAL);
	struct gsh_buffdesc fh = { .addr = &obj->key.wire,
				   .len = sizeof(obj->key.wire) };
	uint16_t ds_id = export->export.export_id;
	cairn_layout_t lo;
	const cairn_layout_t *lo_used = &lo;
	fsal_multipath_member_t ds;
	uint32_t ds_gen, i;
	nfsstat4 st;
	int rc;

	layoutget_state_ref_fixup(obj_pub);
	if (!export->pnfs)
		return NFS4ERR_LAYOUTUNAVAILABLE;
	st = cairn_layoutget_check(obj_pub->type, export->layout_type, arg->type,
				   res->segment.io_mode, res->segment.offset,
				   res->segment.length, arg->minlength);
	if (st != NFS4_OK) {
		LogDebug(COMPONENT_PNFS,
			 "CAIRN: volume %s: LAYOUTGET type %d iomode %d offset %" PRIu64
			 " length %" PRIu64 " minlength %" PRIu64 ": %s",
			 export->volume, arg->type, res->segment.io_mode,
			 res->segment.offset, res->segment.length,
			 arg->minlength, nfsstat4_to_str(st));
		return st;
	}
	/* before the layout is read: a DS that changes state after this is checked
	 * again (recall.c) */
	ds_gen = cairn_ds_gen(export);
	rc = cairn_layout(export->fs, obj->key.wire.inode, &lo);
	if (rc < 0) {
		LogMajor(COMPONENT_PNFS, "CAIRN: volume %s: cairn_layout: %s",
			 export->volume, cairn_last_error_message());
		return posix2nfs4_error(-rc);
	}
	if (!has_up_brick(&lo))	/* nobody can serve it now, the MDS neither */
		return NFS4ERR_LAYOUTTRYLATER;

	if (export->layout_type == LAYOUT4_FLEX_FILES)
		return layoutget_ff(obj, loc_body, res->segment.io_mode, &lo,
				    ds_gen, res);
	/* the device names one brick's DS (devid = its index + 1), so what a client
	 * caches of it never changes (RFC 8881 §12.2.10): the chain head's, or, if that
	 * DS does not answer (dservers.c), the DS of the next up brick in chain order
	 * that answers; if none does, no layout: the client does its I/O through the
	 * MDS. A new head comes with a recall and a new device (recall.c). */
	for (i = 0; i < lo.nbricks; i++) {
		if (lo.bricks[i].state != CAIRN_BRICK_UP ||
		    cairn_ds_addr_of(export, &lo.bricks[i], &ds) < 0)
			continue;
		if (cairn_ds_up(export, lo.bricks[i].node, &ds)) {
			deviceid.devid = (uint64_t)lo.bricks[i].index +
					 CAIRN_DEVID_BASE;
			break;
		}
	}
	if (deviceid.devid == 0) {
		LogDebug(COMPONENT_PNFS,
			 "CAIRN: volume %s: LAYOUTGET: no data server of set %u answers",
			 export->volume, lo.set);
		return NFS4ERR_LAYOUTUNAVAILABLE;
	}
	deviceid.device_id1 = (uint8_t)lo.rotation;
	deviceid.device_id2 = export->export.export_id;
	deviceid.device_id4 = lo.set;
	/* sparse striping over one stripe: DS offsets are file offsets; COMMIT goes
	 * to the DS (no NFL4_UFLG_COMMIT_THRU_MDS) */
	st = FSAL_encode_file_layout(loc_body, &deviceid, CAIRN_STRIPE_UNIT, 0,
				     0, &ds_id, 1, &fh);
	if (st != NFS4_OK) {
		LogMajor(COMPONENT_PNFS,
			 "CAIRN: volume %s: cannot encode a FILES layout: %s",
			 export->volume, nfsstat4_to_str(st));
		return st;
	}
	whole_file_segment(res);
	cairn_layouts_granted(export, obj->key.wire.inode, lo_used, ds_gen);
	return NFS4_OK;
}

/* One device error a Flexible Files client reported in LAYOUTRETURN: logged with the
 * brick and node the device names (an operator sees which DS clients cannot use), and
 * that DS is probed at once. */
static void log_ff_ioerr(const struct cairn_ff_ioerr *e, void *arg)
{
	struct cairn_export *export = arg;
	struct pnfs_deviceid d;
	const cairn_layout_brick_t *b = NULL;
	cairn_layout_t lo;
	uint32_t i;

	memcpy(&d, e->deviceid, sizeof(d));
	if (d.devid >= CAIRN_DEVID_BASE &&
	    cairn_set_layout(export->fs, d.device_id4, 0, &lo) == 0)
		for (i = 0; i < lo.nbricks; i++)
			if ((uint64_t)lo.bricks[i].index + CAIRN_DEVID_BASE ==
			    d.devid)
				b = &lo.bricks[i];
	LogEvent(COMPONENT_PNFS,
		 "CAIRN: volume %s: a client reports that the data server of brick %" PRIu64
		 " (node %s, set %u) failed %s with %s at %" PRIu64 "+%" PRIu64,
		 export->volume, d.devid - CAIRN_DEVID_BASE, b ? b->node : "?",
		 d.device_id4, nfsop4_to_str(e->opnum),
		 nfsstat4_to_str(e->status), e->offset, e->length);
	/* probe it now: if it is down, its layouts are recalled at once, not after
	 * the probe's 3 failures (dservers.c) */
	if (b != NULL)
		cairn_ds_suspect(export, b);
}

static nfsstat4 layoutreturn(struct fsal_obj_handle *obj_pub, XDR *lrf_body,
			     const struct fsal_layoutreturn_arg *arg)
{
	struct cairn_handle *obj =
		container_of(obj_pub, struct cairn_handle, handle);

	if (arg->lo_type != obj->export->layout_type)
		return NFS4ERR_UNKNOWN_LAYOUTTYPE;
	/* a FF client's ff_layoutreturn4: its I/O error reports are logged (Ganesha
	 * resets the stream after the last segment; ours is the only one), statistics
	 * are not read */
	if (lrf_body != NULL && arg->lo_type == LAYOUT4_FLEX_FILES &&
	    arg->circumstance == circumstance_client &&
	    cairn_ff_decode_ioerrs(lrf_body, log_ff_ioerr, obj->export) < 0)
		LogInfo(COMPONENT_PNFS,
			"CAIRN: volume %s: LAYOUTRETURN with an ff_layoutreturn4 that does not decode",
			obj->export->volume);
	/* a segment Ganesha forgets (returned, on close, forgotten, revoked): one less
	 * to recall on a map change (recall.c) */
	if (arg->circumstance != circumstance_reclaim && arg->dispose)
		cairn_layouts_returned(obj->export, obj->key.wire.inode);
	return NFS4_OK;
}

nfsstat4 cairn_layoutcommit_check(layouttype4 served,
				  const struct fsal_layoutcommit_arg *arg)
{
	const struct pnfs_segment *seg = &arg->segment;

	if (arg->type != served)
		return NFS4ERR_UNKNOWN_LAYOUTTYPE;
	if (!arg->new_offset)
		return NFS4_OK;
	/* RFC 8881 §18.42.3: a last write offset outside the layout is INVAL; so is one
	 * no file can reach (the largest offset is 2^63 - 2). */
	if (arg->last_write >= INT64_MAX)
		return NFS4ERR_INVAL;
	if (arg->last_write < seg->offset ||
	    (seg->length != NFS4_UINT64_MAX &&
	     arg->last_write - seg->offset >= seg->length))
		return NFS4ERR_INVAL;
	return NFS4_OK;
}

/* LAYOUTCOMMIT: the DSs wrote through libcairn, so the bricks already have the data and
 * its size; a size the client reports past the backend's (a write the DS has not made
 * visible yet cannot exist: DS writes go to the chain head) or a later mtime is set.
 * The size only ever grows: it is extended with fallocate(mode 0) of the last written
 * byte, which the head brick applies under its own lock and which never shrinks a file
 * (a size setattr decided from a size read before could cut off a write another client
 * made in between). */
static nfsstat4 layoutcommit(struct fsal_obj_handle *obj_pub, XDR *lou_body,
			     const struct fsal_layoutcommit_arg *arg,
			     struct fsal_layoutcommit_res *res)
{
	struct cairn_handle *obj =
		container_of(obj_pub, struct cairn_handle, handle);
	struct cairn_export *export = obj->export;
	cairn_attr_t ca, in;
	uint32_t mask = 0;
	nfsstat4 st;
	int rc;

	st = cairn_layoutcommit_check(export->layout_type, arg);
	if (st != NFS4_OK) {
		LogDebug(COMPONENT_PNFS,
			 "CAIRN: volume %s: LAYOUTCOMMIT last write %" PRIu64 " (new %d) outside segment %" PRIu64
			 "+%" PRIu64 ": %s", export->volume, arg->last_write,
			 arg->new_offset, arg->segment.offset,
			 arg->segment.length, nfsstat4_to_str(st));
		return st;
	}
	rc = cairn_getattr(export->fs, NULL, obj->key.wire.inode, &ca);
	if (rc < 0) {
		LogMajor(COMPONENT_PNFS, "CAIRN: volume %s: LAYOUTCOMMIT: %s",
			 export->volume, cairn_last_error_message());
		return posix2nfs4_error(-rc);
	}
	memset(&in, 0, sizeof(in));
	if (arg->new_offset && arg->last_write + 1 > ca.size) {
		rc = cairn_fallocate(export->fs, NULL, obj->key.wire.inode, 0,
				     arg->last_write, 1);
		if (rc >= 0)
			rc = cairn_getattr(export->fs, NULL,
					   obj->key.wire.inode, &ca);
		if (rc < 0) {
			LogMajor(COMPONENT_PNFS,
				 "CAIRN: volume %s: LAYOUTCOMMIT extending to %" PRIu64 ": %s",
				 export->volume, arg->last_write + 1,
				 cairn_last_error_message());
			return posix2nfs4_error(-rc);
		}
	}
	if (arg->time_changed &&
	    ((int64_t)arg->new_time.seconds > (int64_t)ca.mtime.tv_sec ||
	     ((int64_t)arg->new_time.seconds == (int64_t)ca.mtime.tv_sec &&
	      arg->new_time.nseconds > (uint32_t)ca.mtime.tv_nsec))) {
		in.mtime.tv_sec = arg->new_time.seconds;
		in.mtime.tv_nsec = arg->new_time.nseconds;
		mask |= CAIRN_SETATTR_MTIME;
	}
	if (mask != 0) {
		rc = cairn_setattr(export->fs, NULL, obj->key.wire.inode, &in,
				   mask, &ca);
		if (rc < 0) {
			LogMajor(COMPONENT_PNFS,
				 "CAIRN: volume %s: LAYOUTCOMMIT setattr: %s",
				 export->volume, cairn_last_error_message());
			return posix2nfs4_error(-rc);
		}
	}
	if (arg->new_offset) {
		res->size_supplied = true;
		res->new_size = ca.size;
	}
	res->commit_done = true;
	return NFS4_OK;
}

void cairn_mds_handle_ops_init(struct fsal_obj_ops *ops)
{
	ops->layoutget = layoutget;
	ops->layoutreturn = layoutreturn;
	ops->layoutcommit = layoutcommit;
}

/* ---- GETDEVICEINFO (module operation) ------------------------------------------ */

static size_t fs_da_addr_size(struct fsal_module *fsal_hdl)
{
	return CAIRN_DA_ADDR_SIZE;
}

/* Encode nfsv4_1_file_layout_ds_addr4 for one stripe: stripe_indices <0>, and one
 * multipath list: the DS of brick DEVID - 1; with DEVID 0 (a device of an older MDS),
 * the DS of the first brick in chain order that is up (the head), else of the first one
 * with an address. */
static nfsstat4 encode_ds_addr(XDR *xdr, const struct cairn_export *export,
			       const cairn_layout_t *lo, uint64_t devid)
{
	fsal_multipath_member_t hosts[CAIRN_LAYOUT_MAX_BRICKS];
	uint32_t one = 1, zero = 0, n = 0, pass, i, j;

	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < lo->nbricks; i++) {
			const cairn_layout_brick_t *b = &lo->bricks[i];
			fsal_multipath_member_t h;
			bool dup = false;

			if (devid != 0 ? pass != 0 ||
			    (uint64_t)b->index + CAIRN_DEVID_BASE != devid :
			    (b->state == CAIRN_BRICK_UP) != (pass == 0))
				continue;
			if (cairn_ds_addr_of(export, b, &h) < 0) {
				LogMajor(COMPONENT_PNFS,
					 "CAIRN: volume %s: no DS address for node %s (cairnd %s): add it to DS_Addrs",
					 export->volume, b->node, b->addr);
				continue;
			}
			for (j = 0; j < n; j++)
				dup |= hosts[j].addr == h.addr &&
				       hosts[j].port == h.port;
			if (!dup)
				hosts[n++] = h;
		}
	}
	/* RFC 8881 §13.5: a multipath list names addresses of ONE data server (the Linux
	 * client tries to trunk them onto one session, "Session trunking failed"); the
	 * other replicas' DSs are different servers: only the head's DS is listed. */
	if (n > 1)
		n = 1;
	if (n == 0)
		return NFS4ERR_NOENT;
	if (!inline_xdr_u_int32_t(xdr, &one) ||
	    !inline_xdr_u_int32_t(xdr, &zero) ||
	    !inline_xdr_u_int32_t(xdr, &one))
		return NFS4ERR_SERVERFAULT;
	return FSAL_encode_v4_multipath(xdr, n, hosts);
}

/* A Flexible Files device: one brick's DS (ff_device_addr4, NFSv4.1, tightly coupled). */
static nfsstat4 encode_ff_device(XDR *xdr, const struct cairn_export *export,
				 const struct pnfs_deviceid *deviceid)
{
	fsal_multipath_member_t h;
	cairn_layout_t lo;
	uint32_t i;
	int rc;

	if (deviceid->devid < CAIRN_DEVID_BASE)
		return NFS4ERR_NOENT;
	rc = cairn_set_layout(export->fs, deviceid->device_id4, 0, &lo);
	if (rc < 0) {
		LogInfo(COMPONENT_PNFS,
			"CAIRN: volume %s: GETDEVICEINFO set %u: %s",
			export->volume, deviceid->device_id4,
			cairn_last_error_message());
		return NFS4ERR_NOENT;
	}
	for (i = 0; i < lo.nbricks; i++) {
		const cairn_layout_brick_t *b = &lo.bricks[i];

		if ((uint64_t)b->index + CAIRN_DEVID_BASE != deviceid->devid)
			continue;
		if (cairn_ds_addr_of(export, b, &h) < 0) {
			LogMajor(COMPONENT_PNFS,
				 "CAIRN: volume %s: no DS address for node %s (cairnd %s): add it to DS_Addrs",
				 export->volume, b->node, b->addr);
			return NFS4ERR_NOENT;
		}
		if (!cairn_ff_encode_device_addr(xdr, h.addr, h.port, 1,
						 CAIRN_FF_IO_SIZE,
						 CAIRN_FF_IO_SIZE))
			return NFS4ERR_TOOSMALL;
		return NFS4_OK;
	}
	return NFS4ERR_NOENT;
}

static nfsstat4 getdeviceinfo(struct fsal_module *fsal_hdl, XDR *da_addr_body,
			      const layouttype4 type,
			      const struct pnfs_deviceid *deviceid)
{
	struct glist_head *g;
	nfsstat4 st = NFS4ERR_NOENT;

	if (type != LAYOUT4_NFSV4_1_FILES && type != LAYOUT4_FLEX_FILES)
		return NFS4ERR_UNKNOWN_LAYOUTTYPE;

	PTHREAD_RWLOCK_rdlock(&fsal_hdl->lock);
	glist_for_each(g, &fsal_hdl->exports) {
		struct fsal_export *e =
			glist_entry(g, struct fsal_export, exports);
		struct cairn_export *export =
			container_of(e, struct cairn_export, export);
		cairn_layout_t lo;
		int rc;

		if (e->export_id != deviceid->device_id2 || !export->pnfs)
			continue;
		if (export->layout_type != type) {
			st = NFS4ERR_UNKNOWN_LAYOUTTYPE;
			break;
		}
		if (type == LAYOUT4_FLEX_FILES) {
			st = encode_ff_device(da_addr_body, export, deviceid);
			break;
		}
		rc = cairn_set_layout(export->fs, deviceid->device_id4,
				      deviceid->device_id1, &lo);
		if (rc < 0) {
			LogInfo(COMPONENT_PNFS,
				"CAIRN: volume %s: GETDEVICEINFO set %u rotation %u: %s",
				export->volume, deviceid->device_id4,
				deviceid->device_id1,
				cairn_last_error_message());
			st = NFS4ERR_NOENT;
			break;
		}
		st = encode_ds_addr(da_addr_body, export, &lo,
				    deviceid->devid);
		break;
	}
	PTHREAD_RWLOCK_unlock(&fsal_hdl->lock);
	return st;
}

void cairn_mds_module_ops_init(struct fsal_ops *ops)
{
	ops->getdeviceinfo = getdeviceinfo;
	ops->fs_da_addr_size = fs_da_addr_size;
}
