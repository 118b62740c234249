#!/bin/sh
# fuse-nfs-build.sh builds fuse-nfs (sahlberg/fuse-nfs, GPLv3; a user-space
# NFSv3 client: FUSE + libnfs) with its POSIX-fixes patch into PREFIX, for the
# NFS gateway's acceptance tests (docs/testing.md, "NFS clients"). `make deps`
# calls it. The source is not in this repository: SRC is a directory holding
# src/ (the upstream tree) and fuse-nfs-posix-fixes.patch, such as
# /work/shared/tools/fuse-nfs.
#
# Usage: fuse-nfs-build.sh SRC [PREFIX]     (PREFIX default /opt/plumeria-fuse-nfs)
#
# Idempotent: when PREFIX/bin/fuse-nfs exists and the stamp next to it names
# the same source and patch, it exits at once. Otherwise it installs the build
# packages (apt, quietly), copies the source to a temporary directory (SRC may
# be read-only), patches, builds, installs, and writes the stamp last, so an
# interrupted build is redone. Exit status is non-zero on any failure; the
# build log is then printed.
set -eu
SRC=${1:?usage: fuse-nfs-build.sh SRC [PREFIX]}
PREFIX=${2:-/opt/plumeria-fuse-nfs}
PATCHFILE=$SRC/fuse-nfs-posix-fixes.patch
STAMP=$PREFIX/plumeria-build-stamp

[ -f "$SRC/src/configure.ac" ] && [ -f "$PATCHFILE" ] || {
	echo "fuse-nfs-build: no fuse-nfs source (src/configure.ac and fuse-nfs-posix-fixes.patch) in $SRC" >&2
	exit 2
}
# The stamp: what was built. The patch's hash stands for the patch; the source
# tree is a fixed upstream commit, so its configure.ac and fuse-nfs.c stand for it.
want=$(cat "$PATCHFILE" "$SRC/src/configure.ac" "$SRC/src/fuse/fuse-nfs.c" | sha256sum | cut -d' ' -f1)
if [ -x "$PREFIX/bin/fuse-nfs" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "patched $want" ]; then
	exit 0
fi

echo "building fuse-nfs (patched) into $PREFIX"
PKGS="autoconf automake libtool pkg-config make gcc libc6-dev patch libnfs-dev libfuse-dev"
# shellcheck disable=SC2086
if ! dpkg -s $PKGS >/dev/null 2>&1; then
	# shellcheck disable=SC2086
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PKGS) >/dev/null 2>&1 || {
		echo "fuse-nfs-build: could not install the build packages: $PKGS" >&2
		exit 1
	}
fi

BUILD=$(mktemp -d /tmp/plumeria-fuse-nfs-build.XXXXXX)
LOG=$BUILD.log
trap 'rm -rf "$BUILD"' EXIT
cp -a "$SRC/src/." "$BUILD/"
chmod -R u+w "$BUILD" # a read-only source stays read-only in the copy
if ! (
	set -e
	cd "$BUILD"
	patch -p1 <"$PATCHFILE"
	./setup.sh
	./configure --prefix="$PREFIX"
	make -j"$(nproc)"
	rm -f "$STAMP"
	make install
) >"$LOG" 2>&1; then
	echo "fuse-nfs-build: build failed; last lines of $LOG:" >&2
	tail -n 30 "$LOG" >&2
	exit 1
fi
"$PREFIX/bin/fuse-nfs" --help >/dev/null 2>&1 || {
	echo "fuse-nfs-build: $PREFIX/bin/fuse-nfs does not run" >&2
	exit 1
}
echo "patched $want" >"$STAMP"
rm -f "$LOG"
echo "installed $PREFIX/bin/fuse-nfs"
