#!/usr/bin/env bash
# Generate, in a configured Samba tree, only the headers a VFS module includes: the pidl
# output for the IDL files (gen_ndr/*.h), the loadparm tables and the NTSTATUS/WERROR
# tables. Uses waf's own generator targets, so the output matches a real build.
set -euo pipefail
tree=$1
cd "$tree"
targets="param_functions.h,param_local.h,param_global.h,s3_param_proto_h"
targets+=",ntstatus_generated,werror_generated"
for idl in librpc/idl/*.idl source3/librpc/idl/*.idl; do
    b=$(basename "$idl" .idl)
    # only IDLs that a wscript_build names are targets
    grep -qw "$b.idl" "$(dirname "$idl")/wscript_build" 2>/dev/null || continue
    targets+=",PIDL_${b^^}"
done
PYTHONHASHSEED=1 nice ./buildtools/bin/waf build -j2 --targets="$targets"
