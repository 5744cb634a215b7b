#!/usr/bin/env bash
# Two or more server binaries on one scenario, alternating, so that a machine whose speed drifts
# over minutes affects them alike: each binary gets its own database (migrated by the binary
# itself, then the 1.12 M-slot seed), then ROUNDS times, for each binary in turn: start it, warm
# it up, measure, stop it. Prints one line per measurement and the median per binary.
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/6 \
#     loadtest/compare.sh before=/path/to/old/clinic-booking after=target/release/clinic-booking
#
# Settings (environment): PG, REDIS, PORT (18083), ROUNDS (3), SCENARIO (success), CONNECTIONS (64),
# SECONDS_EACH (15), WARMUP_SECONDS (3), LT (target/release/clinic-loadtest).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
REDIS=${REDIS-redis://127.0.0.1:6379/6}
PORT=${PORT:-18083}
OUT=${OUT:-target/loadtest-compare}
LT=${LT:-target/release/clinic-loadtest}
SCENARIO=${SCENARIO:-success}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
BASE="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
(($# >= 2)) || { echo "usage: $0 NAME=BINARY NAME=BINARY [...]" >&2; exit 2; }

SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null || true' EXIT
start() { # name binary
  [ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null
  env DATABASE_URL="$PG/cmp_$1" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=warn \
    "$2" serve >> "$OUT/server_$1.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 100); do curl -sf "$BASE/readyz" > /dev/null && return 0; sleep 0.2; done
  echo "$1 did not become ready" >&2; return 1
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=; }

for pair in "$@"; do
  name=${pair%%=*} bin=${pair#*=}
  psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS cmp_$name WITH (FORCE)" -c "CREATE DATABASE cmp_$name"
  start "$name" "$bin"
  "$LT" seed --no-migrate --database-url "$PG/cmp_$name" --out "$OUT/seed_$name.json" > /dev/null
  stop
done

declare -A results
for round in $(seq "${ROUNDS:-3}"); do
  for pair in "$@"; do
    name=${pair%%=*} bin=${pair#*=}
    start "$name" "$bin"
    args=(--url "$BASE" --seed "$OUT/seed_$name.json" --scenario "$SCENARIO" --connections "${CONNECTIONS:-64}")
    "$LT" run "${args[@]}" --duration "${WARMUP_SECONDS:-3}" > /dev/null
    line=$("$LT" run "${args[@]}" --duration "${SECONDS_EACH:-15}" --database-url "$PG/cmp_$name" | tee -a "$OUT/runs.log" \
      | awk '$1 == "book" || $1 == "read" { print $1, $3, $6 } /^check:/ { sub(/^check: /, ""); print "check " $0 }')
    # The first operation's rate is the one compared (bookings, or reads in the reads scenario).
    rate=$(awk 'NR == 1 { print $2 }' <<< "$line")
    ops=$(awk '$1 != "check" { printf "%s%s %s/s p99 %s ms", sep, $1, $2, $3; sep = ", " }' <<< "$line")
    echo "round $round $name: $ops; $(grep check <<< "$line" | cut -c1-90)"
    results[$name]="${results[$name]:-} $rate"
    stop
  done
done
for pair in "$@"; do
  name=${pair%%=*}
  echo "median $name: $(tr ' ' '\n' <<< "${results[$name]}" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')/s over${results[$name]}"
done
