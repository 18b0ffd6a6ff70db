/*
 * FSAL_CAIRN: module registration, configuration and export creation.
 * SPDX-License-Identifier: LGPL-3.0-or-later
 *
 * Configuration (see docs/nfs.md; pNFS: mds.c, ds.c):
 *
 *   EXPORT {
 *       Export_Id = 1; Path = "/"; Pseudo = "/vol0";
 *       FSAL { Name = CAIRN; Volume = vol0; Servers = "127.0.0.1:7420"; }
 *   }
 *
 * Path is a directory inside the volume ("/" is the volume root).
 */

#include <stdlib.h>
#include <string.h>
#include "fsal.h"
#include "FSAL/fsal_init.h"
#include "FSAL/fsal_commonlib.h"
#include "config_parsing.h"
#include "nfs_exports.h"
#include "export_mgr.h"
#include "internal.h"

static const char *module_name = CAIRN_FSAL_NAME;

struct cairn_fsal_module CairnFSM = {
	.fsal = {
		.fs_info = {
			.symlink_support = true,
			.link_support = true,
			.cansettime = true,
			.no_trunc = true,
			.chown_restricted = true,
			.case_preserving = true,
			.maxfilesize = INT64_MAX,
			.maxread = FSAL_MAXIOSIZE,
			.maxwrite = FSAL_MAXIOSIZE,
			.maxlink = 1024,
			.maxnamelen = NAME_MAX,
			.maxpathlen = PATH_MAX,
			.acl_support = FSAL_ACLSUPPORT_ALLOW,
			.supported_attrs = CAIRN_SUPPORTED_ATTRS,
			.lock_support = true,
			.delegations = FSAL_OPTION_FILE_DELEGATIONS,
			.lock_support_async_block = false,
			.unique_handles = true,
			.homogenous = true,
			.readdir_plus = true,
			.xattr_support = true,
			.expire_time_parent = -1,
			.pnfs_mds = true,
			.pnfs_ds = true,
		}
	}
};

static struct config_item cairn_items[] = {
	CONF_ITEM_MODE("umask", 0, cairn_fsal_module, fsal.fs_info.umask),
	CONFIG_EOL
};

static struct config_block cairn_block = {
	.dbus_interface_name = "org.ganesha.nfsd.config.fsal.cairn",
	.blk_desc.name = "CAIRN",
	.blk_desc.type = CONFIG_BLOCK,
	.blk_desc.u.blk.init = noop_conf_init,
	.blk_desc.u.blk.params = cairn_items,
	.blk_desc.u.blk.commit = noop_conf_commit
};

static fsal_status_t init_config(struct fsal_module *module_in,
				 config_file_t config_struct,
				 struct config_error_type *err_type)
{
	struct cairn_fsal_module *myself =
	    container_of(module_in, struct cairn_fsal_module, fsal);

	if (cairn_abi_version() != CAIRN_ABI_VERSION) {
		LogCrit(COMPONENT_FSAL,
			"CAIRN: libcairn ABI %u, FSAL built for %u: refusing to load",
			cairn_abi_version(), CAIRN_ABI_VERSION);
		return fsalstat(ERR_FSAL_INVAL, 0);
	}
	(void) load_config_from_parse(config_struct, &cairn_block, myself,
				      true, err_type);
	if (!config_error_is_harmless(err_type))
		return fsalstat(ERR_FSAL_INVAL, 0);
	display_fsinfo(&myself->fsal);
	return fsalstat(ERR_FSAL_NO_ERROR, 0);
}

/* FSAL { Layout = ...; }: the pNFS layout type of a PNFS export (docs/nfs.md "pNFS") */
static struct config_item_list layout_types[] = {
	CONFIG_LIST_TOK("files", LAYOUT4_NFSV4_1_FILES),
	CONFIG_LIST_TOK("flexfiles", LAYOUT4_FLEX_FILES),
	CONFIG_LIST_EOL
};

static struct config_item export_params[] = {
	CONF_ITEM_NOOP("name"),
	CONF_MAND_STR("volume", 1, NAME_MAX, NULL, cairn_export, volume),
	CONF_ITEM_STR("servers", 1, 4096, "127.0.0.1:7420", cairn_export,
		      servers),
	CONF_ITEM_BOOL("acl", false, cairn_export, acl),
	CONF_ITEM_PATH("credentials", 1, 4096, NULL, cairn_export, credentials),
	CONF_ITEM_BOOL("pnfs", false, cairn_export, pnfs),
	CONF_ITEM_TOKEN("layout", LAYOUT4_NFSV4_1_FILES, layout_types,
			cairn_export, layout_type),
	CONF_ITEM_BOOL("ds", false, cairn_export, ds_role),
	CONF_ITEM_STR("ds_addrs", 1, 8192, NULL, cairn_export, ds_addrs),
	CONF_ITEM_UI32("ds_probe_fails", 1, 100, 3, cairn_export,
		       ds_probe_fails),
	CONFIG_EOL
};

static struct config_block export_param_block = {
	.dbus_interface_name = "org.ganesha.nfsd.config.fsal.cairn-export%d",
	.blk_desc.name = "FSAL",
	.blk_desc.type = CONFIG_BLOCK,
	.blk_desc.u.blk.init = noop_conf_init,
	.blk_desc.u.blk.params = export_params,
	.blk_desc.u.blk.commit = noop_conf_commit
};

static void free_export(struct cairn_export *export)
{
	if (export->fs)
		(void) cairn_unmount(export->fs);
	gsh_free(export->volume);
	gsh_free(export->servers);
	gsh_free(export->credentials);
	gsh_free(export->ds_addrs);
	gsh_free(export);
}

static fsal_status_t create_export(struct fsal_module *module_in,
				   void *parse_node,
				   struct config_error_type *err_type,
				   const struct fsal_up_vector *up_ops)
{
	struct cairn_export *export = gsh_calloc(1, sizeof(*export));
	fsal_status_t status = { ERR_FSAL_NO_ERROR, 0 };
	cairn_options_t opts;
	cairn_attr_t ca;
	cairn_creds_t creds;
	const char *path = CTX_FULLPATH(op_ctx);
	char label[64];
	int rc;

	fsal_export_init(&export->export);
	cairn_export_ops_init(&export->export.exp_ops);
	cairn_mds_export_ops_init(&export->export.exp_ops);

	if (parse_node) {
		rc = load_config_from_node(parse_node, &export_param_block,
					   export, true, err_type);
		if (rc != 0) {
			LogCrit(COMPONENT_FSAL,
				"CAIRN: bad FSAL block for export %s",
				path);
			free_export(export);
			return fsalstat(ERR_FSAL_INVAL, 0);
		}
	}

	if (cairn_pnfs_parse_ds_addrs(export) < 0) {
		status = fsalstat(ERR_FSAL_INVAL, EINVAL);
		goto error;
	}

	cairn_options_init(&opts);
	(void) snprintf(label, sizeof(label), "ganesha-export-%u",
			(unsigned int) op_ctx->ctx_export->export_id);
	opts.client_name = label;
	opts.credentials = export->credentials; /* NULL: CAIRN_CREDENTIALS or defaults */
	rc = cairn_mount(export->servers, export->volume, &opts, &export->fs);
	if (rc < 0) {
		LogCrit(COMPONENT_FSAL,
			"CAIRN: cannot mount volume %s from %s for export %s: %s (errno %d)",
			export->volume, export->servers, path,
			cairn_last_error_message(), -rc);
		export->fs = NULL;
		status = cairn2fsal_error(rc);
		goto error;
	}
	rc = cairn_volume_id(export->fs, export->volume_id);
	if (rc < 0) {
		status = cairn2fsal_error(rc);
		goto error;
	}

	/* The export root: Path inside the volume, looked up as root so that the
	 * export exists whatever the first client's credentials are. */
	rc = cairn_lookup_path(export->fs, NULL, path, &ca);
	if (rc < 0) {
		LogCrit(COMPONENT_FSAL,
			"CAIRN: export %s: no such directory in volume %s: %s (errno %d)",
			path, export->volume, cairn_last_error_message(), -rc);
		status = cairn2fsal_error(rc);
		goto error;
	}
	if ((ca.mode & S_IFMT) != S_IFDIR) {
		LogCrit(COMPONENT_FSAL,
			"CAIRN: export %s in volume %s is not a directory",
			path, export->volume);
		status = fsalstat(ERR_FSAL_NOTDIR, ENOTDIR);
		goto error;
	}
	(void) creds;

	export->export.fsal = module_in;
	export->export.up_ops = up_ops;
	export->up_ops = up_ops;
	export->root = cairn_construct_handle(export, &ca);
	op_ctx->fsal_export = &export->export;

	if (fsal_attach_export(module_in, &export->export.exports) != 0) {
		LogCrit(COMPONENT_FSAL, "CAIRN: cannot attach export %s", path);
		cairn_deconstruct_handle(export->root);
		status = fsalstat(ERR_FSAL_SERVERFAULT, 0);
		goto error;
	}
	if (export->ds_role && cairn_ds_export_init(export) < 0) {
		fsal_detach_export(module_in, &export->export.exports);
		cairn_deconstruct_handle(export->root);
		status = fsalstat(ERR_FSAL_EXIST, EEXIST);
		goto error;
	}
	if (cairn_up_register(export) < 0)
		LogWarn(COMPONENT_FSAL,
			"CAIRN: export %s: no invalidation upcalls: %s",
			path, cairn_last_error_message());
	if (cairn_layouts_register(export) < 0)
		LogWarn(COMPONENT_PNFS,
			"CAIRN: export %s: layouts will not be recalled on map changes: %s",
			path, cairn_last_error_message());

	LogInfo(COMPONENT_FSAL, "CAIRN: exported volume %s path %s (servers %s)",
		export->volume, path, export->servers);
	return status;

error:
	free_export(export);
	return status;
}

MODULE_INIT void init(void)
{
	struct fsal_module *myself = &CairnFSM.fsal;

	if (register_fsal(myself, module_name, FSAL_MAJOR_VERSION,
			  FSAL_MINOR_VERSION, FSAL_ID_EXPERIMENTAL) != 0) {
		LogCrit(COMPONENT_FSAL, "CAIRN module failed to register.");
		return;
	}
	myself->m_ops.create_export = create_export;
	myself->m_ops.init_config = init_config;
	cairn_handle_ops_init(&CairnFSM.handle_ops);
	/* pNFS: layouts per export (PNFS = true), the DS role per DS block */
	cairn_mds_handle_ops_init(&CairnFSM.handle_ops);
	cairn_mds_module_ops_init(&myself->m_ops);
	cairn_ds_module_ops_init(&myself->m_ops);
}

MODULE_FINI void finish(void)
{
	if (unregister_fsal(&CairnFSM.fsal) != 0) {
		LogCrit(COMPONENT_FSAL, "Unable to unload CAIRN FSAL.");
		abort();
	}
}
