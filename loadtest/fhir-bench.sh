#!/usr/bin/env bash
# The FHIR feed benchmark of BENCHMARKS.md: the 1.12 M-slot seed, the release server, then
#   1. the feed's first build (time from the server's log line, memory from /proc);
#   2. feed requests per second served from the snapshot (wrk: the manifest answered 304, the
#      manifest and one doctor's Slot file answered 200 gzip);
#   3. the opening burst with and without one aggregator polling the full feed every second.
#
#   PG=postgres://postgres@127.0.0.1:5432 REDIS=redis://127.0.0.1:6379/5 loadtest/fhir-bench.sh
#
# Settings (environment): PG, DB (default lt_fhir), REDIS (empty: single-process mode), PORT
# (18081), WRK_SECONDS (10), WRK_CONNECTIONS (32), OPENING_RATE (5000), OPENING_READ_RATE (500),
# OPENING_SECONDS (30), SKIP_SEED (1: keep the database of an earlier run), BIN and LT (the server and
# load-test binaries, default target/release/clinic-booking and clinic-loadtest). Needs wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-lt_fhir}
REDIS=${REDIS-redis://127.0.0.1:6379/5}
PORT=${PORT:-18081}
OUT=${OUT:-target/loadtest-fhir}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
BASE="http://127.0.0.1:$PORT"
BIN=${BIN:-target/release/clinic-booking}
LT=${LT:-target/release/clinic-loadtest}
mkdir -p "$OUT"
DATABASE_URL="$PG/$DB"
if [ "${SKIP_SEED:-0}" != 1 ]; then
  psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
  "$LT" seed --database-url "$DATABASE_URL" --out "$OUT/seed.json"
fi
[ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null

env DATABASE_URL="$DATABASE_URL" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=info \
  PUBLIC_BOOKING_URL="https://book.example.com/slots" "$BIN" serve > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "$BASE/readyz" > /dev/null && break; sleep 0.2; done
rss() { awk -v k="$1:" '$1 == k { printf "%.0f MiB", $2 / 1024 }' "/proc/$SERVER/status"; }

echo "== 1. first build"
echo "RSS before: $(rss VmRSS)"
start=$(date +%s.%N)
curl -s -o "$OUT/manifest.json" -w 'manifest: HTTP %{http_code}, %{size_download} bytes\n' "$BASE/fhir/\$bulk-publish"
echo "first manifest request: $(echo "$(date +%s.%N) - $start" | bc) s"
grep -m1 'FHIR feed built' "$OUT/server.log" || true
echo "RSS after: $(rss VmRSS), peak: $(rss VmHWM)"
files=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["output"]))' "$OUT/manifest.json")
slot_url=$(python3 -c 'import json,sys; print([o["url"] for o in json.load(open(sys.argv[1]))["output"] if o["type"]=="Slot"][0])' "$OUT/manifest.json")
gz=0
for url in $(python3 -c 'import json,sys; [print(o["url"]) for o in json.load(open(sys.argv[1]))["output"]]' "$OUT/manifest.json"); do
  n=$(curl -s -H 'accept-encoding: gzip' -o /dev/null -w '%{size_download}' "$url"); gz=$((gz + n))
done
raw=$(curl -s -o /dev/null -w '%{size_download}' "$slot_url")
slot_gz=$(curl -s -H 'accept-encoding: gzip' -o /dev/null -w '%{size_download}' "$slot_url")
echo "$files files, $((gz / 1024 / 1024)) MiB gzipped in all; one Slot file: $raw bytes, $slot_gz gzipped"

echo "== 2. requests per second from the snapshot"
etag=$(curl -s -D - -o /dev/null -H 'accept-encoding: gzip' "$BASE/fhir/\$bulk-publish" | awk 'tolower($1) == "etag:" { print $2 }' | tr -d '\r')
W="wrk -t2 -c${WRK_CONNECTIONS:-32} -d${WRK_SECONDS:-10}s --latency"
echo "-- manifest, If-None-Match (304)"; $W -H "If-None-Match: $etag" -H 'Accept-Encoding: gzip' "$BASE/fhir/\$bulk-publish" | grep -E 'Requests/sec|99%|Non-2xx'
echo "-- manifest, 200 gzip"; $W -H 'Accept-Encoding: gzip' "$BASE/fhir/\$bulk-publish" | grep -E 'Requests/sec|99%|Transfer'
echo "-- one Slot file, 200 gzip"; $W -H 'Accept-Encoding: gzip' "$slot_url" | grep -E 'Requests/sec|99%|Transfer'

echo "== 3. the opening burst, without and with one aggregator polling every second"
run() { "$LT" run --url "$BASE" --seed "$OUT/seed.json" --database-url "$DATABASE_URL" \
          --scenario opening --rate "${OPENING_RATE:-5000}" --read-rate "${OPENING_READ_RATE:-500}" \
          --duration "${OPENING_SECONDS:-30}" --warmup 3 "$@" || true; echo; }
run
run --poll-feed 1
grep -E 'FHIR feed' "$OUT/server.log" | tail -3 || true
