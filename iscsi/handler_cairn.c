/*
 * handler_cairn.c - tcmu-runner handler giving LIO a `user:cairn` backstore: a LUN backed
 * by a regular file on a Cairn volume, reached through libcairn.
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 * Config string (the part after "cairn/"; see docs/iscsi.md):
 *
 *     VOLUME@SERVER[:PORT][,SERVER[:PORT]...]/PATH
 *
 * e.g. cairn/vol0@10.0.2.2:7420/luns/lun0.img. It is parsed and validated in one place,
 * cairn_cfg_parse(); check_config() also mounts the volume and looks the file up, so a bad
 * string is refused when targetcli creates the backstore, not at first I/O.
 *
 * The handler is thin: every command maps onto one libcairn call.
 *  - READ        -> cairn_aio_read (short read at EOF is zero-filled)
 *  - WRITE       -> cairn_aio_write_through: acknowledged only once every live replica has
 *                   the data. There is no write cache (WCE=0), so FUA needs nothing extra.
 *  - SYNC CACHE  -> cairn_aio_fsync
 *  - UNMAP       -> cairn_fallocate(PUNCH_HOLE|KEEP_SIZE) on a helper thread
 *  - WRITE SAME  -> zero pattern: cairn_fallocate(ZERO_RANGE); else write_through chunks,
 *                   on a helper thread
 *  - COMPARE AND WRITE -> cairn_aio_compare_and_write, executed atomically on the brick
 *                   (correct with several gateways); -EILSEQ -> MISCOMPARE sense.
 * libcairn has no asynchronous fallocate, hence the helper threads for UNMAP/WRITE SAME.
 *
 * Errors: transport errors (server down, timeout) complete the command with BUSY so the
 * initiator retries it; other errors give MEDIUM ERROR sense. Nothing is ever reported
 * as written unless libcairn said so.
 */

#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <cairn.h>

#include "libtcmu.h"
#include "tcmu-runner.h"
#include "tcmur_device.h"

#include "cairn_cfg.h"

/* ---------------------------------------------------------------------------------------- */
/* Per-device state                                                                         */

struct cairn_dev {
	struct cairn_cfg cfg;
	cairn_fs_t *fs;
	cairn_id_t id;
	uint32_t block_size;
};

/* One command in flight. */
struct cairn_io {
	struct tcmu_device *dev;
	struct tcmur_cmd *cmd;
	struct cairn_dev *cd;
	uint8_t *buf;		/* bounce buffer (read data, CAW compare+write data) */
	struct iovec *iov;	/* read: where the data goes */
	size_t iov_cnt;
	size_t len;
	uint64_t off;
	/* helper-thread ops */
	int kind;
	uint8_t *pattern;
	size_t pattern_len;
};

enum { IO_UNMAP = 1, IO_WRITESAME };

#define CAIRN_MAX_UNMAP_LBAS (1u << 20)

static const char cairn_cfg_desc[] =
	"VOLUME@SERVER[:PORT][,SERVER[:PORT]...]/PATH: a regular file PATH on Cairn volume "
	"VOLUME, reached through the cairnd at SERVER (default port 7420). Example: "
	"vol0@10.0.2.2:7420/luns/lun0.img";

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */

static size_t iov_length(const struct iovec *iov, size_t cnt)
{
	size_t n = 0;

	for (size_t i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* Copy up to len bytes out of the iovec into buf; returns the bytes copied. */
static size_t iov_gather(const struct iovec *iov, size_t cnt, uint8_t *buf, size_t len)
{
	size_t done = 0;

	for (size_t i = 0; i < cnt && done < len; i++) {
		size_t n = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;

		memcpy(buf + done, iov[i].iov_base, n);
		done += n;
	}
	return done;
}

/* Copy len bytes of buf into the iovec, then zero-fill the iovec up to total. */
static void iov_scatter(struct iovec *iov, size_t cnt, const uint8_t *buf, size_t len,
			size_t total)
{
	size_t pos = 0;

	for (size_t i = 0; i < cnt && pos < total; i++) {
		uint8_t *dst = iov[i].iov_base;
		size_t seg = iov[i].iov_len < total - pos ? iov[i].iov_len : total - pos;
		size_t ncopy = 0;

		if (pos < len)
			ncopy = len - pos < seg ? len - pos : seg;
		memcpy(dst, buf + pos, ncopy);
		memset(dst + ncopy, 0, seg - ncopy);
		pos += seg;
	}
}

/*
 * Transport trouble the initiator should retry; everything else is a medium error. libcairn
 * itself retries these for 30 s (client/src/volume/call.rs RETRY_BUDGET, is_retryable) before
 * giving up with the last one: EHOSTDOWN ("no brick of replica set N is up") and EREMCHG
 * (map epoch changed) included, so a volume down for longer than that gives BUSY.
 */
static bool errno_is_transient(int err)
{
	switch (err) {
	case EHOSTDOWN:
	case EREMCHG:
	case ENETDOWN:
	case ENETRESET:
	case ENOTCONN:
	case ETIMEDOUT:
	case EAGAIN:
	case ECONNRESET:
	case ECONNREFUSED:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EPIPE:
	case EBUSY:
	case EINTR:
		return true;
	default:
		return false;
	}
}

static int errno_to_sts(int err, bool write)
{
	if (err == CAIRN_EMISCOMPARE)
		return TCMU_STS_MISCOMPARE;
	if (errno_is_transient(err))
		return TCMU_STS_BUSY;
	if (err == ENOSPC || err == EDQUOT)
		return TCMU_STS_NO_RESOURCE;
	return write ? TCMU_STS_WR_ERR : TCMU_STS_RD_ERR;
}

static struct cairn_io *io_new(struct tcmu_device *dev, struct tcmur_cmd *cmd)
{
	struct cairn_io *io = calloc(1, sizeof(*io));

	if (!io)
		return NULL;
	io->dev = dev;
	io->cmd = cmd;
	io->cd = tcmur_dev_get_private(dev);
	return io;
}

static void io_free(struct cairn_io *io)
{
	free(io->buf);
	free(io->pattern);
	free(io);
}

/* ---------------------------------------------------------------------------------------- */
/* Config                                                                                   */

static bool hc_check_config(const char *cfgstring, char **reason)
{
	struct cairn_cfg cfg;
	cairn_options_t opts;
	cairn_fs_t *fs = NULL;
	cairn_attr_t attr;
	int ret;

	if (cairn_cfg_parse(cfgstring, &cfg, reason) < 0)
		return false;

	cairn_options_init(&opts);
	opts.connect_timeout_ms = 3000;
	opts.client_name = "tcmu-runner/handler_cairn";
	ret = cairn_mount(cfg.servers, cfg.volume, &opts, &fs);
	if (ret < 0) {
		if (asprintf(reason, "cannot mount volume '%s' from '%s': %s (%s)", cfg.volume,
			     cfg.servers, strerror(-ret), cairn_last_error_message()) < 0)
			*reason = NULL;
		return false;
	}
	ret = cairn_lookup_path(fs, NULL, cfg.path, &attr);
	if (ret < 0) {
		if (asprintf(reason, "file '%s' not found on volume '%s': %s", cfg.path,
			     cfg.volume, strerror(-ret)) < 0)
			*reason = NULL;
	} else if ((attr.mode & S_IFMT) != S_IFREG) {
		if (asprintf(reason, "'%s' on volume '%s' is not a regular file", cfg.path,
			     cfg.volume) < 0)
			*reason = NULL;
		ret = -EINVAL;
	}
	cairn_unmount(fs);
	return ret >= 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Open / close                                                                             */

static int hc_open(struct tcmu_device *dev, bool reopen)
{
	struct cairn_dev *cd;
	cairn_options_t opts;
	cairn_attr_t attr;
	char *reason = NULL;
	uint64_t dev_size;
	int ret;

	(void)reopen;
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return -ENOMEM;

	if (cairn_cfg_parse(tcmu_dev_get_cfgstring(dev), &cd->cfg, &reason) < 0) {
		tcmu_dev_err(dev, "bad config string '%s': %s\n", tcmu_dev_get_cfgstring(dev),
			     reason ? reason : "?");
		free(reason);
		ret = -EINVAL;
		goto err_free;
	}

	cairn_options_init(&opts);
	opts.write_behind = false; /* no write cache anywhere between LIO and the bricks */
	/*
	 * Nothing cached either: another gateway may export the same LUN (multipath), and a
	 * block device has no use for cached attributes.
	 */
	opts.cache_timeout_ms = 0;
	opts.client_name = "tcmu-runner/handler_cairn";
	ret = cairn_mount(cd->cfg.servers, cd->cfg.volume, &opts, &cd->fs);
	if (ret < 0) {
		tcmu_dev_err(dev, "cannot mount volume %s from %s: %s\n", cd->cfg.volume,
			     cd->cfg.servers, cairn_last_error_message());
		goto err_free;
	}
	ret = cairn_lookup_path(cd->fs, NULL, cd->cfg.path, &attr);
	if (ret < 0) {
		tcmu_dev_err(dev, "backing file %s on volume %s: %s\n", cd->cfg.path,
			     cd->cfg.volume, cairn_last_error_message());
		goto err_unmount;
	}
	if ((attr.mode & S_IFMT) != S_IFREG) {
		tcmu_dev_err(dev, "backing file %s on volume %s is not a regular file\n",
			     cd->cfg.path, cd->cfg.volume);
		ret = -EINVAL;
		goto err_unmount;
	}
	cd->id = attr.id;
	cd->block_size = tcmu_dev_get_block_size(dev);

	/*
	 * The LUN size is what LIO was configured with. A shorter file is extended sparsely
	 * (thin provisioning); a longer one is refused: shrinking it would lose data.
	 */
	dev_size = tcmu_dev_get_num_lbas(dev) * cd->block_size;
	if (attr.size > dev_size) {
		tcmu_dev_err(dev,
			     "backing file %s on volume %s has %" PRIu64
			     " bytes, more than the LUN size %" PRIu64 "\n",
			     cd->cfg.path, cd->cfg.volume, attr.size, dev_size);
		ret = -EINVAL;
		goto err_unmount;
	}
	if (attr.size < dev_size) {
		cairn_attr_t in = { .size = dev_size };

		ret = cairn_setattr(cd->fs, NULL, cd->id, &in, CAIRN_SETATTR_SIZE, NULL);
		if (ret < 0) {
			tcmu_dev_err(dev, "extending %s on volume %s to %" PRIu64 ": %s\n",
				     cd->cfg.path, cd->cfg.volume, dev_size,
				     cairn_last_error_message());
			goto err_unmount;
		}
	}
	ret = cairn_open(cd->fs, NULL, cd->id);
	if (ret < 0) {
		tcmu_dev_err(dev, "open of %s on volume %s: %s\n", cd->cfg.path,
			     cd->cfg.volume, cairn_last_error_message());
		goto err_unmount;
	}

	/*
	 * Block Limits VPD MAXIMUM UNMAP LBA COUNT: the runner's default is 32 Mi LBAs
	 * (scsi.h VPD_MAX_UNMAP_LBA_COUNT), more than initiators expect (iscsi-test-cu
	 * Inquiry.BlockLimits wants <= 1 Mi). One UNMAP descriptor is one hole punch on the
	 * bricks; 1 Mi LBAs (512 MiB at 512-byte blocks) keeps each one short.
	 */
	tcmu_dev_set_max_unmap_len(dev, CAIRN_MAX_UNMAP_LBAS);
	/*
	 * tcmu-runner 1.5.4 leaves UNMAP GRANULARITY ALIGNMENT at 0 (main.c) and then takes
	 * WRITE SAME with the UNMAP bit modulo it (handle_unmap_in_writesame): a divide
	 * error that kills the runner. Any block is a hole-punch unit here.
	 */
	tcmu_dev_set_unmap_gran_align(dev, 1);
	tcmu_dev_set_write_cache_enabled(dev, 0);
	tcmu_dev_set_solid_state_media(dev, true);
	tcmur_dev_set_private(dev, cd);
	tcmu_dev_info(dev, "opened %s on volume %s via %s: %" PRIu64 " bytes, block %u\n",
		      cd->cfg.path, cd->cfg.volume, cd->cfg.servers, dev_size, cd->block_size);
	return 0;

err_unmount:
	cairn_unmount(cd->fs);
err_free:
	free(cd);
	return ret < 0 ? ret : -EIO;
}

static void hc_close(struct tcmu_device *dev)
{
	struct cairn_dev *cd = tcmur_dev_get_private(dev);
	int ret;

	if (!cd)
		return;
	ret = cairn_release(cd->fs, cd->id);
	if (ret < 0)
		tcmu_dev_err(dev, "release of %s on volume %s: %s\n", cd->cfg.path,
			     cd->cfg.volume, cairn_last_error_message());
	ret = cairn_unmount(cd->fs);
	if (ret < 0)
		tcmu_dev_err(dev, "unmount of volume %s: %s\n", cd->cfg.volume, strerror(-ret));
	tcmur_dev_set_private(dev, NULL);
	free(cd);
}

static int hc_reconfig(struct tcmu_device *dev, struct tcmulib_cfg_info *cfg)
{
	struct cairn_dev *cd = tcmur_dev_get_private(dev);
	cairn_attr_t attr, in;
	int ret;

	switch (cfg->type) {
	case TCMULIB_CFG_DEV_SIZE:
		ret = cairn_getattr(cd->fs, NULL, cd->id, &attr);
		if (ret < 0)
			return ret;
		if (cfg->data.dev_size < attr.size) {
			tcmu_dev_err(dev, "refusing to shrink %s on volume %s below %" PRIu64 "\n",
				     cd->cfg.path, cd->cfg.volume, attr.size);
			return -EINVAL;
		}
		in.size = cfg->data.dev_size;
		return cairn_setattr(cd->fs, NULL, cd->id, &in, CAIRN_SETATTR_SIZE, NULL);
	case TCMULIB_CFG_WRITE_CACHE:
		/* Writes are write-through to every replica; there is no cache to enable. */
		return cfg->data.write_cache ? -EOPNOTSUPP : 0;
	case TCMULIB_CFG_DEV_CFGSTR:
	default:
		return -EOPNOTSUPP;
	}
}

/* ---------------------------------------------------------------------------------------- */
/* CDB checks the runner's generic path leaves out                                          */

/*
 * tcmu-runner 1.5.4 hands READ/WRITE/WRITE AND VERIFY/COMPARE AND WRITE/WRITE SAME to
 * the handler's callouts without looking at byte 1 of the CDB (tcmur_cmd_handler.c:
 * handle_read/handle_write only run check_lba_and_length), and the kernel's
 * target_core_user passes every CDB through (passthrough_parse_cdb) without the checks
 * sbc_parse_cdb does for fileio/iblock (sbc_check_prot, sbc_check_dpofua). So, like LIO
 * does for its own backstores:
 *  - RDPROTECT/WRPROTECT (bits 7-5) must be 0: the LUN has no protection information
 *    (standard INQUIRY PROTECT=0, READ CAPACITY(16) PROT_EN=0);
 *  - DPO (bit 4) and FUA (bit 3) must be 0: the runner's MODE SENSE reports DPOFUA=0 in
 *    the device-specific parameter (scsi.c tcmu_emulate_mode_sense), so an initiator must
 *    not set them (every write is write-through anyway: FUA would change nothing).
 *  - WRITE SAME(10/16) ANCHOR (bit 4) must be 0: the runner's LBP VPD page (scsi.c, 0xb2)
 *    has ANC_SUP=0, and SBC-4 makes ANCHOR=1 invalid then (and always with UNMAP=0).
 *    tcmu-runner refuses ANCHOR only on UNMAP (handle_unmap), not in handle_writesame, which
 *    would punch or write the range instead; LIO refuses it for its own backstores
 *    (iscsi-test-cu WriteSame10.Unmap / WriteSame16.Unmap).
 * Violations end with CHECK CONDITION, ILLEGAL REQUEST / INVALID FIELD IN CDB.
 *
 * And for the data-in commands the runner answers itself (INQUIRY, MODE SENSE, READ
 * CAPACITY, ...): the runner copies only its few bytes into the data buffer, which is the
 * kernel's ring data area and still holds whatever an earlier command left there (e.g.
 * another LUN user's READ data), and the kernel returns the whole allocation length
 * (tcmu-runner 1.5.4 never sets TCMU_UFLAG_READ_LEN). The handler zeroes the buffer
 * first so nothing leaks (iscsi-test-cu Inquiry.Standard: "Padding data is not zero. Are
 * we leaking data?").
 *
 * Everything returns TCMU_STS_NOT_HANDLED unless refused: the runner's generic path
 * carries on.
 */
enum {
	CDB_REQUEST_SENSE = 0x03,
	CDB_INQUIRY = 0x12,
	CDB_MODE_SENSE_6 = 0x1a,
	CDB_READ_CAPACITY_10 = 0x25,
	CDB_LOG_SENSE = 0x4d,
	CDB_MODE_SENSE_10 = 0x5a,
	CDB_RECEIVE_COPY_RESULTS = 0x84,
	CDB_SERVICE_ACTION_IN_16 = 0x9e,
	CDB_MAINTENANCE_IN = 0xa3,
	CDB_READ_10 = 0x28,
	CDB_WRITE_10 = 0x2a,
	CDB_WRITE_VERIFY_10 = 0x2e,
	CDB_WRITE_SAME_10 = 0x41,
	CDB_READ_16 = 0x88,
	CDB_COMPARE_AND_WRITE = 0x89,
	CDB_WRITE_16 = 0x8a,
	CDB_WRITE_VERIFY_16 = 0x8e,
	CDB_WRITE_SAME_16 = 0x93,
	CDB_READ_12 = 0xa8,
	CDB_WRITE_12 = 0xaa,
	CDB_WRITE_VERIFY_12 = 0xae,
	CDB_VERIFY_10 = 0x2f,
	CDB_VERIFY_16 = 0x8f,
	CDB_VERIFY_12 = 0xaf,
};

#define CDB_PROTECT_MASK 0xe0 /* RDPROTECT / WRPROTECT */
#define CDB_DPO_FUA_MASK 0x18
#define CDB_WRITE_SAME_ANCHOR 0x10

static int hc_verify(struct tcmu_device *dev, struct tcmulib_cmd *cmd);

static int hc_handle_cmd(struct tcmu_device *dev, struct tcmur_cmd *cmd)
{
	const uint8_t *cdb = cmd->lib_cmd->cdb;
	uint8_t bad = 0;

	switch (cdb[0]) {
	case CDB_VERIFY_10:
	case CDB_VERIFY_12:
	case CDB_VERIFY_16:
		return hc_verify(dev, cmd->lib_cmd);
	case CDB_REQUEST_SENSE:
	case CDB_INQUIRY:
	case CDB_MODE_SENSE_6:
	case CDB_READ_CAPACITY_10:
	case CDB_LOG_SENSE:
	case CDB_MODE_SENSE_10:
	case CDB_RECEIVE_COPY_RESULTS:
	case CDB_SERVICE_ACTION_IN_16:
	case CDB_MAINTENANCE_IN:
		/* data-in the runner emulates: no stale ring data past what it fills in */
		for (size_t i = 0; i < cmd->lib_cmd->iov_cnt; i++)
			memset(cmd->lib_cmd->iovec[i].iov_base, 0, cmd->lib_cmd->iovec[i].iov_len);
		return TCMU_STS_NOT_HANDLED;
	case CDB_READ_10:
	case CDB_READ_12:
	case CDB_READ_16:
	case CDB_WRITE_10:
	case CDB_WRITE_12:
	case CDB_WRITE_16:
	case CDB_WRITE_VERIFY_10:
	case CDB_WRITE_VERIFY_12:
	case CDB_WRITE_VERIFY_16:
	case CDB_COMPARE_AND_WRITE:
		bad = cdb[1] & (CDB_PROTECT_MASK | CDB_DPO_FUA_MASK);
		break;
	case CDB_WRITE_SAME_10:
	case CDB_WRITE_SAME_16:
		bad = cdb[1] & (CDB_PROTECT_MASK | CDB_WRITE_SAME_ANCHOR);
		break;
	default:
		return TCMU_STS_NOT_HANDLED;
	}
	if (bad) {
		const char *what = bad & CDB_PROTECT_MASK ? "protection information"
				   : cdb[0] == CDB_WRITE_SAME_10 || cdb[0] == CDB_WRITE_SAME_16
					   ? "ANCHOR"
					   : "DPO/FUA";

		tcmu_dev_dbg(dev, "CDB 0x%02x byte 1 = 0x%02x: %s not supported\n", cdb[0],
			     cdb[1], what);
		return TCMU_STS_INVALID_CDB;
	}
	return TCMU_STS_NOT_HANDLED;
}

/* ---------------------------------------------------------------------------------------- */
/* VERIFY(10/12/16)                                                                         */

/*
 * tcmu-runner 1.5.4 has no VERIFY: without this the command ends with INVALID COMMAND
 * OPERATION CODE (tcmur_cmd_handler.c has no case for it), where LIO's own backstores
 * accept it. SBC-4 5.29-5.31:
 *  - byte 1: VRPROTECT (bits 7-5) must be 0 (no protection information), DPO (bit 4) must
 *    be 0 (the runner's MODE SENSE reports DPOFUA=0), BYTCHK (bits 2-1):
 *      0: check the medium is readable: the range is read through libcairn;
 *      1: compare the data-out buffer (VERIFICATION LENGTH blocks) with the medium;
 *      3: compare the one block of data-out with every block of the range;
 *      2: reserved, INVALID FIELD IN CDB.
 *  - the range must lie on the LUN, else LBA OUT OF RANGE (also with length 0, past the
 *    end); length 0 verifies nothing and is GOOD.
 *  - a difference ends with MISCOMPARE / MISCOMPARE DURING VERIFY OPERATION, the sense
 *    INFORMATION field holding the offset of the first differing byte from the start of
 *    the range (as the runner's COMPARE AND WRITE does, handle_caw_read_cbk); a read
 *    error with MEDIUM ERROR (transport errors with BUSY, as for READ).
 * The runner calls handle_cmd on the device's command thread and exports no way to
 * complete a handle_cmd command later (the aio tracking it started is internal), so the
 * reads are synchronous, 1 MiB at a time: a long VERIFY holds up the submission of the
 * device's next commands (not their completion) while it runs.
 */
#define VERIFY_CHUNK (1u << 20)

static uint64_t get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static int hc_verify(struct tcmu_device *dev, struct tcmulib_cmd *cmd)
{
	const uint8_t *cdb = cmd->cdb;
	struct cairn_dev *cd;
	uint8_t bytchk = (cdb[1] >> 1) & 3;
	uint64_t lba, nblocks, num_lbas, off, len, pos;
	uint8_t *expect = NULL, *now = NULL;
	size_t expect_len = 0;
	uint32_t bs;
	int sts = TCMU_STS_OK;

	if (cdb[1] & CDB_PROTECT_MASK) {
		tcmu_dev_dbg(dev, "VERIFY with VRPROTECT %u: no protection information\n",
			     cdb[1] >> 5);
		return TCMU_STS_INVALID_CDB;
	}
	if (cdb[1] & 0x10) {
		tcmu_dev_dbg(dev, "VERIFY with DPO: DPOFUA=0 in MODE SENSE\n");
		return TCMU_STS_INVALID_CDB;
	}
	if (bytchk == 2) {
		tcmu_dev_dbg(dev, "VERIFY with reserved BYTCHK 2\n");
		return TCMU_STS_INVALID_CDB;
	}
	switch (cdb[0]) {
	case CDB_VERIFY_10:
		lba = get_be(cdb + 2, 4);
		nblocks = get_be(cdb + 7, 2);
		break;
	case CDB_VERIFY_12:
		lba = get_be(cdb + 2, 4);
		nblocks = get_be(cdb + 6, 4);
		break;
	default:
		lba = get_be(cdb + 2, 8);
		nblocks = get_be(cdb + 10, 4);
		break;
	}
	num_lbas = tcmu_dev_get_num_lbas(dev);
	if (nblocks > num_lbas || lba > num_lbas - nblocks) {
		tcmu_dev_dbg(dev, "VERIFY of %" PRIu64 " blocks at LBA %" PRIu64
			     " beyond the %" PRIu64 " blocks of the LUN\n", nblocks, lba, num_lbas);
		return TCMU_STS_RANGE;
	}
	if (nblocks == 0)
		return TCMU_STS_OK;
	cd = tcmur_dev_get_private(dev);
	if (!cd)
		return TCMU_STS_BUSY; /* not open (yet): the initiator retries */
	bs = tcmu_dev_get_block_size(dev);
	off = lba * bs;
	len = nblocks * bs;

	if (bytchk) {
		expect_len = bytchk == 1 ? len : bs;
		if (iov_length(cmd->iovec, cmd->iov_cnt) < expect_len) {
			tcmu_dev_err(dev, "VERIFY BYTCHK %u of %" PRIu64 " blocks: %zu bytes of "
				     "data-out, want %zu\n", bytchk, nblocks,
				     iov_length(cmd->iovec, cmd->iov_cnt), expect_len);
			return TCMU_STS_INVALID_CDB;
		}
		expect = malloc(expect_len);
		if (!expect)
			return TCMU_STS_NO_RESOURCE;
		iov_gather(cmd->iovec, cmd->iov_cnt, expect, expect_len);
	}
	now = malloc(len < VERIFY_CHUNK ? len : VERIFY_CHUNK);
	if (!now) {
		free(expect);
		return TCMU_STS_NO_RESOURCE;
	}
	for (pos = 0; pos < len && sts == TCMU_STS_OK;) {
		size_t n = len - pos < VERIFY_CHUNK ? (size_t)(len - pos) : VERIFY_CHUNK;
		ssize_t got = cairn_read(cd->fs, NULL, cd->id, off + pos, now, n);

		if (got < 0) {
			tcmu_dev_err(dev, "verify read of %zu at %" PRIu64 " from %s on volume %s: "
				     "%s\n", n, off + pos, cd->cfg.path, cd->cfg.volume,
				     cairn_last_error_message());
			sts = errno_to_sts((int)-got, false);
			break;
		}
		memset(now + got, 0, n - (size_t)got); /* short only at end of file: zeros */
		for (size_t i = 0; expect && i < n; i++) {
			uint64_t at = pos + i;
			uint8_t want = bytchk == 1 ? expect[at] : expect[at % bs];

			if (now[i] != want) {
				tcmu_dev_dbg(dev, "VERIFY miscompare at byte %" PRIu64 " of %" PRIu64
					     " at LBA %" PRIu64 "\n", at, len, lba);
				if (at <= UINT32_MAX)
					tcmu_sense_set_info(cmd->sense_buf, (uint32_t)at);
				else
					memset(cmd->sense_buf, 0, 18);
				sts = TCMU_STS_MISCOMPARE;
				break;
			}
		}
		pos += n;
	}
	free(now);
	free(expect);
	return sts;
}

/* ---------------------------------------------------------------------------------------- */
/* Asynchronous read / write / flush / compare-and-write                                    */

static void read_done(int result, void *arg)
{
	struct cairn_io *io = arg;
	int sts = TCMU_STS_OK;

	if (result < 0) {
		tcmu_dev_err(io->dev, "read of %zu at %" PRIu64 " from %s on volume %s: %s\n",
			     io->len, io->off, io->cd->cfg.path, io->cd->cfg.volume,
			     cairn_last_error_message());
		sts = errno_to_sts(-result, false);
	} else {
		/* short only at end of file: the rest reads as zeros */
		iov_scatter(io->iov, io->iov_cnt, io->buf, (size_t)result, io->len);
	}
	tcmur_cmd_complete(io->dev, io->cmd, sts);
	io_free(io);
}

static int hc_read(struct tcmu_device *dev, struct tcmur_cmd *cmd,
			  struct iovec *iov, size_t iov_cnt, size_t len, off_t off)
{
	struct cairn_io *io = io_new(dev, cmd);
	int ret;

	if (!io)
		return TCMU_STS_NO_RESOURCE;
	io->buf = malloc(len ? len : 1);
	if (!io->buf) {
		io_free(io);
		return TCMU_STS_NO_RESOURCE;
	}
	io->iov = iov;
	io->iov_cnt = iov_cnt;
	io->len = len;
	io->off = (uint64_t)off;
	ret = cairn_aio_read(io->cd->fs, NULL, io->cd->id, io->off, io->buf, len, read_done, io);
	if (ret < 0) {
		tcmu_dev_err(dev, "submitting read at %" PRIu64 ": %s\n", io->off,
			     cairn_last_error_message());
		io_free(io);
		return errno_to_sts(-ret, false);
	}
	return TCMU_STS_OK;
}

static void write_done(int result, void *arg)
{
	struct cairn_io *io = arg;
	int sts = TCMU_STS_OK;

	if (result < 0) {
		tcmu_dev_err(io->dev, "write of %zu at %" PRIu64 " to %s on volume %s: %s\n",
			     io->len, io->off, io->cd->cfg.path, io->cd->cfg.volume,
			     cairn_last_error_message());
		sts = errno_to_sts(-result, true);
	} else if ((size_t)result != io->len) {
		tcmu_dev_err(io->dev, "short write of %d/%zu at %" PRIu64 " to %s\n", result,
			     io->len, io->off, io->cd->cfg.path);
		sts = TCMU_STS_WR_ERR;
	}
	tcmur_cmd_complete(io->dev, io->cmd, sts);
	io_free(io);
}

static int hc_write(struct tcmu_device *dev, struct tcmur_cmd *cmd,
			   struct iovec *iov, size_t iov_cnt, size_t len, off_t off)
{
	struct cairn_io *io = io_new(dev, cmd);
	const void *src;
	uint8_t *bounce = NULL;
	int ret;

	if (!io)
		return TCMU_STS_NO_RESOURCE;
	io->len = len;
	io->off = (uint64_t)off;
	if (iov_cnt == 1 && iov[0].iov_len >= len) {
		src = iov[0].iov_base;
	} else {
		bounce = malloc(len ? len : 1);
		if (!bounce) {
			io_free(io);
			return TCMU_STS_NO_RESOURCE;
		}
		iov_gather(iov, iov_cnt, bounce, len);
		src = bounce;
	}
	/* libcairn copies the data before returning: the bounce buffer can go at once */
	ret = cairn_aio_write_through(io->cd->fs, NULL, io->cd->id, io->off, src, len,
				      write_done, io);
	free(bounce);
	if (ret < 0) {
		tcmu_dev_err(dev, "submitting write at %" PRIu64 ": %s\n", io->off,
			     cairn_last_error_message());
		io_free(io);
		return errno_to_sts(-ret, true);
	}
	return TCMU_STS_OK;
}

static void flush_done(int result, void *arg)
{
	struct cairn_io *io = arg;
	int sts = TCMU_STS_OK;

	if (result < 0) {
		tcmu_dev_err(io->dev, "fsync of %s on volume %s: %s\n", io->cd->cfg.path,
			     io->cd->cfg.volume, cairn_last_error_message());
		sts = errno_to_sts(-result, true);
	}
	tcmur_cmd_complete(io->dev, io->cmd, sts);
	io_free(io);
}

static int hc_flush(struct tcmu_device *dev, struct tcmur_cmd *cmd)
{
	struct cairn_io *io = io_new(dev, cmd);
	int ret;

	if (!io)
		return TCMU_STS_NO_RESOURCE;
	ret = cairn_aio_fsync(io->cd->fs, NULL, io->cd->id, true, flush_done, io);
	if (ret < 0) {
		tcmu_dev_err(dev, "submitting fsync: %s\n", cairn_last_error_message());
		io_free(io);
		return errno_to_sts(-ret, true);
	}
	return TCMU_STS_OK;
}

/*
 * On a miscompare the sense INFORMATION field should hold the offset of the first
 * differing byte. libcairn only says "differs", so read the range back and compare
 * (best effort: the data may have changed again since; 0 if it now matches).
 */
static uint32_t miscompare_offset(struct cairn_io *io)
{
	uint8_t *now = malloc(io->len);
	ssize_t n;
	uint32_t at = 0;

	if (!now)
		return 0;
	n = cairn_read(io->cd->fs, NULL, io->cd->id, io->off, now, io->len);
	if (n >= 0) {
		memset(now + n, 0, io->len - (size_t)n);
		for (size_t i = 0; i < io->len; i++) {
			if (now[i] != io->buf[i]) {
				at = (uint32_t)i;
				break;
			}
		}
	}
	free(now);
	return at;
}

static void caw_done(int result, void *arg)
{
	struct cairn_io *io = arg;
	int sts = TCMU_STS_OK;

	if (result == -CAIRN_EMISCOMPARE) {
		sts = TCMU_STS_MISCOMPARE;
		tcmu_sense_set_info(io->cmd->lib_cmd->sense_buf, miscompare_offset(io));
	} else if (result < 0) {
		tcmu_dev_err(io->dev, "compare-and-write of %zu at %" PRIu64
			     " on %s volume %s: %s\n", io->len, io->off, io->cd->cfg.path,
			     io->cd->cfg.volume, cairn_last_error_message());
		sts = errno_to_sts(-result, true);
	}
	tcmur_cmd_complete(io->dev, io->cmd, sts);
	io_free(io);
}

/* iov holds the compare data (len bytes) followed by the data to write (len bytes). */
static int hc_caw(struct tcmu_device *dev, struct tcmur_cmd *cmd, uint64_t off,
			 uint64_t len, struct iovec *iov, size_t iov_cnt)
{
	struct cairn_io *io;
	int ret;

	if (iov_length(iov, iov_cnt) < 2 * len)
		return TCMU_STS_INVALID_PARAM_LIST_LEN;
	io = io_new(dev, cmd);
	if (!io)
		return TCMU_STS_NO_RESOURCE;
	io->buf = malloc(2 * len);
	if (!io->buf) {
		io_free(io);
		return TCMU_STS_NO_RESOURCE;
	}
	io->len = len;
	io->off = off;
	iov_gather(iov, iov_cnt, io->buf, 2 * len);
	ret = cairn_aio_compare_and_write(io->cd->fs, NULL, io->cd->id, off, io->buf,
					  io->buf + len, len, caw_done, io);
	if (ret < 0) {
		tcmu_dev_err(dev, "submitting compare-and-write at %" PRIu64 ": %s\n", off,
			     cairn_last_error_message());
		io_free(io);
		return errno_to_sts(-ret, true);
	}
	return TCMU_STS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* UNMAP and WRITE SAME: synchronous libcairn calls on a detached helper thread             */

#define WRITESAME_CHUNK (1u << 20)

static int do_writesame(struct cairn_io *io)
{
	struct cairn_dev *cd = io->cd;
	bool zero = true;
	uint8_t *chunk;
	size_t chunk_len;
	uint64_t pos = 0;
	int ret = 0;

	for (size_t i = 0; i < io->pattern_len; i++) {
		if (io->pattern[i]) {
			zero = false;
			break;
		}
	}
	if (zero) {
		ret = cairn_fallocate(cd->fs, NULL, cd->id, FALLOC_FL_ZERO_RANGE, io->off,
				      io->len);
		if (ret != -EOPNOTSUPP)
			return ret;
	}
	/* a whole number of pattern blocks, at most WRITESAME_CHUNK */
	chunk_len = (WRITESAME_CHUNK / io->pattern_len) * io->pattern_len;
	if (chunk_len == 0)
		chunk_len = io->pattern_len;
	if (chunk_len > io->len)
		chunk_len = io->len;
	chunk = malloc(chunk_len);
	if (!chunk)
		return -ENOMEM;
	for (size_t p = 0; p < chunk_len; p += io->pattern_len)
		memcpy(chunk + p, io->pattern,
		       chunk_len - p < io->pattern_len ? chunk_len - p : io->pattern_len);
	while (pos < io->len) {
		size_t n = io->len - pos < chunk_len ? io->len - pos : chunk_len;
		ssize_t w = cairn_write_through(cd->fs, NULL, cd->id, io->off + pos, chunk, n);

		if (w < 0) {
			ret = (int)w;
			break;
		}
		pos += n;
	}
	free(chunk);
	return ret;
}

static void *sync_worker(void *arg)
{
	struct cairn_io *io = arg;
	int ret, sts = TCMU_STS_OK;
	const char *what = io->kind == IO_UNMAP ? "unmap" : "write same";

	if (io->kind == IO_UNMAP)
		ret = cairn_fallocate(io->cd->fs, NULL, io->cd->id,
				      FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, io->off,
				      io->len);
	else
		ret = do_writesame(io);
	if (ret < 0) {
		tcmu_dev_err(io->dev, "%s of %zu at %" PRIu64 " on %s volume %s: %s\n", what,
			     io->len, io->off, io->cd->cfg.path, io->cd->cfg.volume,
			     cairn_last_error_message());
		sts = errno_to_sts(-ret, true);
	}
	tcmur_cmd_complete(io->dev, io->cmd, sts);
	io_free(io);
	return NULL;
}

static int start_sync_worker(struct cairn_io *io)
{
	pthread_attr_t attr;
	pthread_t tid;
	int ret;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ret = pthread_create(&tid, &attr, sync_worker, io);
	pthread_attr_destroy(&attr);
	if (ret) {
		io_free(io);
		return TCMU_STS_NO_RESOURCE;
	}
	return TCMU_STS_OK;
}

static int hc_unmap(struct tcmu_device *dev, struct tcmur_cmd *cmd, uint64_t off,
			   uint64_t len)
{
	struct cairn_io *io = io_new(dev, cmd);

	if (!io)
		return TCMU_STS_NO_RESOURCE;
	io->kind = IO_UNMAP;
	io->off = off;
	io->len = len;
	return start_sync_worker(io);
}

static int hc_writesame(struct tcmu_device *dev, struct tcmur_cmd *cmd,
			       uint64_t off, uint64_t len, struct iovec *iov, size_t iov_cnt)
{
	struct cairn_io *io = io_new(dev, cmd);
	uint32_t bs = tcmu_dev_get_block_size(dev);

	if (!io)
		return TCMU_STS_NO_RESOURCE;
	if (iov_length(iov, iov_cnt) < bs) {
		io_free(io);
		return TCMU_STS_INVALID_PARAM_LIST_LEN;
	}
	io->pattern = malloc(bs);
	if (!io->pattern) {
		io_free(io);
		return TCMU_STS_NO_RESOURCE;
	}
	iov_gather(iov, iov_cnt, io->pattern, bs);
	io->pattern_len = bs;
	io->kind = IO_WRITESAME;
	io->off = off;
	io->len = len;
	return start_sync_worker(io);
}

/* ---------------------------------------------------------------------------------------- */

static struct tcmur_handler cairn_handler = {
	.name = "Cairn volume handler (libcairn)",
	.subtype = "cairn",
	.cfg_desc = cairn_cfg_desc,
	.check_config = hc_check_config,
	.reconfig = hc_reconfig,
	.open = hc_open,
	.close = hc_close,
	.read = hc_read,
	.write = hc_write,
	.flush = hc_flush,
	.unmap = hc_unmap,
	.writesame = hc_writesame,
	.caw = hc_caw,
	.handle_cmd = hc_handle_cmd,
	/* commands complete from libcairn's threads (and the helper threads) */
	.nr_threads = 0,
};

/* Entry point tcmu-runner calls after dlopen. */
__attribute__((visibility("default"))) int handler_init(void);
int handler_init(void)
{
	if (cairn_abi_version() != CAIRN_ABI_VERSION) {
		tcmu_err("libcairn ABI %u, handler built for %u\n", cairn_abi_version(),
			 CAIRN_ABI_VERSION);
		return -EINVAL;
	}
	return tcmur_register_handler(&cairn_handler);
}
