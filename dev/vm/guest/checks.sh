#!/bin/sh
# Runs inside the vm-test guest, chrooted into the shared root image
# (read-only: wbscope, mkfs, busybox; dev/vm/src/rootimg.rs), with /tmp
# a guest tmpfs and /tmp/out the results, which step() saves as a tar
# archive on /dev/vdc for the host. It only collects: every pass/fail
# decision is made by the host (dev/vm/src/checks.rs, cgroups.rs, rt.rs)
# from the files written here.
#
# Variables from /vm.env (written by the host): WBSCOPE (absolute path of
# wbscope in the image), TRACE_TIMEOUT and PROBES_TIMEOUT (seconds for
# one wbscope trace or probes run).
set -u
# init's PATH is busybox's /bin; here the host's tools are wanted.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
OUT=/tmp/out
MNT=/tmp/mnt

# The results so far, to the host's disk: a guest that stops part-way
# still leaves what its finished steps wrote.
save() {
    tar -cf /dev/vdc -C "$OUT" . 2>/dev/null
    sync
}
step() {
    save
    echo "WBVM step $*"
}
# Whether group $1 (traces, cgroups, rt, xfs) is to run: all unless
# STEPS (WBSCOPE_VM_STEPS on the host) names some.
want() {
    [ -z "$STEPS" ] && return 0
    case " $STEPS " in *" $1 "*) return 0 ;; esac
    return 1
}

# Whether group $1 was named in STEPS: the scenario group runs only then
# (`cargo xtask vm-scenario`), never with all the others.
named() {
    case " $STEPS " in *" $1 "*) return 0 ;; esac
    return 1
}

# Whether wbscope's stderr ($1) has its "tracing;" line (builtins only).
tracing_started() {
    while IFS= read -r line; do
        case $line in *'tracing;'*) return 0 ;; esac
    done < "$1"
    return 1
}

# Waits until wbscope (pid $1, stderr in $2) has its probes live, or has
# exited. Every external command is an exec over 9p, slow under TCG, so
# the check is a shell builtin loop and the poll interval is coarse.
wait_tracing() {
    until tracing_started "$2"; do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.3
    done
}

# Saves /proc/PID/status of the wbscope that `timeout` (pid $1) runs as
# $2: its ids, capabilities, no_new_privs and seccomp mode once it has
# dropped its privileges (before its "tracing;" line). Builtins only.
save_status() {
    for d in /proc/[0-9]*; do
        read -r _ comm _ ppid _ < "$d/stat" 2>/dev/null || continue
        if [ "$ppid" = "$1" ] && [ "$comm" = "(wbscope)" ]; then
            while IFS= read -r line; do echo "$line"; done < "$d/status" > "$2"
            return 0
        fi
    done
    echo "no wbscope child of $1" > "$2"
}

# Starts `wbscope [ARGS] trace --json --events` in the background for run
# $1, its output in $OUT/$1.*; sets pid.
start_trace() {
    run=$1
    shift
    timeout "$TRACE_TIMEOUT" "$WBSCOPE" --log "$OUT/$run.log" "$@" trace --json --events \
        > "$OUT/$run.jsonl" 2> "$OUT/$run.err" &
    pid=$!
}

step probes
# Which scan functions this kernel can hook (function hooks need them
# traceable): the host expects a function hook for scan exactly when one
# of these is listed.
grep -Ew 'writeback_iter|write_cache_pages' \
    /sys/kernel/tracing/available_filter_functions > "$OUT/functions.txt" 2>&1
ls /sys/kernel/btf > "$OUT/btf.txt" 2>&1
# --log keeps wbscope's diagnostics (verifier refusals) beside the results.
timeout "$PROBES_TIMEOUT" "$WBSCOPE" --log "$OUT/probes.log" probes --json \
    > "$OUT/probes.json" 2> "$OUT/probes.err"
echo $? > "$OUT/probes.rc"

step mkfs
# The host attached an empty raw image as a virtio disk: an ext4 of our own.
mkfs.ext4 -q -F /dev/vda > "$OUT/mkfs.log" 2>&1 || {
    echo "WBVM fail mkfs.ext4 /dev/vda failed: $(tail -n 1 "$OUT/mkfs.log")"
    exit 1
}
mkdir -p "$MNT"
mount -t ext4 /dev/vda "$MNT" > "$OUT/mount.log" 2>&1 || {
    echo "WBVM fail mount /dev/vda failed: $(tail -n 1 "$OUT/mount.log")"
    exit 1
}

T=/sys/kernel/tracing

# One traced 64 MiB write + fsync per run: NAME and the --disable list.
# Beside wbscope, a tracefs kretprobe on ext4_writepages with the
# kernel's default maxactive counts what such a probe misses (its
# kprobe_profile line, saved with wbscope's own before wbscope stops).
trace_run() {
    name=$1
    disable=$2
    step "trace-$name"
    if [ -n "$disable" ]; then
        set -- --disable "$disable"
    else
        set --
    fi
    start_trace "$name" "$@"
    t0=$(date +%s%N)
    wait_tracing "$pid" "$OUT/$name.err"
    echo "$(( ($(date +%s%N) - t0) / 1000000 ))" > "$OUT/$name.startup-ms"
    save_status "$pid" "$OUT/$name.status"
    echo 'r:wbcheck/ewp ext4_writepages' >> "$T/kprobe_events" 2> "$OUT/$name.kretprobe-err"
    echo 1 > "$T/events/wbcheck/ewp/enable" 2>> "$OUT/$name.kretprobe-err"
    file="$MNT/data-$name"
    dd if=/dev/zero of="$file" bs=1M count=64 conv=fsync 2> "$OUT/$name.dd"
    # st_dev as a number (decoded into major:minor by the host) and ino.
    stat -c '%d %i' "$file" > "$OUT/$name.stat"
    cat "$T/kprobe_profile" > "$OUT/$name.kprobe-profile" 2>> "$OUT/$name.kretprobe-err"
    echo 0 > "$T/events/wbcheck/ewp/enable" 2>> "$OUT/$name.kretprobe-err"
    echo '-:wbcheck/ewp' >> "$T/kprobe_events" 2>> "$OUT/$name.kretprobe-err"
    # timeout forwards SIGTERM to wbscope, which ends with its summary line.
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    # Free the space for the next run.
    rm -f "$file"
}

# The fsync anatomy (`--enable durability`): 20 O_DSYNC writes (each an
# ext4_sync_file of its own) and one dd whose conv=fsync is one fsync(2);
# the host counts them as sync lines of their kinds (vm/durability.rs).
durability_run() {
    name=durability
    step "$name"
    # What earlier steps left dirty goes first: the window below is the
    # dd's flushes only.
    sync
    start_trace "$name" --enable durability,device_io
    wait_tracing "$pid" "$OUT/$name.err"
    # vda's own flush counter around the writes (field 16 of
    # Documentation/block/stat.rst, Linux 5.5+) and its MAJ:MIN.
    cat /sys/block/vda/dev > "$OUT/$name.dev"
    cat /sys/block/vda/stat > "$OUT/$name.stat0"
    dd if=/dev/zero of="$MNT/dsync" bs=4k count=20 oflag=dsync 2> "$OUT/$name.dd"
    dd if=/dev/zero of="$MNT/fsynced" bs=1M count=4 conv=fsync 2>> "$OUT/$name.dd"
    cat /sys/block/vda/stat > "$OUT/$name.stat1"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    rm -f "$MNT/dsync" "$MNT/fsynced"
}

if want traces; then
    trace_run default ""
    trace_run no-fentry fentry
    trace_run tracepoints-only fentry,kprobe,tp_btf
    durability_run
fi

# cgroup v2 with the memory and io controllers (cgroup writeback): the
# guest's own hierarchy, which the host's cgroup v1 memory cannot give.
CG=/tmp/cg
step cgroups
mkdir -p "$CG"
cgroups_ok=
if mount -t cgroup2 none "$CG" > "$OUT/cgroup.log" 2>&1 &&
    echo '+memory +io' > "$CG/cgroup.subtree_control" 2>> "$OUT/cgroup.log" &&
    mkdir "$CG/a" "$CG/b" "$CG/small" 2>> "$OUT/cgroup.log"; then
    cgroups_ok=1
    cat "$CG/cgroup.subtree_control" >> "$OUT/cgroup.log"
fi

# Runs "$@" in cgroup $1: the child shell joins it, then execs.
in_cgroup() {
    cg=$1
    shift
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG/$cg" "$@"
}

# Whose writes: two writers at once, one per cgroup, 16 MiB
# each with fsync, traced; the host checks owner_cgroup_id and the pages
# charged to each cgroup against the cgroup directory's inode number (what
# bpf_get_current_cgroup_id returns on cgroup v2).
cgroup_owners() {
    name=cg-owners
    step "trace-$name"
    start_trace "$name"
    wait_tracing "$pid" "$OUT/$name.err"
    # Two fsyncs inside ext4_writepages at once: a default-maxactive
    # kretprobe beside wbscope's (trace_run says more).
    echo 'r:wbcheck/ewp ext4_writepages' >> "$T/kprobe_events" 2> "$OUT/$name.kretprobe-err"
    echo 1 > "$T/events/wbcheck/ewp/enable" 2>> "$OUT/$name.kretprobe-err"
    in_cgroup a dd if=/dev/zero of="$MNT/cg-a" bs=1M count=16 conv=fsync 2> "$OUT/cg-a.dd" &
    wa=$!
    in_cgroup b dd if=/dev/zero of="$MNT/cg-b" bs=1M count=16 conv=fsync 2> "$OUT/cg-b.dd" &
    wb=$!
    wait "$wa" "$wb"
    cat "$T/kprobe_profile" > "$OUT/$name.kprobe-profile" 2>> "$OUT/$name.kretprobe-err"
    echo 0 > "$T/events/wbcheck/ewp/enable" 2>> "$OUT/$name.kretprobe-err"
    echo '-:wbcheck/ewp' >> "$T/kprobe_events" 2>> "$OUT/$name.kretprobe-err"
    for cg in a b; do
        stat -c '%d %i' "$MNT/cg-$cg" > "$OUT/cg-$cg.stat"
        stat -c '%i' "$CG/$cg" > "$OUT/cg-$cg.id"
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    rm -f "$MNT/cg-a" "$MNT/cg-b"
}

# Dirty-throttled by a memcg: a buffered writer in a cgroup of
# 64 MiB (its own dirty domain, balance_dirty_pages()' mdtc) writes
# 192 MiB while doctor watches. io.max holds the cgroup's writeback to
# 8 MiB/s: without it 6.1's writer never reached its memcg's free-run
# ceiling (reclaim in the cgroup kept pace), so nothing throttled. The
# watch is also recorded and replayed to JSON lines: the host reports the
# pauses it saw whatever doctor concluded. The 64 MiB is memory.high, not
# memory.max: the memcg's dirty domain is the lower of the two
# (mem_cgroup_wb_stats(), mm/memcontrol.c), so the throttling is the same,
# but a cgroup full of pages under throttled writeback is slowed at
# memory.high where memory.max OOM-killed dd (6.12 and 6.12-rt in stop
# 35's CI, 1.4 s in). memory.max stays as a backstop well above.
cgroup_doctor() {
    name=cg-doctor
    step "$name"
    echo 64M > "$CG/small/memory.high"
    echo 512M > "$CG/small/memory.max"
    read -r majmin < /sys/block/vda/dev
    echo "$majmin wbps=8388608" > "$CG/small/io.max" 2>> "$OUT/cgroup.log"
    cat "$CG/small/io.max" > "$OUT/$name.io-max" 2>&1
    timeout "$TRACE_TIMEOUT" "$WBSCOPE" --log "$OUT/$name.log" doctor --duration 25 --json \
        --record /tmp/cg-doctor.rec > "$OUT/$name.json" 2> "$OUT/$name.err" &
    pid=$!
    wait_tracing "$pid" "$OUT/$name.err"
    t0=$(date +%s%N)
    in_cgroup small dd if=/dev/zero of="$MNT/cg-small" bs=1M count=192 2> "$OUT/$name.dd"
    echo "$(( ($(date +%s%N) - t0) / 1000000 ))" > "$OUT/$name.dd-ms"
    cat "$CG/small/memory.stat" > "$OUT/$name.memory-stat" 2>&1
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    "$WBSCOPE" replay --json /tmp/cg-doctor.rec > "$OUT/$name.jsonl" 2> "$OUT/$name.replay-err"
    rm -f /tmp/cg-doctor.rec
    echo "$majmin wbps=max" > "$CG/small/io.max"
    rm -f "$MNT/cg-small"
}

if ! want cgroups; then
    :
elif [ -n "$cgroups_ok" ]; then
    cgroup_owners
    cgroup_doctor
else
    echo "WBVM step cgroups-unavailable"
fi

# PREEMPT_RT: on an RT kernel a tracing program runs with
# migration disabled, not preemption, so another task's programs can run
# on the same CPU while one is halfway. Writers and flushers all on CPU 0
# (the guest's only vCPU; taskset says so again) for long enough that
# ticks and the block interrupt thread land inside programs: four O_DSYNC
# writers (64 writepages calls each) and two buffered writers whose pages
# the flushers write back every 0.2 s, traced by wbscope while ftrace's
# own ext4_writepages_result event counts every call and its pages
# independently (its ring buffer, not BPF). The host compares every call
# and page (rt.rs).
rt_interleave() {
    name=rt-interleave
    step "$name"
    read -r centisecs < /proc/sys/vm/dirty_writeback_centisecs
    read -r expire < /proc/sys/vm/dirty_expire_centisecs
    echo 20 > /proc/sys/vm/dirty_writeback_centisecs
    echo 20 > /proc/sys/vm/dirty_expire_centisecs
    echo 8192 > "$T/buffer_size_kb"
    echo > "$T/trace"
    echo 1 > "$T/events/ext4/ext4_writepages_result/enable" 2> "$OUT/$name.ftrace-err"
    start_trace "$name"
    wait_tracing "$pid" "$OUT/$name.err"
    t0=$(date +%s%N)
    pids=
    for i in 1 2 3 4; do
        taskset -c 0 /usr/bin/dd if=/dev/zero of="$MNT/rt-dsync-$i" bs=256k count=64 oflag=dsync \
            2> "$OUT/$name.dd-$i" &
        pids="$pids $!"
    done
    for i in 1 2; do
        taskset -c 0 /usr/bin/dd if=/dev/zero of="$MNT/rt-buffered-$i" bs=1M count=24 \
            2> "$OUT/$name.dd-b$i" &
        pids="$pids $!"
    done
    # shellcheck disable=SC2086
    wait $pids
    # Whatever the flushers have not written yet, written now (inside
    # the trace).
    sync
    echo "$(( ($(date +%s%N) - t0) / 1000000 ))" > "$OUT/$name.ms"
    : > "$OUT/$name.files"
    for f in "$MNT"/rt-*; do
        echo "$(basename "$f") $(stat -c '%d %i %s' "$f")" >> "$OUT/$name.files"
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    echo 0 > "$T/events/ext4/ext4_writepages_result/enable"
    cat "$T/trace" > "$OUT/$name.ftrace"
    cat "$T/per_cpu/cpu0/stats" > "$OUT/$name.ftrace-stats" 2>&1
    echo > "$T/trace"
    echo "$centisecs" > /proc/sys/vm/dirty_writeback_centisecs
    echo "$expire" > /proc/sys/vm/dirty_expire_centisecs
    rm -f "$MNT"/rt-*
}

# PREEMPT_RT: /sys/kernel/realtime at 1 where the kernel has the file
# (Debian's 6.12-rt), else PREEMPT_RT in the version string (7.3-rt has no
# such file), as wbscope's own plan tells (tracer/attach.rs, preempt_rt).
is_rt() {
    rt=
    [ -r /sys/kernel/realtime ] && read -r rt < /sys/kernel/realtime
    [ "$rt" = 1 ] && return 0
    read -r version < /proc/sys/kernel/version
    case $version in *PREEMPT_RT*) return 0 ;; esac
    return 1
}
{
    echo "realtime: $(cat /sys/kernel/realtime 2>&1)"
    echo "version: $(cat /proc/sys/kernel/version)"
} > "$OUT/rt-kernel"

if want rt && is_rt; then
    rt_interleave
fi

# The scenario group: each of $SCENARIOS, $REPEAT runs per variant, on
# scratch filesystems whose images are in /var/tmp (the test disk's
# ext4, bound there: the root image is read-only); its JSON document and
# exit status for the host's table (dev/vm/src/scenario.rs).
if named scenario; then
    if mount --bind "$MNT" /var/tmp > "$OUT/scenario-mount.log" 2>&1; then
        # The bdis' own view beside it (BdiWriteBandwidth, the dirty
        # thresholds per device), twice a second, for the differences the
        # table finds (docs/diff.md): debugfs, where the kernel has it.
        mount -t debugfs debugfs /sys/kernel/debug 2> /dev/null
        for s in $SCENARIOS; do
            step "scenario-$s"
            (
                while :; do
                    for f in /sys/kernel/debug/bdi/*/stats; do
                        [ -r "$f" ] || continue
                        echo "== $(date +%s.%N) $f"
                        cat "$f"
                    done
                    sleep 0.5
                done
            ) > "$OUT/scenario-$s.bdi" 2>&1 &
            sampler=$!
            "$WBSCOPE" --log "$OUT/scenario-$s.log" scenario "$s" --scale tiny \
                --repeat "$REPEAT" --json > "$OUT/scenario-$s.json" 2> "$OUT/scenario-$s.err"
            echo $? > "$OUT/scenario-$s.rc"
            kill "$sampler" 2> /dev/null
            wait "$sampler" 2> /dev/null
        done
        umount /var/tmp
    else
        echo "WBVM fail cannot bind the test disk on /var/tmp: $(tail -n 1 "$OUT/scenario-mount.log")"
    fi
fi

umount "$MNT"

# The do_writepages hooks on xfs: 64 MiB written with O_DSYNC in 8 MiB
# writes (8 calls of 2048 pages, each the fsync of its range), traced by
# wbscope while a tracefs kprobe event on do_writepages counts the calls
# independently: map = the address_space, nr = wbc->nr_to_write at entry
# (the first member of struct writeback_control on both kernels).
xfs_run() {
    name=$1
    disable=$2
    step "trace-$name"
    if [ -n "$disable" ]; then
        set -- --disable "$disable"
    else
        set --
    fi
    start_trace "$name" "$@"
    wait_tracing "$pid" "$OUT/$name.err"
    echo 'p:wbcheck/dwp do_writepages map=%di:x64 nr=+0(%si):s64' >> "$T/kprobe_events" \
        2> "$OUT/$name.kprobe-err"
    echo > "$T/trace"
    echo 1 > "$T/events/wbcheck/dwp/enable" 2>> "$OUT/$name.kprobe-err"
    file="$MNT/data-$name"
    dd if=/dev/zero of="$file" bs=8M count=8 oflag=dsync 2> "$OUT/$name.dd"
    stat -c '%d %i' "$file" > "$OUT/$name.stat"
    # wbscope closes a derived call that nothing else ends once idle for
    # a second: wait for that before stopping.
    sleep 2
    echo 0 > "$T/events/wbcheck/dwp/enable"
    cat "$T/trace" > "$OUT/$name.kprobe"
    # wbscope's kretprobe hits and misses (maxactive), as trace_run saves.
    cat "$T/kprobe_profile" > "$OUT/$name.kprobe-profile" 2>> "$OUT/$name.kprobe-err"
    echo '-:wbcheck/dwp' >> "$T/kprobe_events"
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    rm -f "$file"
}

step mkfs-xfs
if ! want xfs; then
    :
elif mkfs.xfs -q -f /dev/vda > "$OUT/mkfs-xfs.log" 2>&1 &&
    mount -t xfs /dev/vda "$MNT" > "$OUT/mount-xfs.log" 2>&1; then
    xfs_run xfs-fentry ""
    xfs_run xfs-kprobe fentry
    xfs_run xfs-derived fentry,kprobe
    umount "$MNT"
else
    echo "WBVM step xfs-unavailable"
fi
sync
exit 0
