/*
 * Unit tests of FSAL_CAIRN's Flexible Files encoders (fsal/ff.c) against RFC 8435's XDR
 * (and of its decoder of LAYOUTRETURN's ff_layoutreturn4 error reports, §9.3):
 * each case encodes into an ntirpc memory stream and compares every byte with a dump
 * written out by hand from the RFC's structures (ff_layout4 §5.1, ff_device_addr4 §5.2,
 * netaddr4 RFC 8881 §3.3.9) and Ganesha's DS file handle (src/include/nfs_fh.h).
 * tests/nfs/pnfs-xdr.sh builds and runs it; prints PASS/FAIL lines, exits 1 on a failure.
 */

#include <stdio.h>
#include <string.h>
#include "ff.h"

static int failed, passed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "PASS" : "FAIL", what);
	if (ok)
		passed++;
	else
		failed++;
}

static void dump(const char *name, const uint8_t *p, size_t n)
{
	size_t i;

	printf("  %s (%zu bytes):", name, n);
	for (i = 0; i < n; i++)
		printf("%s%02x", i % 16 ? " " : "\n    ", p[i]);
	printf("\n");
}

static void same(const char *what, const uint8_t *got, size_t ngot,
		 const uint8_t *want, size_t nwant)
{
	int ok = ngot == nwant && memcmp(got, want, nwant) == 0;

	check(ok, what);
	if (!ok) {
		dump("got", got, ngot);
		dump("want", want, nwant);
	}
}

#define U32(v) (uint8_t)((v) >> 24), (uint8_t)((v) >> 16), (uint8_t)((v) >> 8), (uint8_t)(v)
#define ZERO12 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
#define DEV(n) 0xfe, n, 0x01, 0x00, 0x07, 0, 0, 0, n, 0, 0, 0, 0, 0, 0, 0

static void test_ds_handle(void)
{
	static const uint8_t want[] = {
		0x43,			/* GANESHA_FH_VERSION */
		0x01,			/* FILE_HANDLE_V4_FLAG_DS */
		0x01, 0x02,		/* id.servers 0x0102, network order */
		0x03,			/* fs_len */
		0xaa, 0xbb, 0xcc	/* the FSAL's handle */
	};
	uint8_t out[64];
	size_t n = cairn_ff_ds_handle(out, sizeof(out), 0x0102, "\xaa\xbb\xcc", 3);

	same("DS handle: version 0x43, DS flag, server id in network order, length, opaque",
	     out, n, want, sizeof(want));
	check(cairn_ff_ds_handle(out, 7, 0x0102, "\xaa\xbb\xcc", 3) == 0,
	      "DS handle: 0 when it does not fit");
}

static void test_layout(void)
{
	static const uint8_t fh[] = { 0x43, 0x01, 0x00, 0x01, 0x03, 0xaa, 0xbb, 0xcc };
	struct cairn_ff_mirror m[2] = {
		{ .deviceid = { DEV(1) }, .efficiency = 2 },
		{ .deviceid = { DEV(2) }, .efficiency = 1 },
	};
	static const uint8_t want[] = {
		0, 0, 0, 0, U32(0x00100000),	/* ffl_stripe_unit: 1 MiB */
		U32(2),				/* ffl_mirrors<>: 2 */
		/* ffl_mirrors[0] */
		U32(1),				/* ffm_data_servers<>: 1 */
		DEV(1),				/* ffds_deviceid */
		U32(2),				/* ffds_efficiency */
		U32(0), ZERO12,			/* ffds_stateid: seqid 0, other 0 */
		U32(1),				/* ffds_fh_vers<>: 1 */
		U32(8), 0x43, 0x01, 0x00, 0x01, 0x03, 0xaa, 0xbb, 0xcc,
		U32(4), '1', '0', '0', '0',	/* ffds_user "1000" */
		U32(2), '5', '0', 0, 0,		/* ffds_group "50", padded */
		/* ffl_mirrors[1] */
		U32(1), DEV(2), U32(1), U32(0), ZERO12, U32(1),
		U32(8), 0x43, 0x01, 0x00, 0x01, 0x03, 0xaa, 0xbb, 0xcc,
		U32(4), '1', '0', '0', '0',
		U32(2), '5', '0', 0, 0,
		U32(0x2),			/* ffl_flags: FF_FLAGS_NO_IO_THRU_MDS */
		U32(0),				/* ffl_stats_collect_hint */
	};
	static const uint8_t want_one[] = {
		0, 0, 0, 0, U32(0x00100000), U32(1),
		U32(1), DEV(1), U32(2), U32(0), ZERO12, U32(1),
		U32(8), 0x43, 0x01, 0x00, 0x01, 0x03, 0xaa, 0xbb, 0xcc,
		U32(1), '0', 0, 0, 0,		/* "0", padded */
		U32(1), '0', 0, 0, 0,
		U32(0), U32(0),
	};
	uint8_t buf[512];
	XDR xdr;

	xdrmem_ncreate(&xdr, (char *)buf, sizeof(buf), XDR_ENCODE);
	check(cairn_ff_encode_layout(&xdr, 1 << 20, m, 2, fh, sizeof(fh), 1000, 50,
				     CAIRN_FF_FLAGS_NO_IO_THRU_MDS, 0),
	      "ff_layout4 with 2 mirrors encodes");
	same("ff_layout4, 2 mirrors: stripe unit, mirrors of one ff_data_server4 (device, "
	     "efficiency, anonymous stateid, one handle, user and group strings), flags, hint",
	     buf, XDR_GETPOS(&xdr), want, sizeof(want));
	XDR_DESTROY(&xdr);

	xdrmem_ncreate(&xdr, (char *)buf, sizeof(buf), XDR_ENCODE);
	check(cairn_ff_encode_layout(&xdr, 1 << 20, m, 1, fh, sizeof(fh), 0, 0, 0, 0),
	      "ff_layout4 with 1 mirror encodes");
	same("ff_layout4, 1 mirror (an RW layout: the chain head), root's ids, no flags",
	     buf, XDR_GETPOS(&xdr), want_one, sizeof(want_one));
	XDR_DESTROY(&xdr);

	xdrmem_ncreate(&xdr, (char *)buf, sizeof(want) - 4, XDR_ENCODE);
	check(!cairn_ff_encode_layout(&xdr, 1 << 20, m, 2, fh, sizeof(fh), 1000, 50,
				      CAIRN_FF_FLAGS_NO_IO_THRU_MDS, 0),
	      "ff_layout4: false when the stream is 4 bytes too short");
	XDR_DESTROY(&xdr);
}

static void test_device(void)
{
	static const uint8_t want[] = {
		U32(1),				/* ffda_netaddrs: multipath_list4 of 1 */
		U32(3), 't', 'c', 'p', 0,	/* na_r_netid "tcp", padded */
		U32(12), '1', '0', '.', '0', '.', '2', '.', '2', '.', '8', '.', '1',
						/* na_r_addr: 10.0.2.2, port 2049 = 8*256+1 */
		U32(1),				/* ffda_versions<>: 1 */
		U32(4),				/* ffdv_version */
		U32(1),				/* ffdv_minorversion */
		U32(0x100000),			/* ffdv_rsize */
		U32(0x80000),			/* ffdv_wsize */
		U32(1),				/* ffdv_tightly_coupled: TRUE */
	};
	static const uint8_t want_pad[] = {
		U32(1), U32(3), 't', 'c', 'p', 0,
		U32(17), '1', '2', '7', '.', '0', '.', '0', '.', '1', '.', '1', '5', '6',
		'.', '2', '0', '4', 0, 0, 0,	/* 127.0.0.1 port 40140 = 156*256+204 */
		U32(1), U32(4), U32(2), U32(4096), U32(4096), U32(1),
	};
	uint8_t buf[256];
	XDR xdr;

	xdrmem_ncreate(&xdr, (char *)buf, sizeof(buf), XDR_ENCODE);
	check(cairn_ff_encode_device_addr(&xdr, 0x0a000202, 2049, 1, 1 << 20,
					  1 << 19),
	      "ff_device_addr4 encodes");
	same("ff_device_addr4: one netaddr4 (tcp, h1.h2.h3.h4.p1.p2), one version: "
	     "NFSv4.1, rsize, wsize, tightly coupled",
	     buf, XDR_GETPOS(&xdr), want, sizeof(want));
	XDR_DESTROY(&xdr);

	xdrmem_ncreate(&xdr, (char *)buf, sizeof(buf), XDR_ENCODE);
	check(cairn_ff_encode_device_addr(&xdr, 0x7f000001, 40140, 2, 4096, 4096),
	      "ff_device_addr4 (padded address) encodes");
	same("ff_device_addr4: a 17-byte r_addr padded to 20, NFSv4.2",
	     buf, XDR_GETPOS(&xdr), want_pad, sizeof(want_pad));
	XDR_DESTROY(&xdr);

	xdrmem_ncreate(&xdr, (char *)buf, 20, XDR_ENCODE);
	check(!cairn_ff_encode_device_addr(&xdr, 0x0a000202, 2049, 1, 1, 1),
	      "ff_device_addr4: false when the stream is too short");
	XDR_DESTROY(&xdr);
}

/* ff_layoutreturn4 (RFC 8435 §9.3) as a client sends it: two ff_ioerr4, the first with
 * two device errors, then one ff_iostats4 the decoder must not need. */
static struct cairn_ff_ioerr got_errs[4];
static int ngot;

static void collect(const struct cairn_ff_ioerr *e, void *arg)
{
	if (ngot < 4)
		got_errs[ngot] = *e;
	ngot++;
}

static void test_ioerrs(void)
{
	static const uint8_t body[] = {
		U32(2),				/* fflr_ioerr_report<>: 2 */
		U32(0), U32(0),			/* ffie_offset 0 */
		U32(0), U32(0x100000),		/* ffie_length 1 MiB */
		U32(1), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,	/* ffie_stateid */
		U32(2),				/* ffie_errors<>: 2 device_error4 */
		0xa1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,	/* de_deviceid */
		U32(6),				/* de_status NFS4ERR_NXIO */
		U32(38),			/* de_opnum OP_WRITE */
		0xa2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
		U32(10008), U32(25),		/* NFS4ERR_DELAY on OP_READ */
		U32(1), U32(0), U32(0xffffffff), U32(0xffffffff),	/* 4 GiB..all */
		U32(0), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		U32(1),
		0xa3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3,
		U32(5), U32(5),			/* NFS4ERR_IO on OP_COMMIT */
		U32(1), 0xde, 0xad,		/* fflr_iostats_report<>: not read */
	};
	XDR xdr;
	int n;

	ngot = 0;
	xdrmem_ncreate(&xdr, (char *)body, sizeof(body), XDR_DECODE);
	n = cairn_ff_decode_ioerrs(&xdr, collect, NULL);
	check(n == 3 && ngot == 3, "ff_layoutreturn4: 2 ff_ioerr4 with 3 device_error4 decode");
	check(ngot == 3 && got_errs[0].offset == 0 && got_errs[0].length == 0x100000 &&
	      got_errs[0].deviceid[0] == 0xa1 && got_errs[0].deviceid[15] == 1 &&
	      got_errs[0].status == 6 && got_errs[0].opnum == 38,
	      "first error: range 0+1 MiB, its device id, NFS4ERR_NXIO on WRITE");
	check(ngot == 3 && got_errs[1].offset == 0 && got_errs[1].deviceid[0] == 0xa2 &&
	      got_errs[1].status == 10008 && got_errs[1].opnum == 25,
	      "second error of the same report: its own device, NFS4ERR_DELAY on READ");
	check(ngot == 3 && got_errs[2].offset == 1ULL << 32 &&
	      got_errs[2].length == UINT64_MAX && got_errs[2].deviceid[15] == 3 &&
	      got_errs[2].status == 5 && got_errs[2].opnum == 5,
	      "second report: its range (64-bit offset, length all ones), NFS4ERR_IO on COMMIT");

	xdrmem_ncreate(&xdr, (char *)body, 60, XDR_DECODE);
	check(cairn_ff_decode_ioerrs(&xdr, NULL, NULL) == -1,
	      "ff_layoutreturn4 cut in its first device_error4 does not decode");
	{
		static const uint8_t many[] = { U32(65) };

		xdrmem_ncreate(&xdr, (char *)many, sizeof(many), XDR_DECODE);
		check(cairn_ff_decode_ioerrs(&xdr, NULL, NULL) == -1,
		      "ff_layoutreturn4 with 65 reports is refused");
	}
	{
		static const uint8_t none[] = { U32(0), U32(0) };

		xdrmem_ncreate(&xdr, (char *)none, sizeof(none), XDR_DECODE);
		check(cairn_ff_decode_ioerrs(&xdr, NULL, NULL) == 0,
		      "ff_layoutreturn4 without reports: no errors");
	}
}

int main(void)
{
	test_ds_handle();
	test_layout();
	test_device();
	test_ioerrs();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
