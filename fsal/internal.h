/*
 * FSAL_CAIRN internal header: NFS-Ganesha FSAL over libcairn.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * The FSAL is a thin translation layer: every object operation is one libcairn call
 * (plus errno conversion through cairn2fsal_error, the one place errors are mapped).
 * Objects are named by their 128-bit cairn id; the wire handle is the volume id followed
 * by the inode id (32 bytes), so a handle is the same on every gateway and survives
 * Ganesha and cairnd restarts.
 */

#ifndef FSAL_CAIRN_INTERNAL_H
#define FSAL_CAIRN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include "fsal.h"
#include "fsal_types.h"
#include "fsal_api.h"
#include "fsal_convert.h"
#include "fsal_up.h"
#include "FSAL/fsal_commonlib.h"
#include "pnfs_utils.h"
#include "cairn.h"

#define CAIRN_FSAL_NAME "CAIRN"

struct cairn_fsal_module {
	struct fsal_module fsal;
	struct fsal_obj_ops handle_ops;
};
extern struct cairn_fsal_module CairnFSM;

/* The wire handle: 32 bytes, identical on every gateway, never reused. */
struct cairn_wire_handle {
	uint8_t volume[16];
	cairn_id_t inode;
} __attribute__ ((__packed__));

/* The cache key: the wire handle plus the export id (two exports of one volume have
 * distinct mounts, so their objects must not share an mdcache entry). */
struct cairn_handle_key {
	struct cairn_wire_handle wire;
	uint16_t export_id;
} __attribute__ ((__packed__));

/* FSAL { DS_Addrs = "NODE=IPV4:PORT,..." }: where each brick node's pNFS DS listens. */
#define CAIRN_MAX_DS_ADDRS 64
struct cairn_ds_addr {
	char node[64];
	uint32_t addr;			/* IPv4, host order */
	uint16_t port;
};

/* A DS the MDS hands out in layouts, probed for liveness (dservers.c). */
struct cairn_ds_state {
	char node[64];			/* for logs: the brick node it serves */
	uint32_t addr;			/* IPv4, host order */
	uint16_t port;
	bool down;			/* failed DS_Probe_Fails probes in a row */
	uint32_t fails;			/* failed probes in a row */
	int err;			/* errno of the last failed probe */
	bool suspect;			/* a client reported an error: probe it now,
					 * one failed probe is down */
};

/* The data servers of a PNFS export and the thread probing them (dservers.c). */
struct cairn_ds_watch {
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	struct cairn_ds_state ds[CAIRN_MAX_DS_ADDRS];
	size_t nds;
	uint32_t gen;			/* bumped on every DS up/down change */
	pthread_t thread;
	bool running;
	bool stop;
};

struct cairn_export {
	struct fsal_export export;
	cairn_fs_t *fs;			/* one libcairn mount per export */
	char *volume;			/* FSAL { Volume = ... } */
	char *servers;			/* FSAL { Servers = "host:port,..." } */
	char *credentials;		/* FSAL { Credentials = "/etc/cairn/gateway.pem" } */
	bool acl;			/* FSAL { ACL = true; }: NFSv4 ACLs */
	bool pnfs;			/* FSAL { PNFS = true; }: layouts (mds.c) */
	uint32_t layout_type;		/* FSAL { Layout = files | flexfiles; }: the
					 * layouttype4 a PNFS export hands out */
	bool ds_role;			/* FSAL { DS = true; }: a pNFS DS (ds.c) */
	char *ds_addrs;			/* FSAL { DS_Addrs = ... } as given */
	uint32_t ds_probe_fails;	/* FSAL { DS_Probe_Fails = 3; }: failed probes
					 * in a row before a DS is down */
	struct cairn_ds_addr ds[CAIRN_MAX_DS_ADDRS];
	size_t nds;
	uint8_t volume_id[16];
	struct cairn_handle *root;
	const struct fsal_up_vector *up_ops;
	/* pNFS layouts handed out and not returned, checked on map changes (recall.c) */
	pthread_mutex_t lo_mutex;
	struct glist_head lo_granted;	/* struct cairn_granted */
	uint64_t lo_epoch;		/* newest map epoch checked */
	uint32_t lo_jobs;		/* checks queued or running */
	uint32_t lo_closing;		/* the export is going away */
	bool lo_ready;
	/* the DSs layouts name, probed: a dead one is left out of layouts (dservers.c) */
	struct cairn_ds_watch ds_watch;
};

/* Per open state (NFSv4 open/lock state, NLM share, global fd). libcairn is stateless by
 * id, so an "fd" is only the open mode used for share reservations. */
struct cairn_fd {
	fsal_openflags_t openflags;
};

struct cairn_state_fd {
	struct state_t state;
	struct cairn_fd cfd;
};

struct cairn_handle {
	struct fsal_obj_handle handle;
	struct cairn_handle_key key;
	struct cairn_fd fd;		/* global (stateless, NFSv3) open */
	struct fsal_share share;
	struct cairn_export *export;
	/* UNSTABLE writes through this handle not yet covered by a COMMIT: a COMMIT
	 * without any skips the fsync (NFS clients commit what they wrote through the
	 * same server; a write-behind error still surfaces on flush/close). */
	bool unstable;
	/* Made by this handle's open2 (CREATE, OPEN with create) and not written yet: its
	 * first WRITE, if at offset 0 and at most CAIRN_SYNC_FIRST_WRITE bytes (a small
	 * file's whole content), is made durable in its own round trip (cairn_write_sync)
	 * and answered FILE_SYNC, so no COMMIT round trip follows. */
	bool fresh;
	/* NFSv4 delegations Ganesha granted on this file (under the object's st_lock,
	 * which Ganesha holds around lease_op2): the backend delegation of this export's
	 * mount is taken on the first and given back with the last. */
	uint32_t delegs;
	bool deleg_write;
};

/* Longest time (s) mdcache may trust what the FSAL returned (attributes, and a
 * directory's cached entries, which it checks against the directory's mtime when the
 * attributes expire). A brick's read lease lasts 10 s (cairnd/src/leases.rs LEASE); while
 * it runs, a change by another client is recalled (up.c invalidates mdcache). After it
 * lapses nothing tells us, so mdcache must have refetched by then: 10 s minus libcairn's
 * own cache (cache_timeout, 1 s), minus mdcache's 1 s clock granularity, with a margin.
 * Ganesha's default Attr_Expiration_Time (60 s) would hide such a change for up to a
 * minute. An export's smaller Attr_Expiration_Time is kept. */
#define CAIRN_ATTR_EXPIRE 5

/* The largest first WRITE of a new file made durable with it (see `fresh`): Linux's
 * largest wsize. A bigger file pays one fsync with its first WRITE, once. */
#define CAIRN_SYNC_FIRST_WRITE (1024 * 1024)

#define CAIRN_SUPPORTED_ATTRS ((const attrmask_t) (ATTRS_POSIX | ATTR_ACL | \
						  ATTR4_XATTR))

#define CAIRN_SETTABLE_ATTRS ((const attrmask_t) (			\
	ATTR_MODE | ATTR_OWNER | ATTR_GROUP | ATTR_ATIME |		\
	ATTR_CTIME | ATTR_MTIME | ATTR_SIZE | ATTR_MTIME_SERVER |	\
	ATTR_ATIME_SERVER | ATTR_ACL))

/* internal.c */
static inline fsal_status_t cairn2fsal_error(long rc)
{
	int err = rc < 0 ? (int)-rc : (int)rc;

	if (err == 0)
		return fsalstat(ERR_FSAL_NO_ERROR, 0);
	return fsalstat(posix2fsal_error(err), err);
}

fsal_status_t cairn_log_error(const char *call, long rc);
const cairn_creds_t *cairn_creds(cairn_creds_t *buf);
int32_t cairn_attr_expire(void);
void cairn2fsal_attributes(const struct cairn_export *export,
			   const cairn_attr_t *ca,
			   struct fsal_attrlist *attrs);
struct cairn_handle *cairn_construct_handle(struct cairn_export *export,
					    const cairn_attr_t *ca);
void cairn_deconstruct_handle(struct cairn_handle *obj);

/* acl.c: NFSv4 ACLs <-> the POSIX ACL xattrs the bricks store and enforce */
fsal_status_t cairn_acl_get(cairn_fs_t *fs, cairn_id_t id,
			    object_file_type_t kind, uint32_t mode,
			    struct fsal_attrlist *attrs);
fsal_status_t cairn_acl_set(cairn_fs_t *fs, cairn_id_t id,
			    object_file_type_t kind, fsal_acl_t *acl);

/* export.c */
void cairn_export_ops_init(struct export_ops *ops);

/* handle.c */
void cairn_handle_ops_init(struct fsal_obj_ops *ops);
struct state_t *cairn_alloc_state(struct fsal_export *exp_hdl,
				  enum state_type state_type,
				  struct state_t *related_state);
void cairn_free_state(struct fsal_export *exp_hdl, struct state_t *state);

/* mds.c: pNFS metadata server (FILES and Flexible Files layouts) */
void cairn_mds_export_ops_init(struct export_ops *ops);
void cairn_mds_handle_ops_init(struct fsal_obj_ops *ops);
void cairn_mds_module_ops_init(struct fsal_ops *ops);
nfsstat4 cairn_layoutget_check(object_file_type_t type, layouttype4 served,
			       layouttype4 ltype,
			       layoutiomode4 iomode, uint64_t offset,
			       uint64_t length, uint64_t minlength);
nfsstat4 cairn_layoutcommit_check(layouttype4 served,
				  const struct fsal_layoutcommit_arg *arg);


/* recall.c: layout recalls when the volume map or a DS's liveness changes */
uint64_t cairn_layout_digest(struct cairn_export *export,
			     const cairn_layout_t *lo);
void cairn_layouts_granted(struct cairn_export *export, cairn_id_t inode,
			   const cairn_layout_t *lo, uint32_t ds_gen);
void cairn_layouts_recheck(struct cairn_export *export);
void cairn_layouts_returned(struct cairn_export *export, cairn_id_t inode);
int cairn_layouts_register(struct cairn_export *export);
void cairn_layouts_unregister(struct cairn_export *export);

/* dservers.c: where each DS of a PNFS export listens (DS_Addrs) and whether it answers
 * (an NFS NULL call every second) */
int cairn_pnfs_parse_ds_addrs(struct cairn_export *export);
int cairn_ds_addr_of(const struct cairn_export *export,
		     const cairn_layout_brick_t *b, fsal_multipath_member_t *out);
int cairn_ds_watch_start(struct cairn_export *export);
void cairn_ds_watch_stop(struct cairn_export *export);
bool cairn_ds_up(struct cairn_export *export, const char *node,
		 const fsal_multipath_member_t *h);
bool cairn_ds_brick_up(struct cairn_export *export,
		       const cairn_layout_brick_t *b);
uint32_t cairn_ds_gen(struct cairn_export *export);
void cairn_ds_suspect(struct cairn_export *export,
		      const cairn_layout_brick_t *b);

/* ds.c: pNFS data server */
void cairn_ds_module_ops_init(struct fsal_ops *ops);
int cairn_ds_export_init(struct cairn_export *export);

/* up.c */
int cairn_up_register(struct cairn_export *export);
void cairn_up_unregister(struct cairn_export *export);

#endif /* FSAL_CAIRN_INTERNAL_H */
