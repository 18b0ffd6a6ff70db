/*
 * FSAL_CAIRN: XDR encoders of pNFS Flexible Files layouts and devices (RFC 8435).
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * See ff.h. Every field is written in the order of RFC 8435's XDR:
 *
 *   struct ff_layout4 { length4 ffl_stripe_unit; ff_mirror4 ffl_mirrors<>;
 *                       ff_flags4 ffl_flags; uint32_t ffl_stats_collect_hint; };
 *   struct ff_mirror4 { ff_data_server4 ffm_data_servers<>; };
 *   struct ff_data_server4 { deviceid4 ffds_deviceid; uint32_t ffds_efficiency;
 *                            stateid4 ffds_stateid; nfs_fh4 ffds_fh_vers<>;
 *                            fattr4_owner ffds_user; fattr4_owner_group ffds_group; };
 *   struct ff_device_addr4 { multipath_list4 ffda_netaddrs;
 *                            ff_device_versions4 ffda_versions<>; };
 *   struct ff_device_versions4 { uint32_t ffdv_version; uint32_t ffdv_minorversion;
 *                                uint32_t ffdv_rsize; uint32_t ffdv_wsize;
 *                                bool ffdv_tightly_coupled; };
 */

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include "ff.h"

static bool put_u32(XDR *xdr, uint32_t v)
{
	return xdr_u_int32_t(xdr, &v);
}

static bool put_u64(XDR *xdr, uint64_t v)
{
	return xdr_u_int64_t(xdr, &v);
}

/* opaque<> / string<>: length, bytes, zero padding to 4 */
static bool put_var(XDR *xdr, const void *p, uint32_t len)
{
	return put_u32(xdr, len) &&
	       (len == 0 || xdr_opaque(xdr, (char *)p, len));
}

size_t cairn_ff_ds_handle(uint8_t *out, size_t outlen, uint16_t server_id,
			  const void *opaque, uint8_t len)
{
	uint16_t id = htons(server_id);

	if (outlen < CAIRN_GANESHA_FH_HEADER + (size_t)len)
		return 0;
	out[0] = CAIRN_GANESHA_FH_VERSION;
	out[1] = CAIRN_GANESHA_FH_FLAG_DS;	/* a little-endian FSAL handle */
	memcpy(out + 2, &id, sizeof(id));
	out[4] = len;
	memcpy(out + CAIRN_GANESHA_FH_HEADER, opaque, len);
	return CAIRN_GANESHA_FH_HEADER + len;
}

static bool put_decimal(XDR *xdr, uint32_t v)
{
	char s[16];
	int n = snprintf(s, sizeof(s), "%u", v);

	return put_var(xdr, s, (uint32_t)n);
}

bool cairn_ff_encode_layout(XDR *xdr, uint64_t stripe_unit,
			    const struct cairn_ff_mirror *mirrors,
			    uint32_t nmirrors, const uint8_t *fh, uint32_t fhlen,
			    uint32_t uid, uint32_t gid, uint32_t flags,
			    uint32_t stats_collect_hint)
{
	static const uint8_t anonymous_other[12];
	uint32_t i;

	if (!put_u64(xdr, stripe_unit) || !put_u32(xdr, nmirrors))
		return false;
	for (i = 0; i < nmirrors; i++) {
		const struct cairn_ff_mirror *m = &mirrors[i];

		if (!put_u32(xdr, 1) ||		/* ffm_data_servers: one */
		    !xdr_opaque(xdr, (char *)m->deviceid,
				CAIRN_FF_DEVICEID_SIZE) ||
		    !put_u32(xdr, m->efficiency) ||
		    !put_u32(xdr, 0) ||		/* ffds_stateid: anonymous */
		    !xdr_opaque(xdr, (char *)anonymous_other,
				sizeof(anonymous_other)) ||
		    !put_u32(xdr, 1) ||		/* ffds_fh_vers: one handle */
		    !put_var(xdr, fh, fhlen) ||
		    !put_decimal(xdr, uid) || !put_decimal(xdr, gid))
			return false;
	}
	return put_u32(xdr, flags) && put_u32(xdr, stats_collect_hint);
}

bool cairn_ff_encode_device_addr(XDR *xdr, uint32_t addr, uint16_t port,
				 uint32_t minor, uint32_t rsize, uint32_t wsize)
{
	char raddr[32];
	int n = snprintf(raddr, sizeof(raddr), "%u.%u.%u.%u.%u.%u",
			 addr >> 24, (addr >> 16) & 0xff, (addr >> 8) & 0xff,
			 addr & 0xff, port >> 8, port & 0xff);

	return put_u32(xdr, 1) &&		/* multipath_list4: one netaddr4 */
	       put_var(xdr, "tcp", 3) && put_var(xdr, raddr, (uint32_t)n) &&
	       put_u32(xdr, 1) &&		/* ffda_versions: one */
	       put_u32(xdr, 4) && put_u32(xdr, minor) &&
	       put_u32(xdr, rsize) && put_u32(xdr, wsize) &&
	       put_u32(xdr, 1);			/* ffdv_tightly_coupled */
}

static bool get_u32(XDR *xdr, uint32_t *v)
{
	return xdr_u_int32_t(xdr, v);
}

static bool get_u64(XDR *xdr, uint64_t *v)
{
	return xdr_u_int64_t(xdr, v);
}

int cairn_ff_decode_ioerrs(XDR *xdr, cairn_ff_ioerr_cb cb, void *arg)
{
	uint32_t nreports = 0, r, nerrors = 0, e;
	uint8_t stateid[16];
	int n = 0;

	if (!get_u32(xdr, &nreports) || nreports > CAIRN_FF_MAX_REPORTS)
		return -1;
	for (r = 0; r < nreports; r++) {
		struct cairn_ff_ioerr ie;

		memset(&ie, 0, sizeof(ie));
		if (!get_u64(xdr, &ie.offset) || !get_u64(xdr, &ie.length) ||
		    !xdr_opaque(xdr, (char *)stateid, sizeof(stateid)) ||
		    !get_u32(xdr, &nerrors) || nerrors > CAIRN_FF_MAX_REPORTS)
			return -1;
		for (e = 0; e < nerrors; e++) {
			if (!xdr_opaque(xdr, (char *)ie.deviceid,
					CAIRN_FF_DEVICEID_SIZE) ||
			    !get_u32(xdr, &ie.status) ||
			    !get_u32(xdr, &ie.opnum))
				return -1;
			if (cb != NULL)
				cb(&ie, arg);
			n++;
		}
	}
	return n;
}
