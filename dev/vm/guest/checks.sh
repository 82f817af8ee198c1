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

# The bighost group (`cargo xtask vm-test --big-host`, judged by
# dev/vm/src/bighost.rs), alone in guests of one online CPU and 64 or 128
# possible, 2 GiB of memory: `wbscope probes` (the maps' memory for the
# possible CPUs, stated and measured), then one `wbscope trace --events`
# over an idle stretch and a busy load, its CPU time and memory sampled
# every second. The load, sized by the host (/vm.env): BH_WRITERS memory
# cgroups, each with one writer of BH_FILES files of one page, all dirty
# at once; and BH_THROTTLED cgroups whose memory.high (BH_HIGH_MIB) and
# io.max (BH_WBPS bytes/s of writes) make balance_dirty_pages() pause
# their writers of BH_THROTTLED_MIB each, counted independently by a
# tracefs histogram; then sync.
BH=/tmp/bighost

# Every second while wbscope (pid $1) runs: the phase, the uptime, its
# utime and stime (clock ticks: USER_HZ, 100 on x86), its VmRSS and
# VmHWM (kB), the guest's Dirty and Writeback (kB, /proc/meminfo: how
# far the sync is), and its time on a CPU in ns (/proc/PID/schedstat's
# first field, `-` without CONFIG_SCHED_INFO): the ticks are a sample of
# which task ran at each tick, a few counts over an idle stretch, the
# scheduler's sum is exact. Builtins but `sleep`.
bighost_sample() {
    phase=start
    while [ -r "/proc/$1/stat" ]; do
        # Read while being rewritten, the file can be empty: the phase
        # stays.
        read -r now < "$BH/phase" && [ -n "$now" ] && phase=$now
        read -r up _ < /proc/uptime
        # Fields 14 and 15 of proc(5); comm is "(wbscope)", no spaces.
        read -r _ _ _ _ _ _ _ _ _ _ _ _ _ utime stime _ < "/proc/$1/stat" || break
        rss=- hwm=-
        while read -r key value _; do
            case $key in
                VmRSS:) rss=$value ;;
                VmHWM:) hwm=$value ;;
            esac
        done < "/proc/$1/status"
        dirty=- writeback=-
        while read -r key value _; do
            case $key in
                Dirty:) dirty=$value ;;
                Writeback:) writeback=$value ;;
            esac
        done < /proc/meminfo
        run=-
        read -r run _ < "/proc/$1/schedstat" || run=-
        echo "$phase $up $utime $stime $rss $hwm $dirty $writeback $run"
        sleep 1
    done 2> /dev/null
}

# The phase the samples are of, and when it began (ns since the epoch).
bighost_phase() {
    echo "$1" > "$BH/phase"
    echo "$1 $(date +%s%N)" >> "$OUT/bighost-phases"
}

# Dirty and under-writeback memory now, labelled $1, and what else
# holds the guest's memory: the page cache, the kernel's per-CPU
# allocations (each memory cgroup's statistics are per possible CPU) and
# slabs (inodes, dentries).
bighost_meminfo() {
    while read -r key value _; do
        case $key in
            Dirty: | Writeback: | MemFree: | Cached: | Percpu: | Slab:)
                echo "$1 $key $value"
                ;;
        esac
    done < /proc/meminfo >> "$OUT/bighost-meminfo"
}

# A step line for the host's time limits without step()'s save.
bighost_step() {
    echo "WBVM step $*"
}

# Whether process $1 is alive and not yet reaped (a zombie's /proc entry
# stays until its parent waits). Builtins only.
running() {
    read -r _ _ state _ < "/proc/$1/stat" 2>/dev/null && [ "$state" != Z ]
}

# One writer, run by busybox sh in its cgroup ($1): BH_FILES files of
# 4096 bytes in $2, each one builtin printf (no process per file: under
# TCG starting a program costs more than writing a page).
BH_WRITER='echo $$ > "$1/cgroup.procs" || exit 1
i=0
while [ "$i" -lt "$BH_FILES" ]; do
    printf %s "$BH_PAGE" > "$2/f$i" || exit 1
    i=$((i + 1))
done'

bighost() {
    mkdir -p "$BH"
    step bighost-probes
    cat /sys/devices/system/cpu/possible > "$OUT/bighost-possible"
    cat /sys/devices/system/cpu/online > "$OUT/bighost-online"
    # `uname -v`: the preemption model, which decides whether a tracing
    # program can be preempted halfway (and its next run skipped).
    cat /proc/sys/kernel/version > "$OUT/bighost-kernel-version"
    timeout "$PROBES_TIMEOUT" "$WBSCOPE" --log "$OUT/bighost-probes.log" probes --json \
        > "$OUT/bighost-probes.json" 2> "$OUT/bighost-probes.err"
    echo $? > "$OUT/bighost-probes.rc"

    step bighost-setup
    t0=$(date +%s%N)
    mkfs.ext4 -q -F /dev/vda > "$OUT/mkfs.log" 2>&1 || {
        echo "WBVM fail mkfs.ext4 /dev/vda failed: $(tail -n 1 "$OUT/mkfs.log")"
        return 1
    }
    mkdir -p "$MNT"
    mount -t ext4 /dev/vda "$MNT" > "$OUT/mount.log" 2>&1 || {
        echo "WBVM fail mount /dev/vda failed: $(tail -n 1 "$OUT/mount.log")"
        return 1
    }
    read -r majmin < /sys/block/vda/dev
    echo "$majmin" > "$OUT/bighost-dev"
    # Every page stays dirty until the sync: the dirty limits above all
    # the load (BH_WRITERS x BH_FILES pages and what the throttled ones
    # keep dirty), and nothing old enough for the periodic writeback.
    # Free-run below (limit + background) / 2, 650 MiB
    # (dirty_freerun_ceiling(), mm/page-writeback.c): the unthrottled
    # writers never enter the pause loop. dirty_bytes first: a background
    # limit at or over the limit is halved. No periodic wake-up of the
    # flushers either: each memory cgroup has a writeback of its own,
    # whose share of the background limit is its share of the recent
    # writeouts (__wb_calc_thresh()), none for a new one, so a wake-up
    # finds any of its dirty pages over it (wb_over_bg_thresh()) and
    # writes them; a throttled writer wakes its own
    # (balance_dirty_pages()).
    read -r ratio < /proc/sys/vm/dirty_ratio
    read -r bg_ratio < /proc/sys/vm/dirty_background_ratio
    read -r expire < /proc/sys/vm/dirty_expire_centisecs
    read -r interval < /proc/sys/vm/dirty_writeback_centisecs
    echo $((700 << 20)) > /proc/sys/vm/dirty_bytes
    echo $((600 << 20)) > /proc/sys/vm/dirty_background_bytes
    echo 360000 > /proc/sys/vm/dirty_expire_centisecs
    echo 360000 > /proc/sys/vm/dirty_writeback_centisecs
    # cgroup v2 with memory and io: cgroup writeback, a dirty domain and
    # a writeback per memory cgroup.
    CG=/tmp/cg
    mkdir -p "$CG"
    if ! { mount -t cgroup2 none "$CG" && echo '+memory +io' > "$CG/cgroup.subtree_control"; } \
        > "$OUT/bighost-cgroup.log" 2>&1; then
        echo "WBVM fail no cgroup v2 with memory and io: $(tail -n 1 "$OUT/bighost-cgroup.log")"
        return 1
    fi
    # One mkdir for every cgroup and directory (a program start each
    # would be seconds under TCG).
    set --
    n=1
    while [ "$n" -le "$BH_WRITERS" ]; do
        set -- "$@" "$CG/w$n" "$MNT/w$n"
        n=$((n + 1))
    done
    n=1
    while [ "$n" -le "$BH_THROTTLED" ]; do
        set -- "$@" "$CG/t$n" "$MNT/t$n"
        n=$((n + 1))
    done
    mkdir "$@" 2>> "$OUT/bighost-cgroup.log" || {
        echo "WBVM fail cannot make the cgroups: $(tail -n 1 "$OUT/bighost-cgroup.log")"
        return 1
    }
    n=1
    while [ "$n" -le "$BH_THROTTLED" ]; do
        echo "${BH_HIGH_MIB}M" > "$CG/t$n/memory.high"
        echo "$majmin wbps=$BH_WBPS" > "$CG/t$n/io.max"
        n=$((n + 1))
    done 2>> "$OUT/bighost-cgroup.log"
    cat "$CG/t1/memory.high" "$CG/t1/io.max" >> "$OUT/bighost-cgroup.log" 2>&1
    BH_PAGE=x
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do
        BH_PAGE=$BH_PAGE$BH_PAGE
    done
    export BH_PAGE
    echo "setup $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/bighost-times"

    # From here to the end of the trace the steps save nothing: step()'s
    # save ends with a sync, which would write the load's pages early.
    bighost_step bighost-idle
    bighost_phase start
    # No --max-event-rate in effect: every call line is wanted.
    timeout "$TRACE_TIMEOUT" "$WBSCOPE" --log "$OUT/bighost-trace.log" trace --json --events \
        --interval 1 --max-event-rate 1000000000 > "$BH/trace.jsonl" 2> "$OUT/bighost-trace.err" &
    pid=$!
    t0=$(date +%s%N)
    wait_tracing "$pid" "$OUT/bighost-trace.err"
    echo "startup $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/bighost-times"
    wb=
    for d in /proc/[0-9]*; do
        read -r _ comm _ ppid _ < "$d/stat" 2>/dev/null || continue
        if [ "$ppid" = "$pid" ] && [ "$comm" = "(wbscope)" ]; then
            wb=${d#/proc/}
        fi
    done
    # The independent count: every balance_dirty_pages event by pid and
    # pause (its `pause` is <= 0 when the task was not put to sleep:
    # balance_dirty_pages(), mm/page-writeback.c), in a histogram; where
    # the kernel has no histograms (Debian's 5.10: no
    # CONFIG_HIST_TRIGGERS), every event in a trace instance's buffer of
    # its own, 16 MiB (an event is about 250 bytes as text, a few
    # thousand of them).
    H=/sys/kernel/tracing/events/writeback/balance_dirty_pages
    I=/sys/kernel/tracing/instances/bighost
    hist=1
    echo 'hist:keys=common_pid,pause:vals=hitcount:size=8192' > "$H/trigger" \
        2> "$OUT/bighost-hist.err" || hist=
    if [ -z "$hist" ]; then
        { mkdir "$I" && echo 16384 > "$I/buffer_size_kb" &&
            echo 1 > "$I/events/writeback/balance_dirty_pages/enable"; } \
            2>> "$OUT/bighost-hist.err"
    fi
    bighost_phase idle
    bighost_sample "$wb" > "$OUT/bighost-samples" &
    sampler=$!
    sleep "$BH_IDLE"

    # The throttled writers first: their memcgs' reclaim (memory.high)
    # wakes every flusher to write everything when it finds only dirty
    # pages (wakeup_flusher_threads(WB_REASON_VMSCAN) in
    # shrink_inactive_list(), mm/vmscan.c), which would write the
    # one-page files before the sync.
    bighost_step bighost-throttled
    bighost_phase throttled
    bighost_meminfo before
    t0=$(date +%s%N)
    pids=
    n=1
    while [ "$n" -le "$BH_THROTTLED" ]; do
        sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG/t$n" \
            dd if=/dev/zero of="$MNT/t$n/big" bs=1M count="$BH_THROTTLED_MIB" \
            2> "$BH/dd-$n" &
        pids="$pids $!"
        n=$((n + 1))
    done
    # shellcheck disable=SC2086
    wait $pids
    echo "throttled $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/bighost-times"
    bighost_meminfo throttled
    cat "$CG/t1/memory.stat" > "$OUT/bighost-t1-memory-stat" 2>&1

    bighost_phase writers
    t0=$(date +%s%N)
    # Waves of 100 writers: a step each for the host's time limit.
    n=1
    while [ "$n" -le "$BH_WRITERS" ]; do
        bighost_step "bighost-writers-$n"
        pids=
        last=$((n + 99))
        while [ "$n" -le "$BH_WRITERS" ] && [ "$n" -le "$last" ]; do
            busybox sh -c "$BH_WRITER" writer "$CG/w$n" "$MNT/w$n" 2>> "$OUT/bighost-writers.err" &
            pids="$pids $!"
            n=$((n + 1))
        done
        # shellcheck disable=SC2086
        wait $pids
    done
    echo "writers $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/bighost-times"
    bighost_meminfo writers

    bighost_step bighost-sync
    bighost_phase sync
    t0=$(date +%s%N)
    # In the background, with a limit of the guest's own (BH_SYNC_SECS,
    # under the host's, a step line every 5 minutes): a sync still
    # running then is said, and the trace is stopped and saved anyway.
    sync &
    syncer=$!
    read -r started _ < /proc/uptime
    started=${started%.*}
    waited=0
    next=300
    while running "$syncer" && [ "$waited" -lt "$BH_SYNC_SECS" ]; do
        sleep 1
        read -r now _ < /proc/uptime
        waited=$((${now%.*} - started))
        if [ "$waited" -ge "$next" ]; then
            bighost_step "bighost-sync-${next}s"
            next=$((next + 300))
        fi
    done
    unfinished=
    if running "$syncer"; then
        unfinished=1
        echo "sync still running after $waited s" > "$OUT/bighost-sync-unfinished"
    else
        wait "$syncer"
    fi
    echo "sync $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/bighost-times"
    bighost_meminfo synced
    bighost_phase drain
    sleep 2
    if [ -n "$hist" ]; then
        cat "$H/hist" > "$OUT/bighost-hist" 2>> "$OUT/bighost-hist.err"
        echo '!hist:keys=common_pid,pause:vals=hitcount:size=8192' > "$H/trigger"
    else
        echo 0 > "$I/events/writeback/balance_dirty_pages/enable"
        gzip -c "$I/trace" > "$OUT/bighost-bdp.trace.gz" 2>> "$OUT/bighost-hist.err"
        # Events the buffer lost: overrun and dropped events per CPU.
        cat "$I"/per_cpu/cpu*/stats > "$OUT/bighost-bdp.stats" 2>> "$OUT/bighost-hist.err"
    fi

    bighost_step bighost-stop
    bighost_phase stop
    t0=$(date +%s%N)
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/bighost-trace.rc"
    echo "stop $(( ($(date +%s%N) - t0) / 1000000 ))" >> "$OUT/bighost-times"
    wait "$sampler"

    # step()'s save ends with a sync, which waits for an unfinished one:
    # this one flushes the results' device alone (busybox sync FILE:
    # fsync(2) of /dev/vdc; init.sh's last save does the same).
    bighost_step bighost-save
    # Every file's inode number, directory by directory.
    ls -iR "$MNT" > "$OUT/bighost-files" 2>&1
    gzip -c "$BH/trace.jsonl" > "$OUT/bighost-trace.jsonl.gz"
    # The kernel's own word on the run (an OOM kill, a hung task).
    dmesg > "$OUT/bighost-dmesg" 2>&1
    rm -f "$BH/trace.jsonl"
    echo "$ratio" > /proc/sys/vm/dirty_ratio
    echo "$bg_ratio" > /proc/sys/vm/dirty_background_ratio
    echo "$expire" > /proc/sys/vm/dirty_expire_centisecs
    echo "$interval" > /proc/sys/vm/dirty_writeback_centisecs
    tar -cf /dev/vdc -C "$OUT" . 2>/dev/null
    busybox sync /dev/vdc
    [ -n "$unfinished" ] || umount "$MNT"
    return 0
}

if named bighost; then
    bighost
    exit $?
fi

step probes
if ! named scenario; then
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
fi

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
    start_trace "$name" --enable durability,device_io,writes
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

# An fsync storm in small, under the default hooks: STORM_FILES files of
# one page, each written and fsync'ed by its own dd (one writepages call
# each); each file's st_dev and inode for the host, which counts the
# programs' runs per call and each file's page (dev/vm/src/storm.rs).
STORM_FILES=20
storm_run() {
    name=storm
    step "trace-$name"
    sync
    start_trace "$name"
    wait_tracing "$pid" "$OUT/$name.err"
    : > "$OUT/$name.stat"
    i=0
    while [ "$i" -lt "$STORM_FILES" ]; do
        dd if=/dev/zero of="$MNT/storm-$i" bs=4k count=1 conv=fsync 2>> "$OUT/$name.dd"
        stat -c '%d %i' "$MNT/storm-$i" >> "$OUT/$name.stat"
        i=$((i + 1))
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    echo $? > "$OUT/$name.rc"
    rm -f "$MNT"/storm-*
}

if want traces; then
    trace_run default ""
    trace_run kprobes fentry,tp_btf,raw_tp
    trace_run tracepoints-only fentry,kprobe,tp_btf,raw_tp
    durability_run
    storm_run
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
# 128 MiB while doctor watches (about 10 s of pauses under TCG), and the
# watch is stopped with SIGINT two seconds after the writer ends (its
# report and exit status are a finished watch's; --duration 25 bounds it). io.max holds the cgroup's writeback to
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
    stat -c '%i' "$CG/small" > "$OUT/cg-small.id"
    read -r majmin < /sys/block/vda/dev
    echo "$majmin wbps=8388608" > "$CG/small/io.max" 2>> "$OUT/cgroup.log"
    cat "$CG/small/io.max" > "$OUT/$name.io-max" 2>&1
    timeout "$TRACE_TIMEOUT" "$WBSCOPE" --log "$OUT/$name.log" doctor --duration 25 --json \
        --record /tmp/cg-doctor.rec > "$OUT/$name.json" 2> "$OUT/$name.err" &
    pid=$!
    wait_tracing "$pid" "$OUT/$name.err"
    t0=$(date +%s%N)
    in_cgroup small dd if=/dev/zero of="$MNT/cg-small" bs=1M count=128 2> "$OUT/$name.dd"
    echo "$(( ($(date +%s%N) - t0) / 1000000 ))" > "$OUT/$name.dd-ms"
    cat "$CG/small/memory.stat" > "$OUT/$name.memory-stat" 2>&1
    sleep 2
    kill -INT "$pid" 2>/dev/null
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

# The write spans' journal wait, caused (only when named: `WBSCOPE_VM_STEPS=
# journal`, judged by dev/vm/src/durability.rs `judge_journal`): on an ext4
# with the smallest journal (1,024 blocks: 4 MiB), a dd syncing every 4 KiB commits
# a transaction per write while another dd appends 512 bytes a write (a
# journal handle for each new size): the appender's handles wait for
# room in the journal and for locked transactions' commits, inside its
# write calls.
if named journal; then
    step writes-journal
    name=writes-journal
    if mkfs.ext4 -q -F -J size=4 /dev/vda > "$OUT/$name.mkfs" 2>&1 &&
        mount -t ext4 /dev/vda "$MNT" >> "$OUT/$name.mkfs" 2>&1; then
        sync
        timeout "$TRACE_TIMEOUT" "$WBSCOPE" --log "$OUT/$name.log" --enable writes trace \
            --json --slow-write 1000 > "$OUT/$name.jsonl" 2> "$OUT/$name.err" &
        pid=$!
        wait_tracing "$pid" "$OUT/$name.err"
        dd if=/dev/zero of="$MNT/synced" bs=4k count=1500 oflag=dsync 2> "$OUT/$name.dd" &
        synced=$!
        dd if=/dev/zero of="$MNT/appended" bs=512 count=6000 2>> "$OUT/$name.dd"
        wait "$synced"
        kill -TERM "$pid" 2>/dev/null
        wait "$pid"
        echo $? > "$OUT/$name.rc"
        umount "$MNT"
    else
        echo "WBVM step writes-journal-unavailable"
    fi
fi
sync
exit 0
