# Sourced by calendar.sh and roll-under-load.sh: the working_hours.weekly JSON of their doctors,
# 40 fifteen-minute slots a day (08:00-13:00 and 14:00-19:00) every day of the week. Weekdays are
# 0 (Monday) to 6; minutes since midnight.
forty_slot_week() {
  local week='[' day
  for day in 0 1 2 3 4 5 6; do
    week+="{\"weekday\":$day,\"start_minute\":480,\"end_minute\":780,\"slot_minutes\":15,\"capacity\":1},"
    week+="{\"weekday\":$day,\"start_minute\":840,\"end_minute\":1140,\"slot_minutes\":15,\"capacity\":1},"
  done
  echo "${week%,}]"
}
