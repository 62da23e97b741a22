#!/usr/bin/env bash
# bench/run.sh — the Nexmark benchmark of issue 10: generates N events once into a real Kafka,
# then runs each query on tarn (when bench/tarnq exists) and on Kafka Streams in turn, at-least-
# once and exactly-once, each followed by a restore from its changelogs after its state dir is
# wiped, then checks the two outputs equal (bench/outputs); a raw franz-go consume of the same
# input is the ceiling. Writes bench/results/
# nexmark-<time>.{jsonl,json,png} and prints a table. bench/README.md explains every figure.
#
#   EVENTS              events to generate (default 1000000; the issue's closing run uses 5000000)
#   PARTITIONS          partitions of every input topic (default 4)
#   SEED                generator seed (default 1)
#   QUERIES             queries to run (default "q0 q1 q2 q3 q5 q7 q8 q17 q18 q20")
#   GUARANTEES          default "at_least_once exactly_once_v2"
#   THREADS             stream threads of each processor (default 2, the machine's cores)
#   COMMIT_INTERVAL_MS  commit interval of both systems (default 1000)
#   COMPRESSION         of the generated topics: none, lz4, ... (default none)
#   KSTREAMS_JAVA_OPTS  JVM options of the Kafka Streams runs (default "-Xms1g -Xmx1g")
#   RESULTS             output folder (default bench/results)
#
# Without TARN_TEST_KAFKA_BROKERS in the environment it starts its own broker through
# scripts/with-env.sh (which also starts a Postgres that the benchmark does not use).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${TARN_TEST_KAFKA_BROKERS:-}" ]]; then
	exec scripts/with-env.sh bench/run.sh "$@"
fi

EVENTS=${EVENTS:-1000000}
PARTITIONS=${PARTITIONS:-4}
SEED=${SEED:-1}
QUERIES=${QUERIES:-"q0 q1 q2 q3 q5 q7 q8 q17 q18 q20"}
GUARANTEES=${GUARANTEES:-"at_least_once exactly_once_v2"}
THREADS=${THREADS:-2}
COMMIT_INTERVAL_MS=${COMMIT_INTERVAL_MS:-1000}
COMPRESSION=${COMPRESSION:-none}
KSTREAMS_JAVA_OPTS=${KSTREAMS_JAVA_OPTS:-"-Xms1g -Xmx1g"}
RESULTS=${RESULTS:-bench/results}
STATEFUL=" q3 q5 q7 q8 q17 q18 q20 "

brokers=$TARN_TEST_KAFKA_BROKERS
stamp=$(date -u +%Y%m%dT%H%M%SZ)
run_id=$(date -u +%H%M%S)
mkdir -p "$RESULTS"
lines="$RESULTS/nexmark-$stamp.jsonl"
logs="$RESULTS/nexmark-$stamp-logs"
mkdir -p "$logs"
work=$(mktemp -d -t tarn-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "bench: building" >&2
go build -o "$work/" ./bench/nexmark/cmd/nexmark-gen ./bench/nexmark/cmd/ceiling ./bench/nexmark/cmd/report \
	./bench/outputs/cmd/compare
mvn -B -q -f bench/kstreams/pom.xml package >"$logs/mvn.log" 2>&1 || { tail -n 40 "$logs/mvn.log" >&2; exit 1; }
kstreams_jar=bench/kstreams/target/nexmark-kstreams.jar
tarnq=""
if [[ -d bench/tarnq/cmd/tarnq ]]; then
	go build -o "$work/tarnq" ./bench/tarnq/cmd/tarnq
	tarnq="$work/tarnq"
fi

# emit KIND SYSTEM QUERY GUARANTEE DATA [TIMEFILE]: appends one JSON line for bench/nexmark/cmd/report.
emit() {
	local cpu=0 rss=0
	if [[ -n "${6:-}" ]]; then
		cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s + 0}' "$6")
		rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$6")
	fi
	printf '{"kind":"%s","system":"%s","query":"%s","guarantee":"%s","cpuSeconds":%s,"peakRssKB":%s,"loadavg":"%s","data":%s}\n' \
		"$1" "$2" "$3" "$4" "$cpu" "${rss:-0}" "$(cut -d' ' -f1-3 /proc/loadavg)" "$5" >>"$lines"
}

# measured NAME CMD...: runs CMD under /usr/bin/time -v; its last stdout line (JSON) goes to
# $work/out, its time report to $work/time, its stderr to the logs. Fails if CMD fails.
measured() {
	local name=$1
	shift
	if ! /usr/bin/time -v -o "$work/time" "$@" >"$work/stdout" 2>"$logs/$name.log"; then
		echo "bench: $name failed; last lines of $logs/$name.log:" >&2
		tail -n 20 "$logs/$name.log" >&2
		return 1
	fi
	tail -n 1 "$work/stdout" >"$work/out"
	cat "$work/time" >>"$logs/$name.log"
}

machine=$(printf '{"cpu":"%s","cores":%d,"memTotalKB":%d,"kernel":"%s","java":"%s","go":"%s","loadavgAtStart":"%s","events":%d,"partitions":%d,"threads":%d,"commitIntervalMs":%d,"kstreamsJavaOpts":"%s"}' \
	"$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)" "$(nproc)" \
	"$(awk '/MemTotal/ {print $2}' /proc/meminfo)" "$(uname -r)" \
	"$(java -version 2>&1 | head -n 1 | tr -d '"')" "$(go env GOVERSION)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
	"$EVENTS" "$PARTITIONS" "$THREADS" "$COMMIT_INTERVAL_MS" "$KSTREAMS_JAVA_OPTS")
emit machine "" "" "" "$machine"

echo "bench: generating $EVENTS events into $PARTITIONS partitions per topic" >&2
measured generator "$work/nexmark-gen" -brokers "$brokers" -events "$EVENTS" -seed "$SEED" \
	-partitions "$PARTITIONS" -compression "$COMPRESSION" -recreate
emit generator nexmark-gen "" "" "$(cat "$work/out")" "$work/time"
echo "bench: generator $(cat "$work/out")" >&2

measured ceiling "$work/ceiling" -brokers "$brokers"
emit ceiling franz-go "" "" "$(cat "$work/out")" "$work/time"
echo "bench: ceiling $(cat "$work/out")" >&2

# command_of SYSTEM: sets cmd to the command line of SYSTEM.
command_of() {
	if [[ $1 == kstreams ]]; then
		# shellcheck disable=SC2086 # KSTREAMS_JAVA_OPTS is a list of options
		cmd=(java $KSTREAMS_JAVA_OPTS -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -jar "$kstreams_jar")
	else
		cmd=("$tarnq")
	fi
}

# args_of SYSTEM QUERY GUARANTEE: sets app and args, the flags both systems take.
args_of() {
	local short=${3%%_*}
	app="nexmark-$1-$2-$short-$run_id"
	args=(--query "$2" --brokers "$brokers" --output "$app-out" --app-id "$app" --guarantee "$3"
		--state-dir "$work/state/$app" --threads "$THREADS" --commit-interval-ms "$COMMIT_INTERVAL_MS")
}

# run_system SYSTEM QUERY GUARANTEE: one run, then a restore for stateful queries. Returns 1
# when the system does not implement the query or its run failed, so its output is not
# compared.
run_system() {
	local system=$1 q=$2 g=$3 cmd app args
	command_of "$system"
	args_of "$system" "$q" "$g"
	if [[ $system == tarn ]]; then
		[[ -n $tarnq ]] && "$tarnq" --mode has --query "$q" 2>/dev/null || return 1
	fi
	echo "bench: $system $q $g" >&2
	measured "$system-$q-${g%%_*}-run" "${cmd[@]}" --mode run "${args[@]}" || return 1
	emit run "$system" "$q" "$g" "$(cat "$work/out")" "$work/time"
	echo "bench:   $(cat "$work/out")" >&2
	if [[ $STATEFUL == *" $q "* ]]; then
		if measured "$system-$q-${g%%_*}-restore" "${cmd[@]}" --mode restore "${args[@]}"; then
			emit restore "$system" "$q" "$g" "$(cat "$work/out")" "$work/time"
			echo "bench:   $(cat "$work/out")" >&2
		fi
	fi
}

# cleanup_system SYSTEM QUERY GUARANTEE: deletes the output and internal topics of a run;
# outputs and changelogs of finished runs would fill the broker's disk at 5M events.
cleanup_system() {
	local cmd app args
	command_of "$1"
	args_of "$1" "$2" "$3"
	[[ $1 == tarn && -z $tarnq ]] && return 0
	"${cmd[@]}" --mode cleanup "${args[@]}" >/dev/null 2>>"$logs/cleanup.log" || true
	rm -rf "$work/state/$app"
}

# compare_outputs QUERY GUARANTEE: checks tarn's output equal to Kafka Streams' by
# bench/README.md's rules and records the verdict.
compare_outputs() {
	local app args tarn_out
	args_of tarn "$1" "$2"
	tarn_out=$app-out
	args_of kstreams "$1" "$2"
	if measured "compare-$1-${2%%_*}" "$work/compare" -brokers "$brokers" -query "$1" -a "$tarn_out" -b "$app-out"; then
		emit compare "" "$1" "$2" "$(cat "$work/out")"
		echo "bench:   compare $(cat "$work/out")" >&2
	fi
}

for q in $QUERIES; do
	for g in $GUARANTEES; do
		tarn_ok=0 kstreams_ok=0
		run_system tarn "$q" "$g" && tarn_ok=1
		run_system kstreams "$q" "$g" && kstreams_ok=1
		if ((tarn_ok && kstreams_ok)); then
			compare_outputs "$q" "$g"
		fi
		cleanup_system tarn "$q" "$g"
		cleanup_system kstreams "$q" "$g"
	done
done

"$work/report" -in "$lines" -json "$RESULTS/nexmark-$stamp.json" -png "$RESULTS/nexmark-$stamp.png"
echo "bench: results in $RESULTS/nexmark-$stamp.{jsonl,json,png}; logs in $logs" >&2
