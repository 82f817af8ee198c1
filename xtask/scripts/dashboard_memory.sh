#!/bin/bash
# 10-minute dashboard memory run: wbscope (release) in tmux while a writer
# touches many inodes on its own loop filesystem; peak RSS from VmHWM.
set -u
# Run from the repository root, as root, after `cargo xtask build --release`.
mkdir -p target/bench
D=$(mktemp -d /var/tmp/wbmem.XXXX)
truncate -s 4G $D/img; L=$(losetup -f --show $D/img); mkfs.ext4 -q $L; mkdir $D/mnt; mount $L $D/mnt
tmux new-session -d -s wbmem -x 160 -y 48 "${WBSCOPE:-target/release/wbscope} --log $D/dash.log"
sleep 5
PID=$(pgrep -f "release/wbscope --log $D/dash.log" | tail -1)
end=$((SECONDS+600)); runs=0; files=0
while [ $SECONDS -lt $end ]; do
  ${WBSCOPE:-target/release/wbscope} write --dir $D/mnt --small-files 2000 --file-sync fsync-each --seed $runs --json > /dev/null 2>>$D/w.err
  runs=$((runs+1)); files=$((files+2000))
  echo "$SECONDS s: $files files, RSS $(grep VmRSS /proc/$PID/status | awk '{print $2}') kB, HWM $(grep VmHWM /proc/$PID/status | awk '{print $2}') kB" >> $D/progress
done
HWM=$(grep VmHWM /proc/$PID/status | awk '{print $2}')
tmux capture-pane -p -t wbmem > $D/screen.txt
tmux send-keys -t wbmem q; sleep 3
echo "runs=$runs files=$files peak_rss_kb=$HWM" > ${OUT:-target/bench/dashboard-memory.txt}
cat $D/progress >> ${OUT:-target/bench/dashboard-memory.txt}
cp $D/screen.txt ${OUT:-target/bench/dashboard-memory.txt}.screen
umount $D/mnt; losetup -d $L; rm -rf $D
