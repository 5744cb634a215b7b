#!/usr/bin/env bash
# The lifecycle, waitlist and delivery figures of BENCHMARKS.md (issues 11, 12 and 13) against
# the release server, on a fresh database with the 1.12 M-slot seed:
#   1. the success path (64 connections, closed loop) alternating without and with telling
#      people: every booked patient has an email address (sent to a local SMTP sink,
#      `clinic-loadtest smtp-sink`, or aiosmtpd with SINK=py) and the
#      partner has a webhook endpoint (a local receiver); the report after each "with" run
#      gives the queues' drain time and each delivery's lag behind the booking's commit;
#   2. holdSlot, and holdSlot then confirmAppointment, on the success path;
#   3. cancelling 20,000 bookings without waiters, then 20,000 with 40 waiters per doctor-day
#      (every cancel offers the freed seat, as a hold, to the one who waited longest), in booking
#      order (one doctor-day at a time) and then both again in random order;
#   4. 100,000 holds expiring in the same second.
# Every step ends with the invariant check on all slots, and a line of the cores each part kept
# busy during it (PostgreSQL, the server, the SMTP sink, the receiver, and the rest: the load
# generator, interrupts and anything else on the machine).
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/4 loadtest/features.sh
#
# Settings (environment): PG, DB (default lt_features), REDIS, PORT (18082), SMTP_PORT (12525),
# HOOK_PORT (18092), SECONDS_EACH (15), CONNECTIONS (64), ROUNDS (2: without/with pairs), CANCELS
# (20000), WAITERS (40), HOLDS (100000), SERVER_ENV (extra K=V words for the server), SINK (rust,
# the default, or py: aiosmtpd, which tops out at ~1,200 messages/s per core here), PY (a Python
# with aiosmtpd, default target/py/bin/python as .ci/run installs it), BIN and LT (the binaries),
# DELIVERIES_ONLY (1: step 1 only), EXPIRY_ONLY (1: step 4 only).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-lt_features}
REDIS=${REDIS-redis://127.0.0.1:6379/4}
PORT=${PORT:-18082}
SMTP_PORT=${SMTP_PORT:-12525}
HOOK_PORT=${HOOK_PORT:-18092}
OUT=${OUT:-target/loadtest-features}
PY=${PY:-target/py/bin/python}
BIN=${BIN:-target/release/clinic-booking}
LT=${LT:-target/release/clinic-loadtest}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
BASE="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
DATABASE_URL="$PG/$DB"
psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
[ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
if [ "${SINK:-rust}" = py ]; then
  # The sink keeps nothing and stops when its standard input closes, which is when this script ends.
  "$PY" tests/servers/smtp_sink.py --discard --port "$SMTP_PORT" > "$OUT/smtp.log" 2>&1 \
    < <(while kill -0 $$ 2>/dev/null; do sleep 1; done) &
else
  "$LT" smtp-sink --port "$SMTP_PORT" > "$OUT/smtp.log" 2>&1 &
fi
pids+=($!)
sink=$!
"$LT" receive --port "$HOOK_PORT" > "$OUT/receiver.log" 2>&1 &
pids+=($!)
receiver=$!
read -ra extra <<< "${SERVER_ENV:-}"
env DATABASE_URL="$DATABASE_URL" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=warn \
  SMTP_URL="smtp://127.0.0.1:$SMTP_PORT" WEBHOOK_ALLOW_CIDRS=127.0.0.1/32 "${extra[@]}" \
  "$BIN" serve > "$OUT/server.log" 2>&1 &
pids+=($!)
server=$!
for _ in $(seq 100); do curl -sf "$BASE/readyz" > /dev/null && break; sleep 0.2; done
curl -s "$BASE/readyz"; echo
"$LT" seed --no-migrate --database-url "$DATABASE_URL" --out "$OUT/seed.json"

common=(--url "$BASE" --seed "$OUT/seed.json" --database-url "$DATABASE_URL")
conns=${CONNECTIONS:-64}
secs=${SECONDS_EACH:-15}
# Clock ticks a process and its reaped children have used (the postmaster reaps the backends
# that exited, so summing every postgres process counts the database's whole share).
ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
sum_ticks() { local t=0 p; for p in "$@"; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# Each step's cores busy by part, measured the same way for every build, so a "with" run's
# cost per booking can be split between the database, the server and the test's own sinks.
cpu_parts() {
  echo "$(sum_ticks $(pgrep -x postgres)) $(ticks "$server") $(ticks "$sink") $(ticks "$receiver") $(busy_ticks) $(date +%s%N)"
}
step() {
  echo "== $*"
  local before after
  before=$(cpu_parts)
  "$LT" "$@" || true
  after=$(cpu_parts)
  awk -v hz="$(getconf CLK_TCK)" -v b="$before" -v a="$after" 'BEGIN {
    split(b, x, " "); split(a, y, " "); s = (y[6] - x[6]) / 1e9
    pg = (y[1] - x[1]) / hz / s; sv = (y[2] - x[2]) / hz / s; sk = (y[3] - x[3]) / hz / s
    rc = (y[4] - x[4]) / hz / s; all = (y[5] - x[5]) / hz / s
    printf "cores busy over %.1f s: %.2f of 2: postgres %.2f, server %.2f, smtp sink %.2f, receiver %.2f, rest (load generator, irq, others) %.2f\n",
      s, all, pg, sv, sk, rc, all - pg - sv - sk - rc }'
  echo
}
expiry() { step life --scenario expiry --connections "$conns" --count "${HOLDS:-100000}" "${common[@]}"; }
[ "${EXPIRY_ONLY:-0}" = 1 ] && { expiry; exit 0; }

for _ in $(seq "${ROUNDS:-2}"); do
  step run --scenario success --connections "$conns" --duration "$secs" "${common[@]}"
  step run --scenario success --connections "$conns" --duration "$secs" "${common[@]}" \
    --contacts --webhook "http://127.0.0.1:$HOOK_PORT/hook"
done
[ "${DELIVERIES_ONLY:-0}" = 1 ] && exit 0
step life --scenario hold --connections "$conns" --duration "$secs" "${common[@]}"
step life --scenario confirm --connections "$conns" --duration "$secs" "${common[@]}"
step life --scenario cancel --connections "$conns" --count "${CANCELS:-20000}" "${common[@]}"
step life --scenario cancel --connections "$conns" --count "${CANCELS:-20000}" --waiters "${WAITERS:-40}" "${common[@]}"
step life --scenario cancel --connections "$conns" --count "${CANCELS:-20000}" --shuffle "${common[@]}"
step life --scenario cancel --connections "$conns" --count "${CANCELS:-20000}" --waiters "${WAITERS:-40}" --shuffle "${common[@]}"
expiry
echo "== the SMTP sink and the receiver"
tail -n1 "$OUT/smtp.log" "$OUT/receiver.log"
