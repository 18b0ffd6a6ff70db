/*
 * cfg_fuzz.c - fuzz cairn_cfg_parse() (iscsi/cairn_cfg.c), the user:cairn config string
 * parser, under AddressSanitizer and UBSan. No clang/libFuzzer on this machine: a
 * deterministic driver with a logged seed instead.
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 *   cfg_fuzz [SECONDS [SEED]]     (defaults: 3 s, a seed from the clock; both printed)
 *
 * Each round either
 *  - generates a valid config string from random parts (volume, servers in either spelling,
 *    path, with or without "cairn/") and checks that it parses to exactly those parts, or
 *  - mutates a valid one (a corpus entry or a generated one: bytes flipped, inserted,
 *    deleted, duplicated, spliced, grown past the length limits) and checks that the parse
 *    either fails with -EINVAL and a non-empty reason, or succeeds with fields that hold
 *    the parser's own rules and parse again to themselves (round trip).
 * Inputs are copied into buffers of their exact size, so ASan sees any read past the end.
 * Any failed check prints the seed, the round and the input (escaped) and aborts;
 * a sanitizer report aborts too (built with -fno-sanitize-recover=all).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn_cfg.h"

static uint64_t seed, rng_state, round_no;
static const char *cur_input;

/* splitmix64: small, deterministic from the seed */
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static size_t below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

static void print_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 0x20 && c < 0x7f && c != '\\')
			fputc(c, f);
		else
			fprintf(f, "\\x%02x", c);
	}
}

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL - cairn_cfg_parse fuzz, seed %llu round %llu: ",
		(unsigned long long)seed, (unsigned long long)round_no);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n  input: \"");
	if (cur_input)
		print_escaped(stderr, cur_input);
	fprintf(stderr, "\"\n  rerun: cfg_fuzz 1 %llu\n", (unsigned long long)seed);
	abort();
}

/* ---------------------------------------------------------------------------------------- */
/* Valid config strings from parts                                                           */

struct parts {
	char volume[CAIRN_CFG_VOLUME_MAX + 1];
	char servers[CAIRN_CFG_SERVERS_MAX + 1]; /* libcairn's spelling: host:port,... */
	char path[CAIRN_CFG_PATH_MAX + 1];
	char cfg[2048];
};

static const char vol_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
static const char host_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789.-";
/* any byte >= 0x20 but '/' may be in a path component */
static char path_char(void)
{
	static const char some[] = "abcxyz019._-@~+:,[] \"'%\\#;={}";
	char c;

	if (below(4))
		return some[below(sizeof(some) - 1)];
	c = (char)(0x20 + below(0xe0));
	return c == '/' ? 'p' : c;
}

static void gen_valid(struct parts *p)
{
	size_t n = 1 + (below(4) ? below(12) : below(CAIRN_CFG_VOLUME_MAX));
	bool lio = below(2);
	char *c, *s;

	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < n; i++)
		p->volume[i] = vol_chars[below(sizeof(vol_chars) - 1)];
	if (p->volume[0] == '.' || p->volume[0] == '-')
		p->volume[0] = 'v';

	s = p->servers;
	for (size_t k = 0, ns = 1 + below(3); k < ns; k++) {
		size_t room = sizeof(p->servers) - (size_t)(s - p->servers);

		if (k)
			*s++ = ',';
		switch (below(3)) {
		case 0:
			s += snprintf(s, room, "%u.%u.%u.%u", (unsigned)below(256), (unsigned)below(256),
				      (unsigned)below(256), (unsigned)below(256));
			break;
		case 1:
			s += snprintf(s, room, "[%s]", below(2) ? "::1" : "fd00:0:0:1::2");
			break;
		default:
			for (size_t i = 0, hn = 1 + below(20); i < hn; i++)
				*s++ = host_chars[below(sizeof(host_chars) - 1)];
		}
		if (below(2))
			s += snprintf(s, 8, ":%u", 1 + (unsigned)below(65535));
	}

	c = p->path;
	for (size_t k = 0, nc = 1 + below(4); k < nc; k++) {
		size_t cl = 1 + (below(8) ? below(10) : below(255));

		if (k)
			*c++ = '/';
		for (size_t i = 0; i < cl; i++)
			*c++ = path_char();
		if (cl <= 2 && c[-1] == '.')
			c[-1] = 'd'; /* no "." or ".." components */
	}

	/* the config string: servers in either spelling, optional "cairn/" prefix */
	n = (size_t)snprintf(p->cfg, sizeof(p->cfg), "%s%s@", below(2) ? "cairn/" : "", p->volume);
	/* LIO's spelling: '~' for ':' and '+' for ',' (the parser maps them back) */
	for (const char *t = p->servers; *t; t++)
		p->cfg[n++] = lio && *t == ':' ? '~' : lio && *t == ',' ? '+' : *t;
	snprintf(p->cfg + n, sizeof(p->cfg) - n, "/%s", p->path);
}

/* ---------------------------------------------------------------------------------------- */
/* One parse, checked                                                                        */

static int parse_exact(const char *s, size_t len, struct cairn_cfg *out, char **reason)
{
	char *buf = malloc(len + 1); /* exact size: ASan catches reads past the end */
	int ret;

	if (!buf)
		abort();
	memcpy(buf, s, len);
	buf[len] = '\0';
	cur_input = buf;
	ret = cairn_cfg_parse(buf, out, reason);
	cur_input = NULL;
	free(buf);
	return ret;
}

static void check_fields(const struct cairn_cfg *c)
{
	size_t vl = strnlen(c->volume, sizeof(c->volume));
	size_t pl = strnlen(c->path, sizeof(c->path));

	if (vl == 0 || vl > CAIRN_CFG_VOLUME_MAX || c->volume[0] == '.' || c->volume[0] == '-')
		fail("accepted volume '%s'", c->volume);
	for (size_t i = 0; i < vl; i++)
		if (!strchr(vol_chars, c->volume[i]))
			fail("accepted volume '%s' with '%c'", c->volume, c->volume[i]);
	if (strnlen(c->servers, sizeof(c->servers)) == 0 || strpbrk(c->servers, "~+@/ "))
		fail("accepted servers '%s'", c->servers);
	/* each item HOST[:PORT] or [IPV6][:PORT], as cairn_cfg.h says */
	for (const char *it = c->servers; it;) {
		const char *end = strchr(it, ','), *port = NULL;
		size_t n = end ? (size_t)(end - it) : strlen(it), hn = n;

		if (n == 0)
			fail("accepted an empty server in '%s'", c->servers);
		if (it[0] == '[') {
			const char *close = memchr(it, ']', n);

			if (!close || close == it + 1 || !(close + 1 == it + n || close[1] == ':'))
				fail("accepted server list '%s' (brackets)", c->servers);
			for (const char *h = it + 1; h < close; h++)
				if (!isxdigit((unsigned char)*h) && *h != ':' && *h != '.')
					fail("accepted server list '%s' (IPv6)", c->servers);
			port = close + 1 < it + n ? close + 2 : NULL;
		} else {
			const char *colon = memchr(it, ':', n);

			if (colon) {
				hn = (size_t)(colon - it);
				port = colon + 1;
			}
			if (hn == 0 || hn > 253)
				fail("accepted server list '%s' (host length)", c->servers);
			for (size_t i = 0; i < hn; i++)
				if (!isalnum((unsigned char)it[i]) && it[i] != '.' && it[i] != '-')
					fail("accepted server list '%s' (host)", c->servers);
		}
		if (port) {
			size_t pn = (size_t)(it + n - port);
			long v = pn >= 1 && pn <= 5 ? strtol(port, NULL, 10) : 0;

			for (size_t i = 0; i < pn; i++)
				if (!isdigit((unsigned char)port[i]))
					v = 0;
			if (v < 1 || v > 65535)
				fail("accepted server list '%s' (port)", c->servers);
		}
		it = end ? end + 1 : NULL;
	}
	if (pl == 0 || pl > CAIRN_CFG_PATH_MAX || c->path[0] == '/' || c->path[pl - 1] == '/' ||
	    strstr(c->path, "//"))
		fail("accepted path '%s'", c->path);
	for (size_t i = 0; i < pl; i++)
		if ((unsigned char)c->path[i] < 0x20)
			fail("accepted a control character in path");
	/* components: no "." or "..", at most 255 bytes */
	for (const char *comp = c->path; comp;) {
		const char *slash = strchr(comp, '/');
		size_t cl = slash ? (size_t)(slash - comp) : strlen(comp);

		if (cl > 255 || (cl == 1 && comp[0] == '.') || (cl == 2 && !strncmp(comp, "..", 2)))
			fail("accepted path '%s' (component)", c->path);
		comp = slash ? slash + 1 : NULL;
	}
}

/* `s` must fail with a reason or parse to fields that round-trip */
static void check_any(const char *s, size_t len)
{
	struct cairn_cfg c, again;
	char *reason = NULL, *cfg2 = NULL;
	int ret = parse_exact(s, len, &c, &reason);

	if (ret == -EINVAL) {
		if (!reason || !*reason) {
			cur_input = s;
			fail("refused without a reason");
		}
		free(reason);
		return;
	}
	if (ret != 0) {
		cur_input = s;
		fail("returned %d", ret);
	}
	if (reason) {
		cur_input = s;
		fail("accepted but set a reason '%s'", reason);
	}
	cur_input = s;
	check_fields(&c);
	if (asprintf(&cfg2, "%s@%s/%s", c.volume, c.servers, c.path) < 0)
		abort();
	ret = parse_exact(cfg2, strlen(cfg2), &again, &reason);
	cur_input = s;
	if (ret != 0 || memcmp(&c, &again, sizeof(c)) != 0)
		fail("does not round-trip through '%s' (%s)", cfg2, reason ? reason : "fields differ");
	free(cfg2);
	cur_input = NULL;
}

static void check_valid(const struct parts *p)
{
	struct cairn_cfg c;
	char *reason = NULL;
	int ret = parse_exact(p->cfg, strlen(p->cfg), &c, &reason);

	cur_input = p->cfg;
	if (ret != 0)
		fail("valid string refused: %s", reason ? reason : "(no reason)");
	if (strcmp(c.volume, p->volume) || strcmp(c.servers, p->servers) || strcmp(c.path, p->path))
		fail("parsed to volume '%s' servers '%s' path '%s', wanted '%s' '%s' '%s'", c.volume,
		     c.servers, c.path, p->volume, p->servers, p->path);
	cur_input = NULL;
	check_any(p->cfg, strlen(p->cfg));
}

/* ---------------------------------------------------------------------------------------- */
/* Mutations                                                                                 */

static const char *corpus[] = {
	"vol0@10.0.2.2:7420/luns/lun0.img",
	"cairn/vol0@10.0.2.2~7420+10.0.2.3~7420/luns/lun0.img",
	"cairn/v@[::1]:7420,[fd00::2]/a",
	"a.b_c-d@node-1.lan,node-2.lan:1/dir/with space/x@y",
	"vol0@h/a",
	"cairn/",
	"",
	"@/",
	"vol0@[/x",
	"vol0@h:/x",
	"vol0@h:65536/x",
	"vol0@h,,h/x",
	"vol0@h/a/../b",
	"vol0@h/a//b",
	"vol0@h/a/",
};

static const char specials[] = "@/:~+,[].-\x01\x7f\xff ";

static size_t mutate(char *buf, size_t len, size_t cap)
{
	for (size_t k = 0, n = 1 + below(4); k < n; k++) {
		size_t at = below(len + 1);

		switch (below(8)) {
		case 0: /* flip a byte */
			if (len)
				buf[below(len)] ^= (char)(1u << below(8));
			break;
		case 1: /* insert a special or random byte */
			if (len + 1 < cap) {
				memmove(buf + at + 1, buf + at, len - at);
				buf[at] = below(2) ? specials[below(sizeof(specials) - 1)]
						   : (char)(1 + below(255));
				len++;
			}
			break;
		case 2: /* delete a run */
		{
			size_t n2 = 1 + below(8);

			if (at + n2 > len)
				n2 = len - at;
			memmove(buf + at, buf + at + n2, len - at - n2);
			len -= n2;
			break;
		}
		case 3: /* duplicate a run */
			if (len) {
				size_t from = below(len), n2 = 1 + below(len - from);

				if (len + n2 < cap) {
					memmove(buf + at + n2, buf + at, len - at);
					memmove(buf + at, buf + (from >= at ? from + n2 : from), n2);
					len += n2;
				}
			}
			break;
		case 4: /* grow: a long run of one byte, past every length limit */
		{
			size_t n2 = 60 + below(1200);
			char ch = below(2) ? specials[below(sizeof(specials) - 1)] : 'a';

			if (len + n2 < cap) {
				memmove(buf + at + n2, buf + at, len - at);
				memset(buf + at, ch, n2);
				len += n2;
			}
			break;
		}
		case 5: /* truncate */
			len = at;
			break;
		case 6: /* splice a corpus entry in */
		{
			const char *o = corpus[below(sizeof(corpus) / sizeof(corpus[0]))];
			size_t ol = strlen(o);

			if (len + ol < cap) {
				memmove(buf + at + ol, buf + at, len - at);
				memcpy(buf + at, o, ol);
				len += ol;
			}
			break;
		}
		default: /* overwrite with a special */
			if (len)
				buf[below(len)] = specials[below(sizeof(specials) - 1)];
		}
	}
	return len;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 3;
	struct timespec t0, t;
	uint64_t valid = 0, accepted = 0;
	static char buf[8192];

	if (argc > 2)
		seed = strtoull(argv[2], NULL, 0);
	else {
		clock_gettime(CLOCK_REALTIME, &t);
		seed = (uint64_t)t.tv_sec * 1000000007ULL ^ (uint64_t)t.tv_nsec;
	}
	rng_state = seed;
	printf("# cfg_fuzz: seed %llu, %.1f s (rerun: cfg_fuzz SECONDS %llu)\n",
	       (unsigned long long)seed, secs, (unsigned long long)seed);
	fflush(stdout);

	/* the corpus itself */
	for (size_t i = 0; i < sizeof(corpus) / sizeof(corpus[0]); i++)
		check_any(corpus[i], strlen(corpus[i]));
	/* NULL */
	{
		struct cairn_cfg c;
		char *reason = NULL;

		if (cairn_cfg_parse(NULL, &c, &reason) != -EINVAL || !reason)
			fail("NULL config string");
		free(reason);
	}

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (round_no = 0;; round_no++) {
		struct parts p;
		size_t len;

		if ((round_no & 255) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= secs)
				break;
		}
		gen_valid(&p);
		if (below(4) == 0) {
			check_valid(&p);
			valid++;
			continue;
		}
		if (below(2)) {
			len = strlen(p.cfg);
			memcpy(buf, p.cfg, len);
		} else {
			const char *o = corpus[below(sizeof(corpus) / sizeof(corpus[0]))];

			len = strlen(o);
			memcpy(buf, o, len);
		}
		len = mutate(buf, len, sizeof(buf) - 1);
		buf[len] = '\0';
		len = strlen(buf); /* an inserted NUL ends the string, as in C callers */
		{
			struct cairn_cfg c;
			char *reason = NULL;

			if (parse_exact(buf, len, &c, &reason) == 0)
				accepted++;
			free(reason);
		}
		check_any(buf, len);
	}
	printf("ok - cairn_cfg_parse: %llu rounds (%llu valid strings round-tripped, %llu mutants "
	       "accepted and round-tripped), no sanitizer report\n",
	       (unsigned long long)round_no, (unsigned long long)valid,
	       (unsigned long long)accepted);
	return 0;
}
