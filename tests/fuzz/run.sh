#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run libFuzzer harnesses (make fuzz): run.sh SECONDS TARGET...
# FUZZ_JOBS targets run at once (default: the CPUs, at most 2: CI's machine
# has 2 and nothing else runs while it fuzzes), each for SECONDS.
#
# Each target starts from its committed seeds (tests/fuzz/corpus/<target>/,
# read only) and what earlier runs found (build/fuzz/corpus/<target>/, where
# new inputs go), with its dictionary (tests/fuzz/<target>.dict) when there
# is one.  A crash, an input that runs longer than 10 s (a hang), a leak or
# more than 2 GiB of memory ends that target's run; its reproducer is left in
# build/fuzz/crashes/<target>/ and the run fails at the end (all targets
# still run).  One summary line per target: executions, coverage, corpus.
set -u
cd "$(dirname "$0")/../.."

secs=${1:?seconds per target}
shift
[ $# -gt 0 ] || { echo "usage: $0 SECONDS TARGET..." >&2; exit 2; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
jobs=${FUZZ_JOBS:-$(nproc)}
[ "$jobs" -gt 2 ] && jobs=2
[ "$jobs" -lt 1 ] && jobs=1

# One target: its summary line in build/fuzz/logs/<target>.summary, and
# build/fuzz/logs/<target>.failed when it failed.
fuzz_one() {
	local t=$1 bin work crashes log seeds before after rc execs rate last cov ft corp line
	local dict=()
	bin=build/fuzz/bin/fuzz-$t
	work=build/fuzz/corpus/$t
	crashes=build/fuzz/crashes/$t
	log=build/fuzz/logs/$t.log
	seeds=tests/fuzz/corpus/$t
	mkdir -p "$work" "$crashes" build/fuzz/logs
	rm -f "build/fuzz/logs/$t.failed"
	if [ ! -x "$bin" ]; then
		echo "fuzz: $bin is not built (make fuzz-build)"
		echo "$t    not built" >"build/fuzz/logs/$t.summary"; : >"build/fuzz/logs/$t.failed"; return
	fi
	if [ ! -d "$seeds" ]; then
		echo "fuzz: no seeds in $seeds"
		echo "$t    no seeds" >"build/fuzz/logs/$t.summary"; : >"build/fuzz/logs/$t.failed"; return
	fi
	[ -f tests/fuzz/$t.dict ] && dict=(-dict=tests/fuzz/$t.dict)
	before=$(ls "$crashes" | wc -l)
	echo "== fuzz $t: $secs s (log $log)"
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
		"${dict[@]}" -artifact_prefix="$crashes/" "$work" "$seeds" >"$log" 2>&1
	rc=$?
	after=$(ls "$crashes" | wc -l)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
	cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
	line=$(printf '%-7s %10s execs %7s/s  cov %5s  ft %6s  corpus %s' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
		"${ft:-?}" "${corp:-?}")
	if [ "$rc" -ne 0 ] || [ "$after" -ne "$before" ]; then
		: >"build/fuzz/logs/$t.failed"
		line="$line  FAILED (exit $rc)"
		echo "fuzz $t failed: the end of $log:"
		grep -E 'ERROR|SUMMARY|FUZZ_CHECK|runtime error|Test unit written' "$log" | head -20
		ls -t "$crashes" | head -5 | sed "s|^|  reproducer: $crashes/|"
	fi
	echo "$line" >"build/fuzz/logs/$t.summary"
}

running=0
for t in "$@"; do
	if [ "$running" -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	fuzz_one "$t" &
	running=$((running + 1))
done
wait
failed=()
summary=()
for t in "$@"; do
	summary+=("$(cat "build/fuzz/logs/$t.summary" 2>/dev/null || echo "$t    no result")")
	[ -e "build/fuzz/logs/$t.failed" ] || [ ! -e "build/fuzz/logs/$t.summary" ] && failed+=("$t")
done
echo "== fuzz summary ($secs s each)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: FAILED: ${failed[*]} (reproducers in build/fuzz/crashes/)"
	exit 1
fi
echo "fuzz: no crash, hang or leak"
