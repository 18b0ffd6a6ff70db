/*
 * FSAL_CAIRN: XDR encoders of pNFS Flexible Files layouts and devices, and the
 * decoder of a client's I/O error reports (RFC 8435).
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * Pure functions over an XDR stream (ntirpc), without Ganesha: mds.c calls them for
 * LAYOUTGET and GETDEVICEINFO (and the decoder of LAYOUTRETURN's error reports), and tests/nfs/ff_xdr_test.c checks their bytes against the
 * RFC's structures (tests/nfs/pnfs-xdr.sh).
 */

#ifndef CAIRN_FF_H
#define CAIRN_FF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <rpc/xdr.h>
#include <rpc/xdr_inline.h>

/* RFC 8435 §5.1 ff_flags4 */
#define CAIRN_FF_FLAGS_NO_LAYOUTCOMMIT 0x00000001
#define CAIRN_FF_FLAGS_NO_IO_THRU_MDS 0x00000002
#define CAIRN_FF_FLAGS_NO_READ_IO 0x00000004
#define CAIRN_FF_FLAGS_WRITE_ONE_MIRROR 0x00000008

/* Ganesha's v4 file handle of a DS (src/include/nfs_fh.h, file_handle_v4 with
 * FILE_HANDLE_V4_FLAG_DS); mds.c checks these against Ganesha's headers. */
#define CAIRN_GANESHA_FH_VERSION 0x43
#define CAIRN_GANESHA_FH_FLAG_DS 0x01
#define CAIRN_GANESHA_FH_HEADER 5

#define CAIRN_FF_DEVICEID_SIZE 16

/* One mirror of a layout: one data server (no striping). */
struct cairn_ff_mirror {
	uint8_t deviceid[CAIRN_FF_DEVICEID_SIZE];
	uint32_t efficiency;		/* ffds_efficiency: higher is better */
};

/* Ganesha's DS handle around `opaque` (the FSAL's wire handle) for the DS whose id is
 * `server_id`: returns its length, or 0 if it does not fit in `outlen`. */
size_t cairn_ff_ds_handle(uint8_t *out, size_t outlen, uint16_t server_id,
			  const void *opaque, uint8_t len);

/* ff_layout4 (RFC 8435 §5.1): `nmirrors` mirrors of one ff_data_server4 each, all with
 * the anonymous stateid (ffds_stateid; the DS is tightly coupled and checks none), the
 * one DS handle `fh`, and `uid`/`gid` as ffds_user/ffds_group (decimal strings, as
 * clients map them numerically). False if the stream is full. */
bool cairn_ff_encode_layout(XDR *xdr, uint64_t stripe_unit,
			    const struct cairn_ff_mirror *mirrors,
			    uint32_t nmirrors, const uint8_t *fh, uint32_t fhlen,
			    uint32_t uid, uint32_t gid, uint32_t flags,
			    uint32_t stats_collect_hint);

/* ff_device_addr4 (RFC 8435 §5.2): one netaddr4 ("tcp", IPv4 "a.b.c.d.p1.p2", RFC 8881
 * §3.3.9; `addr` in host order) and one ff_device_versions4: NFSv4.`minor`, rsize, wsize,
 * tightly coupled. False if the stream is full. */
bool cairn_ff_encode_device_addr(XDR *xdr, uint32_t addr, uint16_t port,
				 uint32_t minor, uint32_t rsize, uint32_t wsize);

/* One device error of a client's I/O error report (RFC 8435 §9.1.1 ff_ioerr4, its
 * device_error4 of RFC 7862 §15.6): the range of the report and one DS's error. */
struct cairn_ff_ioerr {
	uint64_t offset;
	uint64_t length;
	uint8_t deviceid[CAIRN_FF_DEVICEID_SIZE];
	uint32_t status;		/* nfsstat4 the DS answered (or the client saw) */
	uint32_t opnum;			/* the operation, e.g. 38 WRITE */
};
typedef void (*cairn_ff_ioerr_cb)(const struct cairn_ff_ioerr *e, void *arg);

/* Most ff_ioerr4 reports, and device errors per report, a LAYOUTRETURN may carry. */
#define CAIRN_FF_MAX_REPORTS 64

/* Read the I/O error reports of an ff_layoutreturn4 (RFC 8435 §9.3, LAYOUTRETURN's
 * lrf_body): `cb` once per device error, in order; the statistics that follow are not
 * read. Returns how many errors, or -1 for a body that does not decode (or holds more
 * than CAIRN_FF_MAX_REPORTS of either). */
int cairn_ff_decode_ioerrs(XDR *xdr, cairn_ff_ioerr_cb cb, void *arg);

#endif /* CAIRN_FF_H */
