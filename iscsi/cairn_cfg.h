/*
 * cairn_cfg.h - the user:cairn config string, parsed and validated in one place.
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 *     [cairn/]VOLUME@SERVER[:PORT][,SERVER[:PORT]...]/PATH
 *
 * VOLUME: 1-64 of [A-Za-z0-9._-], not starting with '.' or '-'.
 * SERVER: a host name or IPv4 address ([A-Za-z0-9.-], 1-253 chars) or a bracketed IPv6
 *         address; PORT 1-65535 (default 7420, libcairn's).
 *         LIO cannot carry ':' (rtslib refuses it) or ',' (the kernel splits its control
 *         string on commas) in a config string: write SERVER~PORT and SERVER+SERVER there
 *         (e.g. vol0@10.0.2.2~7420+10.0.2.3~7420/luns/lun0.img); both spellings parse alike.
 * PATH:   a '/'-separated path from the volume root to a regular file; no empty, "." or
 *         ".." components, no trailing '/', at most 1024 bytes.
 */
#ifndef CAIRN_CFG_H
#define CAIRN_CFG_H

#define CAIRN_CFG_VOLUME_MAX 64
#define CAIRN_CFG_SERVERS_MAX 512
#define CAIRN_CFG_PATH_MAX 1024

struct cairn_cfg {
	char volume[CAIRN_CFG_VOLUME_MAX + 1];
	char servers[CAIRN_CFG_SERVERS_MAX + 1]; /* as given: libcairn's "host:port,..." */
	char path[CAIRN_CFG_PATH_MAX + 1];	 /* without the leading '/' */
};

/*
 * Parse `cfgstring` into `*out`. Returns 0, or -EINVAL with `*reason` set (malloc'd, to be
 * freed by the caller) to a message naming the bad part.
 */
int cairn_cfg_parse(const char *cfgstring, struct cairn_cfg *out, char **reason);

#endif
