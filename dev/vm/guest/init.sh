#!/bin/sh
# PID 1 of the vm-test guest (busybox-static's sh; see dev/vm/src/matrix.rs).
#
# Loads the modules the host listed in dependency order, mounts the shared
# root image (/dev/vdb, read-only ext4: wbscope, mkfs and busybox; see
# dev/vm/src/rootimg.rs) and runs checks.sh chrooted into it. Results go
# to a tmpfs and are written as a tar archive to /dev/vdc after every step
# and at the end, which the host unpacks; the console only carries "WBVM
# <event>" progress lines, which the host uses for its time limits.
# Whatever happens, the guest powers off (or panics into qemu's
# -no-reboot exit), without a sync of its own (-n): save() has written
# the results, and a sync would wait for any writeback still running.
PATH=/bin
export PATH
/bin/busybox --install -s /bin

say() { echo "WBVM $*"; }
R=/newroot
save() {
    [ -d "$R/tmp/out" ] && tar -cf /dev/vdc -C "$R/tmp/out" . 2>/dev/null
    # fsync(2) of the results' device alone: a sync of everything would
    # wait for any writeback the checks left running (the bighost
    # group's, when its sync ran out of time).
    sync /dev/vdc
}
die() {
    say fail "$*"
    save
    poweroff -n -f
    exit 1
}

mkdir -p /proc /sys /dev "$R"
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

# virtio-blk probes asynchronously on some builds: wait for the disks.
n=0
while [ ! -b /dev/vdc ] && [ "$n" -lt 50 ]; do
    sleep 0.1
    n=$((n + 1))
done
mount -t ext4 -o ro /dev/vdb "$R" || die "cannot mount the root image /dev/vdb"
mount -t proc proc "$R/proc" || die "mount proc in the root image"
mount -t sysfs sysfs "$R/sys" || die "mount sysfs in the root image"
mount -t devtmpfs devtmpfs "$R/dev" || die "mount devtmpfs in the root image"
mount -t tmpfs tmpfs "$R/tmp" || die "mount tmpfs on the root image's /tmp"
# wbscope mounts tracefs itself if needed; mounting it here lets checks.sh
# read available_filter_functions first.
mount -t tracefs tracefs "$R/sys/kernel/tracing" || say note "no tracefs"
mkdir -p "$R/tmp/out"
uname -r > "$R/tmp/out/uname"
cp /checks.sh "$R/tmp/checks.sh"

say ready
# dash from the host (rootimg.rs: busybox's ash has 32-bit arithmetic).
chroot "$R" /usr/bin/dash /tmp/checks.sh
status=$?
save
say done "$status"
poweroff -n -f
