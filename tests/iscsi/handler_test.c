/*
 * handler_test.c - drive handler_cairn.so the way tcmu-runner does, without LIO.
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 * This program plays tcmu-runner: it exports the runner symbols a handler links against
 * (tcmur_register_handler, tcmur_cmd_complete, tcmu_dev_get_*, logging, ...), with a fake
 * struct tcmu_device, dlopens the handler, calls handler_init and then the handler's
 * callouts with fake struct tcmur_cmd commands. The data goes to a real Cairn cluster;
 * what the handler wrote is checked with libcairn directly.
 *
 *   handler_test HANDLER.so config                       config-string validation only
 *   handler_test HANDLER.so ops SERVERS VOLUME           every op, CAW across 2 gateways
 *   handler_test HANDLER.so stress SERVERS VOLUME SECS   writes and reads for SECS seconds
 *        while the caller kills and restarts bricks: failures must be retryable (BUSY),
 *        reads must return acknowledged data; then every block is checked with libcairn
 *        (no acknowledged write lost, nothing torn or half-applied)
 *   handler_test HANDLER.so caw SERVERS VOLUME N         one "gateway": N CAW increments of
 *        the counter in block 0 of luns/caw.img (run several at once)
 *   handler_test HANDLER.so caw-check SERVERS VOLUME N   the counter is N (libcairn)
 *
 * Prints "ok - ..." per check and exits 1 at the first failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cairn.h>

#include "libtcmu.h"
#include "tcmu-runner.h"
#include "tcmur_device.h"

/* ---------------------------------------------------------------------------------------- */
/* The fake runner                                                                          */

struct tcmu_device {
	char cfgstring[2048];
	uint64_t num_lbas;
	uint32_t block_size;
	void *hpriv;
	bool wce;
	bool ssd;
	uint32_t max_unmap_len;
	uint32_t unmap_gran_align;
};

struct hcmd {
	struct tcmur_cmd c; /* what the handler sees */
	struct tcmulib_cmd lib;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	int sts;
	void (*on_done)(struct hcmd *h);
	void *arg;
};

static struct tcmur_handler *handler;
static int errors_logged;
static bool quiet_errors;

int tcmur_register_handler(struct tcmur_handler *h)
{
	handler = h;
	return 0;
}

void tcmur_cmd_complete(struct tcmu_device *dev, void *data, int rc)
{
	struct hcmd *h = (struct hcmd *)data;
	/* read before signalling: a waiter may free h as soon as done is set */
	void (*on_done)(struct hcmd *) = h->on_done;

	(void)dev;
	if (on_done) {
		h->sts = rc;
		on_done(h);
		return;
	}
	pthread_mutex_lock(&h->mu);
	h->sts = rc;
	h->done = true;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

char *tcmu_dev_get_cfgstring(struct tcmu_device *dev) { return dev->cfgstring; }
uint64_t tcmu_dev_get_num_lbas(struct tcmu_device *dev) { return dev->num_lbas; }
void tcmu_dev_set_num_lbas(struct tcmu_device *dev, uint64_t n) { dev->num_lbas = n; }
uint32_t tcmu_dev_get_block_size(struct tcmu_device *dev) { return dev->block_size; }
void tcmu_dev_set_block_size(struct tcmu_device *dev, uint32_t b) { dev->block_size = b; }
void tcmur_dev_set_private(struct tcmu_device *dev, void *p) { dev->hpriv = p; }
void *tcmur_dev_get_private(struct tcmu_device *dev) { return dev->hpriv; }
void tcmu_dev_set_write_cache_enabled(struct tcmu_device *dev, bool e) { dev->wce = e; }
bool tcmu_dev_get_write_cache_enabled(struct tcmu_device *dev) { return dev->wce; }
void tcmu_dev_set_solid_state_media(struct tcmu_device *dev, bool s) { dev->ssd = s; }
void tcmu_dev_set_max_unmap_len(struct tcmu_device *dev, uint32_t l) { dev->max_unmap_len = l; }
void tcmu_dev_set_opt_unmap_gran(struct tcmu_device *dev, uint32_t l, bool s)
{
	(void)dev, (void)l, (void)s;
}
void tcmu_dev_set_unmap_gran_align(struct tcmu_device *dev, uint32_t l) { dev->unmap_gran_align = l; }

/* as tcmu-runner's api.c: fixed-format sense, INFORMATION field, VALID bit */
void tcmu_sense_set_info(uint8_t *sense_buf, uint32_t info)
{
	memset(sense_buf, 0, 18);
	sense_buf[3] = info >> 24;
	sense_buf[4] = info >> 16;
	sense_buf[5] = info >> 8;
	sense_buf[6] = info;
	sense_buf[0] |= 0x80;
}

/* where quieted errors still go (HT_ERRLOG), so a failed stress run shows libcairn's errno */
static FILE *quiet_log;

static void logmsg(FILE *to, const char *lvl, struct tcmu_device *dev, const char *fn,
		   int line, const char *fmt, va_list ap)
{
	(void)dev;
	if (strcmp(lvl, "dbg") == 0 && !getenv("HT_DEBUG"))
		return;
	fprintf(to, "  [handler %s] %s:%d: ", lvl, fn, line);
	vfprintf(to, fmt, ap);
}

#define LOGFN(name, lvl, count)                                                         \
	void name(struct tcmu_device *dev, const char *fn, int line, const char *fmt, ...) \
	{                                                                                  \
		va_list ap;                                                                \
		if (count) {                                                               \
			__atomic_add_fetch(&errors_logged, 1, __ATOMIC_RELAXED);           \
			if (quiet_errors) {                                                \
				if (quiet_log) {                                           \
					va_start(ap, fmt);                                 \
					logmsg(quiet_log, lvl, dev, fn, line, fmt, ap);    \
					va_end(ap);                                        \
				}                                                          \
				return;                                                    \
			}                                                                  \
		}                                                                          \
		va_start(ap, fmt);                                                         \
		logmsg(stderr, lvl, dev, fn, line, fmt, ap);                               \
		va_end(ap);                                                                \
	}
LOGFN(tcmu_crit_message, "crit", 1)
LOGFN(tcmu_err_message, "err", 1)
LOGFN(tcmu_warn_message, "warn", 0)
LOGFN(tcmu_info_message, "info", 0)
LOGFN(tcmu_dbg_message, "dbg", 0)

/* ---------------------------------------------------------------------------------------- */
/* Test plumbing                                                                            */

static int nchecks;

static void ok(const char *fmt, ...)
{
	va_list ap;

	nchecks++;
	printf("ok - ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void __attribute__((noreturn)) die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "FAIL - ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

#define CHECK(cond, ...)                   \
	do {                               \
		if (!(cond))               \
			die(__VA_ARGS__);  \
	} while (0)

static struct hcmd *hcmd_new(void)
{
	struct hcmd *h = calloc(1, sizeof(*h));

	CHECK(h, "out of memory");
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	h->c.lib_cmd = &h->lib;
	return h;
}

static void hcmd_free(struct hcmd *h)
{
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h);
}

/* The callout returned rc: OK means "queued, completion follows"; else it is the status. */
static int wait_cmd(struct hcmd *h, int rc)
{
	struct timespec dl;

	if (rc != TCMU_STS_OK)
		return rc;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 120;
	pthread_mutex_lock(&h->mu);
	while (!h->done) {
		if (pthread_cond_timedwait(&h->cv, &h->mu, &dl) == ETIMEDOUT)
			die("command not completed after 120 s");
	}
	pthread_mutex_unlock(&h->mu);
	return h->sts;
}

static int do_read(struct tcmu_device *dev, void *buf, size_t len, uint64_t off, size_t nseg)
{
	struct hcmd *h = hcmd_new();
	struct iovec iov[16];
	size_t per = len / nseg, pos = 0;
	int sts;

	for (size_t i = 0; i < nseg; i++) {
		iov[i].iov_base = (uint8_t *)buf + pos;
		iov[i].iov_len = i == nseg - 1 ? len - pos : per;
		pos += iov[i].iov_len;
	}
	sts = wait_cmd(h, handler->read(dev, &h->c, iov, nseg, len, (off_t)off));
	hcmd_free(h);
	return sts;
}

static int do_write(struct tcmu_device *dev, const void *buf, size_t len, uint64_t off,
		    size_t nseg)
{
	struct hcmd *h = hcmd_new();
	struct iovec iov[16];
	size_t per = len / nseg, pos = 0;
	int sts;

	for (size_t i = 0; i < nseg; i++) {
		iov[i].iov_base = (uint8_t *)buf + pos;
		iov[i].iov_len = i == nseg - 1 ? len - pos : per;
		pos += iov[i].iov_len;
	}
	sts = wait_cmd(h, handler->write(dev, &h->c, iov, nseg, len, (off_t)off));
	hcmd_free(h);
	return sts;
}

static int do_flush(struct tcmu_device *dev)
{
	struct hcmd *h = hcmd_new();
	int sts = wait_cmd(h, handler->flush(dev, &h->c));

	hcmd_free(h);
	return sts;
}

static int do_unmap(struct tcmu_device *dev, uint64_t off, uint64_t len)
{
	struct hcmd *h = hcmd_new();
	int sts = wait_cmd(h, handler->unmap(dev, &h->c, off, len));

	hcmd_free(h);
	return sts;
}

static int do_writesame(struct tcmu_device *dev, const void *pat, uint64_t off, uint64_t len)
{
	struct hcmd *h = hcmd_new();
	struct iovec iov = { (void *)pat, dev->block_size };
	int sts = wait_cmd(h, handler->writesame(dev, &h->c, off, len, &iov, 1));

	hcmd_free(h);
	return sts;
}

/* CAW as tcmu-runner calls it: one iovec with compare data then write data. */
static int do_caw(struct tcmu_device *dev, const void *cmp, const void *data, size_t len,
		  uint64_t off, uint8_t *sense)
{
	struct hcmd *h = hcmd_new();
	uint8_t *both = malloc(2 * len);
	struct iovec iov[2];
	int sts;

	memcpy(both, cmp, len);
	memcpy(both + len, data, len);
	/* split unevenly so the handler must gather across segments */
	iov[0].iov_base = both;
	iov[0].iov_len = len / 3;
	iov[1].iov_base = both + len / 3;
	iov[1].iov_len = 2 * len - len / 3;
	sts = wait_cmd(h, handler->caw(dev, &h->c, off, len, iov, 2));
	if (sense)
		memcpy(sense, h->lib.sense_buf, 18);
	free(both);
	hcmd_free(h);
	return sts;
}

static struct tcmu_device *dev_new(const char *cfg, uint64_t size, uint32_t bs)
{
	struct tcmu_device *dev = calloc(1, sizeof(*dev));

	CHECK(dev, "out of memory");
	snprintf(dev->cfgstring, sizeof(dev->cfgstring), "%s", cfg);
	dev->block_size = bs;
	dev->num_lbas = size / bs;
	dev->wce = true; /* the handler must turn it off */
	return dev;
}

static cairn_fs_t *lc_mount(const char *servers, const char *volume)
{
	cairn_options_t o;
	cairn_fs_t *fs;
	int ret;

	cairn_options_init(&o);
	o.write_behind = false;
	/* no attribute caching: the checks must see what the handler's mount just did */
	o.cache_timeout_ms = getenv("HT_CACHE_MS") ? (uint32_t)atoi(getenv("HT_CACHE_MS")) : 0;
	o.client_name = "handler_test";
	ret = cairn_mount(servers, volume, &o, &fs);
	CHECK(ret == 0, "cairn_mount %s %s: %s", servers, volume, cairn_last_error_message());
	return fs;
}

/* Create (or truncate to 0) PATH under directory "luns"; returns its id. */
static cairn_id_t lc_create(cairn_fs_t *fs, const char *name)
{
	cairn_attr_t dir, a, zero = { .size = 0 };
	int ret;

	ret = cairn_mkdir(fs, NULL, cairn_id_root(), "luns", 0755, &dir);
	if (ret == -EEXIST)
		ret = cairn_lookup(fs, NULL, cairn_id_root(), "luns", &dir);
	CHECK(ret == 0, "mkdir luns: %s", cairn_last_error_message());
	ret = cairn_create(fs, NULL, dir.id, name, 0600, 0, &a);
	CHECK(ret == 0, "create luns/%s: %s", name, cairn_last_error_message());
	ret = cairn_setattr(fs, NULL, a.id, &zero, CAIRN_SETATTR_SIZE, NULL);
	CHECK(ret == 0, "truncate luns/%s: %s", name, cairn_last_error_message());
	return a.id;
}

static void lc_read(cairn_fs_t *fs, cairn_id_t id, void *buf, size_t len, uint64_t off)
{
	ssize_t n = cairn_read(fs, NULL, id, off, buf, len);

	CHECK(n >= 0, "cairn_read %zu at %" PRIu64 ": %s", len, off, cairn_last_error_message());
	memset((uint8_t *)buf + n, 0, len - (size_t)n);
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
}

static bool all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static void load_handler(const char *path)
{
	void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	int (*init)(void);

	CHECK(so, "dlopen %s: %s", path, dlerror());
	init = (int (*)(void))dlsym(so, "handler_init");
	CHECK(init, "%s has no handler_init", path);
	CHECK(init() == 0 && handler, "handler_init failed or registered nothing");
	CHECK(strcmp(handler->subtype, "cairn") == 0, "subtype is '%s'", handler->subtype);
	CHECK(handler->check_config && handler->open && handler->close && handler->read &&
		      handler->write && handler->flush && handler->unmap && handler->writesame &&
		      handler->caw && handler->handle_cmd,
	      "handler lacks a callout");
	ok("dlopen + handler_init registered subtype 'cairn' with all callouts");
}

/* ---------------------------------------------------------------------------------------- */
/* config                                                                                   */

static void expect_reject(const char *cfg, const char *needle)
{
	char *reason = NULL;
	bool good = handler->check_config(cfg, &reason);

	CHECK(!good, "config '%s' accepted", cfg);
	CHECK(reason && strstr(reason, needle), "config '%s': reason '%s' does not name '%s'",
	      cfg, reason ? reason : "(null)", needle);
	ok("rejects '%s': %s", cfg, reason);
	free(reason);
}

static void test_config_offline(void)
{
	expect_reject("", "empty");
	expect_reject("cairn/", "empty");
	expect_reject("cairn/vol0", "'@'");
	expect_reject("cairn/@127.0.0.1/f", "volume name is empty");
	expect_reject("cairn/vol 0@127.0.0.1/f", "invalid character ' '");
	expect_reject("cairn/-vol@127.0.0.1/f", "must not start");
	expect_reject("cairn/vol0@/f", "server is empty");
	expect_reject("cairn/vol0@127.0.0.1", "no '/PATH'");
	expect_reject("cairn/vol0@127.0.0.1:0/f", "port '0'");
	expect_reject("cairn/vol0@127.0.0.1:70000/f", "port '70000'");
	expect_reject("cairn/vol0@127.0.0.1:http/f", "port 'http'");
	expect_reject("cairn/vol0@host_name/f", "invalid character '_' in host name");
	expect_reject("cairn/vol0@h1:7420,,h2/f", "empty entry");
	expect_reject("cairn/vol0@h1~7420++h2/f", "empty entry");
	expect_reject("cairn/vol0@h1~0/f", "port '0'");
	expect_reject("cairn/vol0@[::1/f", "missing ']'");
	expect_reject("cairn/vol0@127.0.0.1/", "file path is empty");
	expect_reject("cairn/vol0@127.0.0.1/luns/", "ends with '/'");
	expect_reject("cairn/vol0@127.0.0.1/a//b", "empty component");
	expect_reject("cairn/vol0@127.0.0.1/a/../b", "'..' component");
}

/* ---------------------------------------------------------------------------------------- */
/* CDB checks (handle_cmd): what the runner's generic path does not check                   */

static int cdb_sts(uint8_t op, uint8_t byte1)
{
	struct hcmd *h = hcmd_new();
	uint8_t cdb[16] = { op, byte1 };
	int sts;

	h->lib.cdb = cdb;
	sts = handler->handle_cmd(NULL, &h->c);
	hcmd_free(h);
	return sts;
}

/*
 * VERIFY(10/12/16) through handle_cmd, as the runner calls it: synchronous, the status is
 * the return value. byte1 holds VRPROTECT/DPO/BYTCHK; data/datalen the data-out (BYTCHK 1
 * or 3), split in two iovecs; sense (18 bytes) if not NULL.
 */
static int do_verify(struct tcmu_device *dev, uint8_t op, uint8_t byte1, uint64_t lba,
		     uint32_t nblocks, const void *data, size_t datalen, uint8_t *sense)
{
	struct hcmd *h = hcmd_new();
	uint8_t cdb[16] = { op, byte1 };
	struct iovec iov[2] = { { (void *)data, datalen / 3 },
				{ (uint8_t *)data + datalen / 3, datalen - datalen / 3 } };
	int sts;

	switch (op) {
	case 0x2f: /* VERIFY(10) */
		for (int i = 0; i < 4; i++)
			cdb[2 + i] = (uint8_t)(lba >> (24 - 8 * i));
		cdb[7] = (uint8_t)(nblocks >> 8);
		cdb[8] = (uint8_t)nblocks;
		break;
	case 0xaf: /* VERIFY(12) */
		for (int i = 0; i < 4; i++) {
			cdb[2 + i] = (uint8_t)(lba >> (24 - 8 * i));
			cdb[6 + i] = (uint8_t)(nblocks >> (24 - 8 * i));
		}
		break;
	default: /* VERIFY(16) */
		for (int i = 0; i < 8; i++)
			cdb[2 + i] = (uint8_t)(lba >> (56 - 8 * i));
		for (int i = 0; i < 4; i++)
			cdb[10 + i] = (uint8_t)(nblocks >> (24 - 8 * i));
		break;
	}
	h->lib.cdb = cdb;
	h->lib.iovec = data ? iov : NULL;
	h->lib.iov_cnt = data ? 2 : 0;
	memset(h->lib.sense_buf, 0xee, sizeof(h->lib.sense_buf));
	sts = handler->handle_cmd(dev, &h->c);
	if (sense)
		memcpy(sense, h->lib.sense_buf, 18);
	hcmd_free(h);
	return sts;
}

static const struct {
	uint8_t op;
	const char *name;
	uint64_t max_lba;
} verify_ops[] = {
	{ 0x2f, "VERIFY(10)", UINT32_MAX },
	{ 0xaf, "VERIFY(12)", UINT32_MAX },
	{ 0x8f, "VERIFY(16)", UINT64_MAX },
};

/* VERIFY CDB fields and LBA range; no I/O (the device is not open) */
static void test_verify_cdb(void)
{
	struct tcmu_device *dev = dev_new("cairn/none@127.0.0.1/x", 1u << 20, 512);
	const uint64_t n = dev->num_lbas;

	for (size_t i = 0; i < sizeof(verify_ops) / sizeof(verify_ops[0]); i++) {
		uint8_t op = verify_ops[i].op;
		const char *name = verify_ops[i].name;
		int sts;

		for (int prot = 1; prot < 8; prot++) {
			sts = do_verify(dev, op, (uint8_t)(prot << 5), 0, 1, NULL, 0, NULL);
			CHECK(sts == TCMU_STS_INVALID_CDB, "%s VRPROTECT=%d: sts %d, want INVALID_CDB",
			      name, prot, sts);
		}
		sts = do_verify(dev, op, 0x10, 0, 1, NULL, 0, NULL);
		CHECK(sts == TCMU_STS_INVALID_CDB, "%s DPO: sts %d, want INVALID_CDB", name, sts);
		sts = do_verify(dev, op, 0x04, 0, 1, NULL, 0, NULL);
		CHECK(sts == TCMU_STS_INVALID_CDB, "%s BYTCHK=2: sts %d, want INVALID_CDB", name,
		      sts);
		/* 0 blocks: GOOD on the LUN, up to its end; LBA OUT OF RANGE past it */
		CHECK(do_verify(dev, op, 0, 0, 0, NULL, 0, NULL) == TCMU_STS_OK,
		      "%s 0 blocks at LBA 0 not GOOD", name);
		CHECK(do_verify(dev, op, 0x02, n, 0, NULL, 0, NULL) == TCMU_STS_OK,
		      "%s 0 blocks at LBA %" PRIu64 " (end) not GOOD", name, n);
		CHECK(do_verify(dev, op, 0x02, n + 1, 0, NULL, 0, NULL) == TCMU_STS_RANGE,
		      "%s 0 blocks one past the end: not LBA OUT OF RANGE", name);
		CHECK(do_verify(dev, op, 0, verify_ops[i].max_lba, 0, NULL, 0, NULL) ==
			      TCMU_STS_RANGE,
		      "%s 0 blocks at LBA -1: not LBA OUT OF RANGE", name);
		for (uint32_t k = 1; k <= 256; k += 51) {
			CHECK(do_verify(dev, op, 0, n + 1 - k, k, NULL, 0, NULL) == TCMU_STS_RANGE,
			      "%s %u blocks one beyond the end: not LBA OUT OF RANGE", name, k);
			CHECK(do_verify(dev, op, 0, verify_ops[i].max_lba, k, NULL, 0, NULL) ==
				      TCMU_STS_RANGE,
			      "%s %u blocks at LBA -1 (wraps): not LBA OUT OF RANGE", name, k);
			CHECK(do_verify(dev, op, 0, 0x80000000u, k, NULL, 0, NULL) == TCMU_STS_RANGE,
			      "%s %u blocks at LBA 2^31: not LBA OUT OF RANGE", name, k);
		}
		CHECK(do_verify(dev, op, 0, n - 1, 2, NULL, 0, NULL) == TCMU_STS_RANGE,
		      "%s 2 blocks, the second beyond the end: not LBA OUT OF RANGE", name);
	}
	free(dev);
	ok("handle_cmd VERIFY(10/12/16): VRPROTECT, DPO, BYTCHK=2 give INVALID FIELD IN CDB; "
	   "ranges past the end (and wrapping) LBA OUT OF RANGE; 0 blocks GOOD");
}

static void test_cdb_checks(void)
{
	static const struct {
		uint8_t op;
		const char *name;
		uint8_t refused; /* byte 1 bits 4-3 that must be 0 (DPO/FUA, WRITE SAME ANCHOR) */
	} ops[] = {
		{ 0x28, "READ(10)", 0x18 },	  { 0xa8, "READ(12)", 0x18 },
		{ 0x88, "READ(16)", 0x18 },	  { 0x2a, "WRITE(10)", 0x18 },
		{ 0xaa, "WRITE(12)", 0x18 },	  { 0x8a, "WRITE(16)", 0x18 },
		{ 0x2e, "WRITE AND VERIFY(10)", 0x18 },
		{ 0x8e, "WRITE AND VERIFY(16)", 0x18 },
		{ 0x89, "COMPARE AND WRITE", 0x18 },
		/* ANCHOR (0x10) with ANC_SUP=0 in the LBP VPD page; UNMAP (0x08) is fine */
		{ 0x41, "WRITE SAME(10)", 0x10 }, { 0x93, "WRITE SAME(16)", 0x10 },
	};

	CHECK(handler->handle_cmd, "handler has no handle_cmd callout");
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		int sts = cdb_sts(ops[i].op, 0);

		CHECK(sts == TCMU_STS_NOT_HANDLED, "%s plain: sts %d, want NOT_HANDLED",
		      ops[i].name, sts);
		for (int prot = 1; prot < 8; prot++) {
			sts = cdb_sts(ops[i].op, (uint8_t)(prot << 5));
			CHECK(sts == TCMU_STS_INVALID_CDB,
			      "%s with RD/WRPROTECT=%d: sts %d, want INVALID_CDB", ops[i].name, prot,
			      sts);
		}
		for (uint8_t bits = 0x08; bits <= 0x18; bits += 0x08) {
			sts = cdb_sts(ops[i].op, bits);
			CHECK(sts == (bits & ops[i].refused ? TCMU_STS_INVALID_CDB
							    : TCMU_STS_NOT_HANDLED),
			      "%s with byte 1 = 0x%02x: sts %d", ops[i].name, bits, sts);
		}
	}
	/* data-in the runner emulates: the buffer is zeroed first (no stale ring data) */
	{
		static const uint8_t datain_ops[] = { 0x03, 0x12, 0x1a, 0x25, 0x4d,
						      0x5a, 0x84, 0x9e, 0xa3 };
		uint8_t b1[100], b2[160], cdb[16] = { 0 };
		struct iovec iov[2] = { { b1, sizeof(b1) }, { b2, sizeof(b2) } };

		for (size_t i = 0; i < sizeof(datain_ops); i++) {
			struct hcmd *h = hcmd_new();
			int sts;

			memset(b1, 0xaa, sizeof(b1));
			memset(b2, 0xbb, sizeof(b2));
			cdb[0] = datain_ops[i];
			h->lib.cdb = cdb;
			h->lib.iovec = iov;
			h->lib.iov_cnt = 2;
			sts = handler->handle_cmd(NULL, &h->c);
			hcmd_free(h);
			CHECK(sts == TCMU_STS_NOT_HANDLED, "CDB 0x%02x: sts %d", cdb[0], sts);
			CHECK(all_zero(b1, sizeof(b1)) && all_zero(b2, sizeof(b2)),
			      "CDB 0x%02x: data-in buffer not zeroed", cdb[0]);
		}
		/* a WRITE's buffer is data-out: left alone */
		{
			struct hcmd *h = hcmd_new();

			memset(b1, 0xaa, sizeof(b1));
			cdb[0] = 0x2a;
			h->lib.cdb = cdb;
			h->lib.iovec = iov;
			h->lib.iov_cnt = 1;
			CHECK(handler->handle_cmd(NULL, &h->c) == TCMU_STS_NOT_HANDLED &&
				      b1[0] == 0xaa && b1[99] == 0xaa,
			      "WRITE(10) data touched");
			hcmd_free(h);
		}
		ok("handle_cmd: data-in buffers of runner-emulated commands zeroed (INQUIRY, "
		   "MODE SENSE, READ CAPACITY, ...), write data untouched");
	}
	/* everything else is the runner's: READ(6), SYNCHRONIZE CACHE, UNMAP */
	CHECK(cdb_sts(0x08, 0xff) == TCMU_STS_NOT_HANDLED, "READ(6) not passed on");
	CHECK(cdb_sts(0x35, 0x02) == TCMU_STS_NOT_HANDLED, "SYNCHRONIZE CACHE not passed on");
	CHECK(cdb_sts(0x42, 0x00) == TCMU_STS_NOT_HANDLED, "UNMAP not passed on");
	ok("handle_cmd: nonzero RD/WRPROTECT, DPO/FUA and WRITE SAME ANCHOR (alone or with "
	   "UNMAP) give INVALID FIELD IN CDB, the rest (WRITE SAME UNMAP) goes to the runner");
	test_verify_cdb();
}

/* ---------------------------------------------------------------------------------------- */
/* ops                                                                                      */

struct caw_arg {
	struct tcmu_device *dev;
	int increments;
	int miscompares;
	int failures;
};

/* Increment a 64-bit counter in block 0 with CAW until `increments` succeeded. */
static void *caw_incrementer(void *p)
{
	struct caw_arg *a = p;
	uint32_t bs = a->dev->block_size;
	uint8_t *cur = calloc(1, bs), *next = calloc(1, bs);
	int done = 0;

	while (done < a->increments) {
		uint64_t v;
		int sts;

		if (do_read(a->dev, cur, bs, 0, 1) != TCMU_STS_OK) {
			a->failures++;
			break;
		}
		memcpy(&v, cur, 8);
		memcpy(next, cur, bs);
		v++;
		memcpy(next, &v, 8);
		sts = do_caw(a->dev, cur, next, bs, 0, NULL);
		if (sts == TCMU_STS_OK)
			done++;
		else if (sts == TCMU_STS_MISCOMPARE)
			a->miscompares++;
		else {
			a->failures++;
			break;
		}
	}
	free(cur);
	free(next);
	return NULL;
}

static void test_ops(const char *servers, const char *volume)
{
	const uint64_t size = 16u << 20;
	const uint32_t bs = 512;
	cairn_fs_t *fs = lc_mount(servers, volume);
	cairn_id_t id = lc_create(fs, "ops.img");
	char cfg[1024], *reason = NULL;
	struct tcmu_device *dev;
	cairn_attr_t attr;
	uint8_t *a, *b;
	int sts;

	/* check_config against the live cluster */
	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns/ops.img", volume, servers);
	CHECK(handler->check_config(cfg, &reason), "good config '%s' refused: %s", cfg,
	      reason ? reason : "");
	ok("check_config accepts '%s'", cfg);
	{
		/* the LIO-safe spelling: ~ for ':' and + for ',' */
		char alt[1024];

		snprintf(alt, sizeof(alt), "cairn/%s@%s/luns/ops.img", volume, servers);
		for (char *c = alt + 6; *c; c++)
			*c = *c == ':' ? '~' : *c == ',' ? '+' : *c;
		CHECK(handler->check_config(alt, &reason), "LIO-safe config '%s' refused: %s", alt,
		      reason ? reason : "");
		ok("check_config accepts the LIO-safe spelling '%s'", alt);
	}
	snprintf(cfg, sizeof(cfg), "cairn/nosuchvol@%s/luns/ops.img", servers);
	expect_reject(cfg, "nosuchvol");
	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns/missing.img", volume, servers);
	expect_reject(cfg, "luns/missing.img");
	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns", volume, servers);
	expect_reject(cfg, "not a regular file");

	/* open: thin-extends the file to the LUN size, turns the write cache off */
	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns/ops.img", volume, servers);
	dev = dev_new(cfg, size, bs);
	CHECK(handler->open(dev, false) == 0, "open %s failed", cfg);
	CHECK(cairn_getattr(fs, NULL, id, &attr) == 0, "getattr: %s", cairn_last_error_message());
	CHECK(attr.size == size, "backing file size %" PRIu64 ", want %" PRIu64, attr.size, size);
	CHECK(attr.blocks * 512 < (1u << 20), "extended file is not sparse: %" PRIu64 " blocks",
	      attr.blocks);
	CHECK(!dev->wce, "write cache still enabled after open");
	CHECK(dev->max_unmap_len > 0 && dev->max_unmap_len <= (1u << 20),
	      "max unmap LBA count %u (Block Limits VPD): want 1..1Mi", dev->max_unmap_len);
	CHECK(dev->unmap_gran_align > 0,
	      "unmap granularity alignment 0: tcmu-runner 1.5.4 divides by it on WRITE SAME UNMAP");
	ok("open extends the backing file sparsely to %" PRIu64 " bytes, WCE off", size);

	/* write through 3 segments, read back through 5, and directly with libcairn */
	a = malloc(1 << 20);
	b = malloc(1 << 20);
	fill(a, 65536, 1);
	sts = do_write(dev, a, 65536, 1 << 20, 3);
	CHECK(sts == TCMU_STS_OK, "write 64K at 1M: sts %d", sts);
	memset(b, 0xee, 65536);
	sts = do_read(dev, b, 65536, 1 << 20, 5);
	CHECK(sts == TCMU_STS_OK && memcmp(a, b, 65536) == 0, "read back 64K at 1M differs");
	lc_read(fs, id, b, 65536, 1 << 20);
	CHECK(memcmp(a, b, 65536) == 0, "libcairn reads other data than the handler wrote");
	ok("64 KiB written through the handler reads back (handler and libcairn)");

	memset(b, 0xee, 8192);
	sts = do_read(dev, b, 8192, 8u << 20, 2);
	CHECK(sts == TCMU_STS_OK && all_zero(b, 8192), "unwritten blocks do not read as zeros");
	ok("unwritten blocks read as zeros");

	/* many writes in flight at once, then SYNCHRONIZE CACHE */
	{
		enum { N = 64, SZ = 4096 };
		struct hcmd *h[N];
		struct iovec iov[N];
		uint8_t *data = malloc((size_t)N * SZ);

		for (int i = 0; i < N; i++) {
			fill(data + (size_t)i * SZ, SZ, 100 + i);
			iov[i].iov_base = data + (size_t)i * SZ;
			iov[i].iov_len = SZ;
			h[i] = hcmd_new();
			sts = handler->write(dev, &h[i]->c, &iov[i], 1, SZ,
					     (off_t)(2u << 20) + (off_t)i * 3 * SZ);
			CHECK(sts == TCMU_STS_OK, "queueing write %d: sts %d", i, sts);
		}
		for (int i = 0; i < N; i++) {
			sts = wait_cmd(h[i], TCMU_STS_OK);
			CHECK(sts == TCMU_STS_OK, "write %d completed with sts %d", i, sts);
			hcmd_free(h[i]);
		}
		CHECK(do_flush(dev) == TCMU_STS_OK, "flush failed");
		for (int i = 0; i < N; i++) {
			lc_read(fs, id, b, SZ, (2u << 20) + (uint64_t)i * 3 * SZ);
			CHECK(memcmp(b, data + (size_t)i * SZ, SZ) == 0, "write %d lost", i);
		}
		free(data);
		ok("64 concurrent 4 KiB writes completed, flushed, and are all on the volume");
	}

	/* UNMAP punches a hole: zeros through the handler and libcairn, size unchanged */
	sts = do_unmap(dev, (1 << 20) + 16384, 32768);
	CHECK(sts == TCMU_STS_OK, "unmap: sts %d", sts);
	sts = do_read(dev, b, 65536, 1 << 20, 1);
	CHECK(sts == TCMU_STS_OK, "read after unmap: sts %d", sts);
	CHECK(memcmp(a, b, 16384) == 0 && all_zero(b + 16384, 32768) &&
		      memcmp(a + 49152, b + 49152, 16384) == 0,
	      "unmap did not zero exactly the unmapped range");
	lc_read(fs, id, b + 65536, 32768, (1 << 20) + 16384);
	CHECK(all_zero(b + 65536, 32768), "libcairn still sees data in the unmapped range");
	CHECK(cairn_getattr(fs, NULL, id, &attr) == 0 && attr.size == size,
	      "unmap changed the file size");
	ok("UNMAP punches a hole (reads zeros, size kept)");

	/* WRITE SAME with a pattern, then with zeros */
	{
		uint8_t pat[512];
		const uint64_t off = 4u << 20, len = 256 * 512;

		fill(pat, sizeof(pat), 7);
		sts = do_writesame(dev, pat, off, len);
		CHECK(sts == TCMU_STS_OK, "write same: sts %d", sts);
		lc_read(fs, id, b, len, off);
		for (uint64_t i = 0; i < len; i += 512)
			CHECK(memcmp(b + i, pat, 512) == 0, "write same block %" PRIu64 " wrong",
			      i / 512);
		memset(pat, 0, sizeof(pat));
		sts = do_writesame(dev, pat, off + 512, 512 * 10);
		CHECK(sts == TCMU_STS_OK, "write same zeros: sts %d", sts);
		lc_read(fs, id, b, 512 * 12, off);
		CHECK(!all_zero(b, 512) && all_zero(b + 512, 5120) && !all_zero(b + 5632, 512),
		      "write same of zeros wrote the wrong range");
		ok("WRITE SAME (pattern over 256 blocks; zeros over 10 blocks) lands exactly");
	}

	/* COMPARE AND WRITE: match writes; mismatch -> MISCOMPARE with the offset in sense */
	{
		uint8_t blkA[512], blkB[512], blkC[512], sense[18];
		const uint64_t off = 6u << 20;
		uint32_t info;

		fill(blkA, 512, 11);
		memcpy(blkB, blkA, 512);
		blkB[100] ^= 0xff; /* B differs from A first at byte 100 */
		fill(blkC, 512, 12);
		CHECK(do_write(dev, blkA, 512, off, 1) == TCMU_STS_OK, "write A");
		sts = do_caw(dev, blkA, blkB, 512, off, NULL);
		CHECK(sts == TCMU_STS_OK, "CAW with matching data: sts %d", sts);
		lc_read(fs, id, b, 512, off);
		CHECK(memcmp(b, blkB, 512) == 0, "CAW did not write the new data");
		ok("COMPARE AND WRITE with matching data writes");

		sts = do_caw(dev, blkA, blkC, 512, off, sense);
		CHECK(sts == TCMU_STS_MISCOMPARE, "stale CAW: sts %d, want MISCOMPARE", sts);
		info = (uint32_t)sense[3] << 24 | (uint32_t)sense[4] << 16 |
		       (uint32_t)sense[5] << 8 | sense[6];
		CHECK((sense[0] & 0x80) && info == 100,
		      "miscompare sense: valid %d offset %u, want offset 100", sense[0] >> 7, info);
		lc_read(fs, id, b, 512, off);
		CHECK(memcmp(b, blkB, 512) == 0, "a miscompared CAW changed the data");
		ok("COMPARE AND WRITE with stale data: MISCOMPARE at byte 100, data unchanged");
	}

	/* VERIFY: read back (BYTCHK 0), compared with data-out (1) or one block (3) */
	{
		const uint64_t off = 12u << 20, len = 3u << 19; /* 1.5 MiB: two read chunks */
		const uint64_t lba = off / bs, nb = len / bs, end = size / bs;
		uint8_t *d = malloc(len), sense[18], blk[512];
		uint32_t info;

		fill(d, len, 21);
		CHECK(do_write(dev, d, len, off, 2) == TCMU_STS_OK, "write 1.5 MiB at 12 MiB");
		for (size_t i = 0; i < sizeof(verify_ops) / sizeof(verify_ops[0]); i++) {
			uint8_t op = verify_ops[i].op;
			const char *name = verify_ops[i].name;
			uint32_t k = (uint32_t)nb;

			sts = do_verify(dev, op, 0, lba, k, NULL, 0, NULL);
			CHECK(sts == TCMU_STS_OK, "%s BYTCHK=0 of %u blocks: sts %d", name, k, sts);
			sts = do_verify(dev, op, 0x02, lba, k, d, (size_t)k * bs, NULL);
			CHECK(sts == TCMU_STS_OK, "%s BYTCHK=1 of matching data: sts %d", name, sts);
			/* one byte differs in the second 1 MiB read: offset counts from the start */
			d[(1u << 20) + 777] ^= 0x5a;
			sts = do_verify(dev, op, 0x02, lba, k, d, (size_t)k * bs, sense);
			d[(1u << 20) + 777] ^= 0x5a;
			info = (uint32_t)sense[3] << 24 | (uint32_t)sense[4] << 16 |
			       (uint32_t)sense[5] << 8 | sense[6];
			CHECK(sts == TCMU_STS_MISCOMPARE, "%s BYTCHK=1 with a changed byte: sts %d, "
			      "want MISCOMPARE", name, sts);
			CHECK((sense[0] & 0x80) && info == (1u << 20) + 777,
			      "%s miscompare sense: valid %d INFORMATION %u, want %u", name,
			      sense[0] >> 7, info, (1u << 20) + 777);
			/* BYTCHK=0 does not look at the (now different) data-out */
			d[5] ^= 1;
			sts = do_verify(dev, op, 0, lba, 8, d, 8 * bs, NULL);
			d[5] ^= 1;
			CHECK(sts == TCMU_STS_OK, "%s BYTCHK=0 with other data-out: sts %d", name,
			      sts);
			/* data-out shorter than the blocks to compare */
			quiet_errors = true;
			sts = do_verify(dev, op, 0x02, lba, 8, d, 7 * bs, NULL);
			quiet_errors = false;
			CHECK(sts == TCMU_STS_INVALID_CDB, "%s BYTCHK=1 short data-out: sts %d", name,
			      sts);
			/* the last blocks of the LUN (never written: zeros) */
			memset(blk, 0, sizeof(blk));
			sts = do_verify(dev, op, 0x06, end - 4, 4, blk, bs, NULL);
			CHECK(sts == TCMU_STS_OK, "%s BYTCHK=3 zeros over the last 4 blocks: sts %d",
			      name, sts);
			blk[3] = 1;
			sts = do_verify(dev, op, 0x06, end - 4, 4, blk, bs, sense);
			info = (uint32_t)sense[3] << 24 | (uint32_t)sense[4] << 16 |
			       (uint32_t)sense[5] << 8 | sense[6];
			CHECK(sts == TCMU_STS_MISCOMPARE && info == 3,
			      "%s BYTCHK=3 non-matching block: sts %d INFORMATION %u, want "
			      "MISCOMPARE at 3", name, sts, info);
		}
		/* BYTCHK=3 over blocks WRITE SAME filled (11-255 of 4 MiB: 1-10 were zeroed) */
		{
			uint8_t pat[512];

			fill(pat, sizeof(pat), 7);
			sts = do_verify(dev, 0x8f, 0x06, (4u << 20) / bs + 11, 245, pat, bs, NULL);
			CHECK(sts == TCMU_STS_OK, "VERIFY(16) BYTCHK=3 over WRITE SAME blocks: sts %d",
			      sts);
			pat[511] ^= 1;
			sts = do_verify(dev, 0x8f, 0x06, (4u << 20) / bs + 11, 2, pat, bs, sense);
			info = (uint32_t)sense[3] << 24 | (uint32_t)sense[4] << 16 |
			       (uint32_t)sense[5] << 8 | sense[6];
			CHECK(sts == TCMU_STS_MISCOMPARE && info == 511,
			      "VERIFY(16) BYTCHK=3 with one bit off: sts %d INFORMATION %u", sts,
			      info);
		}
		free(d);
		ok("VERIFY(10/12/16): BYTCHK=0 reads the range, BYTCHK=1 compares the data-out "
		   "(MISCOMPARE at byte 1 MiB+777 of 1.5 MiB), BYTCHK=3 one block against each");
	}

	/* CAW is atomic in the backend: two gateways (two mounts) incrementing one counter */
	{
		struct tcmu_device *dev2 = dev_new(cfg, size, bs);
		struct caw_arg a1 = { dev, 40, 0, 0 }, a2 = { dev2, 40, 0, 0 };
		pthread_t t1, t2;
		uint64_t v;

		CHECK(handler->open(dev2, false) == 0, "second open of %s", cfg);
		memset(b, 0, bs);
		CHECK(do_write(dev, b, bs, 0, 1) == TCMU_STS_OK, "zero counter");
		pthread_create(&t1, NULL, caw_incrementer, &a1);
		pthread_create(&t2, NULL, caw_incrementer, &a2);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		CHECK(!a1.failures && !a2.failures, "CAW loop failed");
		lc_read(fs, id, b, bs, 0);
		memcpy(&v, b, 8);
		CHECK(v == 80, "counter is %" PRIu64 " after 2x40 CAW increments (lost updates)",
		      v);
		ok("CAW from two gateways: 80 increments, none lost (%d+%d miscompares retried)",
		   a1.miscompares, a2.miscompares);
		handler->close(dev2);
		free(dev2);
	}

	/* the pattern the suite checks through the FUSE mount: byte i = (i*7 + i/4096) & 255 */
	for (size_t i = 0; i < (1 << 20); i++)
		a[i] = (uint8_t)((i * 7 + i / 4096) & 255);
	CHECK(do_write(dev, a, 1 << 20, 10u << 20, 4) == TCMU_STS_OK, "pattern write");
	CHECK(do_flush(dev) == TCMU_STS_OK, "flush");
	ok("wrote the 1 MiB check pattern at 10 MiB");

	handler->close(dev);
	CHECK(dev->hpriv == NULL, "close left private data");
	ok("close");

	/* a LUN smaller than its backing file is refused (would lose data) */
	dev = dev_new(cfg, size / 2, bs);
	quiet_errors = true;
	CHECK(handler->open(dev, false) < 0, "open with a LUN smaller than the file succeeded");
	ok("open refuses a LUN size below the backing file's size");
	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns/missing.img", volume, servers);
	snprintf(dev->cfgstring, sizeof(dev->cfgstring), "%s", cfg);
	CHECK(handler->open(dev, false) < 0, "open of a missing file succeeded");
	ok("open refuses a missing backing file");
	quiet_errors = false;
	free(dev);

	free(a);
	free(b);
	CHECK(cairn_unmount(fs) == 0, "unmount");
}

/* ---------------------------------------------------------------------------------------- */
/* stress: writes and reads while the caller kills and restarts bricks                      */

#define ST_BLOCKS 512
#define ST_BS 4096
#define ST_QD 8
#define ST_MAXGEN 64

struct st_block {
	uint32_t acked;		     /* highest generation acknowledged OK */
	uint64_t maybe;		     /* bit g: generation g failed (may or may not be applied) */
	bool busy;
};

static struct st_block st[ST_BLOCKS];
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t st_cv = PTHREAD_COND_INITIALIZER;
static int st_inflight, st_ok, st_rok, st_ok_late;
#define ST_NSTS 64
static int st_fail[2][ST_NSTS]; /* [is_read][TCMU status]; ST_NSTS - 1: out of range */
static int st_nonretryable, st_bad_reads;
static time_t st_restart_seen;

struct st_io {
	int blk;
	bool is_read;
	uint32_t gen;
	uint8_t data[ST_BS];
	struct iovec iov;
	time_t t0;
};

/* block content for (blk, gen): header + PRNG fill, so torn or misplaced data shows */
static void st_fill(uint8_t *buf, int blk, uint32_t gen)
{
	fill(buf, ST_BS, (uint64_t)blk << 32 | gen);
	memcpy(buf, "CAIRNBLK", 8);
	memcpy(buf + 8, &blk, 4);
	memcpy(buf + 12, &gen, 4);
}

/*
 * What block blk may hold given its history: zeros before the first write, else a whole
 * block of one generation that is the acknowledged one or a later failed one (a failed
 * write may or may not have been applied). Returns a reason, or NULL if buf is fine.
 */
static const char *st_judge(int blk, const uint8_t *buf, uint32_t *gen_out)
{
	static __thread uint8_t want[ST_BS];
	uint32_t gen = 0;

	if (!all_zero(buf, ST_BS)) {
		int b;

		memcpy(&b, buf + 8, 4);
		memcpy(&gen, buf + 12, 4);
		if (memcmp(buf, "CAIRNBLK", 8) != 0 || b != blk || gen >= ST_MAXGEN)
			return "foreign data";
		st_fill(want, blk, gen);
		if (memcmp(buf, want, ST_BS) != 0)
			return "torn block";
	}
	*gen_out = gen;
	if (gen == st[blk].acked)
		return NULL;
	if (gen > st[blk].acked && (st[blk].maybe >> gen) & 1)
		return NULL;
	return gen < st[blk].acked ? "acknowledged write lost (older data)"
				   : "data no write put there";
}

/* BUSY and TASK SET FULL (NO_RESOURCE) are retried by initiators; the rest is an error. */
static bool sts_retryable(int sts)
{
	return sts == TCMU_STS_BUSY || sts == TCMU_STS_NO_RESOURCE || sts == TCMU_STS_TIMEOUT;
}

static void st_done(struct hcmd *h)
{
	struct st_io *io = h->arg;

	pthread_mutex_lock(&st_mu);
	if (h->sts == TCMU_STS_OK && io->is_read) {
		uint32_t gen = 0;
		const char *why = st_judge(io->blk, io->data, &gen);

		st_rok++;
		if (why) {
			fprintf(stderr, "read of block %d during the restarts: %s (gen %u, "
				"acknowledged %u)\n", io->blk, why, gen, st[io->blk].acked);
			st_bad_reads++;
		}
	} else if (h->sts == TCMU_STS_OK) {
		st[io->blk].acked = io->gen;
		st_ok++;
		if (st_restart_seen && io->t0 > st_restart_seen)
			st_ok_late++;
	} else {
		int k = h->sts >= 0 && h->sts < ST_NSTS - 1 ? h->sts : ST_NSTS - 1;

		st_fail[io->is_read][k]++;
		if (!sts_retryable(h->sts))
			st_nonretryable++;
		if (!io->is_read)
			st[io->blk].maybe |= 1ull << io->gen;
		if (!st_restart_seen)
			st_restart_seen = time(NULL);
	}
	st[io->blk].busy = false;
	st_inflight--;
	pthread_cond_broadcast(&st_cv);
	pthread_mutex_unlock(&st_mu);
}

static void test_stress(const char *servers, const char *volume, int secs)
{
	cairn_fs_t *fs = lc_mount(servers, volume);
	cairn_id_t id = lc_create(fs, "stress.img");
	char cfg[1024];
	struct tcmu_device *dev;
	time_t end = time(NULL) + secs;
	uint32_t gen_next[ST_BLOCKS] = { 0 };
	uint8_t *buf = malloc(ST_BS), *other = malloc(ST_BS);
	unsigned seed = 1;
	int bad = 0, nfail = 0;

	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns/stress.img", volume, servers);
	dev = dev_new(cfg, (uint64_t)ST_BLOCKS * ST_BS, ST_BS);
	CHECK(handler->open(dev, false) == 0, "open %s", cfg);
	/* errors are expected while a brick is down; counted below (HT_VERBOSE=1 shows them) */
	quiet_errors = !getenv("HT_VERBOSE");
	if (getenv("HT_ERRLOG")) {
		quiet_log = fopen(getenv("HT_ERRLOG"), "w");
		CHECK(quiet_log != NULL, "cannot open HT_ERRLOG %s", getenv("HT_ERRLOG"));
		setvbuf(quiet_log, NULL, _IOLBF, 0);
	}

	while (time(NULL) < end) {
		struct st_io *io;
		struct hcmd *h;
		bool is_read;
		int blk, rc;

		pthread_mutex_lock(&st_mu);
		while (st_inflight >= ST_QD)
			pthread_cond_wait(&st_cv, &st_mu);
		do
			blk = rand_r(&seed) % ST_BLOCKS;
		while (st[blk].busy);
		/* one read for two writes; a block that used up its generations is only read */
		is_read = rand_r(&seed) % 3 == 0 || gen_next[blk] + 1 >= ST_MAXGEN;
		st[blk].busy = true;
		st_inflight++;
		pthread_mutex_unlock(&st_mu);

		io = calloc(1, sizeof(*io));
		io->blk = blk;
		io->is_read = is_read;
		io->t0 = time(NULL);
		if (!is_read) {
			io->gen = ++gen_next[blk];
			st_fill(io->data, blk, io->gen);
		}
		io->iov.iov_base = io->data;
		io->iov.iov_len = ST_BS;
		h = hcmd_new();
		h->on_done = st_done;
		h->arg = io;
		rc = is_read ? handler->read(dev, &h->c, &io->iov, 1, ST_BS, (off_t)blk * ST_BS)
			     : handler->write(dev, &h->c, &io->iov, 1, ST_BS, (off_t)blk * ST_BS);
		if (rc != TCMU_STS_OK) {
			h->sts = rc;
			st_done(h);
		}
		/* hcmd/io are leaked on purpose: completions may still reference them */
	}
	pthread_mutex_lock(&st_mu);
	while (st_inflight > 0)
		pthread_cond_wait(&st_cv, &st_mu);
	pthread_mutex_unlock(&st_mu);
	quiet_errors = false;
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < ST_NSTS; k++)
			nfail += st_fail[r][k];
	printf("# stress: %d writes and %d reads OK, %d failed (%d writes acknowledged after "
	       "the first failure)\n", st_ok, st_rok, nfail, st_ok_late);
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < ST_NSTS; k++)
			if (st_fail[r][k])
				printf("#   %s failed with TCMU status %d (%s): %d\n",
				       r ? "read" : "write", k,
				       sts_retryable(k) ? "retryable" : "NOT retryable",
				       st_fail[r][k]);
	CHECK(st_ok > 0 && st_rok > 0, "no write or no read succeeded");
	/* the caller took the volume down for longer than libcairn retries: some must fail */
	CHECK(!getenv("HT_EXPECT_FAILURES") || nfail > 0,
	      "the volume was down longer than libcairn's retry budget, yet no command failed");
	CHECK(!st_nonretryable, "%d commands failed with a status initiators do not retry "
	      "(a brick restart must give BUSY, not MEDIUM ERROR)", st_nonretryable);
	ok("stress: every failed command ended with a retryable status (BUSY)");
	CHECK(!st_bad_reads, "%d reads during the restarts returned wrong data", st_bad_reads);
	ok("stress: %d reads during the restarts returned acknowledged data, none torn", st_rok);

	/*
	 * Every block, through a fresh libcairn mount (no state shared with the handler) and
	 * through the handler: the acknowledged generation, or a later failed one; never torn.
	 */
	{
		cairn_fs_t *fs2 = lc_mount(servers, volume);

		for (int blk = 0; blk < ST_BLOCKS; blk++) {
			uint32_t gen = 0;
			const char *why;

			lc_read(fs2, id, buf, ST_BS, (uint64_t)blk * ST_BS);
			why = st_judge(blk, buf, &gen);
			if (why) {
				fprintf(stderr, "block %d (libcairn): %s (gen %u, acknowledged %u)\n",
					blk, why, gen, st[blk].acked);
				bad++;
			}
			if (do_read(dev, other, ST_BS, (uint64_t)blk * ST_BS, 1) != TCMU_STS_OK)
				die("read of block %d through the handler failed after the restarts",
				    blk);
			CHECK(memcmp(buf, other, ST_BS) == 0,
			      "block %d: handler and libcairn disagree", blk);
		}
		CHECK(cairn_unmount(fs2) == 0, "unmount");
	}
	CHECK(!bad, "%d blocks with lost, torn or phantom writes (checked with libcairn)", bad);
	ok("stress: all %d blocks checked with libcairn: every acknowledged write present, "
	   "none torn", ST_BLOCKS);

	/* the device works again: one more write per block, all acknowledged (retrying BUSY
	 * like an initiator would for up to 60 s) */
	{
		time_t give_up = time(NULL) + 60;
		int retries = 0;

		for (int blk = 0; blk < ST_BLOCKS; blk++) {
			int sts;

			st_fill(buf, blk, ST_MAXGEN - 1);
			while (sts_retryable(sts = do_write(dev, buf, ST_BS, (uint64_t)blk * ST_BS,
							    1)) &&
			       time(NULL) < give_up) {
				retries++;
				usleep(200000);
			}
			CHECK(sts == TCMU_STS_OK, "write to block %d after the restarts: sts %d",
			      blk, sts);
		}
		CHECK(do_flush(dev) == TCMU_STS_OK, "flush after the restarts");
		ok("all %d blocks writable after the restarts (%d BUSY retries)", ST_BLOCKS,
		   retries);
	}
	handler->close(dev);
	free(dev);
	free(buf);
	free(other);
	CHECK(cairn_unmount(fs) == 0, "unmount");
}

/* ---------------------------------------------------------------------------------------- */
/* caw: one gateway of several (one process each) incrementing a counter with CAW           */

static void test_caw_gateway(const char *servers, const char *volume, int n)
{
	char cfg[1024];
	struct tcmu_device *dev;
	struct caw_arg a;

	snprintf(cfg, sizeof(cfg), "cairn/%s@%s/luns/caw.img", volume, servers);
	dev = dev_new(cfg, 1u << 20, 512);
	CHECK(handler->open(dev, false) == 0, "open %s", cfg);
	a = (struct caw_arg){ dev, n, 0, 0 };
	caw_incrementer(&a);
	CHECK(!a.failures, "CAW increment loop failed");
	ok("gateway %d: %d CAW increments done, %d miscompares retried", (int)getpid(), n,
	   a.miscompares);
	handler->close(dev);
	free(dev);
}

/* The counter in block 0 of luns/caw.img, read with libcairn, must be WANT. */
static void test_caw_check(const char *servers, const char *volume, uint64_t want)
{
	cairn_fs_t *fs = lc_mount(servers, volume);
	cairn_attr_t a;
	uint8_t blk[512];
	uint64_t v;

	CHECK(cairn_lookup_path(fs, NULL, "luns/caw.img", &a) == 0, "luns/caw.img: %s",
	      cairn_last_error_message());
	lc_read(fs, a.id, blk, sizeof(blk), 0);
	memcpy(&v, blk, 8);
	CHECK(v == want, "counter is %" PRIu64 ", want %" PRIu64 " (lost CAW updates between "
	      "gateways)", v, want);
	ok("counter is %" PRIu64 ": no CAW increment lost between the gateway processes", v);
	CHECK(cairn_unmount(fs) == 0, "unmount");
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s HANDLER.so config|ops|stress|caw|caw-check "
			"[SERVERS VOLUME [SECS|N]]\n", argv[0]);
		return 2;
	}
	load_handler(argv[1]);
	if (strcmp(argv[2], "config") == 0) {
		test_config_offline();
		test_cdb_checks();
	} else if (strcmp(argv[2], "ops") == 0 && argc == 5) {
		test_ops(argv[3], argv[4]);
	} else if (strcmp(argv[2], "stress") == 0 && argc == 6) {
		test_stress(argv[3], argv[4], atoi(argv[5]));
	} else if (strcmp(argv[2], "caw") == 0 && argc == 6) {
		test_caw_gateway(argv[3], argv[4], atoi(argv[5]));
	} else if (strcmp(argv[2], "caw-check") == 0 && argc == 6) {
		test_caw_check(argv[3], argv[4], strtoull(argv[5], NULL, 10));
	} else {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	printf("# %d checks passed, %d handler errors logged\n", nchecks, errors_logged);
	return 0;
}
