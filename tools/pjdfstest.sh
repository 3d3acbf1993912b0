#!/usr/bin/env bash
# Runs pjdfstest (github.com/pjd/pjdfstest) against mlfsd output mounts and
# prints pass/fail counts per test directory, one table per backend.
#
#   tools/pjdfstest.sh PJDFSTEST_DIR [nas|oss]...     (default: nas oss)
#
# PJDFSTEST_DIR is a pjdfstest checkout; it is built there if its pjdfstest
# binary is missing (needs autoconf, automake, a C compiler). Run as root
# from the mlfsd checkout: pjdfstest switches users and mounts need root.
# Detailed prove output goes to $OUT (default /tmp/mlfsd-pjdfstest). Set
# DIRS="chmod unlink" to run only those test directories.
set -euo pipefail

pjd=$(cd "${1:?usage: $0 PJDFSTEST_DIR [nas|oss]...}" && pwd)
shift
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(nas oss)
out=${OUT:-/tmp/mlfsd-pjdfstest}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -x "$pjd/pjdfstest" ]; then
	(cd "$pjd" && autoreconf -ifs && ./configure && make pjdfstest) >"$out.build.log" 2>&1 ||
		{ echo "building pjdfstest failed: see $out.build.log" >&2; exit 1; }
fi

work=$(mktemp -d /tmp/mlfsd-pjd.XXXXXX)
pids=()
mnt=""
cleanup() {
	[ -n "$mnt" ] && { umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; }
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$here" && go build -o "$work/mlfsd" ./cmd/mlfsd)
mkdir -p "$out"

# waitready READY PID LOG: wait until the mlfsd process PID wrote its
# --ready-file READY (it serves then), failing if it exits first (LOG says why).
waitready() {
	while [ ! -s "$1" ]; do
		if ! kill -0 "$2" 2>/dev/null; then
			echo "mlfsd exited before it was ready:" >&2; cat "$3" >&2; return 1
		fi
		sleep 0.1 # polls the ready file: a shell has no other way to wait on it
	done
}

# readyfield READY NAME: a string field of a ready file.
readyfield() { grep -o "\"$2\":\"[^\"]*\"" "$1" | cut -d'"' -f4; }

for be in "${backends[@]}"; do
	mnt="$work/mnt-$be"
	mkdir -p "$mnt" "$work/staging-$be"
	extra=()
	case "$be" in
	nas)
		mkdir -p "$work/nas"
		uri="nas://$work/nas/"
		;;
	oss)
		mkdir -p "$work/oss/bkt"
		# The emulator checks signatures: give it the pair the mount signs with.
		OSS_ACCESS_KEY_ID=test OSS_ACCESS_KEY_SECRET=test \
			"$work/mlfsd" emulate oss --root "$work/oss" --listen 127.0.0.1:0 \
			--ready-file "$work/emu.ready" >"$work/emu.log" 2>&1 &
		pids+=($!)
		waitready "$work/emu.ready" "$!" "$work/emu.log" || exit 1
		ep="http://$(readyfield "$work/emu.ready" addr)"
		uri="oss://bkt/pjd/"
		extra=(--oss-endpoint "$ep")
		;;
	*) echo "unknown backend $be (want nas or oss)" >&2; exit 2 ;;
	esac
	OSS_ACCESS_KEY_ID=test OSS_ACCESS_KEY_SECRET=test \
		"$work/mlfsd" mount --staging-dir "$work/staging-$be" "${extra[@]}" --ready-file "$work/mount-$be.ready" \
		"$uri" "$mnt" >"$out/mount-$be.log" 2>&1 &
	mpid=$!
	pids+=($mpid)
	waitready "$work/mount-$be.ready" "$mpid" "$out/mount-$be.log" || { echo "mount of $uri failed" >&2; exit 1; }

	echo "## $be ($uri)"
	printf '%-12s %6s %6s %6s\n' dir tests failed passed
	for d in "$pjd"/tests/*/; do
		name=$(basename "$d")
		if [ -n "${DIRS:-}" ] && [[ " $DIRS " != *" $name "* ]]; then
			continue
		fi
		log="$out/$be-$name.log"
		if ! grep -q " $mnt fuse" /proc/mounts; then
			echo "the mount of $uri is gone (see $out/mount-$be.log)" >&2
			exit 1
		fi
		(cd "$mnt" && prove -r "$d") >"$log" 2>&1 || true
		# prove prints "Failed N/M subtests" per failing file and
		# "Files=F, Tests=T" at the end.
		total=$(grep -o 'Tests=[0-9]*' "$log" | tail -1 | cut -d= -f2 || true)
		failed=$(grep -o 'Failed [0-9]*/[0-9]* subtests' "$log" | awk '{split($2,a,"/"); s+=a[1]} END {print s+0}' || true)
		printf '%-12s %6s %6s %6s\n' "$name" "${total:-?}" "$failed" "$(( ${total:-0} - failed ))"
	done
	kill -TERM "$mpid"
	wait "$mpid" || echo "mlfsd mount exited $? (see $out/mount-$be.log)" >&2
	mnt=""
	# Leave every test directory empty for the next backend.
	rm -rf "$work/staging-$be"
done
