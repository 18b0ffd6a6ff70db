/*
 * nfsacl: NFSv4 raw-COMPOUND driver for tests/nfs/acl.sh (ACLs) and gateways.sh (file
 * handles walked up after a gateway restart), on Debian's libnfs (libnfs-dev).
 *
 *   nfsacl URL PATH CMD [ARG]
 *
 * URL is a libnfs NFSv4 URL of the export (nfs://127.0.0.1/vol0?version=4&nfsport=P
 * &uid=U&gid=G: the AUTH_SYS identity of every call). libnfs mounts it (its v4.0
 * client), then nfsacl sends its own COMPOUNDs (PUTROOTFH, LOOKUP each component of
 * the export path and PATH, then the operation) on libnfs' RPC context, since libnfs
 * 4.0 has no ACL calls. One line of output:
 *
 *   getacl          mode 0640 A::OWNER@:rwatTnNcCoy A::2001:r... (nfs4_getfacl letters)
 *   setacl SPEC     ok | NFS4ERR_<name>      SPEC: ACEs "TYPE:FLAGS:WHO:PERMS" joined by ','
 *   read            ok | NFS4ERR_<name>      READ of 16 bytes, anonymous stateid
 *   write           ok | NFS4ERR_<name>      WRITE of 1 byte at the end (FILE_SYNC)
 *   chmod MODE      ok | NFS4ERR_<name>      SETATTR mode (octal)
 *   getfh           fh HEX                   the file handle of PATH
 *   fileid          fileid N                 the fileid of PATH
 *   parent HEXFH    fileid N | NFS4ERR_<name>  PUTFH HEXFH, LOOKUPP, GETATTR fileid
 *                                            (PATH unused: a handle kept across a
 *                                            gateway restart walked up by itself)
 *
 * Exit status 0 when the call got an NFS answer (whatever it was), 1 on an error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs4.h>

static void die(const char *what, const char *err)
{
	fprintf(stderr, "nfsacl: %s: %s\n", what, err ? err : strerror(errno));
	exit(1);
}

/* ---- ACE text <-> bits (nfs4_acl(5) letters) ---- */

static const struct { char c; uint32_t bit; } perms[] = {
	{ 'r', ACE4_READ_DATA }, { 'w', ACE4_WRITE_DATA }, { 'a', ACE4_APPEND_DATA },
	{ 'x', ACE4_EXECUTE }, { 'd', ACE4_DELETE }, { 'D', ACE4_DELETE_CHILD },
	{ 't', ACE4_READ_ATTRIBUTES }, { 'T', ACE4_WRITE_ATTRIBUTES },
	{ 'n', ACE4_READ_NAMED_ATTRS }, { 'N', ACE4_WRITE_NAMED_ATTRS },
	{ 'c', ACE4_READ_ACL }, { 'C', ACE4_WRITE_ACL }, { 'o', ACE4_WRITE_OWNER },
	{ 'y', ACE4_SYNCHRONIZE },
};
static const struct { char c; uint32_t bit; } flags[] = {
	{ 'f', ACE4_FILE_INHERIT_ACE }, { 'd', ACE4_DIRECTORY_INHERIT_ACE },
	{ 'n', ACE4_NO_PROPAGATE_INHERIT_ACE }, { 'i', ACE4_INHERIT_ONLY_ACE },
	{ 'g', ACE4_IDENTIFIER_GROUP },
};
#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *status_name(nfsstat4 st)
{
	static char buf[32];

	switch (st) {
	case NFS4_OK: return "ok";
	case NFS4ERR_PERM: return "NFS4ERR_PERM";
	case NFS4ERR_ACCESS: return "NFS4ERR_ACCESS";
	case NFS4ERR_INVAL: return "NFS4ERR_INVAL";
	case NFS4ERR_ATTRNOTSUPP: return "NFS4ERR_ATTRNOTSUPP";
	case NFS4ERR_BADOWNER: return "NFS4ERR_BADOWNER";
	case NFS4ERR_NOENT: return "NFS4ERR_NOENT";
	default:
		snprintf(buf, sizeof(buf), "NFS4ERR_%d", (int)st);
		return buf;
	}
}

/* ---- XDR of fattr4 values, by hand (libnfs has no ACL attribute codec) ---- */

struct xbuf {
	char *p;
	size_t len, cap;
};

static void put32(struct xbuf *b, uint32_t v)
{
	if (b->len + 4 > b->cap) {
		b->cap = b->cap ? 2 * b->cap : 256;
		b->p = realloc(b->p, b->cap);
	}
	v = htonl(v);
	memcpy(b->p + b->len, &v, 4);
	b->len += 4;
}

static void putstr(struct xbuf *b, const char *s)
{
	size_t n = strlen(s), i;

	put32(b, n);
	for (i = 0; i < (n + 3) / 4; i++) {
		uint32_t w = 0;

		memcpy(&w, s + 4 * i, n - 4 * i < 4 ? n - 4 * i : 4);
		put32(b, ntohl(w));
	}
}

static uint32_t get32(const char **p, const char *end)
{
	uint32_t v;

	if (*p + 4 > end)
		die("GETATTR", "short attribute value");
	memcpy(&v, *p, 4);
	*p += 4;
	return ntohl(v);
}

/* "A:fd:2001:rx" -> XDR nfsace4 */
static void put_ace(struct xbuf *b, char *text)
{
	char *type = strsep(&text, ":"), *fl = strsep(&text, ":"),
	     *who = strsep(&text, ":"), *pm = text, *c;
	uint32_t f = 0, m = 0;
	size_t i;

	if (type == NULL || fl == NULL || who == NULL || pm == NULL)
		die("ACE", "want TYPE:FLAGS:WHO:PERMS");
	for (c = fl; *c; c++) {
		for (i = 0; i < N(flags) && flags[i].c != *c; i++)
			;
		if (i == N(flags))
			die("ACE flag", c);
		f |= flags[i].bit;
	}
	for (c = pm; *c; c++) {
		for (i = 0; i < N(perms) && perms[i].c != *c; i++)
			;
		if (i == N(perms))
			die("ACE permission", c);
		m |= perms[i].bit;
	}
	put32(b, *type == 'A' ? ACE4_ACCESS_ALLOWED_ACE_TYPE :
		 *type == 'D' ? ACE4_ACCESS_DENIED_ACE_TYPE :
		 (die("ACE type", type), 0));
	put32(b, f);
	put32(b, m);
	putstr(b, who);
}

static void print_ace(const char **p, const char *end)
{
	uint32_t type = get32(p, end), f = get32(p, end), m = get32(p, end);
	uint32_t n = get32(p, end);
	size_t i;

	if (*p + n > end)
		die("GETATTR", "short ACE name");
	printf(" %c:", type == ACE4_ACCESS_ALLOWED_ACE_TYPE ? 'A' :
	       type == ACE4_ACCESS_DENIED_ACE_TYPE ? 'D' : '?');
	for (i = 0; i < N(flags); i++)
		if (f & flags[i].bit)
			putchar(flags[i].c);
	printf(":%.*s:", (int)n, *p);
	*p += (n + 3) & ~3u;
	for (i = 0; i < N(perms); i++)
		if (m & perms[i].bit)
			putchar(perms[i].c);
}

/* ---- one COMPOUND on libnfs' RPC context ---- */

struct call {
	int done, status;
};

static nfs_argop4 ops[64];
static int nops;

static nfsstat4 last_status(COMPOUND4res *r)
{
	return r->status;
}

static const char *cmd;

/* Runs inside the RPC callback: libnfs frees the result when it returns. */
static void take_result(COMPOUND4res *res)
{
	if (last_status(res) != NFS4_OK) {
		printf("%s\n", status_name(last_status(res)));
		return;
	}
	if (strcmp(cmd, "getacl") == 0) {
		nfs_resop4 *r = &res->resarray.resarray_val[nops - 1];
		fattr4 *fa = &r->nfs_resop4_u.opgetattr.GETATTR4res_u.resok4.obj_attributes;
		const char *p = fa->attr_vals.attrlist4_val;
		const char *end = p + fa->attr_vals.attrlist4_len;
		const char *q;
		uint32_t n, k, mode;

		if (fa->attrmask.bitmap4_len < 1 ||
		    !(fa->attrmask.bitmap4_val[0] & (1u << FATTR4_ACL))) {
			printf("no acl attribute\n");
			return;
		}
		n = get32(&p, end);
		/* the mode follows the ACL: skip the ACEs to print it first */
		q = p;
		for (k = 0; k < n; k++) {
			uint32_t len;

			get32(&q, end);
			get32(&q, end);
			get32(&q, end);
			len = get32(&q, end);
			q += (len + 3) & ~3u;
		}
		mode = get32(&q, end);
		printf("mode %04o", mode);
		for (; n > 0; n--)
			print_ace(&p, end);
		printf("\n");
	} else if (strcmp(cmd, "getfh") == 0) {
		nfs_resop4 *r = &res->resarray.resarray_val[nops - 1];
		nfs_fh4 *fh = &r->nfs_resop4_u.opgetfh.GETFH4res_u.resok4.object;
		u_int k;

		printf("fh ");
		for (k = 0; k < fh->nfs_fh4_len; k++)
			printf("%02x", (unsigned char)fh->nfs_fh4_val[k]);
		printf("\n");
	} else if (strcmp(cmd, "fileid") == 0 || strcmp(cmd, "parent") == 0) {
		nfs_resop4 *r = &res->resarray.resarray_val[nops - 1];
		fattr4 *fa = &r->nfs_resop4_u.opgetattr.GETATTR4res_u.resok4.obj_attributes;
		const char *p = fa->attr_vals.attrlist4_val;
		const char *end = p + fa->attr_vals.attrlist4_len;
		uint64_t hi = get32(&p, end);

		printf("fileid %" PRIu64 "\n", hi << 32 | get32(&p, end));
	} else {
		printf("ok\n");
	}
}


static void compound_cb(struct rpc_context *rpc, int status, void *data,
			void *pd)
{
	struct call *c = pd;

	c->done = 1;
	c->status = status;
	if (status == RPC_STATUS_SUCCESS)
		take_result(data);
}

static void compound(struct nfs_context *nfs, struct call *c)
{
	struct rpc_context *rpc = nfs_get_rpc_context(nfs);
	COMPOUND4args args;
	struct pollfd pfd;

	memset(&args, 0, sizeof(args));
	args.argarray.argarray_len = nops;
	args.argarray.argarray_val = ops;
	memset(c, 0, sizeof(*c));
	if (rpc_nfs4_compound_async(rpc, compound_cb, &args, c) != 0)
		die("COMPOUND", rpc_get_error(rpc));
	while (!c->done) {
		pfd.fd = rpc_get_fd(rpc);
		pfd.events = rpc_which_events(rpc);
		if (poll(&pfd, 1, 1000) < 0)
			die("poll", NULL);
		if (rpc_service(rpc, pfd.revents) < 0)
			die("rpc_service", rpc_get_error(rpc));
	}
	if (c->status != RPC_STATUS_SUCCESS)
		die("COMPOUND", rpc_get_error(rpc));
}

static void add_op(nfs_opnum4 op)
{
	memset(&ops[nops], 0, sizeof(ops[nops]));
	ops[nops].argop = op;
	nops++;
}

int main(int argc, char **argv)
{
	struct nfs_context *nfs;
	struct nfs_url *url;
	struct call c;
	char *path, *comp;
	uint32_t attrmask[2];
	struct xbuf b = { 0 };
	char data[16] = "w";
	int i;

	if (argc < 4)
		die("usage", "nfsacl URL PATH getacl|setacl SPEC|read|write|chmod MODE");
	cmd = argv[3];
	nfs = nfs_init_context();
	if (nfs == NULL)
		die("nfs_init_context", NULL);
	url = nfs_parse_url_dir(nfs, argv[1]);
	if (url == NULL)
		die("URL", nfs_get_error(nfs));
	if (nfs_mount(nfs, url->server, url->path) != 0)
		die("mount", nfs_get_error(nfs));

	add_op(OP_PUTROOTFH);
	path = malloc(strlen(url->path) + strlen(argv[2]) + 2);
	sprintf(path, "%s/%s", url->path, argv[2]);
	while ((comp = strsep(&path, "/")) != NULL) {
		if (*comp == '\0')
			continue;
		add_op(OP_LOOKUP);
		ops[nops - 1].nfs_argop4_u.oplookup.objname.utf8string_len = strlen(comp);
		ops[nops - 1].nfs_argop4_u.oplookup.objname.utf8string_val = comp;
	}

	if (strcmp(cmd, "parent") == 0) {
		static char fh[NFS4_FHSIZE];
		size_t len;

		if (argc < 5 || strlen(argv[4]) % 2 || strlen(argv[4]) / 2 > sizeof(fh))
			die(cmd, "missing or bad file handle");
		len = strlen(argv[4]) / 2;
		for (i = 0; i < (int)len; i++)
			sscanf(argv[4] + 2 * i, "%2hhx", (unsigned char *)&fh[i]);
		nops = 0;
		add_op(OP_PUTFH);
		ops[nops - 1].nfs_argop4_u.opputfh.object.nfs_fh4_len = len;
		ops[nops - 1].nfs_argop4_u.opputfh.object.nfs_fh4_val = fh;
		add_op(OP_LOOKUPP);
	}
	if (strcmp(cmd, "getfh") == 0) {
		add_op(OP_GETFH);
	} else if (strcmp(cmd, "fileid") == 0 || strcmp(cmd, "parent") == 0) {
		attrmask[0] = 1u << FATTR4_FILEID;
		attrmask[1] = 0;
		add_op(OP_GETATTR);
		ops[nops - 1].nfs_argop4_u.opgetattr.attr_request.bitmap4_len = 2;
		ops[nops - 1].nfs_argop4_u.opgetattr.attr_request.bitmap4_val = attrmask;
	} else if (strcmp(cmd, "getacl") == 0) {
		attrmask[0] = 1u << FATTR4_ACL;
		attrmask[1] = 1u << (FATTR4_MODE - 32);
		add_op(OP_GETATTR);
		ops[nops - 1].nfs_argop4_u.opgetattr.attr_request.bitmap4_len = 2;
		ops[nops - 1].nfs_argop4_u.opgetattr.attr_request.bitmap4_val = attrmask;
	} else if (strcmp(cmd, "setacl") == 0 || strcmp(cmd, "chmod") == 0) {
		SETATTR4args *sa;
		char *spec, *ace;
		uint32_t naces = 0;

		if (argc < 5)
			die(cmd, "missing argument");
		if (strcmp(cmd, "setacl") == 0) {
			attrmask[0] = 1u << FATTR4_ACL;
			attrmask[1] = 0;
			spec = strdup(argv[4]);
			for (i = 0; argv[4][i]; i++)
				naces += argv[4][i] == ',';
			put32(&b, naces + 1);
			while ((ace = strsep(&spec, ",")) != NULL)
				put_ace(&b, ace);
		} else {
			attrmask[0] = 0;
			attrmask[1] = 1u << (FATTR4_MODE - 32);
			put32(&b, strtoul(argv[4], NULL, 8));
		}
		add_op(OP_SETATTR);
		sa = &ops[nops - 1].nfs_argop4_u.opsetattr;
		sa->obj_attributes.attrmask.bitmap4_len = 2;
		sa->obj_attributes.attrmask.bitmap4_val = attrmask;
		sa->obj_attributes.attr_vals.attrlist4_len = b.len;
		sa->obj_attributes.attr_vals.attrlist4_val = b.p;
	} else if (strcmp(cmd, "read") == 0) {
		add_op(OP_READ);
		ops[nops - 1].nfs_argop4_u.opread.count = 16;
	} else if (strcmp(cmd, "write") == 0) {
		WRITE4args *wa;

		add_op(OP_WRITE);
		wa = &ops[nops - 1].nfs_argop4_u.opwrite;
		wa->offset = 1 << 20;
		wa->stable = FILE_SYNC4;
		wa->data.data_len = 1;
		wa->data.data_val = data;
	} else {
		die("unknown command", cmd);
	}

	compound(nfs, &c);
	nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return 0;
}
