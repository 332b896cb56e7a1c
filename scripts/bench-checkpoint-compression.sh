#!/bin/bash
# Measures runsc alone: checkpoint and restore of one sandbox with the
# image uncompressed (runsc's default, what Warren uses), compressed
# (--compression=flate-best-speed), and with --exclude-committed-zero-pages.
# Prints one line per checkpoint: its time, the image's size, the restore's
# time and what the restored guest still reads from its memory (/tmp).
#
#   scripts/bench-checkpoint-compression.sh [N]        (root; bin/runsc, var/base-rootfs.tar)
#   WORK='echo x > /tmp/r; sleep 1e6' scripts/bench-checkpoint-compression.sh 8   # an idle guest
#
# The default workload fills 128 MB of the guest's memory-backed /tmp: 64 MB
# of random bytes (incompressible) and 64 MB of repeated text.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-6}
work=${WORK:-'head -c 64M /dev/urandom > /tmp/r; yes warren | head -c 64M > /tmp/z; sleep 1e6'}
dir=$(mktemp -d /tmp/warren-ckpt-bench.XXXXXX)
rs=("$repo/bin/runsc" --root "$dir/root" --platform systrap --overlay2=none --network=none)
cleanup() {
	"${rs[@]}" list -q 2>/dev/null | xargs -r -n1 "${rs[@]}" delete -force >/dev/null 2>&1
	umount "$dir/root/null-netns" 2>/dev/null || true # runsc's own, bind-mounted
	rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/root" "$dir/bundle/rootfs"
tar -C "$dir/bundle/rootfs" -xf "$repo/var/base-rootfs.tar"
cat > "$dir/bundle/config.json" <<JSON
{"ociVersion":"1.0.0","process":{"user":{"uid":0,"gid":0},"args":["/usr/bin/bash","-c","$work"],
"env":["PATH=/usr/bin:/bin"],"cwd":"/"},"root":{"path":"rootfs","readonly":false},"hostname":"c",
"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/tmp","type":"tmpfs","source":"tmpfs"}],
"linux":{"namespaces":[{"type":"pid"},{"type":"ipc"},{"type":"uts"},{"type":"mount"}]}}
JSON
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
for i in $(seq 1 "$n"); do
	for mode in none flate-best-speed zero-pages; do
		id=ckpt$i$RANDOM img=$dir/img
		rm -rf "$img" && mkdir -p "$img"
		"${rs[@]}" run -detach -bundle "$dir/bundle" "$id" >/dev/null 2>&1 </dev/null
		sleep 3 # the workload fills the memory
		flags=(--compression=none)
		[ "$mode" = flate-best-speed ] && flags=(--compression=flate-best-speed)
		[ "$mode" = zero-pages ] && flags=(--compression=none --exclude-committed-zero-pages)
		t=$(date +%s%N)
		"${rs[@]}" checkpoint --image-path "$img" "${flags[@]}" "$id"
		c=$(ms "$t")
		size=$(du -sm "$img" | cut -f1)
		"${rs[@]}" delete -force "$id" >/dev/null 2>&1 || true
		t=$(date +%s%N)
		"${rs[@]}" restore -detach --image-path "$img" -bundle "$dir/bundle" "$id" >/dev/null 2>&1 </dev/null
		r=$(ms "$t")
		kept=$("${rs[@]}" exec "$id" /usr/bin/bash -c 'cat /tmp/r | wc -c')
		echo "$mode checkpoint_ms=$c image_mb=$size restore_ms=$r guest_tmp_r_bytes=$kept load=$(cut -d' ' -f1 /proc/loadavg)"
		"${rs[@]}" delete -force "$id" >/dev/null 2>&1 || true
	done
done
