# Cairn: the two commands are `make up` (run the whole thing on this host) and `make test`
# (everything CI checks). `make help` lists the rest.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Debian packages the build, `make up` and the tests need (installed by `make deps`).
DEB_PACKAGES :=
DEB_PACKAGES += etcd-server       # config store: one etcd for make up and for each test cluster
DEB_PACKAGES += etcd-client       # etcdctl: turns etcd auth on (users root, cairn; scripts/etcd-tls.sh)
DEB_PACKAGES += openssl           # the etcd CA and certificates of make up and the test clusters (scripts/etcd-tls.sh)
DEB_PACKAGES += fuse3             # fusermount3, /dev/fuse for mount.cairn
DEB_PACKAGES += libfuse3-dev      # FUSE headers/library the mount crate links against
DEB_PACKAGES += protobuf-compiler # protoc, for etcd-client's gRPC code at build time
DEB_PACKAGES += cbindgen          # generates cairn.h from libcairn
DEB_PACKAGES += tcpdump           # the pnfs VM scenario captures MDS/DS traffic (tests/vm/scenarios/pnfs.sh)
DEB_PACKAGES += attr              # getfattr/setfattr: xattr checks on bricks and mounts
DEB_PACKAGES += pkg-config        # finds fuse3 (and cairn.pc for the C modules)
DEB_PACKAGES += build-essential   # cc, ld, make for the C parts and build scripts
DEB_PACKAGES += curl              # etcd health checks in scripts/ and tests/
DEB_PACKAGES += python3           # JSON checks and free-port picking in scripts/ and tests/
DEB_PACKAGES += python3-pip       # Python test tools (later suites)
DEB_PACKAGES += shellcheck        # lints scripts/ and tests/ in make test
DEB_PACKAGES += strace            # tests/bench/cost.sh: system calls per operation
# NFS gateway (issue 3): Ganesha and what its FSAL builds against; userspace NFS clients.
DEB_PACKAGES += nfs-ganesha nfs-ganesha-vfs rpcbind nfs-common  # server, FSAL_VFS to compare, statd (NLM)
DEB_PACKAGES += cmake bison flex libntirpc-dev liburcu-dev libkrb5-dev libdbus-1-dev \
	libcap-dev libblkid-dev uuid-dev                      # configure Ganesha's tree for config.h
DEB_PACKAGES += libnfs-utils libnfs-dev python3-venv  # nfs-cat/nfs-cp/nfs-ls (v3); venv for nfs-rs
# SMB gateway (issue 4): Samba, its clients and test suite; what vfs-module/prepare-samba.sh
# needs to configure Samba's source tree for the module's headers.
DEB_PACKAGES += samba samba-vfs-modules smbclient samba-testsuite  # vfs-modules: streams_xattr (shares stack it under cairn)
DEB_PACKAGES += libtalloc-dev libtevent-dev libtdb-dev libldb-dev libpopt-dev zlib1g-dev \
	libacl1-dev libattr1-dev libtirpc-dev libbsd-dev libjansson-dev libarchive-dev \
	libparse-yapp-perl libicu-dev libgnutls28-dev libkeyutils-dev libreadline-dev
# iSCSI gateway (issue 5): tcmu-runner's source (dpkg-source), initiator tools, VM harness.
DEB_PACKAGES += dpkg-dev libiscsi-bin                  # apt-get source + dpkg-source; iscsi-test-cu
DEB_PACKAGES += qemu-system-x86 qemu-utils debootstrap openssh-client e2fsprogs  # tests/vm
DEB_PACKAGES += qemu-block-extra  # qemu-io's iscsi:// protocol (vm-test SCENARIO=iscsi); not a dependency of qemu-utils
DEB_PACKAGES += iproute2          # ip netns (tests/faults), tc and ss (make bench); not in a minimal Debian
# Gateway HA (issue 19): Corosync/Pacemaker with pcs, the stock agents (IPaddr2,
# portblock + tickle_tcp), iptables for portblock; tests/ha runs them in namespaces.
DEB_PACKAGES += pacemaker corosync pcs resource-agents iptables
DEB_PACKAGES += ctdb  # clustered Samba on the gateways (tests/ha/smb-failover.sh)
# Benchmarks.
DEB_PACKAGES += fio
# Appliance image (issue 18, make image / tests/appliance): Packer 1.6.6 (qemu builder and
# ansible provisioner built in) + Ansible; the base disk's GPT (sgdisk) and ESP (mkfs.vfat);
# the boot tests' UEFI firmware, NoCloud seed ISOs and qemu's iscsi:// driver (qemu-io).
DEB_PACKAGES += packer ansible-core gdisk dosfstools ovmf genisoimage
DEB_PACKAGES += nftables python3-yaml  # the first-boot program's firewall check (nft -c) and user-data parser
# GlusterFS, measured side by side by `make bench` only (tests/bench/gluster.sh starts its own
# glusterd on 127.0.0.2). Not in DEB_PACKAGES: where systemd runs, the package starts a
# system glusterd on *:24007, so `make bench` stops and disables that one right after it
# installed the package (never a glusterd that was there before).
BENCH_DEB_PACKAGES := glusterfs-server glusterfs-client
# The AWS CLI, for `make ami` only (it marks the AMI IMDSv2-only after Packer's build).
AMI_DEB_PACKAGES := awscli

# Profiles: `make build/install/up/bench` use release; `make test` builds, unit-tests and
# runs the integration suites on one debug build (faster to compile on 2 cores, and
# incremental for edit-test loops). Either can be overridden: make test TEST_PROFILE=release
PROFILE ?= release
TEST_PROFILE ?= debug
CARGO ?= cargo
PREFIX ?= /usr/local

# rustup's toolchain (what the machine image provides), even when a login shell did not
# put it on PATH.
ifneq ($(wildcard $(HOME)/.cargo/bin/cargo),)
export PATH := $(HOME)/.cargo/bin:$(PATH)
endif

# CI builds once from scratch: incremental compilation only costs time and disk there.
ifneq ($(CI),)
export CARGO_INCREMENTAL := 0
endif

REPO := $(CURDIR)
BACKEND := $(REPO)/backend
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(BACKEND)/target)
BUILD := $(REPO)/build
# The appliance (make dist/image/ami; docs/appliance.md): a release build by default;
# IMAGE_PROFILE=debug packs make test's debug build instead (no second compilation).
IMAGE_PROFILE ?= release
IMAGE_VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' $(BACKEND)/Cargo.toml | head -n1)
DIST_TARBALL := $(BUILD)/dist/cairn-$(IMAGE_VERSION).tar.gz
cargo_flags = $(if $(filter release,$(1)),--release,)

.PHONY: help deps build build-test install up down clean-run test fmt-check clippy \
	shellcheck lint unit integration bench bench-sbs vm-test print-deb-packages dist image ami image-test

help:
	@echo 'make up         deps + build + install, then start etcd, cairnd and vol0 mounted at run/mnt/vol0'
	@echo 'make down       unmount and stop everything make up started (data in run/ stays)'
	@echo 'make test       deps + build + cargo test + fmt/clippy/shellcheck + integration suites (what CI runs)'
	@echo 'make deps       install the Debian packages listed in DEB_PACKAGES; check cargo >= 1.80'
	@echo 'make build      cargo build --release of backend/ (PROFILE=debug for a debug build)'
	@echo 'make install    install binaries, libcairn.so, cairn.h, cairn.pc under $(PREFIX)'
	@echo 'make bench      release build + tests/bench/run.sh (installs GlusterFS to compare against)'
	@echo 'make bench-sbs OLD=COMMIT [NEW=COMMIT]  two release builds side by side, interleaved (tests/bench/side-by-side.sh)'
	@echo 'make vm-test SCENARIO=NAME  run a VM scenario (tests/vm/scenarios/NAME.sh; e.g. iscsi)'
	@echo 'make image-test build the appliance image from the debug build and boot it (BIOS, UEFI) under qemu'
	@echo 'make clean-run  delete run/ (after make down)'
	@echo 'make dist       build (IMAGE_PROFILE, default release) and pack it: build/dist/cairn-VERSION.tar.gz'
	@echo 'make image      dist + the appliance images in build/image/ (qcow2, raw, ova, SHA256SUMS, manifest)'
	@echo 'make ami        dist + the appliance AMI (packer amazon-ebs; needs AWS credentials)'

deps: $(BUILD)/deps.stamp

# The package lists, for tests/integration/deb-packages.sh (which checks that every tool the
# scripts, suites, VM scenarios and benchmarks tell a user to apt-get install is listed).
print-deb-packages:
	@echo 'DEB_PACKAGES=$(strip $(DEB_PACKAGES))'
	@echo 'BENCH_DEB_PACKAGES=$(strip $(BENCH_DEB_PACKAGES))'

$(BUILD)/deps.stamp: Makefile scripts/deps.sh
	@mkdir -p $(BUILD)
	scripts/deps.sh $(DEB_PACKAGES)
	@touch $@

build: deps
	cd $(BACKEND) && $(CARGO) build --workspace $(call cargo_flags,$(PROFILE))
	if command -v ganesha.nfsd >/dev/null; then $(MAKE) -C fsal plugins LIBCAIRN_DIR=$(TARGET_DIR)/$(PROFILE); fi
	if command -v smbd >/dev/null; then $(MAKE) -C vfs-module CAIRN_LIB_DIR=$(TARGET_DIR)/$(PROFILE) all install-link; fi

install: build
	PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) scripts/install.sh $(TARGET_DIR)/$(PROFILE)

up: install
	scripts/cluster-up.sh

down:
	scripts/cluster-down.sh

clean-run:
	@if [[ -d run/mnt ]] && grep -qF " $(REPO)/run/" /proc/self/mounts; then \
		echo 'run/ still has mounts: run make down first' >&2; exit 1; fi
	rm -rf run

# --- test -------------------------------------------------------------------------------

build-test: deps
	cd $(BACKEND) && $(CARGO) build --workspace $(call cargo_flags,$(TEST_PROFILE))

fmt-check: deps
	cd $(BACKEND) && $(CARGO) fmt --all --check

clippy: deps
	cd $(BACKEND) && $(CARGO) clippy --workspace -- -D warnings

SHELL_FILES = $(shell find scripts tests .ci -type f \( -name '*.sh' -o -path .ci/run \) \
	-not -path 'tests/vm/cache/*' 2>/dev/null | sort)
# gateway HA: OCF/fence agents and renderers (shell scripts without a .sh suffix)
SHELL_FILES += $(wildcard appliance/ha/ocf/* appliance/ha/bin/* appliance/ha/cib-resources \
	appliance/ha/ganesha-ha-conf appliance/ha/fence_cairn tests/ha/fence_cairn_ns tests/ha/gw-services)

shellcheck: deps
	shellcheck -x $(SHELL_FILES)

lint: fmt-check shellcheck clippy

unit: build-test
	cd $(BACKEND) && $(CARGO) test --workspace --no-fail-fast $(call cargo_flags,$(TEST_PROFILE))

integration: build-test
	CAIRN_BIN_DIR=$(TARGET_DIR)/$(TEST_PROFILE) tests/run-all.sh

# Cheap checks first, then the build and the tests on it.
test: deps
	$(MAKE) --no-print-directory fmt-check shellcheck
	$(MAKE) --no-print-directory build-test
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory clippy
	$(MAKE) --no-print-directory integration

bench: build
	@fresh=; for p in $(BENCH_DEB_PACKAGES); do \
		[[ $$(dpkg-query -W -f='$${db:Status-Status}' $$p 2>/dev/null) == installed ]] || fresh=1; done; \
	if [[ -n $$fresh ]]; then scripts/deps.sh $(BENCH_DEB_PACKAGES) && \
		if [[ -d /run/systemd/system ]]; then systemctl disable --now glusterd.service || true; fi; fi
	@if [[ -f tests/bench/run.sh ]]; then \
		CAIRN_BIN_DIR=$(TARGET_DIR)/$(PROFILE) bash tests/bench/run.sh; \
	else echo 'no benchmarks yet (tests/bench/run.sh)'; fi

# Two builds side by side (tests/bench/side-by-side.sh, docs/benchmarks.md): OLD and NEW are
# commits (built in release with one shared target dir) or directories of release binaries.
bench-sbs: deps
	@[[ -n "$(OLD)" ]] || { echo 'usage: make bench-sbs OLD=COMMIT|DIR [NEW=COMMIT|DIR] (NEW defaults to HEAD)'; exit 2; }
	bash tests/bench/side-by-side.sh $(OLD) $(or $(NEW),HEAD)

# VM scenarios (tests/vm, docs/vm-harness.md): a debug build, then one named scenario.
SCENARIO ?=
vm-test: build-test
	@[[ -n "$(SCENARIO)" ]] || { echo 'usage: make vm-test SCENARIO=NAME (see tests/vm/scenarios)'; exit 2; }
	CAIRN_BIN_DIR=$(TARGET_DIR)/$(TEST_PROFILE) tests/vm/run.sh $(SCENARIO)

# --- appliance ------------------------------------------------------------------------------
# dist: the binaries and libcairn of one profile; scripts/dist.sh builds the three C
# modules against it (no install-link: Samba's module dir is left alone) and packs it all.
dist: deps
	cd $(BACKEND) && $(CARGO) build --workspace $(call cargo_flags,$(IMAGE_PROFILE))
	scripts/dist.sh $(TARGET_DIR)/$(IMAGE_PROFILE) $(DIST_TARBALL)

# image: debootstrap base + packer (qemu, TCG) + conversions; docs/appliance.md "Build".
image: dist
	packer/image.sh $(DIST_TARBALL) $(IMAGE_VERSION) $(BUILD)/image

# ami: packer's amazon-ebs source (AWS credentials in the environment); AMI_VARS adds
# -var options (region, subnet...); docs/appliance.md "AMI".
AMI_VARS ?=
ami: dist
	scripts/deps.sh $(AMI_DEB_PACKAGES)
	packer/ami.sh $(DIST_TARBALL) $(IMAGE_VERSION) $(AMI_VARS)

# image-test: the appliance suites that build the image from make test's debug build and boot
# it under qemu TCG from its disk, BIOS and UEFI (tests/appliance/{base,build,vm}.sh; about
# 25-35 minutes on 2 cores, so not part of make test). docs/appliance.md "Tests".
image-test: build-test
	CAIRN_BIN_DIR=$(TARGET_DIR)/$(TEST_PROFILE) tests/run-all.sh appliance/base appliance/build appliance/vm
