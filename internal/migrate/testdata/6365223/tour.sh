#!/usr/bin/env bash
# How this directory's data was made (see README.md): runs $BIN, a taskgraph
# built from commit 6365223 (the last before versioned migrations), on the
# database $DB with the data directory $DATA, listening on port $PORT, in
# the working directory $WORK; makes some history through its command line
# (tasks, a failure and its retry, an idempotent create, a cancel, an
# import with its error report, an export); and stops it.
set -euo pipefail
: "${BIN:?a taskgraph built from 6365223}" "${DB:?}" "${DATA:?}" "${PORT:?}" "${WORK:?}"
export TASKGRAPH_ADDR=127.0.0.1:$PORT TASKGRAPH_SERVER=http://127.0.0.1:$PORT
cd "$WORK"
"$BIN" --db "$DB" --data-dir "$DATA" --log-level warn > server.log 2>&1 &
SRV=$!
curl -s --retry 30 --retry-connrefused --retry-delay 1 http://127.0.0.1:$PORT/readyz; echo
ID=$("$BIN" task create noop --title first --input '{"sleepMs": 200}' -q)
"$BIN" task watch "$ID" -q
HOOK=$("$BIN" task create webhook --title "notify customer" --max-attempts 1 -q \
  --input '{"url": "http://127.0.0.1:1/hook?token=abc", "body": {"phone": "13812345678"}}')
"$BIN" task watch "$HOOK" -q || true
"$BIN" task retry "$HOOK" --wait -q || true
"$BIN" task create noop --idempotency-key order-42 -q
LONG=$("$BIN" task create noop --title "to cancel" --input '{"sleepMs": 60000}' -q)
sleep 1
"$BIN" task cancel "$LONG" || true
"$BIN" task watch "$LONG" -q || true
cat > contacts.csv <<'CSV'
姓名,手机,邮箱,公司,城市,标签,性别,生日
张三,13812345678,zhangsan@example.com,示例科技,上海,"vip,new",男,1990-01-02
李四,139-1234-5678,lisi@example.com,示例科技,北京,vip,女,1988/7/15
王五,12345,wangwu@example,示例科技,深圳,,男,1992年3月4日
赵六,13700001111,zhaoliu@example.com,,杭州,new,未知,
CSV
"$BIN" import contacts.csv --target contacts --idempotency-key contacts-2026-11 --wait -q || true
"$BIN" export --source contacts --format csv --filter '{"city": "上海"}'
"$BIN" task list
kill -TERM $SRV
wait $SRV || true
cat server.log | tail -5
