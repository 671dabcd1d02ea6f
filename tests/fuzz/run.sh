#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run libFuzzer harnesses one after the other (make fuzz): run.sh SECONDS TARGET...
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
failed=()
summary=()
for t in "$@"; do
	bin=build/fuzz/bin/fuzz-$t
	work=build/fuzz/corpus/$t
	crashes=build/fuzz/crashes/$t
	log=build/fuzz/logs/$t.log
	seeds=tests/fuzz/corpus/$t
	mkdir -p "$work" "$crashes" build/fuzz/logs
	[ -x "$bin" ] || { echo "fuzz: $bin is not built (make fuzz-build)"; failed+=("$t"); continue; }
	[ -d "$seeds" ] || { echo "fuzz: no seeds in $seeds"; failed+=("$t"); continue; }
	dict=()
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
		failed+=("$t")
		line="$line  FAILED (exit $rc)"
		echo "fuzz $t failed: the end of $log:"
		grep -E 'ERROR|SUMMARY|FUZZ_CHECK|runtime error|Test unit written' "$log" | head -20
		ls -t "$crashes" | head -5 | sed "s|^|  reproducer: $crashes/|"
	fi
	summary+=("$line")
done
echo "== fuzz summary ($secs s each)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: FAILED: ${failed[*]} (reproducers in build/fuzz/crashes/)"
	exit 1
fi
echo "fuzz: no crash, hang or leak"
