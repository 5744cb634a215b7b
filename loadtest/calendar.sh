#!/usr/bin/env bash
# The working-hours horizon from nothing: 2,000 doctors (zones mixed), each with a pattern of
# 40 fifteen-minute slots a day (08:00-13:00 and 14:00-19:00, every day of the week), seeded straight into working_hours, then one timed `roll-horizon` pass
# making every doctor's SCHEDULE_HORIZON_DAYS (14) days ahead: about 2,000 x 14 x 40 = 1.1 M slots. A second pass
# then shows that nothing is made twice (0 slots). Last, the server answers HOURS_CALLS
# `setWorkingHours` one after another, each moving another doctor from today (in its zone) to a
# pattern of 20-minute slots on weekdays (09:00-12:00, 13:00-17:00): every call removes the
# earlier pattern's slots of the 14-day horizon (about 560) and makes the new ones; their
# latency as the client sees it (p50, p99, max).
#
#   PG=postgres://postgres@127.0.0.1:5432 loadtest/calendar.sh
#
# Settings (environment): PG, DOCTORS (2000), HOURS_CALLS (300; 0 skips them), PORT (18081),
# BIN (target/release/clinic-booking, built if absent).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DOCTORS=${DOCTORS:-2000}
HOURS_CALLS=${HOURS_CALLS:-300}
PORT=${PORT:-18081}
OUT=${OUT:-target/loadtest}
BIN=${BIN:-target/release/clinic-booking}
DB=calendar_load
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
[ -x "$BIN" ] || cargo build --release --bin clinic-booking

psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL="$PG/$DB" RUST_LOG=warn
"$BIN" migrate > /dev/null

. loadtest/pattern.sh
WEEK=$(forty_slot_week)
psql -X -q "$DATABASE_URL" <<SQL
INSERT INTO doctor (name, specialty, timezone, created_at)
SELECT 'Dr ' || g, 'general',
       (ARRAY['Europe/Paris','America/New_York','Asia/Tokyo','UTC','Australia/Sydney'])[1 + g % 5], now()
FROM generate_series(1, $DOCTORS) g;
INSERT INTO working_hours (doctor_id, valid_from, weekly, created_at)
SELECT id, to_char(now() - interval '1 day', 'YYYY-MM-DD'), '$WEEK', now() FROM doctor;
SQL

echo "first pass (from nothing):"
"$BIN" roll-horizon
echo "second pass (nothing left to make):"
"$BIN" roll-horizon
psql -X -q -t "$DATABASE_URL" -c "SELECT count(*) || ' slots, ' || count(DISTINCT doctor_id) || ' doctors' FROM time_slot"

[ "$HOURS_CALLS" -gt 0 ] || exit 0
mkdir -p "$OUT"
BIND_ADDR="127.0.0.1:$PORT" "$BIN" serve > "$OUT/calendar-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.2; done
TOKEN=$("$BIN" token --role admin --sub calendar-load)
WEEKLY='['
for day in MONDAY TUESDAY WEDNESDAY THURSDAY FRIDAY; do
  WEEKLY+="{\"weekday\":\"$day\",\"startTime\":\"09:00\",\"endTime\":\"12:00\",\"slotMinutes\":20},"
  WEEKLY+="{\"weekday\":\"$day\",\"startTime\":\"13:00\",\"endTime\":\"17:00\",\"slotMinutes\":20},"
done
WEEKLY="${WEEKLY%,}]"
QUERY='mutation($in:SetWorkingHoursInput!){setWorkingHours(input:$in){created removed conflicts{id} userErrors{code message}}}'
: > "$OUT/hours-times"
echo "setWorkingHours, $HOURS_CALLS doctors one after another:"
psql -X -q -A -t -F ' ' "$DATABASE_URL" \
  -c "SELECT id, to_char(now() AT TIME ZONE timezone, 'YYYY-MM-DD') FROM doctor ORDER BY id LIMIT $HOURS_CALLS" |
while read -r id day; do
  body="{\"query\":\"$QUERY\",\"variables\":{\"in\":{\"doctorId\":\"$id\",\"validFrom\":\"$day\",\"weekly\":$WEEKLY}}}"
  curl -s -o "$OUT/hours-answer" -w '%{time_total}\n' -H "authorization: Bearer $TOKEN" \
    -H 'content-type: application/json' -d "$body" "http://127.0.0.1:$PORT/graphql" >> "$OUT/hours-times"
  grep -q '"userErrors":\[\]' "$OUT/hours-answer" || { echo "doctor $id: $(cat "$OUT/hours-answer")"; exit 1; }
done
tail -c 300 "$OUT/hours-answer"; echo
sort -n "$OUT/hours-times" | awk '{ t[NR] = $1 * 1000 } END {
  n = NR; i50 = int(n * 0.50 + 0.999); i99 = int(n * 0.99 + 0.999)
  printf "%d calls: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", n, t[i50], t[i99], t[n] }'
