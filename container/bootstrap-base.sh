#!/usr/bin/env bash
# Build the sandbox's base image offline from Debian packages (no image registry needed).
# Usage: bootstrap-base.sh IMAGE_TAG LABEL_VALUE
# Needs root (debootstrap) and reaches only Debian's package mirror.
set -euo pipefail
tag=${1:?image tag}
label=${2:-base}
mirror=${SANDSHELL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
packages=python3,python3-pip,python3-venv,procps,psmisc,git,curl,wget,ca-certificates,less,vim-tiny,file,xz-utils,bzip2,unzip,jq,iproute2,iputils-ping,sudo

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "sandshell: installing debootstrap (apt-get)..."
  apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
fi
rootfs=$(mktemp -d /tmp/sandshell-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "sandshell: debootstrap $suite into $rootfs (about 2-4 minutes)..."
debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror"
# Keep the image small: no apt lists or caches, no docs.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb \
       "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
echo "sandshell: importing $tag..."
tar -C "$rootfs" -c . | docker import \
  --change "LABEL sandshell.image=$label" \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "sandshell: base image $tag ready."
