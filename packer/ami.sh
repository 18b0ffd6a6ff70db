#!/usr/bin/env bash
# Build the appliance AMI (`make ami`; docs/appliance.md "AMI"):
#
#   packer/ami.sh DIST_TARBALL VERSION [-var NAME=VALUE]...
#
# packer build -only=amazon-ebs.cairn with aws.pkrvars.hcl: Debian 12's official AMI, the
# same provisioners as the qemu image (ansible/image.yml, manifest, seal), then the AMI is
# marked IMDSv2-only (aws ec2 modify-image-attribute --imds-support v2.0; Debian's packer
# 1.6.6 cannot set it itself). Needs AWS credentials in the environment (AWS_PROFILE or
# AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), packer, ansible-playbook and the aws CLI.
# Writes build/image/ami/: packer-manifest.json (the AMI id per region), the package
# manifest and packer.log.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
dist=$(realpath "${1:?usage: ami.sh DIST_TARBALL VERSION [-var NAME=VALUE]...}")
version=${2:?usage: ami.sh DIST_TARBALL VERSION [-var NAME=VALUE]...}
shift 2
out=$repo/build/image/ami
die() {
    echo "ami: $*" >&2
    exit 1
}
for t in packer ansible-playbook aws python3; do
    command -v "$t" >/dev/null || die "$t is missing (make ami installs it: make deps, AMI_DEB_PACKAGES)"
done
mkdir -p "$out"
cd "$here"
CHECKPOINT_DISABLE=1 packer build -only=amazon-ebs.cairn -color=false -timestamp-ui \
    -var-file="$here/aws.pkrvars.hcl" \
    -var "version=$version" -var "dist_tarball=$dist" \
    -var "playbook=$repo/ansible/image.yml" \
    -var "manifest=$out/cairn-appliance-$version.packages.txt" \
    -var "output_dir=$out" "$@" . 2>&1 | tee "$out/packer.log"
((PIPESTATUS[0] == 0)) || die "packer build failed (log $out/packer.log)"
# artifact_id is "region:ami-id,region:ami-id"
python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["builds"][-1]; print("\n".join(b["artifact_id"].split(",")))' \
    "$out/packer-manifest.json" | while IFS=: read -r region ami; do
    aws ec2 modify-image-attribute --region "$region" --image-id "$ami" --imds-support v2.0
    echo "ami: $region $ami (IMDSv2 required)"
done
