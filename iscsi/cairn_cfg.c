/*
 * cairn_cfg.c - parse and validate the user:cairn config string (see cairn_cfg.h).
 * SPDX-License-Identifier: GPL-3.0-or-later
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn_cfg.h"

static int bad(char **reason, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(reason, fmt, ap) < 0)
		*reason = NULL;
	va_end(ap);
	return -EINVAL;
}

static const char *usage = "expected VOLUME@SERVER[:PORT]/PATH, e.g. vol0@10.0.2.2:7420/luns/lun0.img";

static int check_volume(const char *v, size_t n, char **reason)
{
	if (n == 0)
		return bad(reason, "volume name is empty (%s)", usage);
	if (n > CAIRN_CFG_VOLUME_MAX)
		return bad(reason, "volume name '%.*s' is longer than %d characters", (int)n, v,
			   CAIRN_CFG_VOLUME_MAX);
	if (v[0] == '.' || v[0] == '-')
		return bad(reason, "volume name '%.*s' must not start with '%c'", (int)n, v, v[0]);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = v[i];

		if (!isalnum(c) && c != '.' && c != '_' && c != '-')
			return bad(reason, "volume name '%.*s' has an invalid character '%c'",
				   (int)n, v, c);
	}
	return 0;
}

/* One SERVER[:PORT] item of the server list. */
static int check_server(const char *s, size_t n, char **reason)
{
	const char *host = s, *port = NULL;
	size_t hlen = n;

	if (n == 0)
		return bad(reason, "server list has an empty entry (%s)", usage);
	if (s[0] == '[') {
		const char *close = memchr(s, ']', n);

		if (!close)
			return bad(reason, "server '%.*s': missing ']' after IPv6 address", (int)n, s);
		host = s + 1;
		hlen = (size_t)(close - s) - 1;
		if (hlen == 0)
			return bad(reason, "server '%.*s': empty IPv6 address", (int)n, s);
		for (size_t i = 0; i < hlen; i++)
			if (!isxdigit((unsigned char)host[i]) && host[i] != ':' && host[i] != '.')
				return bad(reason, "server '%.*s': invalid IPv6 address", (int)n, s);
		if (close + 1 < s + n) {
			if (close[1] != ':')
				return bad(reason, "server '%.*s': expected ':PORT' after ']'", (int)n, s);
			port = close + 2;
		}
	} else {
		const char *colon = memchr(s, ':', n);

		if (colon) {
			hlen = (size_t)(colon - s);
			port = colon + 1;
		}
		if (hlen == 0)
			return bad(reason, "server '%.*s': empty host name", (int)n, s);
		if (hlen > 253)
			return bad(reason, "server '%.*s': host name longer than 253 characters",
				   (int)n, s);
		for (size_t i = 0; i < hlen; i++) {
			unsigned char c = host[i];

			if (!isalnum(c) && c != '.' && c != '-')
				return bad(reason, "server '%.*s': invalid character '%c' in host name",
					   (int)n, s, c);
		}
	}
	if (port) {
		size_t plen = (size_t)(s + n - port);
		unsigned long v = 0;

		if (plen == 0)
			return bad(reason, "server '%.*s': empty port", (int)n, s);
		for (size_t i = 0; i < plen; i++) {
			if (!isdigit((unsigned char)port[i]) || plen > 5)
				return bad(reason, "server '%.*s': port '%.*s' is not a number 1-65535",
					   (int)n, s, (int)plen, port);
			v = v * 10 + (unsigned long)(port[i] - '0');
		}
		if (v == 0 || v > 65535)
			return bad(reason, "server '%.*s': port '%.*s' is not a number 1-65535",
				   (int)n, s, (int)plen, port);
	}
	return 0;
}

static int check_path(const char *p, size_t n, char **reason)
{
	size_t start = 0;

	if (n == 0)
		return bad(reason, "file path is empty (%s)", usage);
	if (n > CAIRN_CFG_PATH_MAX)
		return bad(reason, "file path is longer than %d bytes", CAIRN_CFG_PATH_MAX);
	if (p[n - 1] == '/')
		return bad(reason, "file path '%.*s' ends with '/': it must name a file", (int)n, p);
	for (size_t i = 0; i <= n; i++) {
		if (i < n && (unsigned char)p[i] < 0x20)
			return bad(reason, "file path '%.*s' has a control character", (int)n, p);
		if (i == n || p[i] == '/') {
			size_t clen = i - start;

			if (clen == 0)
				return bad(reason, "file path '%.*s' has an empty component ('//')",
					   (int)n, p);
			if ((clen == 1 && p[start] == '.') ||
			    (clen == 2 && p[start] == '.' && p[start + 1] == '.'))
				return bad(reason, "file path '%.*s' has a '%.*s' component", (int)n, p,
					   (int)clen, p + start);
			if (clen > 255)
				return bad(reason, "file path '%.*s' has a component longer than 255",
					   (int)n, p);
			start = i + 1;
		}
	}
	return 0;
}

int cairn_cfg_parse(const char *cfgstring, struct cairn_cfg *out, char **reason)
{
	const char *s = cfgstring, *at, *slash, *item;
	size_t vlen, slen;
	int ret;

	*reason = NULL;
	memset(out, 0, sizeof(*out));
	if (!s || !*s)
		return bad(reason, "config string is empty (%s)", usage);
	if (strncmp(s, "cairn/", 6) == 0)
		s += 6;
	if (!*s)
		return bad(reason, "config string is empty after 'cairn/' (%s)", usage);
	at = strchr(s, '@');
	slash = strchr(s, '/');
	if (!at || (slash && slash < at))
		return bad(reason, "config '%s' has no '@' between volume and server (%s)", s,
			   usage);
	vlen = (size_t)(at - s);
	ret = check_volume(s, vlen, reason);
	if (ret)
		return ret;

	slash = strchr(at + 1, '/');
	if (!slash)
		return bad(reason, "config '%s' has no '/PATH' after the server (%s)", s, usage);
	slen = (size_t)(slash - (at + 1));
	if (slen == 0)
		return bad(reason, "server is empty in '%s' (%s)", s, usage);
	if (slen > CAIRN_CFG_SERVERS_MAX)
		return bad(reason, "server list is longer than %d characters",
			   CAIRN_CFG_SERVERS_MAX);
	{
		char norm[CAIRN_CFG_SERVERS_MAX + 1];

		memcpy(norm, at + 1, slen);
		norm[slen] = '\0';
		for (char *c = norm; *c; c++) {
			if (*c == '~')
				*c = ':';
			else if (*c == '+')
				*c = ',';
		}
		item = norm;
		while (item <= norm + slen) {
			const char *comma = strchr(item, ',');
			const char *end = comma ? comma : norm + slen;

			ret = check_server(item, (size_t)(end - item), reason);
			if (ret)
				return ret;
			item = end + 1;
		}
	}
	ret = check_path(slash + 1, strlen(slash + 1), reason);
	if (ret)
		return ret;

	memcpy(out->volume, s, vlen);
	memcpy(out->servers, at + 1, slen);
	/* the LIO-safe spelling: '~' for ':' and '+' for ',' (see cairn_cfg.h) */
	for (char *c = out->servers; *c; c++) {
		if (*c == '~')
			*c = ':';
		else if (*c == '+')
			*c = ',';
	}
	strcpy(out->path, slash + 1);
	return 0;
}
