#!/usr/bin/env bash
# The slot search beside bookings (BENCHMARKS.md, nineteenth pass): how many searches the kept
# answers still serve when bookings keep ending them. One release server on a database that
# `run-all.sh` seeded; for each booking rate and scenario, 64 closed-loop searchers with
# `--book-rate` bookings a second of random seeded slots beside them, then the kept answers
# served during the run (the server's `answer_cache_hits_total`).
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/4 loadtest/find-under-writes.sh
#
# Settings (environment): PG (server URL without database), DB (lt), REDIS, PORT (18081), BIN
# (target/release/clinic-booking), LT (target/release/clinic-loadtest), SEED (the manifest
# run-all.sh wrote: target/loadtest/seed.json), RATES ("100 500"), SCENARIOS ("find-slots
# find-one"), SECONDS_EACH (15), SERVER_ENV (extra K=V words for the server).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-lt}
REDIS=${REDIS-redis://127.0.0.1:6379/4}
PORT=${PORT:-18081}
BIN=${BIN:-target/release/clinic-booking}
LT=${LT:-target/release/clinic-loadtest}
SEED=${SEED:-target/loadtest/seed.json}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
mkdir -p target
hits() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^answer_cache_hits_total/ { print $2 }'; }

read -ra extra <<< "${SERVER_ENV:-}"
for rate in ${RATES-100 500}; do
  [ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null
  env DATABASE_URL="$PG/$DB" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=warn \
    "${extra[@]}" "$BIN" serve > "target/find-under-writes-server.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.2; done
  for scenario in ${SCENARIOS-find-slots find-one}; do
    before=$(hits)
    "$LT" run --url "http://127.0.0.1:$PORT" --seed "$SEED" --scenario "$scenario" --connections 64 \
      --duration "${SECONDS_EACH:-15}" --book-rate "$rate" || true
    after=$(hits)
    echo "kept answers served: $(( ${after:-0} - ${before:-0} ))"
    echo
  done
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
done
