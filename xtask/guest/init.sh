#!/bin/sh
# PID 1 of the vm-test guest (busybox-static's sh; see xtask/src/vm.rs).
#
# Loads the modules the host listed in dependency order, mounts the host's
# root read-only over 9p and runs checks.sh chrooted into it, so that the
# host's own wbscope, mkfs.ext4 and coreutils run with the host's libraries
# (docs/toolchain.md: bpftrace ran this way in both guests). Everything the host
# needs comes back through the writable 9p share "out"; the console only
# carries "WBVM <event>" progress lines, which the host uses for its time
# limits. Whatever happens, the guest powers off (or panics into qemu's
# -no-reboot exit).
PATH=/bin
export PATH
/bin/busybox --install -s /bin

say() { echo "WBVM $*"; }
die() {
    say fail "$*"
    sync
    poweroff -f
    exit 1
}

mkdir -p /proc /sys /dev /hostroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
. /vm.env
say init "$(uname -r)"

while read -r module; do
    # crc32c-intel may refuse a CPU without SSE4.2; ext4 then uses
    # crc32c_generic, so a failed insmod is reported, not fatal.
    insmod "/modules/$module" || say note "insmod $module failed"
done < /modules.list

R=/hostroot
# cache=loose: the share is read-only and every command in checks.sh is an
# exec of a host binary and its libraries over 9p, slow under TCG uncached.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot "$R" \
    || die "cannot mount the host root over 9p"
mount -t proc proc "$R/proc" || die "mount proc in the host root"
mount -t sysfs sysfs "$R/sys" || die "mount sysfs in the host root"
mount -t devtmpfs devtmpfs "$R/dev" || die "mount devtmpfs in the host root"
mount -t tmpfs tmpfs "$R/tmp" || die "mount tmpfs on the host root's /tmp"
# wbscope mounts tracefs itself if needed; mounting it here lets checks.sh
# read available_filter_functions first.
mount -t tracefs tracefs "$R/sys/kernel/tracing" || say note "no tracefs"
mkdir -p "$R/tmp/out"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out "$R/tmp/out" \
    || die "cannot mount the output share"
cp /checks.sh "$R/tmp/checks.sh"

say ready
chroot "$R" /bin/sh /tmp/checks.sh
say done "$?"
sync
poweroff -f
